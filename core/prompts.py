"""Prompt texts, versioned: every LLM call stores PROMPT_VERSION so a run can be replayed and
a prompt change measured. Builders are pure functions from dataclasses to chat messages."""

from __future__ import annotations

from core.retrieval import LinkedValue
from core.types import ExampleContext, TableContext

PROMPT_VERSION = "2026-11-21.1"

GATE_CATEGORIES = ("answerable", "out_of_scope", "non_medical", "future_data", "private_data")
# Every decline category (the gate's, the answerability rules' and no_data) in words, for pages.
CATEGORY_LABELS = {
    "answerable": "answerable",
    "no_data": "no table holds this",
    "not_in_schema": "information the database does not hold",
    "future_data": "about the future",
    "advice": "asks for advice or an opinion",
    "private_data": "would identify or contact a person",
    "out_of_scope": "outside this database's scope",
    "non_medical": "not about the patient data",
}

DIALECT_NAMES = {"postgres": "PostgreSQL", "sqlite": "SQLite", "duckdb": "DuckDB"}

GUIDELINES = """\
- Use only the tables and columns listed above, with their schema-qualified names.
- Join on the documented keys; diagnoses and procedures join their dictionaries on BOTH icd_code and icd_version.
- Join the code tables (d_icd_diagnoses, d_icd_procedures, d_labitems, d_items) to filter or show human-readable names; match names case-insensitively (ILIKE or lower()) unless a linked value gives the exact spelling.
- Use drug names (prescriptions.drug, emar.medication), not product codes.
- Handle NULLs deliberately (COUNT(col) vs COUNT(*), COALESCE where a missing value means zero) and avoid division by zero (NULLIF).
- Never use NOW(), CURRENT_DATE or CURRENT_TIMESTAMP: "today" is the as-of timestamp {as_of}; write it as a literal.
- Dates are shifted per patient into the future (years like 2110–2210); compare years as stored.
- Return readable column aliases; add ORDER BY when order matters and LIMIT when the question asks for top N.
- Output only one SQL query in a ```sql block, no explanation."""


def _format_table(t: TableContext) -> str:
    lines = [f"### {t.qualified}"]
    if t.description:
        lines.append(t.description)
    if t.purpose:
        lines.append(f"Purpose: {t.purpose}")
    if t.grain:
        lines.append(f"Grain: {t.grain}")
    if t.synonyms:
        lines.append(f"Synonyms: {', '.join(t.synonyms)}")
    lines.append("Columns:")
    for c in t.columns:
        parts = [f"- {c.name} {c.type}".rstrip()]
        if c.key:
            parts.append(f"[{c.key}]")
        if c.meaning:
            parts.append(f"— {c.meaning}")
        if c.example_values and not c.sensitive:
            parts.append(f"(e.g. {c.example_values})")
        lines.append(" ".join(parts))
    if t.joins:
        lines.append("Joins:")
        lines.extend(f"- {j}" for j in t.joins)
    if t.considerations:
        lines.append("Considerations:")
        lines.extend(f"- {c}" for c in t.considerations)
    return "\n".join(lines)


def _format_values(values: list[LinkedValue]) -> str:
    seen = []
    for v in values[:12]:
        code = f" (code {v.code})" if v.code else ""
        seen.append(f"- \"{v.term}\" may mean {v.table}.{v.column} = '{v.value}'{code}")
    return "\n".join(seen)


def sql_messages(
    *,
    question: str,
    tables: list[TableContext],
    examples: list[ExampleContext],
    values: list[LinkedValue],
    dialect: str,
    as_of: str,
) -> list[dict]:
    dialect_name = DIALECT_NAMES.get(dialect, dialect)
    system = (
        f"You write one {dialect_name} SQL query that answers a researcher's question about a clinical "
        f"database in the MIMIC-IV layout. The data is as of {as_of}.\n\n"
        "## Tables\n\n" + "\n\n".join(_format_table(t) for t in tables)
    )
    if values:
        system += "\n\n## Values in the database that the question may mention\n" + _format_values(values)
    system += "\n\n## Guidelines\n" + GUIDELINES.format(as_of=as_of)
    messages = [{"role": "system", "content": system}]
    for ex in examples:
        messages.append({"role": "user", "content": ex.question})
        messages.append({"role": "assistant", "content": f"```sql\n{ex.sql}\n```"})
    messages.append({"role": "user", "content": question})
    return messages


def repair_messages(previous: list[dict], sql: str, error: str) -> list[dict]:
    """The conversation so far plus the failed SQL and its real error, verbatim."""
    return [
        *previous,
        {"role": "assistant", "content": f"```sql\n{sql}\n```"},
        {
            "role": "user",
            "content": f"That query failed with this error:\n{error}\n\n"
            "Fix it. Use only the listed tables and columns. Output only the corrected SQL in a ```sql block.",
        },
    ]


def gate_messages(*, question: str, tables: list[TableContext], as_of: str) -> list[dict]:
    catalog = "\n".join(f"- {t.qualified}: {t.description[:200]}" for t in tables)
    system = f"""You screen questions for a clinical research database (MIMIC-IV layout: hospital and ICU \
records of de-identified patients; dates shifted into the future; data as of {as_of}).
The most relevant tables are:
{catalog}

Classify the question into exactly one category:
- answerable: the tables above can answer it with SQL.
- out_of_scope: about clinical data this database does not hold (e.g. genomics, imaging pixels, outpatient \
clinic notes, other hospitals) or needs knowledge outside the data.
- non_medical: not a question about this clinical data at all (weather, coding help, jokes, general chat).
- future_data: asks about events after {as_of} or predictions of the future.
- private_data: tries to identify, locate or contact a patient or staff member (names, addresses, phone \
numbers, re-identification), which the de-identified data must never support.
Reply with only a JSON object: {{"category": "...", "reason": "one short sentence for the user"}}."""
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def summary_messages(*, question: str, sql: str, preview: str, row_count: int, truncated: bool) -> list[dict]:
    system = (
        "You explain the result of a SQL query to a clinical researcher in 2–4 plain sentences: answer the "
        "question directly with the numbers, then one caveat that matters (shifted dates, missing data, "
        "what the query counted). Do not invent numbers that are not in the result."
    )
    count = f"{row_count} rows" + (" (truncated at the row cap)" if truncated else "")
    user = f"Question: {question}\n\nSQL:\n{sql}\n\nResult ({count}):\n{preview}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
