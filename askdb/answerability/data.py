"""Training data for the answerability model, read from the catalog and the example library, and
the training and evaluation services the `train_answerability` command and task wrap.

Labels: approved examples are answerable (their SQL groups paraphrases), flagged ones are not.
"""

from __future__ import annotations

import hashlib
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from askdb.answerability import rules, store
from askdb.answerability.model import (
    AnswerabilityModel,
    ColumnText,
    Encoder,
    MiniLMEncoder,
    TableText,
    TrainConfig,
    TrainingError,
    TrainQuestion,
    check_data,
    classification_metrics,
    train,
)
from metadata_admin.docs import table_embedding_text

Progress = Callable[[str], None] | None


def _norm(text: str) -> str:
    return " ".join(str(text or "").lower().split())


def column_text(table: str, column: str, meaning: str) -> str:
    """The text a column is found by: its name and what it means."""
    return f"{table}.{column}: {' '.join(str(meaning or '').split())}".strip()


def table_texts(source) -> list[TableText]:
    """The documented tables the source really has, each with the text retrieval embeds."""
    from metadata_admin.docs import table_doc_embedding_text
    from metadata_admin.models import TableDoc

    docs = TableDoc.objects.filter(source=source, exists_in_source=True).prefetch_related("columns")
    return [TableText(doc.qualified_name, table_doc_embedding_text(doc)) for doc in docs]


def _from_values(values: str) -> str:
    """What an undocumented column holds, drafted from its values when no one (and no LLM) wrote
    it: the catalog can still be asked about what its values say."""
    return f"values such as {values}" if values else ""


def column_texts(source) -> list[ColumnText]:
    """Every documented column of the source's tables (per-column relevance, absent concepts)."""
    from metadata_admin.models import ColumnDoc

    rows = ColumnDoc.objects.filter(table__source=source, table__exists_in_source=True).select_related(
        "table"
    )
    return [
        ColumnText(
            f"{c.table.qualified_name}.{c.name}",
            column_text(c.table.name, c.name, c.meaning or c.draft_meaning or _from_values(c.example_values)),
            c.example_values,
        )
        for c in rows.order_by("table__schema_name", "table__name", "position", "name")
    ]


def value_texts(source) -> list[str]:
    """The source's linked values (drug, lab, diagnosis names...): words the catalog can be asked
    about though no doc spells them."""
    from metadata_admin.models import ValueEntry

    return list(ValueEntry.objects.filter(source=source).values_list("value", flat=True).distinct())


def docs_catalog(tables) -> tuple[list[TableText], list[ColumnText]]:
    """Table and column texts from parsed YAML docs (metadata_admin.docs.DocTable), for the
    benchmark and tests that have no database; the same texts the catalog gives."""
    table_out, column_out = [], []
    for t in tables:
        text = table_embedding_text(
            name=t.name, qualified=t.qualified, synonyms=t.synonyms, description=t.description,
            purpose=t.purpose, grain=t.grain, example_questions=t.example_questions,
            column_names=[c.name for c in t.columns],
        )  # fmt: skip
        table_out.append(TableText(t.qualified, text))
        column_out += [
            ColumnText(f"{t.qualified}.{c.name}", column_text(t.name, c.name, c.meaning), c.example_values)
            for c in t.columns
        ]
    return table_out, column_out


def library_questions(source) -> list[TrainQuestion]:
    """Active library examples: approved SQL (answerable) and flagged-unanswerable ones."""
    from askdb.models import Example

    rows = (
        Example.objects.filter(source=source, status=Example.Status.ACTIVE)
        .order_by("id")
        .values_list("pk", "question", "kind", "tables", "sql")
    )
    return [
        TrainQuestion(
            id=str(pk), text=question, answerable=kind == Example.Kind.ANSWERABLE,
            tables=tuple(tables or ()) if kind == Example.Kind.ANSWERABLE else (), origin="library",
            sql=sql if kind == Example.Kind.ANSWERABLE else "",
        )
        for pk, question, kind, tables, sql in rows
    ]  # fmt: skip


def library_items(source) -> list[tuple[int, str, bool]]:
    """(example id, question, answerable) of the active library, for the nearest-example signals."""
    from askdb.models import Example

    rows = Example.objects.filter(source=source, status=Example.Status.ACTIVE).order_by("id")
    return [
        (pk, q, kind == Example.Kind.ANSWERABLE) for pk, q, kind in rows.values_list("pk", "question", "kind")
    ]


