"""The comparison flip (core/match/compared.py): a verified template with one comparison written the
other way where the question says the other word, on the corpus library with a bag-of-words stand-in
for the embedder. Which operator a word writes comes from the library's own pairs of templates, never
from a list; the attacks: a comparison word that compares something else (a threshold), two
comparisons at once, a negation, a time word before a value the flipped comparison does not compare
(pure: no database)."""

from __future__ import annotations

import pytest

from core.match import LibraryIndex, build_template, mask_question
from core.match.compared import ComparisonFlip, _compare_word, comparison_plans, library_comparisons
from core.match.library import Vote
from core.match.reading import read_question
from tests.core.match.corpus import library_items
from tests.core.match.test_library import ask_with_own_values, embed, indexed

HEART = (
    "(SELECT c.valuenum FROM mimiciv_icu.chartevents AS c JOIN mimiciv_icu.d_items AS di ON di.itemid = c.itemid "
    "WHERE c.subject_id = {p} AND di.label = 'Heart Rate' ORDER BY c.charttime {o} LIMIT 1)"
)


def heart(patient: int, op: str) -> str:
    return f"SELECT {HEART.format(p=patient, o='DESC')} {op} {HEART.format(p=patient, o='ASC')}"


@pytest.fixture(scope="module")
def library():
    return indexed(library_items())


ask = ask_with_own_values


def plans(index, question, base):
    vote = Vote.of(embed([mask_question(question)])[0], index)
    return comparison_plans(read_question(question, None), index, base, vote)


def base_of(index, start):
    return next(i for i, e in enumerate(index.entries) if e.question.startswith(start))


def test_the_library_shows_which_operator_a_comparison_word_writes(library):
    index, _ = library
    # "greater than" and "less than" of the last creatinine / potassium value against the first (a
    # pair), and each template's own word before the one value it compares ("older than 65": GT)
    assert library_comparisons(index).words == {
        "_q ? _q": {">": "GT", "<": "LT"},
        "_c ? _v": {">": "GT", ">=": "GTE"},
        "EXTRACT(YEAR FROM _c) ? _v": {"in": "EQ", "since": "GTE"},
        "CAST(_c AS DATE) ? _v": {"in": "EQ"},
    }
    # a library where no template says "less than" for two values maps only "greater than": no flip
    lone = [e for e in index.entries if "potassium value" not in e.question]
    assert library_comparisons(LibraryIndex(lone, embed([e.question for e in lone]))).words["_q ? _q"] == {
        ">": "GT"
    }


@pytest.fixture(scope="module")
def compared(library):
    """The corpus library's last-against-first templates alone: the vote tries each of them."""
    index, _ = library
    keep = [e for e in index.entries if e.template and e.question.startswith("was the last")]
    return LibraryIndex(keep, embed([e.template.masked_question for e in keep])), {
        e.question: e.example_id for e in keep
    }


def test_the_other_comparison_is_composed_on_the_tree(compared):
    index, ids = compared
    question = "was the last heart rate of patient 10002428 less than the first heart rate?"
    (source, flip), *_ = plans(index, question, base_of(index, "was the last heart rate"))
    assert (flip.key, flip.old_word, flip.new_word) == ("compare", ">", "less than")
    assert flip.phrase == "less than instead of greater than"
    assert "less than" in index.entries[source].question  # a question that says the new word
    found = ask(index, question)
    best = next(r for r in found.results if r.composed_from and r.hard_ok)
    assert best.sql == heart(10002428, "<") and best.features["composed"] == 1.0
    assert (
        ids["was the last heart rate of patient 10004235 greater than the first heart rate?"]
        in best.composed_from
    )


def test_a_verified_template_of_the_asked_word_is_never_flipped(library):
    index, _ = library
    question = "was the last heart rate of patient 10002428 greater than the first heart rate?"
    assert not plans(index, question, base_of(index, "was the last heart rate"))


@pytest.mark.parametrize(
    "question",
    [
        # the comparison word compares the last value with a threshold, not with the first value
        "was the last heart rate of patient 10004235 less than 100?",
        # two comparisons at once
        "was the last heart rate of patient 10004235 greater than the first heart rate and less than 100?",
        # a negation: "not greater than" is another question than "less than"
        "was the last heart rate of patient 10004235 not greater than the first heart rate?",
        "was the last heart rate of patient 10004235 no greater than the first heart rate?",
    ],
)
def test_no_flip_the_question_does_not_ask(library, question):
    index, _ = library
    assert not plans(index, question, base_of(index, "was the last heart rate"))
    flipped = [
        r for r in ask(index, question).results if r.hard_ok and "instead of greater" in r.composed_with
    ]
    assert not flipped, [(r.sql, r.composed_with) for r in flipped]


