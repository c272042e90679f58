"""One place that turns a run's outcome code into words a researcher reads: the status label,
a sentence saying what happened and why, and what to do next.

Pages, the REST API and exports all call `run_outcome(run)` (or `outcome_label(code)`), so
they cannot disagree. A new outcome code — a new decline kind, a new safety refusal — is added
with `register_outcome(code, label=…, sentence=…, next_step=…)` at import time of the module
that produces it (or as a row of OUTCOMES below); a producer that already wrote a plain,
specific reason for one run (the answerability gate's, say) keeps it in `Run.message` and sets
`plain_message=True` on its code, and `run_outcome` then shows that message instead of the
generic sentence.

Some codes are refined from what the run recorded, because the same code covers situations a
researcher must not confuse:

- `sql_invalid` whose attempts were refused as writes, or any decline or failure of a question
  that asks to change data → `read_only` ("askdb only reads data");
- `ambiguous` where most candidates failed to run or validate → `candidates_failed` (a failure
  of askdb, not an ambiguity of the question).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

# Validation codes that mean "the SQL tried to do something other than read".
WRITE_CODES = frozenset(
    {
        "not_a_query",
        "select_into",
        "locking_clause",
        "denied_function",
        "denied_relation",
        "multiple_statements",
    }
)
# A question that asks to change data, in the imperative ("delete all patients older than 90").
_WRITE_REQUEST = re.compile(
    r"^\W*(?:please\s+|can you\s+|could you\s+)?(?:delete|drop|update|insert|truncate|alter|remove|erase|"
    r"modify|overwrite|rename|set|add|create)\b",
    re.I,
)


@dataclass(frozen=True)
class OutcomeText:
    """How one outcome reads. `tone` is for styling: ok, info, warn or error."""

    code: str
    label: str  # a few words, for badges and lists: "Answered", "Declined: not in this data"
    sentence: str  # what happened and why, in plain words
    next_step: str = ""  # what the researcher can do about it ("" when nothing is needed)
    tone: str = "info"
    plain_message: bool = False  # the run's own message is plain and more specific than `sentence`

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "plain_message"}


OUTCOMES: dict[str, OutcomeText] = {}


def register_outcome(
    code: str,
    *,
    label: str,
    sentence: str,
    next_step: str = "",
    tone: str = "info",
    plain_message: bool = False,
) -> OutcomeText:
    """Declare how an outcome code reads (replacing an earlier declaration of the same code).

    `plain_message=True` says the producer writes a plain, question-specific reason into
    `Run.message`, which is then shown in place of `sentence`.
    """
    text = OutcomeText(code, label, sentence, next_step, tone, plain_message)
    OUTCOMES[code] = text
    return text


_REPHRASE = "Rephrase the question, or pick one of the questions askdb can answer."
for _code, _kw in {
    "answered": dict(label="Answered", sentence="askdb answered this question.", tone="ok"),
    "no_rows": dict(
        label="Answered: nothing matches",
        sentence="The query ran, and nothing in the data matches this question.",
        next_step="Check the values in the question (an id, a name, a date): askdb used them as written.",
        tone="ok",
    ),
    "result_cut": dict(
        label="Answered: result too large to show",
        sentence="The query ran, but its result was cut before any row could be shown: a single row was "
        "larger than askdb sends. This does not mean nothing matches.",
        next_step="Ask for fewer or narrower columns (not whole notes or long text), or for a count or summary.",
        tone="warn",
    ),
    "ambiguous": dict(
        label="Unclear question",
        sentence="askdb wrote several readings of this question and they give different answers, "
        "so none is shown as fact.",
        next_step="Use the reading that matches what you meant, or rephrase the question more precisely.",
        tone="warn",
    ),
    "candidates_failed": dict(
        label="Failed: askdb's SQL did not work",
        sentence="Most of the SQL askdb wrote for this question failed its checks or did not run, so it shows "
        "no answer. This is askdb's failure, not a problem with your question.",
        next_step="Ask again, or rephrase the question with the table or measurement you mean.",
        tone="error",
    ),
    "no_llm": dict(
        label="Declined: not in the verified library",
        sentence="askdb can only answer questions like those in its verified library right now (no language "
        "model is set up to write new SQL), and it could not match this question to one of them.",
        next_step="Request an answer from a reviewer, or browse the library for a question like yours.",
        tone="warn",
    ),
    "no_data": dict(
        label="Declined: not in this data",
        sentence="This database does not seem to hold what the question asks about.",
        next_step=_REPHRASE,
        tone="warn",
        plain_message=True,
    ),
    "not_in_schema": dict(
        label="Declined: not in this database",
        sentence="This database does not hold the information the question asks for.",
        next_step=_REPHRASE,
        tone="warn",
        plain_message=True,
    ),
    "advice": dict(
        label="Declined: asks for advice",
        sentence="The question asks for advice or an opinion; the database records the care given, not what is best.",
        next_step="Ask what was done instead (which drugs were given, how often…).",
        tone="warn",
        plain_message=True,
    ),
    "out_of_scope": dict(
        label="Declined: outside this database",
        sentence="This question is about something this clinical database does not cover.",
        next_step=_REPHRASE,
        tone="warn",
        plain_message=True,
    ),
    "non_medical": dict(
        label="Declined: not a question about the data",
        sentence="This does not look like a question about the clinical data.",
        next_step=_REPHRASE,
        tone="warn",
        plain_message=True,
    ),
    "future_data": dict(
        label="Declined: asks about the future",
        sentence="The question asks about events after the data's as-of date, which the data cannot know.",
        next_step="Ask about a period the data covers.",
        tone="warn",
        plain_message=True,
    ),
    "private_data": dict(
        label="Declined: private information",
        sentence="The question asks for personal details that askdb does not reveal.",
        next_step="Ask for counts or summaries instead of identifying details.",
        tone="warn",
        plain_message=True,
    ),
    "privacy_row_level": dict(
        label="Declined: counts only for your role",
        sentence="Your role may see counts and statistics, not lists of patients, so askdb did not run this.",
        next_step="Ask for a count or a summary over a group of patients instead.",
        tone="warn",
    ),
    "privacy_sensitive_column": dict(
        label="Declined: sensitive information",
        sentence="The answer would show columns marked sensitive, which your role may not see.",
        next_step="Ask without those details, or ask a reviewer.",
        tone="warn",
    ),
    "privacy_differencing": dict(
        label="Declined: too many near-identical questions",
        sentence="This question differs from several you asked recently by a single condition; comparing "
        "such answers can reveal one patient, so askdb did not show it.",
        next_step="Ask a broader question, or ask an admin to review the limit on this source.",
        tone="warn",
        plain_message=True,
    ),
    "privacy_budget": dict(
        label="Declined: privacy budget spent",
        sentence="Your privacy budget on this source is spent, so askdb shows no more answers from it.",
        next_step="Ask an admin for more budget on this source.",
        tone="warn",
        plain_message=True,
    ),
    "privacy_dp_counts_only": dict(
        label="Declined: counts only on this source",
        sentence="This source releases only counts, with differential privacy; this answer has other statistics.",
        next_step="Ask how many patients, admissions or stays instead.",
        tone="warn",
        plain_message=True,
    ),
    "privacy_dp_unsupported": dict(
        label="Declined: not a count differential privacy can answer",
        sentence="This source releases counts with differential privacy, which cannot answer this query.",
        next_step="Ask a simpler count: one table, grouped by a few columns.",
        tone="warn",
        plain_message=True,
    ),
    "read_only": dict(
        label="Refused: askdb only reads data",
        sentence="askdb only reads data: it cannot change, add or delete records, so it did not run anything.",
        next_step="Ask a question about the data instead (how many, which, when…).",
        tone="warn",
    ),
    "sql_invalid": dict(
        label="Failed: no valid SQL",
        sentence="askdb could not write SQL for this question that passes its checks.",
        next_step="Ask again, or rephrase the question with the table or measurement you mean.",
        tone="error",
    ),
    "execution_error": dict(
        label="Failed: the query did not run",
        sentence="The SQL askdb wrote was refused by the database when it ran.",
        next_step="Ask again, or rephrase the question.",
        tone="error",
    ),
    "timeout": dict(
        label="Failed: the query took too long",
        sentence="The query took longer than the database allows and was stopped.",
        next_step="Narrow the question: a shorter period, fewer patients, one measurement; or ask an admin "
        "about a longer limit (CLINICAL_STATEMENT_TIMEOUT_S).",
        tone="error",
        plain_message=True,  # the run's message names the limit it hit
    ),
    "long_query_timeout": dict(  # a timeout of a long query (services.long_queries), refined below
        label="Failed: the long query took too long",
        sentence="The long query took longer than its limit and was stopped.",
        next_step="Narrow the question: a shorter period, fewer patients, one measurement; or ask an admin "
        "about a longer limit for long queries (ASKDB_LONG_QUERY_TIMEOUT_S).",
        tone="error",
        plain_message=True,  # the run's message names the limit and the query's size
    ),
    "time_limit": dict(
        label="Failed: took too long",
        sentence="Answering took longer than askdb allows and was stopped.",
        next_step="Narrow the question and ask again.",
        tone="error",
    ),
    "llm_error": dict(
        label="Failed: language model unavailable",
        sentence="The language model askdb uses could not be reached or did not answer.",
        next_step="Ask again in a minute; if it keeps failing, tell an admin.",
        tone="error",
    ),
    "worker_lost": dict(
        label="Failed: interrupted",
        sentence="The process answering this question stopped before it finished. Nothing was lost.",
        next_step="Ask again to retry.",
        tone="error",
    ),
    "error": dict(
        label="Failed: internal error",
        sentence="askdb hit an internal error while answering. The question is kept.",
        next_step="Ask again; if it keeps failing, tell an admin and give the run number.",
        tone="error",
    ),
    "cancelled": dict(
        label="Cancelled", sentence="This question was cancelled before it finished.", next_step="Ask again."
    ),
}.items():
    register_outcome(_code, **_kw)

_RUNNING = {
    "queued": OutcomeText("queued", "Waiting", "askdb has the question and will start on it in a moment."),
    "running": OutcomeText("running", "Working", "askdb is working on this question."),
}
_STATUS_FALLBACK = {
    "succeeded": "answered",
    "declined": "no_data",
    "failed": "error",
    "cancelled": "cancelled",
}


def outcome_text(code: str, *, message: str = "") -> OutcomeText:
    """How an outcome code reads; an unknown code gets a neutral text that still shows `message`."""
    known = OUTCOMES.get(code)
    if known is None:
        return OutcomeText(code or "unknown", "Ended", message or "This run ended.", tone="info")
    if known.plain_message and message:
        return OutcomeText(known.code, known.label, message, known.next_step, known.tone)
    return known


def outcome_label(code: str) -> str:
    """The few words for a code, as lists and badges show it."""
    return outcome_text(code).label


def run_outcome_code(run) -> str:
    """The run's outcome code, refined where one code covers situations a researcher must tell apart."""
    if not run.is_terminal:
        return run.status
    code = run.outcome or _STATUS_FALLBACK.get(run.status, "")
    if run.status != "succeeded" and code != "cancelled" and _refused_as_write(run, code):
        return "read_only"
    if code == "ambiguous" and _mostly_failed(run.candidates):
        return "candidates_failed"
    if code == "timeout" and getattr(run, "long_query_of_id", None):
        return "long_query_timeout"
    return code


def run_outcome(run) -> OutcomeText:
    """How this run's outcome reads (labels, sentence, next step), for pages, the API and exports."""
    if not run.is_terminal:
        return _RUNNING.get(run.status, _RUNNING["running"])
    return outcome_text(run_outcome_code(run), message=run.message)


def _refused_as_write(run, code: str) -> bool:
    if _WRITE_REQUEST.match(run.question.text):
        return True
    return code == "sql_invalid" and bool(
        {a.error_code for a in run.attempts.all() if not a.valid} & WRITE_CODES
    )


def _mostly_failed(candidates) -> bool:
    """More candidates failed than the largest group that agreed: a failure, not an ambiguity."""
    if not isinstance(candidates, dict):
        return False
    failures = len(candidates.get("failures") or [])
    groups = candidates.get("groups") or []
    largest = max((len(g.get("members") or []) for g in groups), default=0)
    return failures > largest
