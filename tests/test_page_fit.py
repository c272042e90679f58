"""Every page, as each role meets it, at a desktop (1280×800) and a phone (390×844) in Debian's
Chromium: nothing wider than the screen (a wide table or SQL block scrolls inside its own box),
no axe-core violation (WCAG 2.1 A/AA), a focus ring of at least 3:1 against what it is drawn on,
and a header that leaves the phone's screen to the page.

One browser, one context per role, every page of a role in that context: the whole tour is one
test so that it stays fast. With ASKDB_SCREENSHOT_DIR set it also saves a screenshot of each page
at both widths (how docs/screenshots/ is made).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.factories import PASSWORD, make_user

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
AXE = Path(__file__).resolve().parent / "support" / "vendor" / "axe.min.js"
SHOTS = Path(os.environ["ASKDB_SCREENSHOT_DIR"]) if os.environ.get("ASKDB_SCREENSHOT_DIR") else None
DESKTOP, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"),
]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# A long line in a SQL block and a long value in a table: what made pages wider than a phone.
LONG_SQL = (
    "SELECT p.subject_id, p.gender, p.anchor_age, p.anchor_year_group, p.anchor_year FROM mimiciv_hosp.patients AS p "
    "WHERE p.anchor_age > 60 AND p.gender = 'F' ORDER BY p.anchor_age DESC, p.subject_id"
)

# In the page: what sticks out of the screen (outside any box that scrolls or clips).
TOO_WIDE_JS = """() => {
  const W = document.documentElement.clientWidth, out = [];
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (el.classList.length ? '.' + [...el.classList].join('.') : '');
  if (document.documentElement.scrollWidth > W) out.push(`the page scrolls sideways (${document.documentElement.scrollWidth} px > ${W} px)`);
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (!r.width || r.right <= 0) continue;           // not shown, or moved off screen on purpose (skip link)
    // its box, or what spills out of it (a long word, a long code) when it does not clip or scroll
    const spills = getComputedStyle(el).overflowX === 'visible' && el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0
      ? r.left + el.scrollWidth : r.right;
    if (Math.max(r.right, spills) <= W + 0.5 && r.width <= W + 0.5) continue;
    // Allowed only inside a box that scrolls (the user can reach it), or text hidden for screen
    // readers (a 1 px clip): a box that just hides the overflow cuts the page off, and is caught.
    let p = el.parentElement, inBox = false;
    for (; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (/(auto|scroll)/.test(o) || (o !== 'visible' && p.getBoundingClientRect().width <= 2)) { inBox = true; break; }
    }
    if (!inBox) out.push(`${name(el)} is ${Math.round(r.width)} px wide, its content ends at ${Math.round(Math.max(r.right, spills))} px`);
  }
  if (out.length === 1) {  // the page is too wide, but no box is: name what reaches furthest right
    let far = null, right = 0;
    for (const el of document.body.querySelectorAll('*')) { const r = el.getBoundingClientRect(); if (r.width && r.right > right) { far = el; right = r.right; } }
    if (far) out.push(`${name(far)} reaches ${Math.round(right)} px (inside ${name(far.parentElement)})`);
  }
  return out.slice(0, 8);
}"""

# In the page: the focus ring of every focusable element against the colour just outside it.
FOCUS_RING_JS = """() => {
  const rgb = (c) => { const m = c.match(/[\\d.]+/g).map(Number); return {r: m[0], g: m[1], b: m[2], a: m.length > 3 ? m[3] : 1}; };
  const lum = ({r, g, b}) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }; return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const background = (el, x, y) => {
    for (const under of document.elementsFromPoint(x, y)) {
      if (under === el || el.contains(under)) continue;
      const c = rgb(getComputedStyle(under).backgroundColor);
      if (c.a > 0.5) return c;
    }
    return {r: 255, g: 255, b: 255, a: 1};
  };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + ' "' + (el.innerText || el.getAttribute('aria-label') || el.name || '').trim().slice(0, 30) + '"';
  const bad = [];
  const all = document.querySelectorAll('a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), select:not([disabled]), textarea, summary, [tabindex="0"]');
  for (const el of all) {
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height || getComputedStyle(el).visibility === 'hidden') continue;
    el.focus({preventScroll: true});
    if (document.activeElement !== el) continue;
    const s = getComputedStyle(el);
    if (s.outlineStyle === 'none' || parseFloat(s.outlineWidth) < 2) { bad.push(`${name(el)}: no focus ring`); continue; }
    const gap = parseFloat(s.outlineOffset) + parseFloat(s.outlineWidth) + 1;
    const x = Math.min(Math.max(r.left - gap, 0), innerWidth - 1), y = Math.min(Math.max(r.top + r.height / 2, 0), innerHeight - 1);
    if (r.left - gap < 0 || r.top + r.height / 2 > innerHeight || r.top + r.height / 2 < 0) continue;  // off screen: not judged here
    const k = ratio(rgb(s.outlineColor), background(el, x, y));
    if (k < 3) bad.push(`${name(el)}: focus ring ${s.outlineColor} is ${k.toFixed(2)}:1`);
  }
  if (document.activeElement) document.activeElement.blur();
  return bad.slice(0, 8);
}"""

# In the page: every box that scrolls can be reached by Tab and says what it holds.
SCROLL_REACH_JS = """() => {
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    const s = getComputedStyle(el);
    const x = /(auto|scroll)/.test(s.overflowX) && el.scrollWidth > el.clientWidth + 1;
    const y = /(auto|scroll)/.test(s.overflowY) && el.scrollHeight > el.clientHeight + 1;
    if (!(x || y) || !el.getClientRects().length || el.matches('textarea, select, input')) continue;  // a form field has its label
    const named = el.getAttribute('aria-label') || el.getAttribute('aria-labelledby');
    const focusable = el.tabIndex >= 0 || el.querySelector('a[href], button, input, select, textarea, [tabindex]');
    if (!focusable || !named) out.push(`${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${[...el.classList].join('.')} scrolls but is ${focusable ? '' : 'not focusable'}${!focusable && !named ? ' and ' : ''}${named ? '' : 'unnamed'}`);
  }
  return out.slice(0, 5);
}"""

AXE_JS = """async () => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']},
                                          resultTypes: ['violations']});
  return result.violations.map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`);
}"""


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"],
        )  # fmt: skip
        yield browser
        browser.close()


def _world(source, settings) -> dict:
    """A user per role and something on every page: answered and declined runs, a pending review,
    a request, a library example with a template, an evaluation with a failure, audit events."""
    from askdb.models import Run
    from askdb.services.examples import example_upsert
    from askdb.services.requests import request_create
    from askdb.services.runs import question_submit_sync
    from evaluation.models import Evaluation, EvaluationItem
    from metadata_admin.models import TableDoc

    settings.LLM_MODEL = ""  # no LLM: the default a new team meets
    users = {role: make_user(name, role) for name, role in (
        ("ada", "admin"), ("rae", "researcher"), ("rev", "reviewer"), ("agg", "aggregate_researcher"))}  # fmt: skip
    example = example_upsert(source=source, question="list the women older than 60, oldest first",
                             sql=LONG_SQL, approved_by=users["reviewer"])  # fmt: skip
    example_upsert(source=source, question="how many patients are there?",
                   sql="SELECT count(*) AS n FROM mimiciv_hosp.patients", approved_by=users["reviewer"])  # fmt: skip
    answered = question_submit_sync(
        user=users["researcher"], text="list the women older than 60, oldest first"
    )
    counted = question_submit_sync(user=users["aggregate_researcher"], text="how many patients are there?")
    declined = question_submit_sync(
        user=users["researcher"], text="which patients had the most lab tests in their first week?"
    )
    request = request_create(
        run=Run.objects.get(pk=declined.pk), user=users["researcher"], note="for a grant"
    )
    evaluation = Evaluation.objects.create(source=source, name="library only", status="finished",
                                           questions_file="benchmarks/data/mimiciv/valid.json", version="v1")  # fmt: skip
    EvaluationItem.objects.create(evaluation=evaluation, position=0, item_id="q1", question="women over 60?",
                                  gold_sql=LONG_SQL, predicted_sql=LONG_SQL.replace("60", "65"), done=True,
                                  verdict="wrong", why="a different age threshold")  # fmt: skip
    return {
        "users": users, "example": example, "answered": answered.pk, "counted": counted.pk,
        "declined": declined.pk, "request": request.pk, "evaluation": evaluation.pk,
        "table": TableDoc.objects.filter(source=source).order_by("pk").first().pk,
    }  # fmt: skip


def _tour(w: dict) -> dict[str, list[tuple[str, str]]]:
    """Per role: (name, path) of every page it has; the run page is shown with its details open."""
    run, ex = f"/runs/{w['answered']}/", f"/library/{w['example'].pk}/"
    return {
        "admin": [
            ("home", "/"), ("run", run), ("history", "/runs/"), ("review-queue", "/review/"),
            ("run-review", f"{run}review/"), ("library", "/library/"), ("library-example", ex),
            ("requests", "/requests/"), ("request-desk", f"/requests/{w['request']}/"), ("inbox", "/inbox/"),
            ("audit", "/audit/"), ("catalog", "/catalog/"), ("catalog-table", f"/catalog/tables/{w['table']}/"),
            ("playground", "/catalog/playground/"), ("evaluations", "/evaluations/"),
            ("evaluation", f"/evaluations/{w['evaluation']}/"), ("phenotypes", "/phenotypes/"), ("users", "/users/"),
            ("password", "/accounts/password/"),
        ],
        # The other roles: their own header and what differs for them (the admin's tour has every template).
        "researcher": [("home", "/"), ("run", run), ("declined", f"/runs/{w['declined']}/"), ("library", "/library/")],
        "reviewer": [("review-queue", "/review/"), ("request-desk", f"/requests/{w['request']}/")],
        "aggregate_researcher": [("home", "/"), ("run", f"/runs/{w['counted']}/")],
    }  # fmt: skip


def _open_everything(page) -> None:
    """ "How askdb got this", provenance and the like open: the widest the page gets."""
    page.evaluate("() => document.querySelectorAll('main details').forEach((d) => { d.open = true; })")


def _check(page, where: str, size: dict, label: str, failures: list[str], ring: bool = False) -> None:
    page.set_viewport_size(size)
    page.wait_for_timeout(150)  # a resize re-runs the page's layout scripts (a11y.js waits 100 ms)
    # ... and on a busy machine its timer can fire later than that (a flaky "scrolls but is unnamed").
    page.wait_for_function("() => !(window.askdbReachPending && window.askdbReachPending())", timeout=10_000)
    where = f"{where} @{label}"
    failures += [f"{where}: {f}" for f in page.evaluate(TOO_WIDE_JS)]
    failures += [f"{where}: axe {v}" for v in page.evaluate(AXE_JS)]
    failures += [f"{where}: {f}" for f in page.evaluate(SCROLL_REACH_JS)]
    if ring:
        page.keyboard.press("Tab")  # the keyboard is in use: a focused element shows its ring
        failures += [f"{where}: {f}" for f in page.evaluate(FOCUS_RING_JS)]
    if SHOTS:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{where.replace(' @', '-').replace(' ', '-')}.png"))


def _phone_header(page) -> None:
    """On a phone the admin's header and the no-LLM banner took half the screen: now one row and a
    Menu button that opens the links, by keyboard too, and closes with Escape."""
    page.goto("/")
    page.set_viewport_size(PHONE)
    topbar, banner = page.evaluate(
        "() => ['.topbar', '.banner'].map((s) => document.querySelector(s).getBoundingClientRect().height)"
    )
    assert topbar < 60 and topbar + banner < PHONE["height"] * 0.2, (
        topbar,
        banner,
    )  # one row; it was half the screen
    nav = page.get_by_role("navigation", name="Main")
    assert not nav.is_visible()
    menu = page.get_by_role("button", name="Menu")
    menu.focus()
    page.keyboard.press("Enter")
    assert nav.is_visible() and menu.get_attribute("aria-expanded") == "true"
    assert (
        nav.get_by_role("link", name="Users").is_visible()
        and nav.get_by_role("link", name="Password").is_visible()
    )
    assert page.evaluate(FOCUS_RING_JS) == []  # the Menu button's ring on the dark header, the links'
    menu.focus()
    page.keyboard.press("Escape")
    assert not nav.is_visible() and page.evaluate("document.activeElement.textContent") == "Menu"
    page.set_viewport_size(DESKTOP)  # a desktop has room: the links, no Menu button
    assert nav.is_visible() and not menu.is_visible()


def _log_in(page, username: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")


# Each check, cheated as a page could cheat it: a wide box hidden by `overflow: hidden` (no scroll
# bar, the content cut off), a box that scrolls but takes no focus, the old amber ring on white.
CHEATS = (
    """<!doctype html><html lang="en"><head><title>cheats</title><style>
  :focus-visible { outline: 3px solid #ffbf47; outline-offset: 2px; }
</style></head><body><main>
  <div style="overflow-x:hidden"><table id="cut"><tr><td style="min-width:900px">wide</td></tr></table></div>
  <div id="stuck" style="overflow-x:auto"><pre style="margin:0">"""
    + "x" * 300
    + """</pre></div>
  <a href="#">a link</a>
</main></body></html>"""
)


def test_every_page_fits_a_phone_is_reachable_by_keyboard_and_passes_axe(
    browser, live_server, source, settings
):
    world = _world(source, settings)
    failures: list[str] = []
    for role, pages in _tour(world).items():
        context = browser.new_context(base_url=live_server.url, viewport=DESKTOP)
        context.add_init_script(path=str(AXE))
        page = context.new_page()
        page.set_default_timeout(20_000)
        _log_in(page, world["users"][role].username)
        for name, path in pages:
            response = page.goto(path)
            assert response.status == 200, (role, path, response.status)
            _open_everything(page)
            # The ring is judged on the admin's pages, which have every kind of element, at the
            # desktop width, where the header's links show too.
            _check(page, f"{role} {name}", DESKTOP, "desktop", failures, ring=role == "admin")
            _check(page, f"{role} {name}", PHONE, "phone", failures)
        if role == "admin":
            _phone_header(page)
        context.close()
    assert not failures, "\n".join(failures)


def test_the_checks_catch_what_they_are_there_for(browser):
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.set_content(CHEATS)
    assert any("table#cut" in f for f in page.evaluate(TOO_WIDE_JS))
    assert any("div#stuck" in f and "not focusable" in f for f in page.evaluate(SCROLL_REACH_JS))
    page.keyboard.press("Tab")
    assert any("focus ring rgb(255, 191, 71) is 1.6" in f for f in page.evaluate(FOCUS_RING_JS))
    context.close()