def test_a_time_word_flips_only_the_comparison_of_its_own_value():
    """ "since" before the year flips the year's comparison; the other comparisons stay."""
    template = build_template(
        "how many times was heparin prescribed to patient 10004235 in 2150?",
        "SELECT COUNT(*) FROM mimiciv_hosp.prescriptions AS p WHERE p.subject_id = 10004235 "
        "AND p.drug = 'Heparin' AND EXTRACT(YEAR FROM p.starttime) = 2150",
    )
    form = "EXTRACT(YEAR FROM _c) ? _v"
    flip = ComparisonFlip("time", "in", "in", "since", frozenset({(form, "EQ", "GTE")}))
    question, sql = flip.apply(template)
    assert question == "how many times was heparin prescribed to patient 10004235 since 2150?"
    assert sql.endswith("EXTRACT(YEAR FROM p.starttime) >= 2150") and "p.subject_id = 10004235" in sql
    # a paraphrase that says another word before its year is not this flip's
    other = ComparisonFlip("time", "since", "since", "before", frozenset({(form, "GTE", "LT")}))
    assert other.apply(template) is None


def test_a_comparison_of_another_form_is_not_flipped():
    template = build_template(
        "was the last heart rate of patient 10004235 greater than the first heart rate?", heart(10004235, ">")
    )
    flip = ComparisonFlip("compare", ">", "greater than", "less than", frozenset({("_q ? _v", "GT", "LT")}))
    assert flip.apply(template) is None


def test_a_threshold_is_flipped_with_its_word_and_keeps_its_number():
    template = build_template(
        "when was the last time patient 10021487 had a heart rate greater than 97.0?",
        "SELECT c.charttime FROM mimiciv_icu.chartevents AS c JOIN mimiciv_icu.d_items AS di "
        "ON di.itemid = c.itemid WHERE c.subject_id = 10021487 AND di.label = 'Heart Rate' "
        "AND c.valuenum > 97.0 ORDER BY c.charttime DESC LIMIT 1",
    )
    flip = ComparisonFlip("compare", ">", "greater than", "less than", frozenset({("_c ? _v", "GT", "LT")}))
    question, sql = flip.apply(template)
    assert question == "when was the last time patient 10021487 had a heart rate less than 97.0?"
    assert "c.valuenum < 97.0" in sql and "c.subject_id = 10021487" in sql


def test_a_word_read_with_its_number_is_replaced_without_it():
    assert _compare_word("how many patients over 65 died?") == (">", 18, 22)


def test_a_threshold_word_never_flips_a_comparison_of_two_values(library):
    """The base compares the last value with the first; the question compares it with a number."""
    index, _ = library
    question = "was the last heart rate of patient 10004235 less than 100 than the first heart rate?"
    assert not plans(index, question, base_of(index, "was the last heart rate"))


DRUGS = "SELECT COUNT(*) FROM mimiciv_hosp.prescriptions AS p WHERE p.subject_id = {p} AND p.drug = '{d}' AND EXTRACT(YEAR FROM p.starttime) {op} {y}"
FIRST = (
    "SELECT a.admission_type FROM mimiciv_hosp.admissions AS a WHERE a.hadm_id IN (SELECT a2.hadm_id "
    "FROM mimiciv_hosp.admissions AS a2 WHERE a2.subject_id = {p} AND EXTRACT(YEAR FROM a2.admittime) {op} {y}) "
    "ORDER BY a.admittime ASC LIMIT 1"
)


@pytest.fixture(scope="module")
def years():
    """A pair of templates alike but for "in" / "since" a year, and one with "in" alone."""
    return indexed(
        [
            {"question": "how many times was heparin prescribed to patient 10004235 in 2150?",
             "sql": DRUGS.format(p=10004235, d="Heparin", op="=", y=2150)},
            {"question": "how many times was insulin prescribed to patient 10006580 since 2151?",
             "sql": DRUGS.format(p=10006580, d="Insulin", op=">=", y=2151)},
            {"question": "what was the admission type of patient 10002428's first admission in 2150?",
             "sql": FIRST.format(p=10002428, op="=", y=2150)},
        ]
    )  # fmt: skip


