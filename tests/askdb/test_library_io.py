"""askdb/library_io.py: every file format the library reads, and the exact sentence for each malformed one."""

from __future__ import annotations

import json

import pytest

from askdb.library_io import (
    MAX_UPLOAD_BYTES,
    LibraryFormatError,
    check_size,
    dump_examples,
    parse_ehrsql,
    parse_examples,
)

SQL = "SELECT COUNT(*) FROM mimiciv_hosp.patients"


def j(value) -> bytes:
    return json.dumps(value).encode()


def error_of(call, *args) -> str:
    with pytest.raises(LibraryFormatError) as info:
        call(*args)
    return str(info.value)


# --------------------------------------------------------------------------- the formats


def test_a_plain_json_list_with_ids_and_unanswerables():
    items = parse_examples(
        j([
            {"id": "a1", "question": "  How many   patients? ", "sql": SQL},
            {"id": 7, "question": "Who will be admitted tomorrow?", "sql": None},
            {"question": "What is the weather?", "sql": "null"},
        ]),
        "lib.json",
    )  # fmt: skip
    assert items == [
        {"id": "a1", "question": "How many patients?", "sql": SQL},
        {"id": "7", "question": "Who will be admitted tomorrow?", "sql": ""},
        {"id": "3", "question": "What is the weather?", "sql": ""},  # no id: its position
    ]


def test_our_benchmark_format_imports_as_is():
    bench = [
        {"id": "b-001", "question": "How many female patients?", "sql": SQL, "category": "count",
         "difficulty": "easy", "tables": ["mimiciv_hosp.patients"]},
        {"id": "b-002", "question": "Average age at admission?", "sql": "SELECT 1", "category": "aggregate"},
    ]  # fmt: skip
    items = parse_examples(j(bench), "test.json")
    assert [i["id"] for i in items] == ["b-001", "b-002"]
    assert items[0] == {"id": "b-001", "question": "How many female patients?", "sql": SQL}


def test_askdb_exports_round_trip_in_both_formats():
    examples = [
        {"id": 3, "question": "How many patients?", "sql": "SELECT COUNT(*)\nFROM mimiciv_hosp.patients",
         "kind": "answerable", "status": "active", "tables": ["mimiciv_hosp.patients"], "note": "checked"},
        {"id": 4, "question": "Will it rain?", "sql": "", "kind": "unanswerable", "status": "active"},
    ]  # fmt: skip
    for fmt in ("json", "yaml"):
        data = dump_examples(examples, fmt=fmt, source="mimic")
        items = parse_examples(data, f"export.{fmt}")
        assert items == [
            {"id": "3", "question": "How many patients?", "sql": examples[0]["sql"], "note": "checked"},
            {"id": "4", "question": "Will it rain?", "sql": ""},
        ], fmt
    assert b"sql: |" in dump_examples(examples, fmt="yaml")  # multi-line SQL as a readable block


def test_yaml_list_and_format_sniffing_without_a_known_extension():
    yaml_text = b"- id: x\n  question: How many stays?\n  sql: SELECT 1\n- question: Unknown?\n  sql: null\n"
    assert parse_examples(yaml_text, "lib.yml")[1] == {"id": "2", "question": "Unknown?", "sql": ""}
    assert parse_examples(yaml_text, "upload")[0]["sql"] == "SELECT 1"
    assert parse_examples(j([{"question": "How many?", "sql": SQL}]), "upload.txt")[0]["sql"] == SQL


def test_an_ehrsql_like_data_file_carrying_its_own_query():
    data = {"version": "2022", "data": [{"id": "q1", "question": "How many patients?", "query": SQL}]}
    assert parse_examples(j(data), "valid.json") == [
        {"id": "q1", "question": "How many patients?", "sql": SQL}
    ]


def test_the_ehrsql_pair():
    data = {"data": [{"id": "e1", "question": "How many patients?"}, {"id": "e2", "question": "Who is sad?"},
                     {"id": "e3", "question": "Heart rate of 1?"}]}  # fmt: skip
    labels = {"e1": SQL, "e2": "null", "e3": None}
    assert parse_ehrsql(j(data), j(labels)) == [
        {"id": "e1", "question": "How many patients?", "sql": SQL},
        {"id": "e2", "question": "Who is sad?", "sql": ""},
        {"id": "e3", "question": "Heart rate of 1?", "sql": ""},
    ]


def test_the_size_limit():
    check_size(MAX_UPLOAD_BYTES, "ok.json")
    assert error_of(check_size, 7 * 1024 * 1024, "big.json") == "big.json is 7.0 MB, over the 5 MB limit."