def read_labelled_file(path: str | Path, labels: str | Path | None = None) -> list[dict]:
    """A labelled question file in any format the evaluation harness reads (our benchmark's JSON
    list, EHRSQL's data.json with its label.json, CSV). The label is the category when there is
    one, else whether SQL is given."""
    from infra.formats import FormatError, load_items

    try:
        items = load_items(path, labels)
    except FormatError as exc:
        raise TrainingError(str(exc)) from exc
    out = []
    for item in items:
        answerable = item.category == "answerable" if item.category else item.answerable
        out.append(
            {
                "id": item.id,
                "question": " ".join(item.question.split()),
                "answerable": answerable,
                "category": item.category or ("answerable" if answerable else "unanswerable"),
                "tables": tuple(item.metadata.get("tables") or ()) if answerable else (),
                "sql": item.gold_sql if answerable else "",
            }
        )
    return out


def file_questions(path: str | Path, labels: str | Path | None = None) -> list[TrainQuestion]:
    return [
        TrainQuestion(f"file:{i['id']}", i["question"], i["answerable"], i["tables"], "file", i["sql"])
        for i in read_labelled_file(path, labels)
    ]


def library_snapshot(source) -> dict[str, Any]:
    """Which library the model learnt from: size, last change, and a hash of its content."""
    from django.db.models import Max

    from askdb.models import Example

    qs = Example.objects.filter(source=source, status=Example.Status.ACTIVE)
    digest = hashlib.sha256()
    for pk, kind, sql, question in qs.order_by("id").values_list("pk", "kind", "sql", "question"):
        digest.update(f"{pk}\x1f{kind}\x1f{question}\x1f{sql}\x1e".encode())
    last = qs.aggregate(last=Max("updated_at"))["last"]
    return {
        "examples": qs.count(),
        "last_updated": last.isoformat() if last else None,
        "hash": digest.hexdigest()[:16],
    }


def merged_questions(
    source, from_file: str | Path | None, tables: list[TableText], labels: str | Path | None = None
) -> tuple[list[TrainQuestion], dict[str, int]]:
    """The library's questions plus a file's, a file question dropped when the library has it or
    when it needs a table this source lacks (answerable elsewhere, not here: no usable label)."""
    questions = library_questions(source)
    counts = {"library": len(questions), "file": 0, "file_skipped": 0}
    if from_file:
        known = {t.qualified for t in tables}
        seen = {_norm(q.text) for q in questions}
        for q in file_questions(from_file, labels):
            if q.answerable and q.tables and not set(q.tables) <= known:
                counts["file_skipped"] += 1
            elif _norm(q.text) not in seen:
                seen.add(_norm(q.text))
                questions.append(q)
                counts["file"] += 1
    return questions, counts


def peak_memory_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def as_of_year(source) -> int | None:
    return source.as_of.year if getattr(source, "as_of", None) else None


@dataclass
class TrainReport:
    version: str
    path: Path
    manifest: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)


def answerability_train(
    *,
    source,
    from_file: str | Path | None = None,
    labels: str | Path | None = None,
    config: TrainConfig | None = None,
    activate: bool = True,
    progress: Progress = None,
    encoder: Encoder | None = None,
) -> TrainReport:
    """Train on the library (plus a file), store a new version, and make it current."""
    from dataclasses import replace

    from django.utils import timezone

    from infra.audit.services import audit_record

    say = progress or (lambda s: None)
    started = time.monotonic()
    config = replace(config or TrainConfig(), as_of_year=as_of_year(source))
    tables = table_texts(source)
    if not tables:
        raise TrainingError(f"source {source.name} has no documented tables; import the catalog first")
    columns = column_texts(source)
    questions, counts = merged_questions(source, from_file, tables, labels)
    say(
        f"{counts['library']} library questions, {counts['file']} from file "
        f"({counts['file_skipped']} skipped: tables not in {source.name}), {len(tables)} tables, "
        f"{len(columns)} columns"
    )
    check_data(questions, config)
    encoder = encoder or MiniLMEncoder.installed()
    result = train(
        questions, tables, columns, encoder=encoder, config=config, progress=say, values=value_texts(source)
    )
    created = timezone.now()
    snapshot = library_snapshot(source)
    manifest = {
        "created": created.isoformat(),
        "source": source.name,
        "encoder": getattr(encoder, "name", ""),
        "library": snapshot,
        "training_data": {
            **counts,
            "unanswerable": sum(not q.answerable for q in questions),
            "from_file": str(from_file) if from_file else None,
        },
        "tables": [t.qualified for t in tables],
        "columns": len(columns),
        "absent_concepts": sorted(result.absent),
        "as_of_year": config.as_of_year,
        "size": result.size,
        "paraphrase_families": result.families,
        "unanswerable_kinds": result.kinds,
        "threshold": result.threshold,
        "evaluation": f"{config.folds}-fold cross-validation holding out whole kinds of unanswerable question "
        f"and whole paraphrase families, dealt {config.repeats} ways",
        "metrics": result.metrics,
        "model_metrics": result.model_metrics,
        "rules_metrics": result.rules_metrics,
        "selection": result.selection,
        "config": {
            "folds": config.folds,
            "repeats": config.repeats,
            "seed": config.seed,
            "l2": result.l2,
            "member_l2": result.member_l2,
            "standardize": result.standardize,
            "max_blocked": config.max_blocked,
        },
        "stages": result.stages,
        "seconds": round(time.monotonic() - started, 1),
        "peak_memory_mb": peak_memory_mb(),
    }
    version = store.new_version(created, snapshot["hash"])
    path = store.save_version(
        source.name, version, combiner=result.combiner, threshold=result.threshold, manifest=manifest,
        library=([q.text for q in questions], result.library_vectors), activate=activate,
    )  # fmt: skip
    audit_record(action="answerability.trained", actor=None, target=source,
                 message=f"answerability model {version} trained", detail={"version": version,
                 "metrics": result.metrics, "activated": activate})  # fmt: skip
    say(
        f"stored version {version} in {manifest['seconds']:.0f}s, peak memory {manifest['peak_memory_mb']:.0f} MB"
    )
    return TrainReport(version=version, path=path, manifest=store.read_manifest(source.name, version),
                       metrics=result.metrics)  # fmt: skip


