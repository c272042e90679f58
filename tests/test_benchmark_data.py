"""The MIMIC-IV question benchmark (benchmarks/data/mimiciv/{train,test}.json) is well formed.

Pure tests check the files themselves: ids, sizes, categories, paraphrase links, and that every
gold SQL parses and passes askdb's own validator against the MIMIC-IV v2.2 layout with the
tables it declares. One slow test loads the real open demo into a scratch database and runs
every gold SQL on it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest
import sqlglot

from core.types import CatalogSchema, TableSchema
from core.validation import referenced_tables, validate_sql
from metadata_admin.clinical import schema

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "mimiciv"
DEMO = Path(__file__).resolve().parents[2] / "shared" / "mimic-iv-demo-2.2"

UNANSWERABLE = frozenset({"out_of_scope", "non_medical", "future_data", "private_data", "missing_field"})
FIELDS = {"id", "question", "sql", "category", "tables", "paraphrase_of"}

# The demo has no chartevents, so the gold SQL may not use it: the catalog leaves it out. The
# summaries the loader keeps beside the tables (the lab test counts) are part of the layout.
CATALOG = CatalogSchema(
    tables=tuple(
        TableSchema(t.schema, t.name, t.column_names) for t in schema.TABLES if t.name != "chartevents"
    )
    + tuple(TableSchema(s.schema, s.name, s.columns) for s in schema.SUMMARIES)
)


def _load(name: str) -> list[dict]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


TRAIN = _load("train.json")
TEST = _load("test.json")
ITEMS = TRAIN + TEST
ANSWERABLE = [item for item in ITEMS if item["category"] == "answerable"]


def test_items_have_exactly_the_documented_fields():
    for item in ITEMS:
        assert set(item) == FIELDS, item.get("id")
        assert isinstance(item["question"], str) and item["question"].strip(), item["id"]
        assert isinstance(item["tables"], list), item["id"]


def test_ids_are_unique_across_both_files_and_name_their_split():
    ids = [item["id"] for item in ITEMS]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"tr-\d{3}", item["id"]) for item in TRAIN)
    assert all(re.fullmatch(r"te-\d{3}", item["id"]) for item in TEST)


def test_questions_are_not_repeated():
    questions = [item["question"].strip().lower() for item in ITEMS]
    assert len(questions) == len(set(questions))


def test_sizes_and_split():
    assert len(ITEMS) >= 150
    unanswerable = [item for item in ITEMS if item["category"] != "answerable"]
    assert len(unanswerable) >= 30
    # Unanswerable questions are in both splits, and every category is represented.
    for split in (TRAIN, TEST):
        assert {item["category"] for item in split} >= UNANSWERABLE | {"answerable"}
    # About 60/40 train/test.
    assert 0.5 <= len(TRAIN) / len(ITEMS) <= 0.7


def test_paraphrases_point_at_train_items():
    train_ids = {item["id"] for item in TRAIN}
    assert all(item["paraphrase_of"] is None for item in TRAIN)
    paraphrases = [item for item in TEST if item["paraphrase_of"] is not None]
    assert len(paraphrases) >= 40
    for item in paraphrases:
        assert item["paraphrase_of"] in train_ids, item["id"]
        assert item["category"] == "answerable", item["id"]
    # A paraphrase is a new question with its own gold SQL, not a copy.
    by_id = {item["id"]: item for item in TRAIN}
    for item in paraphrases:
        original = by_id[item["paraphrase_of"]]
        assert item["question"] != original["question"], item["id"]
        assert item["sql"] != original["sql"], item["id"]


def test_unanswerable_items_have_no_sql_and_a_known_category():
    for item in ITEMS:
        if item["category"] == "answerable":
            continue
        assert item["category"] in UNANSWERABLE, item["id"]
        assert item["sql"] == "", item["id"]
        assert item["tables"] == [], item["id"]
        assert item["paraphrase_of"] is None, item["id"]


@pytest.mark.parametrize("item", ANSWERABLE, ids=lambda item: item["id"])
def test_answerable_sql_parses_validates_and_declares_its_tables(item):
    sql = item["sql"]
    assert sql.strip() == sql and not sql.endswith(";"), "no surrounding whitespace or trailing semicolon"
    assert not re.search(r"\b(now|current_date|current_timestamp)\b", sql, re.IGNORECASE), (
        "MIMIC dates are shifted: no wall-clock time in gold SQL"
    )
    statements = sqlglot.parse(sql, dialect="postgres")
    assert len(statements) == 1 and isinstance(statements[0], sqlglot.exp.Query)
    validated = validate_sql(sql, CATALOG)
    assert item["tables"] == list(validated.tables)
    assert item["tables"] == list(referenced_tables(sql))
    # Every table is schema-qualified in the SQL itself.
    assert all(t.startswith(("mimiciv_hosp.", "mimiciv_icu.")) for t in referenced_tables(sql))


@pytest.mark.slow
@pytest.mark.skipif(not (DEMO / "hosp").is_dir(), reason=f"MIMIC-IV demo not found at {DEMO}")
def test_every_gold_sql_runs_on_the_demo(scratch_database):
    from metadata_admin.clinical.loader import load_release

    report = load_release(DEMO, dsn=scratch_database, progress=False, out=lambda line: None)
    assert report.ok, report.failed
    failures, empty = [], []
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = on")
        conn.execute("SET statement_timeout = '30s'")
        for item in ANSWERABLE:
            try:
                rows = conn.execute(item["sql"]).fetchall()
            except psycopg.Error as error:
                failures.append(f"{item['id']}: {str(error).splitlines()[0]}")
                continue
            if not rows:
                empty.append(item["id"])
    assert not failures, "\n".join(failures)
    # The values in the questions were picked from the demo so that every gold answer has rows.
    assert not empty, empty


def test_each_summary_documents_the_columns_its_query_makes():
    from metadata_admin.docs import BUNDLED_DOCS, read_docs

    docs = {t.qualified: [c.name for c in t.columns] for t in read_docs([BUNDLED_DOCS])}
    for summary in schema.SUMMARIES:
        made = [e.alias_or_name for e in sqlglot.parse_one(summary.query, dialect="postgres").expressions]
        assert made == list(summary.columns) == docs[summary.qualified_name]
