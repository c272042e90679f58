"""Every URL pattern, crawled from the URL configuration, needs a login — except the allow-list."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

# Pages an anonymous visitor may see, by URL name.
ALLOW_ANONYMOUS = {"login", "healthz", "admin:login"}

# A value for each path converter, so every pattern can be requested.
SAMPLES = {"int": "1", "str": "x", "slug": "x", "uuid": "00000000-0000-0000-0000-000000000001", "path": "x/y"}


def _walk(resolver: URLResolver, prefix: str = "", namespace: str = ""):
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            ns = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from _walk(entry, prefix + str(entry.pattern), ns)
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), f"{namespace}{entry.name}" if entry.name else None


def _concrete(pattern: str) -> str:
    url = re.sub(r"<(?:(\w+):)?\w+>", lambda m: SAMPLES.get(m.group(1) or "str", "x"), pattern)
    # regex patterns (the admin's): strip anchors and fill named groups
    url = re.sub(r"\(\?P<\w+>[^)]*\)", "x", url).replace("^", "").replace("$", "").replace("\\", "")
    return "/" + url


PATTERNS = sorted(set(_walk(get_resolver())))
PRIVATE = [(pattern, name) for pattern, name in PATTERNS if name not in ALLOW_ANONYMOUS]


def test_the_crawl_finds_the_app_pages():
    names = {name for _, name in PATTERNS}
    assert {"home", "audit_log", "review_queue", "healthz", "admin:index"} <= names
    assert len(PATTERNS) > 20


@pytest.mark.django_db
@pytest.mark.parametrize(("pattern", "name"), PRIVATE, ids=[p for p, _ in PRIVATE])
def test_anonymous_is_sent_to_login(client, pattern, name):
    response = client.get(_concrete(pattern))
    if response.status_code == 404:
        # e.g. an admin object URL with a sample id: it must not reveal anything either
        assert b"<form" not in response.content or b"login" in response.content
        return
    if pattern.startswith("api/") and name != "api_docs":
        # the REST API answers anonymous clients with 401/403, it does not redirect them
        assert response.status_code in (401, 403), f"{pattern} answered {response.status_code}"
        return
    assert response.status_code in (301, 302), (
        f"{pattern} answered {response.status_code} to an anonymous user"
    )
    assert "/login/" in response["Location"], f"{pattern} redirected to {response['Location']}"


@pytest.mark.django_db
def test_public_pages_answer_anonymously(client):
    assert client.get("/accounts/login/").status_code == 200
    assert client.get("/healthz").status_code in (200, 503)