def test_a_time_word_flips_the_year_compared_inside_a_subquery(years):
    index, _ = years
    assert library_comparisons(index).words == {"EXTRACT(YEAR FROM _c) ? _v": {"in": "EQ", "since": "GTE"}}
    question = "what was the admission type of patient 10004235's first admission since 2151?"
    (source, flip), *_ = plans(index, question, base_of(index, "what was the admission type"))
    assert (flip.key, flip.old_word, flip.new_word) == ("time", "in", "since")
    assert "since" in index.entries[source].question
    template = index.entries[base_of(index, "what was the admission type")].template
    composed_question, sql = flip.apply(template)
    assert (
        composed_question == "what was the admission type of patient 10002428's first admission since 2150?"
    )
    assert "EXTRACT(YEAR FROM a2.admittime) >= 2150" in sql


@pytest.mark.parametrize(
    "question",
    [
        # a word the library never shows for that comparison
        "what was the admission type of patient 10004235's first admission before 2151?",
        # two years: which one the word says is not one comparison
        "what was the admission type of patient 10004235's first admission since 2151 in 2152?",
    ],
)
def test_no_time_flip_the_library_does_not_show(years, question):
    index, _ = years
    assert not plans(index, question, base_of(index, "what was the admission type"))


INPUT = (
    "SELECT SUM(i.amount) FROM mimiciv_icu.inputevents AS i WHERE i.subject_id = {p} "
    "AND CAST(i.starttime AS DATE) {op} '{d}'"
)
LAB = "SELECT COUNT(*) FROM mimiciv_hosp.labevents AS l WHERE l.subject_id = {p} AND CAST(l.charttime AS DATE) {op} '{d}'"


def _lone(items):
    from tests.core.match.test_library import index_of

    return index_of(items, dialect="postgres")


def test_one_template_per_word_shows_what_each_writes():
    """No pair: "since" a day from the inputs' template, "on" a day from the labs' (another SQL), so
    "the total input on 03/10/2100" is the inputs' template with the day compared for equality."""
    index = _lone([
        ("what was the total input of patient 10019777 since 2100-06-23?", INPUT.format(p=10019777, op=">=", d="2100-06-23")),
        ("how many lab tests did patient 10004235 have on 2100-03-02?", LAB.format(p=10004235, op="=", d="2100-03-02")),
    ])  # fmt: skip
    assert library_comparisons(index).words == {"CAST(_c AS DATE) ? _v": {"since": "GTE", "in": "EQ"}}
    question = "what was the total input of patient 10019777 on 2100-03-10?"
    (source, flip), *_ = plans(index, question, base_of(index, "what was the total input"))
    assert (flip.key, flip.old_word, flip.new_word) == ("time", "since", "on")
    assert index.entries[source].question.startswith("how many lab tests")
    _, sql = flip.apply(index.entries[base_of(index, "what was the total input")].template)
    assert "CAST(i.starttime AS DATE) = '2100-06-23'" in sql


@pytest.mark.parametrize(
    "items",
    [
        # two templates that disagree: neither reaches MAPPING_SHARE
        [("how many lab tests did patient 10004235 have on 2100-03-02?", LAB.format(p=10004235, op="=", d="2100-03-02")),
         ("what was the total input of patient 10019777 on 2100-06-23?", INPUT.format(p=10019777, op=">=", d="2100-06-23"))],
        # one word before a day compared twice, with two operators: which one it writes is not shown
        [("how many lab tests did patient 10004235 have on 2100-03-02?",
          LAB.format(p=10004235, op="=", d="2100-03-02") + " AND CAST(l.storetime AS DATE) >= '2100-03-02'")],
    ],
)  # fmt: skip
def test_one_template_teaches_no_comparison_it_does_not_show(items):
    words = library_comparisons(_lone(items)).words
    assert "in" not in words.get("CAST(_c AS DATE) ? _v", {}), words


def test_a_word_learned_for_another_form_flips_nothing():
    """ "since" is shown only for a year, "on" only for a day: "since" a day is not composed."""
    years = "SELECT COUNT(*) FROM mimiciv_hosp.labevents AS l WHERE l.subject_id = {p} AND EXTRACT(YEAR FROM l.charttime) >= {y}"
    index = _lone([
        ("how many lab tests did patient 10004235 have since 2100?", years.format(p=10004235, y=2100)),
        ("what was the total input of patient 10019777 on 2100-06-23?", INPUT.format(p=10019777, op="=", d="2100-06-23")),
    ])  # fmt: skip
    question = "what was the total input of patient 10019777 since 2100-03-10?"
    assert "since" not in library_comparisons(index).words["CAST(_c AS DATE) ? _v"]
    assert not plans(index, question, base_of(index, "what was the total input"))
