import pytest

from core.extraction import (
    JsonExtractionError,
    SqlExtractionError,
    extract_json_object,
    extract_sql,
)

QUERY = "SELECT subject_id, COUNT(*) AS n\nFROM mimiciv_hosp.admissions\nGROUP BY subject_id"


@pytest.mark.parametrize(
    "reply",
    [
        f"```sql\n{QUERY}\n```",
        f"```SQL\n{QUERY};\n```",
        f"``` postgresql\n{QUERY}\n```",
        f"Here is the query you asked for:\n\n```sql\n{QUERY}\n```\n\nIt counts admissions per patient.",
        f"```\n{QUERY}\n```",
        # an untagged block of sample output comes first; the query block is the one used
        f"Result looks like:\n```\nsubject_id | n\n1 | 2\n```\nQuery:\n```\n{QUERY}\n```",
        f"```sql\n{QUERY}",  # reply cut off before the closing fence
        f"<think>\nThe user wants counts. Maybe SELECT * FROM patients?\n</think>\n```sql\n{QUERY}\n```",
        f"<think>I could write ```sql\nSELECT 1\n``` but no.</think>\n\n{QUERY};",
        # the server dropped the opening tag: the draft inside the reasoning is not the answer
        f"Draft:\n```sql\nSELECT 1\n```\nNo, group it.</think>\n```sql\n{QUERY}\n```",
        f"```sql\n{QUERY}\n```\n<think>double-check the grouping</think>",
        f"{QUERY};",
        f"  {QUERY} ;; \n",
        f"SQL: {QUERY}",
        f"SQL query:\n{QUERY};",
        f"To answer this, I count admissions per patient.\n\n{QUERY};\n\nThis groups by subject_id.",
        f"To answer this, I count admissions per patient.\n\n{QUERY}\n\nThis groups by subject_id.",
        f"{QUERY}\n\nFrom this you get one row per patient.\n\nWith more data it would be slower.",
        f"I will select the right rows with a GROUP BY.\n{QUERY}",
    ],
)
def test_the_query_is_found_in_common_reply_shapes(reply):
    assert extract_sql(reply) == QUERY


def test_a_cte_is_taken_whole_from_bare_text():
    sql = (
        "WITH per_patient AS (\n  SELECT subject_id, COUNT(*) AS n\n  FROM mimiciv_hosp.admissions\n"
        "  GROUP BY 1\n)\n\nSELECT AVG(n)\n\nFROM per_patient"
    )
    assert extract_sql(f"Sure, with a CTE this is easy:\n\n{sql}\n\nLet me know if you need more.") == sql


def test_a_semicolon_inside_a_string_does_not_end_the_statement():
    sql = "SELECT * FROM mimiciv_hosp.d_labitems WHERE label = 'a;b' -- note; here\nAND fluid = 'Blood'"
    assert extract_sql(f"Try this:\n{sql}; and then check the result.") == sql


def test_a_sql_tagged_block_is_preferred_to_other_blocks():
    reply = f"```text\nSELECT is used below\n```\n```sql\n{QUERY}\n```"
    assert extract_sql(reply) == QUERY


def test_a_fenced_block_is_returned_even_if_it_is_not_a_select():
    # Refusing it is validation's job, which gives the model a better message than "no SQL".
    assert extract_sql("```sql\nDROP TABLE mimiciv_hosp.patients;\n```") == "DROP TABLE mimiciv_hosp.patients"


def test_a_one_line_fence_loses_its_backticks():
    assert extract_sql("```SELECT 1```") == "SELECT 1"


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "   \n ",
        "I'm sorry, I can't answer that from the available tables.",
        "Please select a time range with more data.",
        "```sql\n\n```",
        "<think>Maybe SELECT * FROM patients</think>I don't know.",
        "<think>SELECT * FROM mimiciv_hosp.patients -- the reply was cut off while reasoning",
        None,
    ],
)
def test_replies_without_sql_raise_a_clear_error(reply):
    with pytest.raises(SqlExtractionError, match=r"^the model's reply contained no SQL$"):
        extract_sql(reply)


def test_the_extraction_error_is_a_value_error():
    assert issubclass(SqlExtractionError, ValueError)
    assert issubclass(JsonExtractionError, ValueError)


@pytest.mark.parametrize(
    "reply",
    [
        '{"sql": "SELECT 1", "confidence": 0.9}',
        '```json\n{"sql": "SELECT 1", "confidence": 0.9}\n```',
        '```\n{"sql": "SELECT 1", "confidence": 0.9}\n```',
        'Here you go:\n{"sql": "SELECT 1", "confidence": 0.9}\nHope this helps {really}.',
        '<think>{"sql": "wrong"}</think>{"sql": "SELECT 1", "confidence": 0.9}',
        'Thinking about {braces} first.\n```json\n{"sql": "SELECT 1", "confidence": 0.9}\n```',
    ],
)
def test_a_json_object_is_found_fenced_or_bare(reply):
    assert extract_json_object(reply) == {"sql": "SELECT 1", "confidence": 0.9}


def test_nested_json_is_kept_whole():
    assert extract_json_object('Result: {"a": {"b": [1, {"c": "}"}]}} done') == {"a": {"b": [1, {"c": "}"}]}}


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("", "empty"),
        ("no json here at all", "no JSON object"),
        ('{"sql": "SELECT 1",', "not valid JSON"),
        ("{not: json}", "not valid JSON"),
        ("[1, 2, 3]", "JSON array"),
        ('"just a string"', "JSON string"),
    ],
)
def test_garbage_instead_of_json_raises_a_clear_error(reply, message):
    with pytest.raises(JsonExtractionError, match=message):
        extract_json_object(reply)
