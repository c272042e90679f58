"""What a question leaves unsaid that its answer depends on, read against the catalog.

Why: the gate's grounding asks whether the attribute a question wants has a column. A question can
pass that and still have no answer, because it does not say *which* thing it means or asks for
something the recorded thing does not have:

- a **class** of drugs or tests no column records ("the dose of the opioid", "immunotherapies",
  "a beta blocker"): the database names each drug, and nothing says which ones are opioids;
- a **duration** of an event whose table records when it happened but not when it ended ("how long
  did the arterial catheterization take", "how long has patient N had hypertension");
- an **indefinite** test or drug whose value is asked ("the value of a test patient N had"): the
  answer depends on which test, and the question does not say;
- a **time with no anchor** ("recently", "lately", "in the past", "around the time of the surgery"):
  every event has its time, but the question does not say which period it means;
- what happened **after discharge** beyond what a column documents as captured then (patients.dod:
  a death up to a year after) or a later stay in this hospital ("did patient N go back to work").

The catalog decides, never a list of the questions' words: a class word is grounded when a
column's doc or values use it (microbiologyevents.ab_name documents "antibiotic"); a duration is
grounded when the thing asked of is one a table with an end-time column is called by (its name and
"Also called" synonyms: "hospital stay", "ICU stay", "prescribed", "infusion"). Tables' synonyms do
not ground a class: prescriptions is "also called" opioid for retrieval, yet no column holds one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from askdb.answerability import grounding, rules

# A column recording when something ended: what a duration needs.
_END_COLUMN = re.compile(
    r"\.(?:[a-z]*end[a-z]*time|stoptime|outtime|dischtime|edouttime|endtime|[a-z]*end_?date)$"
)
# A column that holds the length itself (icustays.los, a source's los_days or procedure_duration):
# a table with one can say how long, with or without an end time.
_LENGTH_COLUMN = re.compile(
    r"\.(?:los|los_[a-z]+|[a-z_]+_los|[a-z_]*duration[a-z_]*|[a-z_]*length_of_stay[a-z_]*)$"
)
_SYNONYM_LINES = ("Table ", "Also called")


def _lasting_tables(columns: Iterable[Any]) -> set[str]:
    """Tables that can say how long something lasted: an end-time column or a length column."""
    return {
        c.qualified.rsplit(".", 1)[0]
        for c in columns
        if _END_COLUMN.search(c.qualified.lower()) or _LENGTH_COLUMN.search(c.qualified.lower())
    }


# How a question asks how long something lasted; `thing` is what it asks of (the patient's own verb
# first: in "how long did patient N take furosemide", furosemide is what lasted, not the patient).
_DURATION = tuple(
    re.compile(p)
    for p in (
        r"\bhow long (?:took|lasted) (?P<thing>.+?)(?: for\b| of\b|\?|$)",
        r"\bhow long (?:did|does|do) (?:the )?(?:patient|subject) (?:\d+ )?(?P<thing>(?:receive|undergo|get|have|take|"
        r"spend|need) .+?)(?: for\b| during\b| on\b| in\b|\?|$)",
        r"\bhow long (?:did|does|do|will|would) (?P<thing>.+?) (?:take|last|run|go on)\b",
        r"\bhow long (?:was|is|were|has|had|have) (?:the )?(?:patient|subject)(?: \d+)?(?:'s)? (?:(?:been|had) )?"
        r"(?P<thing>.+?)(?: for (?:the )?(?!the)|\?|$)",
        r"\bhow long (?:was|is|were) (?P<thing>(?:the|a|an) .+?) (?:of|for|on) (?:the )?(?:patient|subject)\b",
        r"\bhow many (?:seconds|minutes|hours) (?:did|does|do|was|were) (?P<thing>.+?) (?:take|last|run)\b",
        r"\b(?:duration|length|lasting time) of (?P<thing>.+?)(?:\?|$)",
    )
)

# Morphology of the names of classes of drugs and tests, not of the drugs: "antidepressant",
# "opioid", "beta blocker", "ace inhibitors", "immunotherapies", "painkillers", "sedatives". A word
# a column's doc or example values use, or a value the question names holds ("long-term use of
# anticoagulants", a diagnosis), is not a class the question leaves open.
_CLASS_WORD = re.compile(
    r"\b(?P<w>anti-?(?!cipat|bod|gen|thromb)[a-z]{5,}s?|(?:opi|corticoster|ster|cannabin)oids?|opiates?|[a-z]+ "
    r"blockers?|[a-z]+ inhibitors?|[a-z]{4,}therap(?:y|ies)|painkillers?|pain killers?|blood thinners?|sedatives?|"
    r"statins|[a-z]{2,}(?:otic|etic|esic)(?:s|(?= (?:drugs?|medications?|medicines?|agents?)\b)))\b"
)
# The question treats the class as something given or tested.
_DRUG_CONTEXT = re.compile(
    r"\b(?:drugs?|medications?|medicines?|meds|doses?|dosages?|prescri\w*|given|gave|administ\w*|receiv\w*|took|taken|"
    r"takes?|treated|on|agents?|tests?|screenings?|panels?|get|got|gets|had|has|have|use|used|which|what)\b"
)
_TOKEN = re.compile(r"[a-z0-9]+")
_GENERIC_CLASS = frozenset({"drug", "medication", "medicine", "agent", "test", "therapy", "therapies"})


def interval_words(
    tables: Iterable[Any], columns: Iterable[Any]
) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(the words a table with an end-time column is called by and no table without one is, the
    whole synonym phrases of those tables, the words tables without one are called by): what a
    duration can be asked of, and what it cannot."""
    ends = _lasting_tables(columns)
    with_end, without_end, phrases = set(), set(), set()
    for t in tables:
        names = [x for x in t.text.splitlines() if x.startswith(_SYNONYM_LINES)]
        said = " ".join(names).lower().replace("also called:", ",")
        said = re.sub(r"\([^)]*\)", " ", said).replace("table ", ",")
        found = [p.strip(" .") for p in said.split(",") if p.strip(" .")]
        # A synonym's head names the thing ("ICU stay" is a stay, "blood product" a product): its
        # other words only qualify it, and a table without an end time ("blood test") shares them.
        stems = {grounding.stem(grounding.words(p)[-1]) for p in found if grounding.words(p)}
        if t.qualified in ends:
            with_end |= stems
            phrases |= {" ".join(grounding.stem(w) for w in grounding.words(p)) for p in found}
        else:
            without_end |= stems
    return frozenset(with_end - without_end), frozenset(p for p in phrases if p), frozenset(without_end)


