"""In a real Chromium: define → run (live progress) → evidence → adjudicate → cohort → a question
that joins the cohort, answered through the scripted LLM on a real Celery worker."""

from __future__ import annotations

import psycopg
import pytest
from django.conf import settings

from phenotypes.services import COHORT_SCHEMA
from tests.celery_worker import running_worker
from tests.factories import make_user
from tests.support.scripted_llm import Reply
from tests.test_browser import CHROMIUM, browser, log_in, page  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"),
]

COHORT_SQL = (
    "SELECT COUNT(DISTINCT c.subject_id) AS patients FROM askdb_cohorts.heart_failure c "
    "JOIN mimiciv_icu.icustays i ON i.subject_id = c.subject_id"
)


@pytest.fixture
def cohort_schema_dropped():
    yield
    with psycopg.connect(settings.CLINICAL_ADMIN_DATABASE_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {COHORT_SCHEMA} CASCADE")


def test_define_run_adjudicate_save_a_cohort_and_ask_about_it(
    page,  # noqa: F811 - the fixture imported above
    source,
    scripted_llm,
    cohort_schema_dropped,
):
    scripted_llm.when("You screen questions", Reply('{"category": "answerable", "reason": "a cohort table"}'))
    scripted_llm.when("You write one", Reply(f"```sql\n{COHORT_SQL}\n```"))
    scripted_llm.when("You explain the result", Reply("Patients of the cohort with an ICU stay."))
    source.min_cell_size = 0
    source.save(update_fields=["min_cell_size"])
    make_user("rev", "reviewer")
    with running_worker():
        log_in(page, "rev")
        page.get_by_role("link", name="Phenotypes").click()
        form = page.locator("form#define")
        form.get_by_label("Name").fill("heart failure")
        form.get_by_label("Description").fill(
            "Heart failure: the heart cannot pump enough; edema, diuretics."
        )
        form.get_by_label("Terms and synonyms").fill("heart failure, congestive heart failure, CHF")
        form.get_by_label("ICD-9/ICD-10 patterns").fill("I50%, 428%")
        form.get_by_role("button", name="Save definition").click()
        page.get_by_text("Defined heart failure.").wait_for()
        page.get_by_role("button", name="Run").click()
        page.wait_for_url("**/phenotypes/runs/*/")
        # The progress fragment polls until the run ends, then the page reloads with the result.
        page.locator("#counts").wait_for(timeout=120_000)
        assert page.locator("#evidence mark.assertion-affirmed").count() > 0
        assert page.locator("#agreement").is_visible()
        page.locator("ol.sample > li").first.get_by_role("button", name="Agree", exact=True).click()
        page.get_by_text("Estimated precision 1.00").wait_for()
        page.get_by_role("button", name="Save as cohort").click()
        page.locator("#cohort", has_text="askdb_cohorts.heart_failure").wait_for()
        page.goto("/")
        page.get_by_label("Your question").fill(
            "How many patients in the heart failure cohort were admitted to the ICU?"
        )
        page.get_by_role("button", name="Ask").click()
        page.wait_for_url("**/runs/*/")
        page.locator("#run-status", has_text="answered").wait_for(timeout=60_000)
        assert page.get_by_text("Patients of the cohort with an ICU stay.").is_visible()