def _cause(score) -> str:
    """What declined a question: a decisive rule (named), the catalog grounding, or the model."""
    decisive = [f for f in score.findings if f.decisive]
    if not decisive:
        return "model"
    return "grounding" if decisive[0].rule == "ungrounded_attribute" else f"rule:{decisive[0].rule}"


def _p50_ms(seconds: Sequence[float]) -> float:
    return round(1000 * sorted(seconds)[len(seconds) // 2], 2) if seconds else 0.0


def score_items(
    model: AnswerabilityModel,
    items: Sequence[dict],
    progress: Progress = None,
    *,
    embed: Callable[[str], Any] | None = None,
    facts: Callable[[str], Sequence[Any]] | None = None,
) -> dict:
    """Precision/recall/F1/AUC of a model on labelled items (unanswerable = positive), at the
    model's threshold, with how each kind of reason was used and questions it got wrong.
    `facts(question)`: the findings a run makes in the data itself (`people`), as the ports do.

    `embed` plays the pipeline's embed stage: each question is embedded first (timed apart,
    `embed_p50_ms`) and the gate gets that vector, as in a run (`p50_ms` is then the gate's own
    time, `total_p50_ms` both); without it the gate encodes the question itself."""
    probabilities, labels, by_kind = [], [], {}
    missed, blocked, seconds, embedding = [], [], [], []
    for n, item in enumerate(items, start=1):
        t0 = time.perf_counter()
        vector = embed(item["question"]) if embed is not None else None
        t1 = time.perf_counter()
        score = model.score(item["question"], vector=vector, facts=facts(item["question"]) if facts else ())
        seconds.append(time.perf_counter() - t1)
        embedding.append(t1 - t0)
        probabilities.append(score.gate_probability)  # the one score a run reports and the CV ranks
        labels.append(item["answerable"])
        if not score.answerable:
            k = by_kind.setdefault(score.kind, {"declined": 0, "of_them_unanswerable": 0, "example": ""})
            k["declined"] += 1
            k["of_them_unanswerable"] += int(not item["answerable"])
            if not item["answerable"] and not k["example"]:
                k["example"] = f"{item['question']} → {score.reason}"
            if item["answerable"]:
                blocked.append({"question": item["question"], "reason": score.reason, "cause": _cause(score)})
        elif not item["answerable"]:
            missed.append(item["question"])
        if progress and n % 200 == 0:
            progress(f"scored {n}/{len(items)}")
    metrics = classification_metrics(probabilities, labels, model.threshold)
    n_answerable = sum(labels)
    metrics["answerable_blocked"] = round(len(blocked) / n_answerable, 4) if n_answerable else 0.0
    metrics["p50_ms"] = _p50_ms(seconds)
    if embed is not None:
        metrics["embed_p50_ms"] = _p50_ms(embedding)
        metrics["total_p50_ms"] = _p50_ms([a + b for a, b in zip(seconds, embedding, strict=True)])
    metrics["by_kind"] = by_kind
    metrics["blocked"] = blocked
    metrics["missed"] = missed
    return metrics


__all__ = [
    "AnswerabilityModel",
    "TrainReport",
    "answerability_train",
    "column_texts",
    "docs_catalog",
    "library_items",
    "rules",
    "score_items",
    "table_texts",
]