# How a question asks why something happened: "why was X stopped", "the reason for the transfer", "for
# what reason". Not a cause in a diagnosis title ("... as the cause of abnormal reaction").
_REASON = re.compile(
    r"^(?:and |so |but )?why\b|\bwhy (?:was|were|did|does|do|is|are|had|has|have)\b|\bfor what reasons?\b|\b(?:the|what|"
    r"which|any) reasons? (?:for|why|that|behind|patient|\w+ (?:was|were|had))\b|\breasons? (?:for|why|behind) (?:the |"
    r"a |an |his |her |their |patient )"
)
# A column whose doc says it records a reason ("reason_for_no_barcode: Free-text reason the barcode
# was not scanned"): only that reason is recorded.
_REASON_DOC = re.compile(r"\b(?:reasons?|indications?|why)\b")
_REASON_NOISE = frozenset(
    {"reason", "indication", "why", "free", "text", "not", "patient", "recorded", "record"}
)


def _reason_columns(columns: Iterable[Any]) -> list[tuple[frozenset[str], str]]:
    """Each column that documents a reason: the content stems of what it is the reason for, and its
    name's words stemmed and joined ("reason_for_no_barcode" → "reasonfornobarcode") when the name says
    "reason": a question saying the name, spaced or not ("the reason for no bar code"), asks for the
    column itself, whatever words of its doc it leaves out."""
    out = []
    for c in columns:
        doc = c.text.partition(": ")[2].lower()
        name = grounding.words(c.qualified.rsplit(".", 1)[-1])
        if _REASON_DOC.search(doc) or _REASON_DOC.search(" ".join(name)):
            said = {grounding.stem(w) for w in grounding.words(f"{' '.join(name)} {doc}")}
            kept: list[str] = []
            for w in sorted(said, key=len):  # one word in two forms ("transfer", "transferred") counts once
                content = w not in grounding.GENERIC and w not in _REASON_NOISE and len(w) > 3
                if content and not any(grounding.same_word(w, k) for k in kept):
                    kept.append(w)
            out.append(
                (
                    frozenset(kept),
                    "".join(map(grounding.stem, name)) if _REASON_DOC.search(" ".join(name)) else "",
                )
            )
    return out


