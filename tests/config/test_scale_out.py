"""Several machines' worth of processes, one truth: two web processes and two Celery workers against
one database and one broker, as a multi-host deployment runs them. The API throttle counts across
both web processes; a library change made through one process (a reloaded source's values, a
flagged example) reaches questions on both workers at once, with no restart."""

from __future__ import annotations

import contextlib

import psycopg
import pytest
from django.conf import settings as django_settings
from rest_framework.authtoken.models import Token

from askdb.models import Example, Run
from askdb.services.examples import example_upsert
from askdb.services.runs import question_submit
from metadata_admin.services import clinical_source_refresh
from tests.celery_worker import database_url_for_tests, pool_status, wait_for, worker_process
from tests.factories import make_user
from tests.web_process import request, web_process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

COUNT_SQL = "SELECT count(*) AS n FROM mimiciv_hosp.prescriptions WHERE drug = '{drug}'"
NEW_DRUG = "Zorblatin"  # in no synthetic data: it arrives with a reload


def _ask_until_both_workers_answered(asker, source, text: str, workers: list[str], log) -> list[Run]:
    """Ask `text` in pairs until each worker has answered it at least once; every answer so far."""
    done: list[Run] = []
    for _ in range(5):
        runs = [question_submit(user=asker, text=text, source=source) for _ in range(2)]
        for run in runs:
            done.append(wait_for(lambda r=run: Run.objects.filter(pk=r.pk, status__in=Run.TERMINAL).first(),
                                 timeout=60, message=log))  # fmt: skip
        if {w for w in workers if any(r.worker.startswith(w) for r in done)} == set(workers):
            return done
    raise AssertionError(f"not answered by both workers: {[r.worker for r in done]}\n{log()}")


def test_two_web_processes_and_two_workers_share_one_truth(source, tmp_path, settings):
    reviewer, asker = make_user("so-rev", "reviewer"), make_user("so-ask", "researcher")
    example = example_upsert(source=source, question="how many prescriptions of Acetaminophen are there?",
                             sql=COUNT_SQL.format(drug="Acetaminophen"), approved_by=reviewer)  # fmt: skip
    busy = Token.objects.create(user=make_user("so-busy", "researcher")).key
    review_token = Token.objects.create(user=reviewer).key
    web_env = {
        "DATABASE_URL": database_url_for_tests(settings.ASKDB_APP_ROLE or None),
        "API_THROTTLE_RATE": "6/hour",
    }
    logs = {name: tmp_path / f"{name}.log" for name in ("w1", "w2", "web1", "web2")}

    def log() -> str:
        return "\n".join(
            f"--- {n}\n{p.read_text(errors='replace')[-1500:]}" for n, p in logs.items() if p.exists()
        )

    with contextlib.ExitStack() as stack:
        workers = [
            stack.enter_context(worker_process(n, logs[n], pool="threads", concurrency=1))
            for n in ("w1", "w2")
        ]
        first = stack.enter_context(web_process(logs["web1"], web_env))
        second = stack.enter_context(web_process(logs["web2"], web_env))
        for worker in workers:
            wait_for(lambda w=worker: pool_status(w.celery_name), timeout=120, message=log)
        names = [f"{n}-" for n in ("w1", "w2")]

        # The throttle: six requests allowed in all, whichever process they reach.
        headers = {"Authorization": f"Token {busy}"}
        statuses = [request(url + "/api/runs/", headers=headers)[0] for url in [first, second] * 4]
        assert statuses == [200] * 6 + [429, 429], statuses

        # Both workers answer from the library (each has loaded its values and index).
        warm = _ask_until_both_workers_answered(asker, source, "how many prescriptions of Docusate Sodium are there?",
                                                names, log)  # fmt: skip
        assert all(r.answered_by == "library" for r in warm), [(r.worker, r.message) for r in warm]

        # A reloaded source (load_mimic on any host) reaches both workers' values.
        unknown = question_submit(
            user=asker, text=f"how many prescriptions of {NEW_DRUG} are there?", source=source
        )
        unknown = wait_for(
            lambda: Run.objects.filter(pk=unknown.pk, status__in=Run.TERMINAL).first(), timeout=60
        )
        assert unknown.answered_by != "library"  # not a value of the data yet
        dsn = django_settings.CLINICAL_ADMIN_DATABASE_URL
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO mimiciv_hosp.prescriptions (subject_id, hadm_id, pharmacy_id, drug_type, drug) "
                "SELECT subject_id, hadm_id, pharmacy_id, drug_type, %s FROM mimiciv_hosp.prescriptions LIMIT 1",
                [NEW_DRUG],
            )
        try:
            clinical_source_refresh()
            reloaded = _ask_until_both_workers_answered(
                asker, source, f"how many prescriptions of {NEW_DRUG} are there?", names, log
            )
            assert all(r.answered_by == "library" and f"'{NEW_DRUG}'" in r.sql for r in reloaded), [
                (r.worker, r.answered_by, r.message) for r in reloaded
            ]

            # A flag sent through the other web process stops library answers on both workers at once.
            status, _, body = request(
                f"{second}/api/runs/{warm[0].pk}/review/",
                method="POST",
                headers={"Authorization": f"Token {review_token}", "Content-Type": "application/json"},
                body=b'{"action": "flag", "category": "wrong_values", "comment": "wrong column"}',
            )
            assert status == 200, body
            assert Example.objects.get(pk=example.pk).status == Example.Status.NEEDS_REVIEW
            after = _ask_until_both_workers_answered(
                asker, source, "how many prescriptions of Docusate Sodium are there?", names, log
            )
            assert all(r.answered_by != "library" and r.example_id is None for r in after), [
                (r.worker, r.answered_by) for r in after
            ]
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("DELETE FROM mimiciv_hosp.prescriptions WHERE drug = %s", [NEW_DRUG])
