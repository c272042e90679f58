"""The catalog's admin side through HTTP: editing docs in the Django admin keeps history and
audits, the admin actions (re-embed, LLM drafts, accept) and the catalog pages, against the
real embedded PostgreSQL, the synthetic clinical data and the scripted OpenAI-compatible server."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from askdb.roles import ADMIN, RESEARCHER, REVIEWER
from infra.audit.models import AuditEvent
from metadata_admin.docs import table_doc_embedding_text
from metadata_admin.drafting import NO_LLM_MESSAGE
from metadata_admin.models import ColumnDoc, DocRevision, TableDoc, content_hash
from metadata_admin.selectors import current_embedding_model, table_doc_embedding_status
from tests.factories import make_user
from tests.support.scripted_llm import Malformed, Reply

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:metadata_admin_tabledoc_changelist"
LABITEMS = "CREATE TABLE mimiciv_hosp.d_labitems"
ICU_ITEMS = "CREATE TABLE mimiciv_icu.d_items"


class _FormFields(HTMLParser):
    """What a browser would submit from one form of a page (submit buttons aside)."""

    def __init__(self, form_id: str):
        super().__init__(convert_charrefs=True)
        self.form_id, self.inside, self.data = form_id, False, {}
        self._textarea: str | None = None
        self._select: str | None = None
        self._options: list[tuple[str, bool]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and a.get("id") == self.form_id:
            self.inside = True
        if not self.inside or "__prefix__" in a.get("name", "__prefix__"):
            if tag == "option" and self._select:
                self._options.append((a.get("value", ""), "selected" in a))
            return
        if tag == "input" and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self.data[a["name"]] = a.get("value") or ("on" if a.get("type") == "checkbox" else "")
        elif tag == "textarea":
            self._textarea = a["name"]
            self.data[a["name"]] = ""
        elif tag == "select":
            self._select, self._options = a["name"], []

    def handle_data(self, data):
        if self._textarea:
            self.data[self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "textarea" and self._textarea:
            # Browsers drop the newline Django writes after <textarea>.
            self.data[self._textarea] = self.data[self._textarea].removeprefix("\n")
            self._textarea = None
        elif tag == "select" and self._select:
            chosen = [v for v, selected in self._options if selected] or [v for v, _ in self._options[:1]]
            if chosen:
                self.data[self._select] = chosen[0]
            self._select = None
        elif tag == "form" and self.inside:
            self.inside = False


def form_fields(html: str, form_id: str) -> dict[str, str]:
    parser = _FormFields(form_id)
    parser.feed(html)
    assert parser.data, f"no form #{form_id} on the page"
    return parser.data


def doc_named(source, schema: str, name: str) -> TableDoc:
    return TableDoc.objects.prefetch_related("columns").get(source=source, schema_name=schema, name=name)


def status(doc: TableDoc) -> str:
    doc = TableDoc.objects.prefetch_related("columns").get(pk=doc.pk)
    return table_doc_embedding_status(doc, model=current_embedding_model())


def run_action(client, action: str, *docs: TableDoc):
    return client.post(
        reverse(CHANGELIST), {"action": action, "_selected_action": [d.pk for d in docs]}, follow=True
    )


def shown_messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.fixture
def admin_client(client):
    client.force_login(make_user("curator", ADMIN))
    return client


@pytest.fixture
def llm(scripted_llm):
    return scripted_llm


# ---------------------------------------------------------------- editing in the Django admin


def test_admin_edit_keeps_the_old_text_audits_and_marks_the_embedding_stale(admin_client, source):
    doc = doc_named(source, "mimiciv_hosp", "d_labitems")
    old_description, synonyms = doc.description, list(doc.synonyms)
    assert status(doc) == "current"
    url = reverse("admin:metadata_admin_tabledoc_change", args=[doc.pk])
    data = form_fields(admin_client.get(url).content.decode(), "tabledoc_form")
    assert data["synonyms"] == "\n".join(synonyms)  # one item per line, not JSON
    data["description"] = "The lab test dictionary, rewritten by a curator."

    response = admin_client.post(url, {**data, "_save": "Save"})

    assert response.status_code == 302, response.content.decode()[:2000]
    doc.refresh_from_db()
    assert doc.description == "The lab test dictionary, rewritten by a curator."
    assert doc.synonyms == synonyms  # the lines round-tripped to the same JSON list
    revision = DocRevision.objects.get(table=doc)
    assert revision.snapshot["description"] == old_description and revision.by.username == "curator"
    assert AuditEvent.objects.filter(
        action="docs.edited", target_id=str(doc.pk), actor_name="curator"
    ).exists()
    assert status(doc) == "stale"
    listing = admin_client.get(reverse(CHANGELIST), {"q": "d_labitems"}).content.decode()
    assert "stale" in listing


def test_admin_edits_lines_and_column_meanings_and_an_unchanged_save_writes_nothing(admin_client, source):
    doc = doc_named(source, "mimiciv_hosp", "d_labitems")
    url = reverse("admin:metadata_admin_tabledoc_change", args=[doc.pk])
    data = form_fields(admin_client.get(url).content.decode(), "tabledoc_form")

    assert admin_client.post(url, {**data, "_save": "Save"}).status_code == 302
    assert not DocRevision.objects.filter(table=doc).exists()
    assert not AuditEvent.objects.filter(action="docs.edited").exists()

    label = next(k for k, v in data.items() if k.startswith("columns-") and v == "label")
    data[label.replace("-name", "-meaning")] = "Full name of the lab test."
    data["synonyms"] = "lab dictionary\n\n  analyte list  \n"
    assert admin_client.post(url, {**data, "_save": "Save"}).status_code == 302
    assert TableDoc.objects.get(pk=doc.pk).synonyms == ["lab dictionary", "analyte list"]
    assert ColumnDoc.objects.get(table=doc, name="label").meaning == "Full name of the lab test."
    before = DocRevision.objects.get(table=doc).snapshot
    assert {c["name"]: c["meaning"] for c in before["columns"]}["label"] == "Name of the test."


def test_reembed_action_embeds_the_changed_text(admin_client, source):
    doc = doc_named(source, "mimiciv_hosp", "d_labitems")
    TableDoc.objects.filter(pk=doc.pk).update(description="Lab test names and their itemids.")
    assert status(doc) == "stale"

    response = run_action(admin_client, "reembed_selected", doc)

    doc.refresh_from_db()
    assert doc.content_hash == content_hash(table_doc_embedding_text(doc))
    assert status(doc) == "current"
    assert "Re-embedded 1 doc;" in " ".join(shown_messages(response))


# ---------------------------------------------------------------- LLM drafts


def drafted_reply(description: str, **columns: str) -> Reply:
    return Reply(
        "Here is the draft:\n```json\n"
        + json.dumps({"description": description, "columns": columns})
        + "\n```"
    )


def test_draft_then_accept_fills_only_what_was_missing(admin_client, source, llm):
    labitems = doc_named(source, "mimiciv_hosp", "d_labitems")
    curated = doc_named(source, "mimiciv_hosp", "patients")
    curated_text = curated.description
    TableDoc.objects.filter(pk=labitems.pk).update(description="")
    ColumnDoc.objects.filter(table=labitems, name="fluid").update(meaning="")
    ColumnDoc.objects.filter(table=curated, name="gender").update(meaning="")
    label_meaning = ColumnDoc.objects.get(table=labitems, name="label").meaning
    llm.when(
        LABITEMS, drafted_reply("DRAFT: the lab dictionary.", fluid="DRAFT: specimen", label="DRAFT: no")
    )
    # Would overwrite curated text if the code let it.
    llm.default = drafted_reply("DRAFT: should never be stored.", gender="DRAFT: sex")

    response = run_action(admin_client, "draft_missing_descriptions", labitems, curated)

    assert "2 drafted" in " ".join(shown_messages(response))
    labitems.refresh_from_db()
    assert labitems.description == "" and labitems.draft_description == "DRAFT: the lab dictionary."
    columns = {c.name: c for c in labitems.columns.all()}
    assert columns["fluid"].draft_meaning == "DRAFT: specimen" and columns["fluid"].meaning == ""
    assert columns["label"].meaning == label_meaning and columns["label"].draft_meaning == ""
    curated.refresh_from_db()
    assert curated.description == curated_text and curated.draft_description == ""
    assert ColumnDoc.objects.get(table=curated, name="gender").draft_meaning == "DRAFT: sex"
    prompt = next(r[1]["content"] for r in llm.chat_requests() if LABITEMS in r[1]["content"])
    assert "fluid" in prompt and "Blood" in prompt  # DDL and sampled values
    assert AuditEvent.objects.filter(action="docs.drafted").exists()

    response = run_action(admin_client, "accept_drafts", labitems)

    labitems.refresh_from_db()
    assert labitems.description == "DRAFT: the lab dictionary." and labitems.draft_description == ""
    assert ColumnDoc.objects.get(table=labitems, name="fluid").meaning == "DRAFT: specimen"
    assert DocRevision.objects.get(table=labitems).snapshot["description"] == ""
    assert status(labitems) == "stale"  # the accepted text is what retrieval must now find
    assert ColumnDoc.objects.get(table=curated, name="gender").draft_meaning == "DRAFT: sex"  # not selected


def test_sensitive_columns_send_no_values_to_the_llm(admin_client, source, llm):
    doc = doc_named(source, "mimiciv_hosp", "d_labitems")
    TableDoc.objects.filter(pk=doc.pk).update(description="")
    ColumnDoc.objects.filter(table=doc, name="label").update(sensitive=True)
    llm.default = drafted_reply("DRAFT")

    run_action(admin_client, "draft_missing_descriptions", doc)

    prompt = llm.chat_requests()[0][1]["content"]
    assert "label varchar" in prompt.replace("character varying", "varchar")  # the DDL still names it
    assert "Creatinine" not in prompt and "- label:" not in prompt


@pytest.mark.parametrize(
    "garbage",
    [Reply("I'd rather not."), Reply('{"description": 42}'), Malformed("not json")],
    ids=["prose", "wrong-shape", "not-a-completion"],
)
def test_garbage_for_one_table_is_reported_and_does_not_stop_the_others(admin_client, source, llm, garbage):
    labitems = doc_named(source, "mimiciv_hosp", "d_labitems")
    items = doc_named(source, "mimiciv_icu", "d_items")
    TableDoc.objects.filter(pk__in=[labitems.pk, items.pk]).update(description="")
    llm.when(LABITEMS, garbage)
    llm.when(ICU_ITEMS, drafted_reply("DRAFT: ICU items."))

    response = run_action(admin_client, "draft_missing_descriptions", labitems, items)

    shown = shown_messages(response)
    assert "1 drafted" in shown[0] and "1 failed" in shown[0]
    assert any(m.startswith("mimiciv_hosp.d_labitems: ") for m in shown)
    labitems.refresh_from_db()
    assert labitems.draft_description == "" and labitems.description == ""
    assert not ColumnDoc.objects.filter(table=labitems).exclude(draft_meaning="").exists()
    assert TableDoc.objects.get(pk=items.pk).draft_description == "DRAFT: ICU items."
    event = AuditEvent.objects.get(action="docs.drafted")
    assert list(event.detail["failed"]) == ["mimiciv_hosp.d_labitems"]


def test_drafting_without_an_llm_says_what_to_set(admin_client, source, settings):
    settings.LLM_MODEL = ""
    doc = doc_named(source, "mimiciv_hosp", "d_labitems")
    TableDoc.objects.filter(pk=doc.pk).update(description="")

    response = run_action(admin_client, "draft_missing_descriptions", doc)

    assert shown_messages(response) == [NO_LLM_MESSAGE]
    assert TableDoc.objects.get(pk=doc.pk).draft_description == ""


# ---------------------------------------------------------------- catalog pages

QUESTION = "average creatinine of patients with sepsis"


def test_playground_full_page_ranks_tables_and_links_values(admin_client, source):
    response = admin_client.get(reverse("catalog:playground"), {"q": QUESTION, "k": 5})

    page = response.content.decode()
    assert response.status_code == 200 and "<h1>Retrieval playground</h1>" in page
    ranked = [t.qualified for t in response.context["retrieval"].tables]
    assert "mimiciv_hosp.labevents" in ranked and "mimiciv_hosp.diagnoses_icd" in ranked
    assert "<code>mimiciv_hosp.labevents</code>" in page
    assert 'class="fill" style="width: 100%"' in page  # the best table's bar, with its score as text
    best = response.context["retrieval"].tables[0]
    assert f'<span class="value">{best.score:.3f}</span>' in page
    values = {(v.table, v.column, v.value.lower()) for v in response.context["retrieval"].values}
    assert ("mimiciv_hosp.d_labitems", "label", "creatinine") in values
    assert any("sepsis" in v for _, _, v in values)
    assert "Timings" in page and "embed:" in page


def test_playground_answers_htmx_with_the_results_fragment_only(admin_client, source):
    response = admin_client.get(
        reverse("catalog:playground"), {"q": QUESTION}, headers={"HX-Request": "true"}
    )

    fragment = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in fragment and "<form" not in fragment
    assert "mimiciv_hosp.labevents" in fragment and "d_labitems.label</code> = Creatinine" in fragment


def test_playground_without_a_question_shows_the_form(admin_client, source):
    page = admin_client.get(reverse("catalog:playground")).content.decode()
    assert 'hx-get="/catalog/playground/"' in page and 'name="q"' in page
    assert "Linked values" not in page


@pytest.mark.parametrize("name", ["catalog:overview", "catalog:playground"])
@pytest.mark.parametrize(("role", "expected"), [(RESEARCHER, 403), (REVIEWER, 403), (ADMIN, 200)])
def test_catalog_pages_are_for_admins(client, source, name, role, expected):
    client.force_login(make_user(f"user-{role}", role))
    assert client.get(reverse(name)).status_code == expected


def test_overview_lists_tables_with_status_and_curation_links(admin_client, source):
    doc = doc_named(source, "mimiciv_hosp", "d_labitems")
    TableDoc.objects.filter(pk=doc.pk).update(description="changed")

    page = admin_client.get(reverse("catalog:overview")).content.decode()

    assert reverse("catalog:table", args=[doc.pk]) in page
    assert "<code>mimiciv_hosp.patients</code>" in page and "<code>mimiciv_icu.icustays</code>" in page
    rows = {
        r.doc.qualified_name: r
        for _, rows in admin_client.get(reverse("catalog:overview")).context["sources"]
        for r in rows
    }
    assert rows["mimiciv_hosp.d_labitems"].status == "stale"
    assert rows["mimiciv_hosp.patients"].status == "current"
    assert (
        rows["mimiciv_hosp.patients"].column_count == ColumnDoc.objects.filter(table__name="patients").count()
    )


def test_overview_empty_state_says_how_to_add_a_source(admin_client, source):
    source.delete()
    page = admin_client.get(reverse("catalog:overview")).content.decode()
    assert "No clinical source is registered" in page and "make demo" in page


# ---------------------------------------------------------------- read-only and list pages


def test_source_list_never_shows_a_password(admin_client, source):
    source.url = "postgresql://reader:s3cret-pw@db.example.org:5433/mimic"
    source.save(update_fields=["url"])

    page = admin_client.get(reverse("admin:metadata_admin_clinicalsource_changelist")).content.decode()

    assert "reader:***@db.example.org:5433/mimic" in page and "s3cret-pw" not in page
    assert f">{TableDoc.objects.filter(source=source).count()}<" in page  # the table count column


def test_revisions_and_values_are_read_only(admin_client, source):
    doc = doc_named(source, "mimiciv_hosp", "d_labitems")
    revision = DocRevision.objects.create(
        table=doc, note="before import", snapshot={"description": "old <b>"}
    )

    page = admin_client.get(reverse("admin:metadata_admin_docrevision_change", args=[revision.pk]))

    assert page.status_code == 200
    assert "<pre>{\n  &quot;description&quot;: &quot;old &lt;b&gt;&quot;\n}</pre>" in page.content.decode()
    assert admin_client.get(reverse("admin:metadata_admin_docrevision_add")).status_code == 403
    assert (
        admin_client.post(reverse("admin:metadata_admin_docrevision_delete", args=[revision.pk])).status_code
        == 403
    )
    values = admin_client.get(reverse("admin:metadata_admin_valueentry_changelist"), {"q": "creatinine"})
    assert values.status_code == 200 and "Creatinine" in values.content.decode()
    assert admin_client.get(reverse("admin:metadata_admin_valueentry_add")).status_code == 403


def test_the_minimum_cell_size_is_set_per_source_in_the_admin_and_audited(admin_client, source):
    url = reverse("admin:metadata_admin_clinicalsource_change", args=[source.pk])
    data = form_fields(admin_client.get(url).content.decode(), "clinicalsource_form")
    assert data["min_cell_size"] == "11"
    response = admin_client.post(url, data | {"min_cell_size": "5"})
    assert response.status_code == 302, response.content.decode()[:2000]
    source.refresh_from_db()
    assert source.min_cell_size == 5
    event = AuditEvent.objects.get(action="source.changed")
    assert event.detail == {"min_cell_size": "5"} and event.message == "min_cell_size"


def test_the_disclosure_mode_and_its_parameters_are_set_per_source_in_the_admin_and_audited(
    admin_client, source
):
    url = reverse("admin:metadata_admin_clinicalsource_change", args=[source.pk])
    page = admin_client.get(url).content.decode()
    data = form_fields(page, "clinicalsource_form")
    assert (
        data["disclosure_mode"] == "suppress"
        and data["round_base"] == "5"
        and data["differencing_limit"] == "7"
    )
    assert "differential privacy" in page and "add noise (i2b2-style)" in page

    refused = admin_client.post(
        url, data | {"disclosure_mode": "round", "round_base": "0", "dp_epsilon": "0"}
    )
    assert refused.status_code == 200  # a base of 0 or a free epsilon is not a setting
    source.refresh_from_db()
    assert source.disclosure_mode == "suppress"

    response = admin_client.post(
        url, data | {"disclosure_mode": "noise", "noise_scale": "2.0", "noise_clip": "4"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    source.refresh_from_db()
    assert (source.disclosure_mode, source.noise_scale, source.noise_clip) == ("noise", 2.0, 4)
    event = AuditEvent.objects.get(action="source.changed")
    assert event.detail == {"disclosure_mode": "noise", "noise_scale": "2.0", "noise_clip": "4"}
    listing = admin_client.get(reverse("admin:metadata_admin_clinicalsource_changelist")).content.decode()
    assert "add noise (i2b2-style)" in listing
