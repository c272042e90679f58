"""True end-to-end tests: Debian's Chromium (Playwright) → Django → Celery → PostgreSQL → scripted LLM.

Chromium is launched through its executablePath (Playwright never downloads a browser here),
headless with --no-sandbox. A failing test leaves a screenshot in test-artifacts/.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
from pathlib import Path

import pytest

from askdb.models import Run
from tests.celery_worker import running_worker
from tests.factories import PASSWORD, make_user
from tests.support.scripted_llm import Delay, Reply

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"),
]
# Playwright's sync API runs an event loop in this thread; the ORM calls in these tests are
# ordinary blocking calls made between browser steps, which is safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

SQL = "SELECT care_unit, count(*) AS stays FROM (SELECT first_careunit AS care_unit FROM mimiciv_icu.icustays) s GROUP BY care_unit ORDER BY stays DESC"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"],
        )  # fmt: skip
        yield browser
        browser.close()


@pytest.fixture
def page(browser, request, live_server):
    context = browser.new_context(base_url=live_server.url, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()


@pytest.fixture
def llm(scripted_llm):
    scripted_llm.when(
        "You screen questions", Reply('{"category": "answerable", "reason": "ICU stays are recorded"}')
    )
    # A little latency on generation, so the browser sees the stages arrive one by one.
    scripted_llm.when("You write one", Delay(1.0, Reply(f"```sql\n{SQL}\n```")))
    scripted_llm.when("You explain the result", Reply("The MICU had the most ICU stays."))
    return scripted_llm


def log_in(page, username: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")


def test_researcher_asks_watches_stages_and_downloads_the_csv(page, source, llm):
    make_user("rachel", "researcher")
    log_in(page, "rachel")
    page.get_by_label("Your question").fill("How many ICU stays were there per care unit?")
    page.get_by_role("button", name="Ask").click()
    page.wait_for_url("**/runs/*/")
    # the stages appear live while the run is going
    page.locator(".stage .name", has_text="retrieve").wait_for()
    page.locator("#run-status", has_text="answered").wait_for(timeout=30_000)
    names = page.locator(".stage .name").all_inner_texts()
    assert names[:4] == ["embed", "retrieve", "match", "gate"] and "execute" in names
    assert page.get_by_text("The MICU had the most ICU stays.").is_visible()
    assert page.locator("canvas#chart").is_visible()
    rows = page.locator("#result-table tbody tr")
    assert rows.count() >= 2
    if os.environ.get("ASKDB_SCREENSHOT"):  # how the README's screenshot is made
        page.set_viewport_size({"width": 1280, "height": 900})
        page.wait_for_timeout(300)
        page.screenshot(path=os.environ["ASKDB_SCREENSHOT"], full_page=True)

    with page.expect_download() as download:
        page.get_by_role("link", name="Download CSV").click()
    text = Path(download.value.path()).read_text()
    lines = list(csv.reader(io.StringIO(text)))
    run = Run.objects.get()
    assert lines[0] == ["care_unit", "stays"]
    assert lines[1:] == [[str(v) for v in row] for row in run.result_rows]

    # sorting happens on the server, through htmx
    page.get_by_role("link", name="stays").click()
    page.locator("th[aria-sort='ascending']").wait_for()
    first = page.locator("#result-table tbody tr").first.locator("td").nth(1).inner_text()
    assert int(first) == min(r[1] for r in run.result_rows)


def test_a_reviewer_sees_another_users_run_and_a_researcher_does_not(page, source, llm):
    owner = make_user("owen", "researcher")
    make_user("rita", "reviewer")
    make_user("rick", "researcher")
    from askdb.services.runs import question_submit

    with running_worker():
        run = question_submit(user=owner, text="How many ICU stays were there per care unit?", source=source)
        log_in(page, "rita")
        page.goto(f"/runs/{run.pk}/")
        page.locator("#run-status", has_text="answered").wait_for(timeout=30_000)
    assert page.get_by_text("asked by owen").is_visible()
    page.goto("/runs/")
    assert page.get_by_role("link", name="How many ICU stays were there per care unit?").is_visible()

    page.context.clear_cookies()
    log_in(page, "rick")
    response = page.goto(f"/runs/{run.pk}/")
    assert response.status == 404
    assert page.get_by_role("heading", name="Not found").is_visible()


def test_a_reviewer_approves_from_the_queue_and_the_researcher_sees_it(page, source, llm):
    """Browser → Django → Celery → PostgreSQL → scripted LLM, then the review path back to the asker."""
    from askdb.models import Example
    from askdb.services.runs import question_submit

    owner = make_user("olga", "researcher")
    make_user("rory", "reviewer")
    with running_worker():
        run = question_submit(user=owner, text="How many ICU stays were there per care unit?", source=source)
        log_in(page, "rory")
        page.goto(f"/runs/{run.pk}/")
        page.locator("#run-status", has_text="answered").wait_for(timeout=30_000)
    page.goto("/review/")
    page.get_by_role("link", name="How many ICU stays were there per care unit?").first.click()
    page.get_by_role("button", name="Approve").click()
    page.wait_for_load_state()
    example = Example.objects.get()
    assert example.origin_run_id == run.pk and example.approved_by.username == "rory"
    page.goto(f"/library/{example.pk}/")
    assert page.get_by_text("How many ICU stays were there per care unit?").first.is_visible()

    page.context.clear_cookies()
    log_in(page, "olga")
    page.goto(f"/runs/{run.pk}/")
    outcome = page.locator("#review-outcome")
    assert "approved" in outcome.inner_text() and "rory" in outcome.inner_text()
    page.goto("/runs/")
    assert page.get_by_text("approved").first.is_visible()


@pytest.fixture(autouse=True)
def _worker_for_browser_tests(request):
    """The first test submits through the page, so a worker must already be listening."""
    if request.node.name.startswith("test_researcher_asks"):
        with running_worker():
            yield
    else:
        yield
