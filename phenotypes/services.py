"""Phenotype use cases: define, run (retrieve → judge → decide), allow snippets to an LLM, adjudicate.

Every write audits in its own transaction. A run reads note text through NOTES_DATABASE_URL (a
role the SQL path's readers are not), judges with ConText or, when the source allows it, an LLM
map step (phenotypes/tasks.py), and keeps the deciding snippets as evidence.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import yaml
from django.conf import settings
from django.db import models, transaction
from django.utils import timezone
from pgvector.django import CosineDistance
from psycopg import sql as psql

from infra.audit.services import audit_record
from infra.providers.embeddings import EmbeddingError, get_embedder
from infra.providers.llm import get_chat_model
from metadata_admin.docs import DocColumn, DocRelationship, DocTable
from metadata_admin.models import ClinicalSource
from metadata_admin.services import docs_import, table_docs_reembed
from phenotypes import retrieval
from phenotypes.assertion import AssertionClassifier
from phenotypes.decide import agreement, decide
from phenotypes.llm_judge import JudgeAnswerError, map_messages, parse_assertion
from phenotypes.models import (
    Adjudication,
    Evidence,
    NotesPolicy,
    PatientDecision,
    Phenotype,
    PhenotypeRun,
    SnippetEmbedding,
)

DEFINITIONS_DIR = Path(__file__).with_name("definitions")
_ICD_PATTERN = re.compile(r"^[A-Z0-9%]{1,8}$")
_BATCH = 2000


class PhenotypeError(ValueError):
    """A definition or a run that cannot be used, in words a person can act on."""


# --------------------------------------------------------------------------- definitions


def _clean_definition(data: dict) -> dict:
    if not isinstance(data, dict):
        raise PhenotypeError("a phenotype definition is a mapping with name, description, terms and icd")
    unknown = sorted(set(data) - {"name", "description", "terms", "icd"})
    if unknown:
        raise PhenotypeError(f"unknown key(s) {', '.join(unknown)}; use name, description, terms, icd")
    name = str(data.get("name") or "").strip()
    description = str(data.get("description") or "").strip()
    terms = data.get("terms") or []
    icd = data.get("icd") or []
    if not name:
        raise PhenotypeError("the definition has no name")
    if not description:
        raise PhenotypeError(f"{name}: the definition has no description (snippets are ranked by it)")
    if not isinstance(terms, list) or not all(isinstance(t, str) and t.strip() for t in terms) or not terms:
        raise PhenotypeError(f"{name}: terms must be a non-empty list of words or phrases")
    if not isinstance(icd, list):
        raise PhenotypeError(f"{name}: icd must be a list of code patterns such as I27% or 42731")
    codes = []
    for code in icd:
        # MIMIC stores codes without the dot; accept "I27.%" as people write it.
        code = str(code).strip().upper().replace(".", "")
        if not _ICD_PATTERN.match(code):
            raise PhenotypeError(f"{name}: {code!r} is not an ICD code pattern (letters, digits, % wildcard)")
        codes.append(code)
    return {
        "name": name,
        "description": description,
        "terms": list(dict.fromkeys(t.strip() for t in terms)),
        "icd": codes,
    }


def read_definition_file(path: Path) -> list[dict]:
    """The definitions in a YAML or JSON file (one mapping, or a list of them)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PhenotypeError(f"{path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PhenotypeError(
            f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'} ({exc})"
        ) from None
    return data if isinstance(data, list) else [data]


@transaction.atomic
def phenotype_define(*, data: dict, actor=None) -> Phenotype:
    """Create a phenotype, or replace the definition of the same name; audited."""
    clean = _clean_definition(data)
    existing = Phenotype.objects.filter(name=clean["name"]).first()
    phenotype, created = Phenotype.objects.update_or_create(
        name=clean["name"],
        defaults={
            "description": clean["description"],
            "terms": clean["terms"],
            "icd": clean["icd"],
            "updated_by": actor if getattr(actor, "pk", None) else None,
        },
    )
    before = (
        None
        if existing is None
        else {"description": existing.description, "terms": existing.terms, "icd": existing.icd}
    )
    audit_record(
        action="phenotype.defined",
        actor=actor,
        target=phenotype,
        message=f"{'defined' if created else 'replaced'} phenotype {phenotype.name}",
        detail={"definition": clean, "before": before},
    )
    return phenotype