# --------------------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    ("data", "filename", "message"),
    [
        (b'[\n  {"question": "a b c",\n   "sql": "SELECT 1",}\n]', "lib.json",
         "lib.json: bad JSON at line 3, column 22: Expecting property name enclosed in double quotes."),
        (b"- question: [unclosed\n", "lib.yaml", "lib.yaml: bad YAML at line 2, column 1:"),
        (b"", "lib.json", "lib.json is empty."),
        (b"\xff\xfe[]", "lib.json", "lib.json is not UTF-8 text (bad byte at offset 0)."),
        (b"[]", "lib.json", "lib.json holds no examples."),
        (b'"just text"', "lib.json", "lib.json: expected a list of examples, found text."),
        (b'{"items": []}', "lib.json",
         'lib.json: expected a list of examples, or an object with an "examples" list; '
         "found an object with the keys items."),
        (b'{"examples": {"a": 1}}', "lib.json", 'lib.json: "examples" must be a list, not an object.'),
        (j([{"question": "ok ok", "sql": ""}, {"question": "ok", "sql": "x"}, {"id": "z", "sql": SQL}]),
         "lib.json", 'lib.json: item 3 (id "z") has no "question" key.'),
        (j([{"question": "How many?"}]), "lib.json",
         'lib.json: item 1 has no "sql" key (use "" or null for a question the database cannot answer).'),
        (j([{"question": "How many?", "sql": 5}]), "lib.json", 'lib.json: item 1: "sql" must be text or null, not a number.'),
        (j([{"question": ["a"], "sql": ""}]), "lib.json", 'lib.json: item 1: "question" must be text, not a list.'),
        (j([{"question": "   ", "sql": ""}]), "lib.json", 'lib.json: item 1: "question" is empty.'),
        (j(["How many?"]), "lib.json", "lib.json: item 1 is text, not an object."),
        (j({"examples": [{"question": "x y", "sql": ""}, 3]}), "lib.json",
         "lib.json: examples item 2 is a number, not an object."),
        (j([{"id": "a", "question": "q q", "sql": ""}, {"id": "a", "question": "r r", "sql": ""}]), "lib.json",
         'lib.json: id "a" appears twice (items 1 and 2); ids must be unique so the report can name each failure.'),
        (j({"data": [{"id": "1", "question": "How many?"}]}), "data.json",
         "data.json looks like an EHRSQL data.json: its items have no SQL. "
         "Upload its label.json with it (the labels file)."),
        (j({"1": "SELECT 1", "2": "null"}), "label.json",
         "label.json looks like an EHRSQL label.json (an object of id → SQL). "
         "Upload it as the labels file, with its data.json as the examples file."),
        (j([{"question": "Will it rain?", "sql": "SELECT 1", "kind": "unanswerable"}]), "lib.json",
         "lib.json: item 1 is marked unanswerable but has SQL; drop one of the two."),
    ],
)  # fmt: skip
def test_malformed_example_files_say_what_and_where(data, filename, message):
    assert error_of(parse_examples, data, filename).startswith(message)


DATA = {"data": [{"id": "e1", "question": "How many patients?"}, {"id": "e2", "question": "Who is sad?"}]}


@pytest.mark.parametrize(
    ("data", "labels", "message"),
    [
        (b"{", j({}), "data.json: bad JSON at line 1, column 2: Expecting property name enclosed in double quotes."),
        (j(DATA), b"[1,", "label.json: bad JSON at line 1, column 4: Expecting value."),
        (j(DATA), j({"e1": SQL, "e2": "null", "e9": SQL}), 'label.json has 1 id(s) not in data.json: "e9".'),
        (j(DATA), j({"e1": SQL}), 'label.json has no label for 1 data.json id(s): "e2".'),
        (j({"data": [{"question": "x y z"}]}), j({}), 'data.json item 1 has no "id" key.'),
        (j({"data": [{"id": "e1", "text": "x"}]}), j({"e1": SQL}), 'data.json item 1 (id "e1") has no "question" key.'),
        (j(DATA), j([SQL]), 'label.json: expected an object mapping each id to its SQL ("null" when unanswerable), '
                            "found a list."),
        (j(DATA), j({"e1": SQL, "e2": 3}), 'label.json: the label of id "e2" must be SQL text or "null", not a number.'),
        (j({"e1": SQL}), j(DATA), "data.json looks like a label file (an object of id → SQL); the two files are swapped."),
        (j({"data": []}), j({}), "data.json holds no questions."),
        (j({"data": [{"id": "a", "question": "q q"}, {"id": "a", "question": "r r"}]}), j({"a": ""}),
         'data.json: id "a" appears twice (items 1 and 2)'),
    ],
)  # fmt: skip
def test_malformed_ehrsql_pairs_say_what_and_where(data, labels, message):
    assert error_of(parse_ehrsql, data, labels).startswith(message)


def test_many_missing_labels_are_counted_not_all_listed():
    data = {"data": [{"id": f"q{n}", "question": f"Question {n}?"} for n in range(8)]}
    assert error_of(parse_ehrsql, j(data), j({})) == (
        'label.json has no label for 8 data.json id(s): "q0", "q1", "q2", "q3", "q4" (+3 more).'
    )


def test_an_unknown_export_format_is_refused():
    assert (
        error_of(lambda: dump_examples([], fmt="csv"))
        == "Unknown export format 'csv'; use one of: json, yaml."
    )