def _says(stems: Sequence[str], joined: str) -> bool:
    """The words `stems` say `joined` in a run of whole words, spaced any way ("bar code", "barcode")."""
    for i in range(len(stems)):
        run = ""
        for w in stems[i:]:
            run += w
            if run == joined:
                return True
            if not joined.startswith(run):
                break
    return False


# A period said with no anchor: "recently", "lately", "in the past" (not "in the past 2 years"),
# "around the time of the surgery" (which hours or days around it?). An anchor elsewhere in the
# question says the period ("recently prescribed today compared to yesterday"); "most recent" is the
# last one, and "recent" inside a name ("reopening of recent thoracotomy site") is not a period.
_UNANCHORED = re.compile(
    r"\b(?:(?<!most )(?<!the )recently|lately|of late|in recent (?:times|days|weeks|months|years)|in the (?:recent |distant )?past(?! (?:\d+|few|two|three|"
    r"several|one|a|year|month|week|day|hour)\b)|(?:a (?:little |long )?while|some time|not long) (?:ago|back)|back then|"
    r"these days|nowadays|around the time (?:of|when|that)|(?:close|near) to the time (?:of|when))\b"
)
_ANCHOR = re.compile(
    r"\b(?:1[89]\d\d|2\d\d\d|\d+ (?:years?|months?|weeks?|days?|hours?) ago|today|yesterday|tonight|"
    r"(?:this|last|current|same|previous) (?:year|month|week|day|hospital|icu|visit|stay|admission|encounter)|"
    r"(?:first|last|second|third|current|this|latest|previous) (?:hospital|icu|inpatient)? ?(?:visit|stay|admission|"
    r"encounter|hospitalization)|since|within|on the day|\d+/\d+)\b"
)
# After discharge: "after the last discharge", "after going home", "at the follow-up visit".
_AFTER_DISCHARGE = re.compile(
    r"\b(?:after|following|post)[- ](?:(?:the|his|her|their|patient|\d+'s|last|first|hospital|icu) ){0,3}"
    r"(?:discharge|being discharged|going home|leaving (?:the )?hospital|(?:he|she|they) (?:left|went home))\b|"
    r"\bpost-?discharge\b|\bfollow-?up (?:visit|appointment|clinic)s?\b"
)
_AFTER_DOC = re.compile(r"\bafter (?:the )?(?:[a-z']+ ){0,3}discharge\b")
# What the patient's death is asked by: the column's doc calls it "death".
_DEATH_WORDS = frozenset({"die", "died", "dies", "dying", "dead", "alive", "survive", "survived", "deceased"})


def _after_discharge_words(tables: Iterable[Any], columns: Iterable[Any]) -> tuple[frozenset[str], str]:
    """What the catalog records after a discharge: the content stems of columns whose doc says so
    (patients.dod: "death ... within one year after the last hospital discharge"), the values of a
    column naming where a discharge went (admissions.discharge_location: "SKILLED NURSING FACILITY"),
    and the names of the tables that record a stay by its admission time, and their columns' names
    (a later stay here is a readmission: "admitted" is admissions.admittime); and the columns of the
    first two kinds, named in the decline."""
    said: set[str] = set()
    named: list[str] = []
    columns = list(columns)
    for c in columns:
        doc = c.text.partition(": ")[2].lower()
        name = c.qualified.rsplit(".", 1)[-1]
        if _AFTER_DOC.search(doc):
            said |= {grounding.stem(w) for w in grounding.words(f"{name} {doc}")}
            named.append(c.qualified)
        elif "discharge" in name and re.search(r"location|destination|disposition", f"{name} {doc}"):
            said |= {grounding.stem(w) for w in grounding.words(f"{name} {c.values}".lower())}
            named.append(c.qualified)
    admitted = {
        c.qualified.rsplit(".", 1)[0] for c in columns if re.search(r"\.(?:admittime|intime)$", c.qualified)
    }
    said |= {c.qualified.rsplit(".", 1)[-1] for c in columns if c.qualified.rsplit(".", 1)[0] in admitted}
    for t in tables:
        if t.qualified in admitted:
            names = " ".join(x for x in t.text.splitlines() if x.startswith(_SYNONYM_LINES))
            said |= {grounding.stem(w) for w in grounding.words(names)}
    return frozenset(w for w in said if w not in grounding.GENERIC and len(w) > 2), " and ".join(named)


