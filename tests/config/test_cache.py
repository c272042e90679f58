"""CACHES on Redis: two web processes against one database and one Redis share the API throttle
(before, Django's per-process memory cache let each process allow the full rate), and the cache
fails open when Redis is down instead of turning requests into 500s."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from rest_framework.authtoken.models import Token

from config.settings.base import _cache_url
from infra import embedded
from tests.celery_worker import database_url_for_tests
from tests.factories import make_user
from tests.web_process import request, web_process

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_two_web_processes_count_one_throttle(tmp_path, settings):
    user = make_user("busy", "researcher")
    token = Token.objects.create(user=user).key
    env = {
        "DATABASE_URL": database_url_for_tests(settings.ASKDB_APP_ROLE or None),
        "API_THROTTLE_RATE": "5/hour",
    }
    headers = {"Authorization": f"Token {token}"}
    with (
        web_process(tmp_path / "web1.log", env) as first,
        web_process(tmp_path / "web2.log", env) as second,
    ):
        statuses = [request(url + "/api/runs/", headers=headers)[0] for url in [first, second] * 3]
        status, _, body = request(first + "/api/runs/", headers=headers)
    # Five requests in all are allowed, wherever they land; the sixth and seventh are refused.
    assert statuses == [200, 200, 200, 200, 200, 429], statuses
    assert status == 429 and "throttled" in json.loads(body)["error"].lower()


def test_the_cache_fails_open_when_redis_is_down():
    cache.set("askdb-test-key", 1, 30)
    p = embedded.paths()
    embedded.redis_stop(p)
    try:
        assert cache.get("askdb-test-key", "missing") == "missing"
        cache.set("askdb-test-key", 2, 30)  # dropped, not raised
        assert cache.add("other", 1) is False
    finally:
        embedded.redis_start(p)
    cache.get("askdb-test-key")  # the first call after the restart may still meet the old socket: a miss
    cache.set("askdb-test-key", 3, 30)
    assert cache.get("askdb-test-key") == 3  # and the cache works again


@pytest.mark.parametrize(
    ("env", "url"),
    [
        ({"CACHE_URL": "redis://cache:6379/5"}, "redis://cache:6379/5"),
        ({"CELERY_BROKER_URL": "redis://:pw@broker:6379/0"}, "redis://:pw@broker:6379/2"),
        (
            {"CELERY_BROKER_URL": "redis+socket:///run/redis.sock?virtual_host=0"},
            "unix:///run/redis.sock?db=2",
        ),
        ({"CELERY_BROKER_URL": "amqp://rabbit//"}, ""),
    ],
)
def test_the_cache_url_defaults_to_the_brokers_redis(monkeypatch, env, url):
    for name in ("CACHE_URL", "CELERY_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _cache_url() == url
