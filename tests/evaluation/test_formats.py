"""Question files: EHRSQL data + label, askdb's plain JSON list, CSV; malformed ones say where."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from infra.formats import FormatError, load_items


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_ehrsql_data_and_labels(tmp_path):
    data = write(tmp_path, "data.json", {"version": "x", "data": [
        {"id": "a1", "question": "How many patients are there?"},
        {"id": "a2", "question": " Where does patient 1 live? ", "category": "privacy"},
    ]})  # fmt: skip
    labels = write(tmp_path, "label.json", {"a1": "select count(*) from patients", "a2": "null"})
    items = load_items(data, labels)
    assert [(i.id, i.answerable) for i in items] == [("a1", True), ("a2", False)]
    assert items[0].gold_sql == "select count(*) from patients"
    assert items[1].question == "Where does patient 1 live?" and items[1].category == "privacy"


def test_ehrsql_missing_label_names_the_id(tmp_path):
    data = write(
        tmp_path, "data.json", {"data": [{"id": "a1", "question": "q one"}, {"id": "b7", "question": "q"}]}
    )
    labels = write(tmp_path, "label.json", {"a1": "null"})
    with pytest.raises(FormatError, match=r"no label for id 'b7' \(item 2"):
        load_items(data, labels)


def test_ehrsql_data_without_labels_asks_for_them(tmp_path):
    data = write(tmp_path, "data.json", {"data": [{"id": "a1", "question": "q one"}]})
    with pytest.raises(FormatError, match="--labels"):
        load_items(data)


def test_askdb_benchmark_list_keeps_extra_keys_as_metadata(tmp_path):
    path = write(tmp_path, "test.json", [
        {"id": "m1", "question": "How many admissions?", "sql": "SELECT count(*) FROM admissions",
         "category": "count", "tables": ["mimiciv_hosp.admissions"], "paraphrase_of": None},
        {"id": "m2", "question": "What is the weather?", "sql": "", "category": "unanswerable",
         "tables": [], "paraphrase_of": "m9"},
    ])  # fmt: skip
    items = load_items(path)
    assert [(i.id, i.category, i.answerable) for i in items] == [
        ("m1", "count", True),
        ("m2", "unanswerable", False),
    ]
    assert items[0].metadata == {"tables": ["mimiciv_hosp.admissions"], "paraphrase_of": None}
    assert items[1].metadata["paraphrase_of"] == "m9"


def test_plain_list_without_ids_numbers_items_and_accepts_null_sql(tmp_path):
    path = write(
        tmp_path, "q.json", [{"question": "one?", "sql": None}, {"question": "two?", "gold_sql": "SELECT 2"}]
    )
    items = load_items(path)
    assert [(i.id, i.gold_sql) for i in items] == [("1", ""), ("2", "SELECT 2")]


def test_csv(tmp_path):
    path = write(
        tmp_path,
        "q.csv",
        'question,sql,category,note\n"How many, exactly?",SELECT 1,count,first\n\nWho am I?,,privacy,\n',
    )
    items = load_items(path)
    assert [(i.id, i.question, i.gold_sql, i.category) for i in items] == [
        ("1", "How many, exactly?", "SELECT 1", "count"),
        ("3", "Who am I?", "", "privacy"),
    ]
    assert items[0].metadata == {"note": "first"} and items[1].metadata == {}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.json", '[{"question": "a", "sql": ""},\n  {"question": }]', r"not valid JSON at line 2"),
        ("obj.json", {"questions": []}, r"expected a JSON list"),
        (
            "noq.json",
            [{"question": "ok", "sql": ""}, {"sql": "SELECT 1"}],
            r"item 2: missing or empty key 'question'",
        ),
        ("nosql.json", [{"question": "ok"}], r"item 1: missing key 'sql'"),
        ("type.json", [{"question": "ok", "sql": 3}], r"item 1: key 'sql': expected SQL text"),
        (
            "dup.json",
            [{"id": 1, "question": "a", "sql": ""}, {"id": "1", "question": "b", "sql": ""}],
            "duplicate id '1'",
        ),
        ("empty.json", [], "no questions"),
        ("head.csv", "text,sql\nq,SELECT 1\n", r"line 1: the header needs a 'question' column"),
        ("wide.csv", "question,sql\nq,SELECT 1,extra\n", r"line 2: more fields than the header"),
        ("blankq.csv", "question,sql\nq,SELECT 1\n ,SELECT 2\n", r"line 3: empty 'question'"),
    ],
)
def test_malformed_files_say_where(tmp_path, name, content, message):
    with pytest.raises(FormatError, match=message):
        load_items(write(tmp_path, name, content))


def test_missing_file(tmp_path):
    with pytest.raises(FormatError, match="no such file"):
        load_items(tmp_path / "nope.json")


def test_the_command_turns_a_malformed_file_into_a_command_error(tmp_path):
    path = write(tmp_path, "bad.json", [{"question": "ok"}])
    with pytest.raises(CommandError, match=r"item 1: missing key 'sql'"):
        call_command("evaluate", questions=str(path))


@pytest.mark.parametrize("field", ["question", "sql"])
def test_a_nul_character_in_a_benchmark_file_is_refused_with_a_sentence(tmp_path, field):
    """PostgreSQL's text cannot hold a NUL: it must be refused where the file is read, naming the
    item, never fail later inside a write (JSON's \\u0000 escape, and a CSV cell, carry one)."""
    row = {"id": "q1", "question": "How many patients?", "sql": "SELECT count(*) FROM patients"}
    row[field] = row[field][:4] + "\x00" + row[field][4:]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps([row]))
    with pytest.raises(FormatError, match=r"bench.json: item 1 \('q1'\).*NUL character"):
        load_items(path)
    csv_path = tmp_path / "bench.csv"
    csv_path.write_text("id,question,sql\nq1,How\x00 many?,SELECT 1\n")
    with pytest.raises(FormatError, match="NUL character"):
        load_items(csv_path)
