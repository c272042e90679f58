"""How a query's size reads: the rows of the tables it reads and the planner's expectation."""

from __future__ import annotations

import pytest

from core.estimate import QueryEstimate, about, timed_out_message


@pytest.mark.parametrize(
    ("n", "said"),
    [(0, "0"), (3412, "3,412"), (99_999, "99,999"), (450_000, "450 thousand"), (2_500_000, "2.5 million"),
     (118_171_367, "118 million"), (1_000_000, "1 million"), (27e9, "27 billion")],
)  # fmt: skip
def test_row_counts_read_as_people_say_them(n, said):
    assert about(n) == said


def test_a_timeout_says_how_many_rows_of_which_table_it_reads():
    sizes = {
        "mimiciv_hosp.labevents": 118_171_367,
        "mimiciv_hosp.d_labitems": 1_622,
        "mimiciv_hosp.other": None,
    }
    estimate = QueryEstimate.from_sizes(("mimiciv_hosp.d_labitems", "mimiciv_hosp.labevents"), sizes)
    assert estimate.tables[0] == ("mimiciv_hosp.labevents", 118_171_367) and estimate.rows_read == 118_172_989
    message = timed_out_message(30, estimate)
    assert message.startswith(
        "This question reads about 118 million rows of labevents and 1 other table and needed more than 30 s "
        "(the statement timeout), so it was stopped"
    )
    assert "says nothing about whether the data can answer it" in message


def test_a_join_the_planner_expects_to_explode_says_so():
    estimate = QueryEstimate.from_sizes(("mimiciv_hosp.labevents",), {"mimiciv_hosp.labevents": 3000})
    planned = estimate.planned(27e9, 4.1e8)
    assert (
        planned.reads()
        == "reads about 3,000 rows of labevents, which the planner expects to become about 27 billion rows"
    )
    assert planned.is_large(rows=10**9, cost=1e6)  # the planner's cost decides, not the small table
    # an indexed lookup on a huge table: the planner says small, whatever the table's size
    lookup = QueryEstimate.from_sizes(("t",), {"t": 118_000_000}).planned(40, 12.5)
    assert not lookup.is_large(rows=1_000_000, cost=1e6) and "planner" not in lookup.reads()


def test_without_any_size_the_timeout_still_names_the_limit():
    unknown = QueryEstimate.from_sizes(("t",), {})
    assert not unknown.known
    assert timed_out_message(0.5, unknown).startswith(
        "This question's query needed more than 0.5 s (the statement timeout) and was stopped:"
    )
    assert unknown.is_large(rows=1, cost=1) is False