def phenotype_define_bundled(*, actor=None) -> list[Phenotype]:
    """The four phenotypes shipped with askdb (definitions/*.yaml), for the demo and the benchmark."""
    return [
        phenotype_define(data=d, actor=actor)
        for path in sorted(DEFINITIONS_DIR.glob("*.yaml"))
        for d in read_definition_file(path)
    ]


# --------------------------------------------------------------------------- policy


@transaction.atomic
def notes_policy_set(*, source: ClinicalSource, snippets_to_llm: bool, actor=None) -> NotesPolicy:
    """Allow (or stop) sending this source's note snippets to the LLM; audited."""
    policy, _ = NotesPolicy.objects.get_or_create(source=source)
    before = policy.snippets_to_llm
    policy.snippets_to_llm = snippets_to_llm
    policy.save(update_fields=["snippets_to_llm"])
    audit_record(
        action="notes.policy_changed",
        actor=actor,
        target=source,
        message=f"note snippets to the LLM {'allowed' if snippets_to_llm else 'not allowed'} for {source.name}",
        detail={"snippets_to_llm": {"before": before, "after": snippets_to_llm}},
    )
    return policy


def snippets_may_leave(source: ClinicalSource) -> bool:
    policy = NotesPolicy.objects.filter(source=source).first()
    return bool(policy and policy.snippets_to_llm)


# --------------------------------------------------------------------------- runs


def notes_dsn(source: ClinicalSource) -> str:
    """Where this source's notes are read. Only the configured clinical source has notes."""
    if source.name != settings.CLINICAL_SOURCE_NAME or not settings.NOTES_DATABASE_URL:
        raise PhenotypeError(
            f"source {source.name!r} has no notes askdb may read: notes are read through "
            f"NOTES_DATABASE_URL for source {settings.CLINICAL_SOURCE_NAME!r}"
        )
    return settings.NOTES_DATABASE_URL


