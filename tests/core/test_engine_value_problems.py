"""A value lookup or check that failed during the library match is said in the match stage (the
run's recorded steps), not read as "no such value" in silence."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.engine import NO_LLM_MESSAGE
from tests.core.test_engine import OLDER_SQL, FakePorts, Rows, ask, match


@dataclass
class PortsWithProblems(FakePorts):
    problems: list[str] = field(default_factory=list)

    def value_problems(self) -> list[str]:
        return list(self.problems)


def test_a_lookup_that_ran_out_of_time_is_in_the_match_stage():
    timed_out = (
        "looking up 'Zorblatin' in prescriptions.drug ran out of time (ASKDB_VALUE_LOOKUP_TIMEOUT_S = 5 s)"
    )
    ports = PortsWithProblems(results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.2)],
                              problems=[timed_out])  # fmt: skip
    outcome, rec = ask(ports)
    assert outcome.message == NO_LLM_MESSAGE
    assert rec.stage_named("match").detail["value_problems"] == [timed_out]


def test_no_problem_no_note():
    ports = PortsWithProblems(results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.9)])
    _, rec = ask(ports)
    assert "value_problems" not in rec.stage_named("match").detail