class Specifics:
    """The catalog's answer to "does the question say which, and can what it asks of last?"."""

    def __init__(self, tables: Sequence[Any], columns: Sequence[Any], values: Sequence[str] = ()) -> None:
        self.interval, self.interval_phrases, self.unended_names = interval_words(tables, columns)
        ended = _lasting_tables(columns)
        self.table_names = {t.qualified.rsplit(".", 1)[-1]: t.qualified in ended for t in tables}
        # Columns' docs and the example values of columns that name things; not the linked values: a
        # diagnosis title ("opioid abuse") names a diagnosis, not which drugs are opioids.
        held = [c.text for c in columns] + [c.values for c in columns if grounding.names_things(c.qualified)]
        self.column_stems = frozenset().union(*(grounding.stems_of(t) for t in held))
        self.values = [" ".join(_TOKEN.findall(str(v).lower())) for v in values]
        self.reasons = _reason_columns(columns)
        self.after_discharge, self.after_column = _after_discharge_words(tables, columns)
        self._in_values: dict[str, tuple[str, ...]] = {}

    def _lasts(self, word: str) -> bool:
        """A table with an end time is called by the word, in one of its forms ("ventilator" is
        said "ventilation"), or its name begins with it."""
        return (
            word in self.interval
            # Whole words in another form only: an abbreviation ("infus") begins too many words, and
            # "procedure" begins the name procedureevents without being one.
            or (
                len(word) >= 7
                and any(grounding.same_word(word, w) and abs(len(w) - len(word)) <= 3 for w in self.interval)
            )
            or self._names_ended_table(word)
        )

    def _names_ended_table(self, word: str) -> bool:
        """The word begins the name of a table with an end time and of none without ("icu")."""
        starts = {
            ended for name, ended in self.table_names.items() if len(word) >= 3 and name.startswith(word)
        }
        return starts == {True}

    def findings(self, question: str) -> list[rules.Finding]:
        """Each thing the question leaves unsaid that its answer depends on (decisive declines)."""
        text = " ".join(str(question or "").lower().replace("’", "'").split())
        found = (
            self.unrecorded_class(text),
            self.unended(text),
            self.unrecorded_reason(text),
            unanchored_time(text),
            self.after_discharge_unrecorded(text),
        )
        return [f for f in found if f is not None]

    def after_discharge_unrecorded(self, text: str) -> rules.Finding | None:
        """Something asked of the time after a discharge that no column records then: the catalog
        keeps a death (the column whose doc says it is captured after discharge) and later stays in
        this hospital, not how the patient lived, worked or was cared for elsewhere."""
        m = _AFTER_DISCHARGE.search(text)
        if not m or not self.after_column:
            return None
        rest = _AFTER_DISCHARGE.sub(" ", text)
        asked = [
            w for w in grounding.words(rest) if w not in grounding.GENERIC and w not in grounding.LIGHT_VERBS
        ]
        # The discharge is the question's anchor, not what it asks ("at the discharge location").
        asked = [
            w
            for w in asked
            if len(w) > 2 and w not in {"after", "before", "again", "within"} and w[:8] != "discharg"
        ]
        if any(w in _DEATH_WORDS for w in asked) or any(
            grounding.same_word(grounding.stem(w), h)
            or grounding.same_word(w, h)
            or (len(w) >= 5 and h.startswith(w[:5]))
            for w in asked
            for h in self.after_discharge
        ):
            return None
        return rules.Finding(
            "not_in_schema", "after_discharge", m.group(0),
            f"After a discharge the database records only what {self.after_column} hold (where the patient went, a "
            "death up to a year after) and later stays in this hospital, so askdb cannot answer this; it can answer "
            "where the patient was discharged to, whether the patient died or was admitted again.", True,
        )  # fmt: skip

    def unrecorded_reason(self, text: str) -> rules.Finding | None:
        """Why something happened, when no column documents the reason for it: the database records
        what was done and when (a transfer, a stop, a dose change), and a reason only where a column
        says it keeps one for that thing (the barcode not scanned), which the question must name."""
        if not _REASON.search(text):
            return None
        said = [grounding.stem(w) for w in grounding.words(text)]
        asked = set(said) - grounding.GENERIC
        for held, name in self.reasons:
            if name and _says(said, name):
                return None  # the question says the column's name: it asks for the recorded reason
            shared = [h for h in held if any(a == h or grounding.same_word(a, h) for a in asked)]
            if held and len(shared) >= min(
                2, len(held)
            ):  # the question names what the column keeps a reason for
                return None
        return rules.Finding(
            "not_in_schema", "unrecorded_reason", "why",
            "The database records what was done and when, not why, so askdb cannot answer this; it can answer "
            "what happened and when.", True,
        )  # fmt: skip

    def unrecorded_class(self, text: str) -> rules.Finding | None:
        """A class of drugs or tests the question asks about that no column records."""
        if not _DRUG_CONTEXT.search(text):
            return None
        for m in _CLASS_WORD.finditer(text):
            said = [w for w in grounding.words(m.group("w")) if w not in _GENERIC_CLASS]
            if (
                said
                and not any(grounding.stem(w) in self.column_stems or w in self.column_stems for w in said)
                and (not self._in_named_value(said[-1], text))
            ):
                what = " ".join(said)
                return rules.Finding(
                    "not_in_schema", "unrecorded_class", what,
                    f'The database records each drug and test by its own name, not by class ("{what}"), so '
                    "askdb cannot tell which of them the question means; ask for them by name.", True,
                )  # fmt: skip
        return None

    def _in_named_value(self, word: str, text: str) -> bool:
        """The word is part of a value the question names ("long-term (current) use of anticoagulants",
        a diagnosis; "anticardiolipin antibody igg", a test): the value's words around it are the
        question's too."""
        found = self._in_values.get(word)
        if found is None:
            if len(self._in_values) >= 1024:
                self._in_values.clear()
            found = self._in_values[word] = tuple(v for v in self.values if word in v.split())
        asked = f" {' '.join(_TOKEN.findall(text))} "
        for v in found:
            tokens = v.split()
            i = tokens.index(word)
            window = tokens[max(0, i - 1) : i + 2]
            if len(window) > 1 and f" {' '.join(window)} " in asked:
                return True
        return False

    def unended(self, text: str) -> rules.Finding | None:
        """A duration asked of something no table with an end time is called by."""
        for pattern in _DURATION:
            m = pattern.search(text)
            if not m:
                continue
            thing = m.group("thing")
            if thing == "it":  # "how long did it take to get spinal canal explor nec"
                after = re.search(r"\bit (?:take|last)\w* (?:to|for) (?P<t>.+?)(?:\?|$)", text)
                thing = after.group("t") if after else thing
            # When it happened is not what lasted: "the biopsy during the icu stay" is a biopsy.
            thing = re.sub(r"(?<=\w) (?:during|at|after|before|since|within|while|when) .*$", "", thing)
            # "On heparin", "take furosemide": a regimen of a drug or a device, which has a stop time.
            if re.match(r"(?:on|take|taking) ", thing):
                return None
            stems = [grounding.stem(w) for w in grounding.words(thing)]
            joined = " ".join(stems)
            if any(self._lasts(s) for s in stems) or any(
                re.search(rf"\b{re.escape(p)}\b", joined) for p in self.interval_phrases
            ):
                return None
            what = re.sub(r"^(?:the|a|an|patient \d+'s|receive|undergo|get|have|take) ", "", thing)
            what = re.sub(r" (?:of|for|on|in) (?:the )?(?:patient|subject)\b.*$", "", what).strip()
            return rules.Finding(
                "not_in_schema", "unended_event", what,
                f'The database records when "{what}" happened, not when it ended, so askdb cannot say how long '
                "it took; it can answer when it happened.", True,
            )  # fmt: skip
        return None


def unanchored_time(text: str) -> rules.Finding | None:
    """A period the question names without saying when ("recently", "in the past"): the database
    records every event's time, and the answer depends on which period is meant."""
    m = _UNANCHORED.search(text)
    if not m or _ANCHOR.search(text):
        return None
    said = " ".join(m.group(0).split())
    return rules.Finding(
        "not_in_schema", "unanchored_time", said,
        f'This asks about "{said}" without saying when; the database records when each event happened, and the '
        "answer depends on the period, so askdb cannot answer this. Say the period (since a date, during the "
        "last hospital visit, in a given month).", True,
    )  # fmt: skip