@transaction.atomic
def phenotype_run_create(
    *, phenotype: Phenotype, source: ClinicalSource, judge: str = PhenotypeRun.Judge.CONTEXT, actor=None
) -> PhenotypeRun:
    """A queued run of `phenotype` over `source`'s notes; an LLM judge needs the source's consent."""
    if judge not in PhenotypeRun.Judge.values:
        raise PhenotypeError(f"unknown judge {judge!r}; use {' or '.join(PhenotypeRun.Judge.values)}")
    notes_dsn(source)
    if judge == PhenotypeRun.Judge.LLM and not snippets_may_leave(source):
        raise PhenotypeError(
            f"note snippets of {source.name} may not be sent to an LLM: an admin must allow it "
            "for this source first (Phenotypes page or Django admin, Notes policies)"
        )
    run = PhenotypeRun.objects.create(
        phenotype=phenotype,
        source=source,
        judge=judge,
        definition={
            "name": phenotype.name,
            "description": phenotype.description,
            "terms": phenotype.terms,
            "icd": phenotype.icd,
        },
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    audit_record(
        action="phenotype.run_started",
        actor=actor,
        target=run,
        message=f"phenotype {phenotype.name} on {source.name} ({judge})",
        detail={"definition": run.definition, "judge": judge},
    )
    return run


def _progress(run: PhenotypeRun, **fields) -> None:
    PhenotypeRun.objects.filter(pk=run.pk).update(**fields)


def snippet_scores(texts: list[str], description: str) -> dict[str, float]:
    """Cosine similarity of each distinct snippet to the description, ranked in pgvector.

    Only these candidate snippets are embedded (never whole notes), each once per model: the
    vectors are kept by text hash, so a snippet repeated across notes or runs costs nothing twice.
    """
    distinct = list(dict.fromkeys(texts))
    if not distinct:
        return {}
    try:
        embedder = get_embedder()
        model = getattr(embedder, "model", "unknown")
        by_hash = {hashlib.sha256(t.encode()).hexdigest(): t for t in distinct}
        have = set(
            SnippetEmbedding.objects.filter(model=model, text_hash__in=list(by_hash)).values_list(
                "text_hash", flat=True
            )
        )
        missing = [h for h in by_hash if h not in have]
        for i in range(0, len(missing), 256):
            part = missing[i : i + 256]
            vectors = embedder.embed([by_hash[h] for h in part])
            SnippetEmbedding.objects.bulk_create(
                [
                    SnippetEmbedding(text_hash=h, model=model, embedding=v)
                    for h, v in zip(part, vectors, strict=True)
                ],
                ignore_conflicts=True,
            )
        query = embedder.embed([description])[0]
    except EmbeddingError:
        return {}  # ranking is a convenience: judging does not depend on it
    rows = (
        SnippetEmbedding.objects.filter(model=model, text_hash__in=list(by_hash))
        .annotate(distance=CosineDistance("embedding", query))
        .values_list("text_hash", "distance")
    )
    return {by_hash[h]: round(1.0 - float(d), 4) for h, d in rows}


def _gather(run: PhenotypeRun, dsn: str, terms: list[str]):
    """Candidate snippets per subject with their ConText assertion, judged in batches."""
    classifier = AssertionClassifier(terms)
    judged: dict[int, list[tuple]] = defaultdict(list)
    batch: list[tuple] = []
    seen = 0

    def flush() -> None:
        nonlocal seen
        results = classifier.judge([(c.text, c.section) for _, c in batch])
        for (subject, chunk), j in zip(batch, results, strict=True):
            if j.assertion:  # the term regex found it; ConText's tokenizer too
                judged[subject].append(
                    (chunk.note_id, chunk.section, chunk.text, j.term_start, j.term_end, j.assertion)
                )
        seen += len(batch)
        batch.clear()
        _progress(run, done=seen, stage="judging snippets")

    for item in retrieval.candidates(dsn, terms):
        batch.append(item)
        if len(batch) >= _BATCH:
            flush()
    if batch:
        flush()
    return judged


def phenotype_run_execute(
    *, run_id: int, rerank: bool = True, final: bool = True, out: Callable[[str], object] | None = None
) -> PhenotypeRun:
    """Retrieve, judge with ConText, rank by similarity to the description, decide, store.

    The LLM judge reuses this for retrieval and then hands the snippets to the map step
    (tasks.py); a failure marks the run failed with its reason instead of raising.
    """
    run = PhenotypeRun.objects.select_related("source", "phenotype").get(pk=run_id)
    say = out or (lambda s: None)
    _progress(run, status=PhenotypeRun.Status.RUNNING, stage="finding candidate snippets", done=0, total=0)
    try:
        dsn = notes_dsn(run.source)
        terms = run.definition["terms"]
        subjects = retrieval.subjects_with_notes(dsn)
        if not subjects:
            raise PhenotypeError("the source holds no notes (load note/ with load_mimic first)")
        _progress(run, total=len(subjects))
        judged = _gather(run, dsn, terms)
        say(f"{sum(map(len, judged.values())):,} candidate snippets of {len(judged):,} patients judged")
        scores: dict[str, float] = {}
        if rerank:
            _progress(run, stage="ranking snippets")
            scores = snippet_scores(
                [s[2] for rows in judged.values() for s in rows], run.definition["description"]
            )
        coded = retrieval.coded_subjects(dsn, run.definition["icd"])
        _store(run, subjects, judged, scores, coded, final=final)
    except Exception as exc:  # the run records any failure; the caller sees the status
        PhenotypeRun.objects.filter(pk=run.pk).update(
            status=PhenotypeRun.Status.FAILED,
            error=f"{type(exc).__name__}: {exc}"[:2000],
            finished_at=timezone.now(),
        )
        raise
    run.refresh_from_db()
    return run


@transaction.atomic
def _store(
    run, subjects: set[int], judged, scores: dict[str, float], coded: set[int] | None, *, final: bool
) -> None:
    PatientDecision.objects.filter(run=run).delete()  # idempotent: a retried run starts clean
    decisions: dict[int, str] = {}
    rows = []
    evidence_of: list[tuple[int, list[tuple], tuple[int, ...]]] = []
    for subject in sorted(subjects | set(judged)):
        snippets = judged.get(subject, [])
        d = decide([s[5] for s in snippets])
        decisions[subject] = d.decision
        rows.append(
            PatientDecision(
                run=run, subject_id=subject, decision=d.decision, coded=bool(coded and subject in coded)
            )
        )
        evidence_of.append((subject, snippets, d.deciding))
    created = PatientDecision.objects.bulk_create(rows, batch_size=5000)
    evidence = []
    for decision, (_, snippets, deciding) in zip(created, evidence_of, strict=True):
        for i, (note_id, section, text, start, end, assertion) in enumerate(snippets):
            evidence.append(
                Evidence(
                    decision=decision,
                    note_id=note_id,
                    section=section[:80],
                    text=text,
                    term_start=start,
                    term_end=end,
                    assertion=assertion,
                    score=scores.get(text),
                    deciding=i in deciding,
                )
            )
    Evidence.objects.bulk_create(evidence, batch_size=5000)
    if final:
        _finish(run, decisions, coded)
    else:
        PhenotypeRun.objects.filter(pk=run.pk).update(stage="asking the LLM", done=0, total=len(evidence))


def _finish(
    run: PhenotypeRun, decisions: dict[int, str], coded: set[int] | None, extra: dict | None = None
) -> None:
    counts = {k: sum(1 for v in decisions.values() if v == k) for k in ("present", "absent", "uncertain")}
    counts["patients"] = len(decisions)
    counts["snippets"] = Evidence.objects.filter(decision__run=run).count()
    counts |= extra or {}
    table = agreement(decisions, coded) if coded is not None else {}
    PhenotypeRun.objects.filter(pk=run.pk).update(
        status=PhenotypeRun.Status.DONE,
        stage="done",
        done=len(decisions),
        total=len(decisions),
        counts=counts,
        agreement=table,
        finished_at=timezone.now(),
    )
    audit_record(
        action="phenotype.run_finished",
        target=run,
        message=f"phenotype {run.definition['name']}: {counts['present']} present of {counts['patients']}",
        detail={"counts": counts, "agreement": table},
    )


def phenotype_run_submit(
    *, phenotype: Phenotype, source: ClinicalSource, judge: str = PhenotypeRun.Judge.CONTEXT, actor=None
) -> PhenotypeRun:
    """Create the run and hand it to a worker once the run row is committed."""
    from phenotypes.tasks import phenotype_run_task  # local: the task module imports this one

    with transaction.atomic():
        run = phenotype_run_create(phenotype=phenotype, source=source, judge=judge, actor=actor)
        transaction.on_commit(lambda: phenotype_run_task.delay(run.pk))
    return run


# --------------------------------------------------------------------------- the LLM judge

LLM_SNIPPETS_PER_PATIENT = 5


def snippets_for_llm(*, run_id: int) -> list[int]:
    """The evidence rows the map step asks about: each patient's best-ranked few snippets."""
    ids: list[int] = []
    per_patient: dict[int, int] = defaultdict(int)
    for pk, decision_id in (
        Evidence.objects.filter(decision__run_id=run_id)
        .order_by("decision_id", "-score", "id")
        .values_list("pk", "decision_id")
    ):
        if per_patient[decision_id] < LLM_SNIPPETS_PER_PATIENT:
            per_patient[decision_id] += 1
            ids.append(pk)
    return ids


def phenotype_snippet_judge(*, evidence_id: int, record_failure: bool, retry: Callable | None = None) -> str:
    """The map step for one snippet: ask the LLM (outside any transaction), store its assertion.

    The snippet is marked as sent before the call: once a request is made it has left. A failure
    retries through `retry` (Celery's) until `record_failure`, then is kept on the snippet.
    """
    evidence = Evidence.objects.select_related("decision__run__source").get(pk=evidence_id)
    run = evidence.decision.run
    if not snippets_may_leave(run.source):
        Evidence.objects.filter(pk=evidence_id).update(llm_error="not sent: the source does not allow it")
        return ""
    model = get_chat_model()
    if model is None:
        Evidence.objects.filter(pk=evidence_id).update(llm_error="no LLM configured")
        return ""
    Evidence.objects.filter(pk=evidence_id).update(sent_to_llm=True)
    messages = map_messages(
        phenotype=run.definition["name"],
        description=run.definition["description"],
        section=evidence.section,
        text=evidence.text,
    )
    try:
        answer = parse_assertion(model.complete(messages, temperature=0.0, max_tokens=30).texts[0])
    except Exception as exc:  # LLMError, an unreadable answer: retried, then recorded per snippet
        if not record_failure and retry is not None and not isinstance(exc, JudgeAnswerError):
            raise retry(exc=exc) from exc
        Evidence.objects.filter(pk=evidence_id).update(llm_error=str(exc)[:500])
        PhenotypeRun.objects.filter(pk=run.pk).update(done=models.F("done") + 1)
        return ""
    Evidence.objects.filter(pk=evidence_id).update(llm_assertion=answer, llm_error="")
    PhenotypeRun.objects.filter(pk=run.pk).update(done=models.F("done") + 1)
    return answer


@transaction.atomic
def phenotype_run_reduce(*, run_id: int) -> PhenotypeRun:
    """The reduce step: each patient decided from the LLM's assertions (ConText's where it failed)."""
    run = PhenotypeRun.objects.select_for_update().get(pk=run_id)
    decisions: dict[int, str] = {}
    coded: set[int] = set()
    failed = sent = 0
    changed: list[PatientDecision] = []
    chosen: list[int] = []
    for decision in PatientDecision.objects.filter(run=run).prefetch_related("evidence"):
        snippets = list(decision.evidence.all())
        sent += sum(e.sent_to_llm for e in snippets)
        failed += sum(bool(e.llm_error) for e in snippets)
        d = decide([e.llm_assertion or e.assertion for e in snippets])
        decisions[decision.subject_id] = d.decision
        if decision.coded:
            coded.add(decision.subject_id)
        if decision.decision != d.decision:
            decision.decision = d.decision
            changed.append(decision)
        chosen.extend(snippets[i].pk for i in d.deciding)
    # A few statements for the whole run, not a few per patient.
    PatientDecision.objects.bulk_update(changed, ["decision"], batch_size=5000)
    Evidence.objects.filter(decision__run=run, deciding=True).update(deciding=False)
    for i in range(0, len(chosen), 10_000):
        Evidence.objects.filter(pk__in=chosen[i : i + 10_000]).update(deciding=True)
    has_codes = bool(run.definition.get("icd"))
    _finish(run, decisions, coded if has_codes else None, {"sent_to_llm": sent, "llm_failed": failed})
    audit_record(
        action="notes.snippets_sent",
        target=run,
        message=f"{sent} note snippets of run {run.pk} were sent to the LLM",
        detail={"sent": sent, "failed": failed},
    )
    run.refresh_from_db()
    return run


# --------------------------------------------------------------------------- cohorts

COHORT_SCHEMA = "askdb_cohorts"


def _cohort_readers(conn: psycopg.Connection) -> list[str]:
    """The roles that may read patients may read a cohort of them (the reader tiers), and the
    reader of CLINICAL_DATABASE_URL; never PUBLIC."""
    roles = {
        r[0]
        for r in conn.execute(
            # The reader tiers hold column privileges (askdb grants no table-wide SELECT): a role
            # that may read patients' subject_id may read the cohort's.
            "SELECT grantee FROM information_schema.column_privileges WHERE table_schema = 'mimiciv_hosp' "
            "AND table_name = 'patients' AND column_name = 'subject_id' AND privilege_type = 'SELECT' "
            "AND grantee <> 'PUBLIC' AND grantee <> current_user"
        )
    }
    reader = urlparse(settings.CLINICAL_DATABASE_URL).username
    if reader:
        roles.add(reader)
    return sorted(roles)


def cohort_table_name(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:50] or "cohort"
    return slug if not slug[0].isdigit() else f"c_{slug}"


def cohort_save(*, run: PhenotypeRun, actor=None) -> str:
    """Save the run's "present" patients as askdb_cohorts.<phenotype> in the clinical database,
    readable by the reader roles and documented in the catalog, so generated SQL can join it.

    A later save of the same phenotype replaces the table (and says which run it holds).
    """
    if run.status != PhenotypeRun.Status.DONE:
        raise PhenotypeError(f"run {run.pk} is {run.status}; only a finished run can become a cohort")
    dsn = settings.CLINICAL_ADMIN_DATABASE_URL
    if not dsn:
        raise PhenotypeError(
            "saving a cohort needs CLINICAL_ADMIN_DATABASE_URL (a role that may create tables)"
        )
    name = run.definition["name"]
    table = cohort_table_name(name)
    subjects = list(
        PatientDecision.objects.filter(run=run, decision=PatientDecision.Decision.PRESENT)
        .order_by("subject_id")
        .values_list("subject_id", flat=True)
    )
    ident = psql.Identifier(COHORT_SCHEMA, table)
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(psql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(psql.Identifier(COHORT_SCHEMA)))
        conn.execute(psql.SQL("DROP TABLE IF EXISTS {}").format(ident))
        conn.execute(psql.SQL("CREATE TABLE {} (subject_id INTEGER PRIMARY KEY)").format(ident))
        with conn.cursor().copy(psql.SQL("COPY {} (subject_id) FROM STDIN").format(ident)) as copy:
            for subject in subjects:
                copy.write_row((subject,))
        conn.execute(
            psql.SQL("COMMENT ON TABLE {} IS {}").format(
                ident, psql.Literal(f"askdb phenotype cohort: {name} (run {run.pk})")
            )
        )
        conn.execute(psql.SQL("ANALYZE {}").format(ident))
        for role in _cohort_readers(conn):
            r = psql.Identifier(role)
            conn.execute(psql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(psql.Identifier(COHORT_SCHEMA), r))
            conn.execute(psql.SQL("GRANT SELECT ON {} TO {}").format(ident, r))
    doc = DocTable(
        schema=COHORT_SCHEMA,
        name=table,
        description=(
            f"The {name} cohort: patients whose clinical notes say they have {name} "
            f"(askdb phenotype run {run.pk}, {run.judge} judge). One row per patient."
        ),
        purpose=f"Join on subject_id to restrict a question to the {name} cohort.",
        grain="one row per patient (subject_id)",
        synonyms=[f"{name} cohort", f"{name} patients", f"patients with {name}"],
        example_questions=[f"How many patients in the {name} cohort were admitted to the ICU?"],
        columns=[DocColumn(name="subject_id", type="integer", meaning="the patient", key="primary, foreign")],
        relationships=[DocRelationship(to="mimiciv_hosp.patients", on=[["subject_id", "subject_id"]])],
        reference=False,
    )
    docs_import(source=run.source, tables=[doc], actor=actor)
    table_docs_reembed(source=run.source)
    with transaction.atomic():
        PhenotypeRun.objects.filter(pk=run.pk).update(cohort_table=f"{COHORT_SCHEMA}.{table}")
        audit_record(
            action="phenotype.cohort_saved",
            actor=actor,
            target=run,
            message=f"cohort {COHORT_SCHEMA}.{table}: {len(subjects)} patients",
            detail={"table": f"{COHORT_SCHEMA}.{table}", "patients": len(subjects)},
        )
    return f"{COHORT_SCHEMA}.{table}"


# --------------------------------------------------------------------------- review


@transaction.atomic
def adjudication_record(*, decision: PatientDecision, reviewer, agree: bool) -> Adjudication:
    """A reviewer's agree/disagree on one sampled decision (again: the new answer replaces it)."""
    adjudication, _ = Adjudication.objects.update_or_create(
        decision=decision, reviewer=reviewer, defaults={"agree": agree}
    )
    audit_record(
        action="phenotype.adjudicated",
        actor=reviewer,
        target=decision.run,
        message=f"subject {decision.subject_id}: {'agree' if agree else 'disagree'} with {decision.decision}",
        detail={"subject_id": decision.subject_id, "decision": decision.decision, "agree": agree},
    )
    return adjudication
