"""The match stage: answer a question from the verified library, with no LLM.

Read it in this order; each module says why it is as it is:

    words, spans, operators   how a question is read (word lists, value spans, operator words: data)
    spelling                  typos corrected to the library's and the catalog's spelling, before reading
    reading                   the question read ONCE: a frozen `Reading` every rule looks at
    template, build           an approved example's SQL with typed slots; building one from an example
    values                    the database values a question names (the value index)
    index                     the library: entries, vectors, each template's family of paraphrases
    rules/                    the refusal rules, in order, in ONE tuple: rules.RULES (one module each)
    binding, probes           the question's values to a template's slots; questions to the source
    matcher                   one template for one question: rules, binding, features
    features, risk            what P(correct) reads, and the logistic model that gives it
    library                   a question against the whole library: the vote, the templates tried
    compose                   where no template fits: a template with a condition of another added
                              (or one of its own left out), and follow-ups on an earlier answer
    conditions, composing     compose's parts: the conditions a template carries (with their
                              words), and one composition made (entries, family, matched)
    reselected                compose's column swap: the one column a base returns for another of
                              its table, where library pairs show which phrase names which column
    timed                     compose's time swap: the one column a base returns for the time column
                              of its table the question names, the word learned from the library
    swap, items               compose's swaps: an aggregate for the one the question asks (swap), an
                              item for one of tables the library uses alike (items)
    related                   compose's relation swap: the relation between two events ("within 2
                              days", "in the same month", "within the same hospital visit") for the
                              one another verified template writes for the question's phrase
    retabled, paths           compose's table swap: an item's tables renamed as other shapes of the
                              library show (retabled), across the path each side is read by: a
                              chart value through its ICU stay, a lab value by the visit (paths)
    revisited                 compose's visit swap: a base's visit subquery (first, last, current,
                              every visit) renamed as two shapes of the library show
    chained                   two changes at once where no one change fits: a composition composed
                              once more by a second change planned on it (feature `chained`)
    calibrate                 P(correct) fitted by grouped cross-validation; the decision to answer

Pure: no Django, no database. Callers pass embeddings, the value index, a value lookup and a probe.
"""

from core.match import reasons
from core.match.binding import Binding
from core.match.build import build_template
from core.match.calibrate import (
    CV_FOLDS,
    Answer,
    LibraryCalibration,
    Part,
    calibrate_library,
    cross_validate,
    decide,
    decide_answer,
    grouped_folds,
    run_part,
    warm_up,
)
from core.match.candidate import MatchResult, TemplateCandidate
from core.match.compose import compose_ready
from core.match.index import UNANSWERABLE, Entry, LibraryIndex, entry_for, key_hash, sql_group
from core.match.library import LibraryMatch, match_follow_up, match_library
from core.match.reading import Reading, mask_question, read_question
from core.match.risk import (
    DEFAULT_RISK,
    RISK_FEATURES,
    Calibration,
    answer_threshold,
    expected,
    fit_risk,
    fold_risks,
    out_of_fold,
)
from core.match.rules import RULES
from core.match.spelling import correct_spelling
from core.match.template import (
    TEMPLATE_VERSION,
    BindError,
    Template,
    bind_sql,
    template_is_current,
    template_key,
)
from core.match.values import ValueIndex, ValueLookup, load_values

__all__ = [
    "CV_FOLDS",
    "DEFAULT_RISK",
    "RISK_FEATURES",
    "RULES",
    "TEMPLATE_VERSION",
    "UNANSWERABLE",
    "Answer",
    "BindError",
    "Binding",
    "Calibration",
    "Entry",
    "LibraryCalibration",
    "LibraryIndex",
    "LibraryMatch",
    "MatchResult",
    "Part",
    "Reading",
    "Template",
    "TemplateCandidate",
    "ValueIndex",
    "ValueLookup",
    "answer_threshold",
    "bind_sql",
    "build_template",
    "calibrate_library",
    "compose_ready",
    "correct_spelling",
    "cross_validate",
    "decide",
    "decide_answer",
    "entry_for",
    "expected",
    "fit_risk",
    "fold_risks",
    "grouped_folds",
    "key_hash",
    "load_values",
    "mask_question",
    "match_follow_up",
    "match_library",
    "out_of_fold",
    "read_question",
    "reasons",
    "run_part",
    "sql_group",
    "template_is_current",
    "template_key",
    "warm_up",
]
