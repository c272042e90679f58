"""Grounding the asked-for attribute in the catalog: which thing about a patient a question asks
for ("the wedding date of patient 10004235"), and whether any column's documentation can hold it.

Why: the rules know a fixed list of concepts and the learned model knows the library's kinds, so
a question about an attribute nobody wrote a rule or an example for ("the eye colour", "the page
count of the discharge summary") went through. The catalog already says what the database holds:
column names, their docs (curated or drafted from the values), the tables' synonyms and example
questions, the values linked to columns, and the questions reviewers approved. An attribute whose
words none of those texts use is not in the schema, and the decline names the column closest to
it, what askdb can answer instead.

It only reads the attribute in the shapes researchers ask for one ("what is the X of patient N",
"patient N's X", "what X does patient N have"), or the event a question asks about when it names
no attribute ("when did patient N get married", "who visited patient N": `asked_event`, checked
against the docs alone, since a value such as "MARRIED" has no date); anything else is left to
the learned model. No Django here: the texts come in as strings.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

_WORD = re.compile(r"[a-z][a-z'-]*")
# Never stops short of the patient's number: "of patient 10004235's daughter" must not read as "of
# patient" (the attribute then belongs to the daughter, not the patient).
_PATIENT = (
    r"(?:the |this |that )?(?:patient|subject)(?: (?:number |no\.? |id )?\d+)?(?! ?(?:number |no\.? |id )?\d)"
)

# Words that start a clause, not a noun phrase: "what was the …", "which is …" read no attribute.
_NOT_A_NOUN = r"(?:is|was|are|were|the|a|an|of|did|does|do|has|had|have|times?|day|days|many|much)\b"
# "how tall is patient N" asks for the height; the catalog calls it by the noun.
HOW_ADJECTIVES = {"tall": "height", "old": "age", "heavy": "weight", "short": "height"}

# Phrasings that ask for an attribute without naming it: "how is nifedipine taken" asks for the
# route, "how much does ondansetron cost" for the cost, "is patient N male or female" for the
# gender. The attribute is the noun a catalog documents it by.
ASKED_BY_PHRASE: tuple[tuple[re.Pattern, str], ...] = tuple(
    (re.compile(p), attribute)
    for p, attribute in (
        (
            r"\bhow (?:is|are|was|were|should|do|does|can) (?:[a-z0-9().,/-]+ ){1,8}?(?:typically |usually |commonly |"
            r"normally )?(?:taken|consumed|ingested|administered|given|delivered)\b|\b(?:ways?|methods?|routes?|means)"
            r" (?:to|for|of) (?:tak|consum|ingest|administ|deliver)\w*|\bconsumption methods?\b|\bmethods? (?:are|is) "
            r"used to (?:ingest|take|consume|administer)\b|\bcommon method for taking\b|\bintake method\b"
            r"|\bwhat ways? (?:can|could|should|is|are) (?:[a-z0-9().,/-]+ ){1,8}?be (?:taken|consumed|ingested|administered)\b",
            "route",
        ),
        (
            r"\bhow much (?:does|do|did|is|was|were|would) (?:[a-z0-9().,/'-]+ ){0,12}?(?:cost|charged?|pa(?:y|id)|bill(?:ed)?|"
            r"reimbursed)\b|\b(?:price|pricing|costs?|charges?) (?:of|for)\b|\bhow much is the (?:drug|procedure|price|cost)\b|"
            r"\bhow much (?:[a-z0-9().,/'-]+ ){0,8}?costs?\b|\bout of pocket\b|\bwhat does (?:a |the )?(?:[a-z0-9().,/'-]+ ){1,12}?"
            r"cost\b|\b(?:most |least |more |less )?expensive\b|\bcheapest\b",
            "cost",
        ),
        (r"\b(?:a )?male or (?:a )?female\b|\bfemale or (?:a )?male\b", "gender"),
    )
)

# "of patient N's daughter" asks of the daughter; "of patient N's last hospital stay" still of the patient.
_OWNS_NONE = (r"(?!'s (?!(?:first |last |latest |most recent |current |recent |previous |next |second |third )?"
              r"(?:hospital |icu |inpatient )?(?:stay|admission|visit|hospitalization|encounter)s?\b))")  # fmt: skip
# A participle a thing given to or done for a patient is described by ("administered", "given").
_GIVEN = r"(?:[a-z]{3,}(?:ed|en)|given|used|run|put|sent|done|drawn|taken|kept)"
# How a question asks for one attribute of one patient; `attr` is the noun phrase asked for.
ATTRIBUTE_PATTERNS: tuple[re.Pattern, ...] = tuple(
    re.compile(p)
    for p in (
        # Someone or something around a patient: "which social worker was assigned to patient N",
        # "which radiologist signed the ct report of patient N", "when did the chaplain visit patient N".
        rf"\b(?:which|what) (?!{_NOT_A_NOUN})(?P<attr>[a-z-]+(?: (?!{_NOT_A_NOUN})[a-z-]+)?) (?:was|were|is|are) (?:[a-z-]+ )?"
        rf"(?:to|for|with|by|at|of|on) {_PATIENT}\b",
        rf"\b(?:which|what) (?!{_NOT_A_NOUN})(?P<attr>[a-z-]+(?: (?!{_NOT_A_NOUN})[a-z-]+)?) (?!{_NOT_A_NOUN})(?:[a-z]+(?:ed|ote|aw|ent)|took|gave|brought|drove|made|kept|held|led|met|paid|told|caught|spoke) "
        rf"(?:the |a |an |his |her )?(?:[a-z-]+ ){{0,3}}?(?:(?:of|for|on|to|about) )?{_PATIENT}\b",
        rf"\b(?:when|how often|how many times) did (?:the |a |an |his |her |their )?(?P<attr>[a-z-]+(?: [a-z-]+)?) "
        rf"(?:visit|see|call|examine|meet|check on|talk to|speak (?:to|with)|sign|write|send|fax|print) (?:the |a )?"
        rf"(?:[a-z-]+ )?(?:of |for |to )?{_PATIENT}\b",
        # Things counted: "how many elevators does the hospital building have", "how many copies of
        # patient N's records were printed", "how many windows did patient N's hospital room have".
        rf"\bhow many (?!{_NOT_A_NOUN})(?P<attr>[a-z-]+(?: of [a-z-]+| [a-z-]+)?) (?:of {_PATIENT}'s [a-z ]+?|does|did|do|has|"
        r"had|have) ",
        # How big, how old: the attribute is the adjective's noun ("how tall is patient N" → height).
        rf"\bhow (?P<attr>{'|'.join(HOW_ADJECTIVES)}) (?:is|was|are|were) {_PATIENT}\b{_OWNS_NONE}",
        rf"\b(?P<attr>(?:full |first |last )?name of {_PATIENT}'s [a-z-]+(?: [a-z-]+)?)(?: (?:on|in|during|at|for|"
        r"from|who|that)\b|\?|$)",
        # A property of a thing given to or done for a patient: "what is the lot number of the insulin
        # administered to patient N", "what color were the tablets prescribed to patient N"; the
        # attribute is the property (the thing is often a drug's name, a value, not a column).
        rf"\b(?:what|which) (?:is|was|are|were) (?:the |a |an )?(?P<attr>(?!{_NOT_A_NOUN})[a-z-]+(?: [a-z-]+)?) of "
        rf"(?:the |a |an |his |her |their )?(?P<thing>(?:(?!who |that |which )[a-z0-9-]+ ){{1,3}}?){_GIVEN} (?:to|for|on|by|in|from) {_PATIENT}\b",
        rf"\b(?:what|which) (?!{_NOT_A_NOUN})(?P<attr>[a-z-]+(?: [a-z-]+)?) (?:is|was|are|were) (?:the |a |an |his |"
        rf"her |their )?(?P<thing>(?:(?!who |that |which )[a-z0-9-]+ ){{1,3}}?){_GIVEN} (?:to|for|on|by|in|from) {_PATIENT}\b",
        rf"\b(?:what|which|who|when|where) (?:is|was|are|were) (?:the |a |an )?(?P<attr>[a-z' -]{{3,60}}?) "
        rf"(?:of|for) {_PATIENT}\b{_OWNS_NONE}",
        rf"\b{_PATIENT}'s (?P<attr>[a-z-]+(?: [a-z-]+){{0,2}}?)(?: (?:is|was|are|were|on|in|during|at|after|before|"
        r"for|when|while|with|from|been|have|has|had|located|called|named|written|signed|sent|saved|given|"
        r"addressed|printed|taken|done|by)\b|\?|$)",
        rf"\b(?:what|which|who) (?:is|was|are|were) {_PATIENT}'s (?P<attr>[a-z' -]{{3,60}}?)(?: (?:on|in|during|at|"
        r"after|before|for|when|while|with|from)\b|\?|$)",
        rf"\b(?:what|which) (?P<attr>[a-z-]+(?: [a-z-]+){{0,3}}?) (?:does|did|do|has|had|is|was) {_PATIENT}\b",
        rf"\bhow many (?P<attr>[a-z-]+(?: [a-z-]+){{0,2}}?) (?:does|did|do|has|had) {_PATIENT} (?:have|own|had)\b",
        rf"\b(?:does|did|has|had) {_PATIENT} (?:ever )?(?:have|has|had|own|owns|been to|gone to) (?:a |an |any |the )?(?P<attr>[a-z-]+"
        r"(?: [a-z-]+){0,2}?)(?: (?:on|in|during|at|after|before|for|from)\b|\?|$)",
        rf"\bthe (?P<attr>[a-z-]+(?: [a-z-]+){{0,3}}?) (?:of|for) {_PATIENT}\b{_OWNS_NONE}",
        # An attribute of the hospital or one of its units, not of a patient: "the capacity of the cardiac
        # icu", "the bed occupancy of the hospital"; grounded as any attribute (a unit's name is a value).
        rf"^(?:what|which) (?:is|was|are|were) (?:the )?(?P<attr>(?!{_NOT_A_NOUN})[a-z-]+(?: [a-z-]+){{0,2}}?) (?:of|in|at) "
        r"(?:the|this|that|our|each|every) (?:[a-z-]+ ){0,4}?(?:hospital|unit|ward|icu|department|clinic)s?(?: (?:on|in|during|"
        r"at|since)\b|\?|$)",
        # A state of the patient asked by its adjective: "was patient N lonely during the icu stay", "did
        # patient N feel anxious"; a participle ("admitted") or a place ("in the icu") is not one.
        rf"^(?:(?:was|is|were) {_PATIENT} (?:ever |feeling |still )?|(?:did|does) {_PATIENT} (?:ever )?(?:feel|seem|look) )"
        rf"(?P<attr>(?!{_NOT_A_NOUN}|in\b|on\b|at\b|still\b|ever\b|alive\b|dead\b|there\b)[a-z]{{3,}}(?<!ed)(?<!en)(?<!ing))"
        r"(?: (?:during|in|on|at|after|before|while|when|throughout|about|with)\b|\?|$)",
    )
)
_STATE = ATTRIBUTE_PATTERNS[-1]  # a state of the patient asked by its adjective ("was patient N lonely")
# A property asked of one thing the question names, a patient's or an item's ("what color was patient N's
# urine specimen", "which manufacturer makes the sensor for chart item 220277", "how painful was patient
# N's last injection", "what did the aspirin tablet of patient N taste like"): the attribute is the property,
# not the thing. Why: the shapes above read "patient N's insurance" as the attribute asked, so "the policy
# number of patient N's insurance" was held by admissions.insurance. The thing must be one the question
# names by its number (a patient, an item, a code), so "how common is …" or "which lab tests are …" keep
# their reading.
_ITEM = rf"(?:{_PATIENT}|\b(?:lab |chart |icu |input |output |d_items |d_labitems |d )?items? \d+|\b(?:icd |hcpcs |drg |ndc )?codes? [a-z]?\d+)"
# "How long", "how many", "how old" ask for a quantity a column may hold; any other adjective after "how"
# ("painful", "fluent", "confident") asks for a quality of that name.
_MEASURE = (r"(?:long|much|many|often|old|tall|heavy|short|soon|frequently|frequent|high|low|big|large|fast|quickly|"
            r"early|late|recently|common|likely|prevalent|rare|well|severe|sick|ill)")  # fmt: skip
_DID = r"(?:was|were|is|are|did|does|do|has|had)"
_PARTICIPLE_OR_ADVERB = r"(?:[a-z]+(?:ed|en)|found|grown|made|read|held|kept|sent|taken|given|drawn|run|done|ever|still|first|last)\b"
# A modal or "be" ends the noun: "which antibiotic should be prescribed" asks for advice, not a property.
_NOT_IN_NOUN = rf"(?:{_NOT_A_NOUN}|(?:should|would|could|can|will|may|might|must|shall|be|been)\b)"
_WH_NOUN = (rf"(?:(?:at|in|on|by|from|with|for|under|to|through) )?(?:what|which) (?P<attr>(?!{_NOT_IN_NOUN})[a-z-]+(?: "
            rf"(?!{_NOT_IN_NOUN})[a-z-]+){{0,2}}?(?: of (?:the |a |an )?(?!{_NOT_IN_NOUN})[a-z-]+(?: (?!{_NOT_IN_NOUN})[a-z-]+)?)?)")  # fmt: skip
# The owner a thing is asked of ("the husband of patient N", "patient N's son"): when the catalog does
# not hold it, the property is someone else's and the shapes above read the owner.
_OWNER = re.compile(
    rf"(?:\b(?:the |a |an )(?P<a>[a-z-]+(?: [a-z-]+)?) of {_PATIENT}|{_PATIENT}'s (?P<b>[a-z-]+(?: [a-z-]+){{0,2}}))"
)
PROPERTY_PATTERNS: tuple[re.Pattern, ...] = tuple(
    re.compile(p)
    for p in (
        rf"^what {_DID} (?P<about>.+?) (?P<attr>taste|smell|look|feel|sound)s? like\b",
        rf"^how {_DID} (?P<about>.*{_ITEM}.*?) (?P<attr>feel|taste|smell|look|sound)\b",
        rf"^how (?P<attr>(?!{_MEASURE}\b|{_NOT_A_NOUN})[a-z]{{3,}}) (?:(?:in|with|about|at) [a-z]+ )?{_DID}\b(?P<about>.*{_ITEM}.*)$",
        # "what color was patient N's urine specimen", "what brand of catheter was used for …": the noun is asked
        # of the thing the sentence goes on to name (not "what germ was found in …", read below).
        rf"^{_WH_NOUN} (?:{_DID} (?!{_PARTICIPLE_OR_ADVERB})|(?:was|were) used\b)(?P<about>.*{_ITEM}.*)$",
        # "who was the respiratory therapist during patient N's first mechanical ventilation": a person's role.
        rf"^who (?:is|was|were|are) (?:the |a |an )?(?P<attr>(?!{_NOT_A_NOUN})[a-z-]+(?: [a-z-]+){{0,2}}?) (?:during|in|at|on|for) "
        rf"(?P<about>.*{_PATIENT}.*)$",
        # "which barcode scanner brand read patient N's insulin": the noun did it to what the patient had.
        rf"^{_WH_NOUN} (?!{_DID}\b)(?:[a-z]+(?:ed|es)|made|makes|read|held|took|gave|ran|drew|wrote|sent|kept|brought) "
        rf"(?:the |a |an |his |her |their )?(?P<about>{_PATIENT}'s .*)$",
    )
)
# "What is the label of lab item 51221", "the unit name of chart item 220045": an item's property, held
# when the catalog holds its words (the learned model, which knows the library's patient questions,
# blocked these); never a decline by itself ("the human-readable label" keeps the plain reading).
_ITEM_PROPERTY = re.compile(
    rf"^(?:(?:what|which) (?:is|was|are|were)|(?:show|tell|give) me|list|name|find|get) (?:the |a |an )?(?P<attr>(?!{_NOT_A_NOUN})"
    r"[a-z-]+(?: [a-z-]+){0,4}?) (?:of|for|on) (?:the |a |an )?(?:lab |chart |icu |input |output |d_items |d_labitems |d )?"
    r"items? (?:with (?:the )?)?(?:id |number |itemid )?\d+\b"
    rf"|^(?:what|which) (?P<attr2>(?!{_NOT_A_NOUN})[a-z-]+(?: [a-z-]+)?) (?:does|did|do|is|was) (?:the )?(?:lab |chart |icu |input "
    r"|output |d_items |d_labitems |d )?items? (?:id |number )?\d+ (?:record|measure|hold|have|show|stand for|belong to|use)\b"
)
# "Which device model produced the readings of lab item 51221", "what germ was found in …": the noun does
# what the verb says; read only when the shapes above read nothing (synonyms such as "germ" are often
# asked so, and the thing they are found in is then the catalog's).
_WH_AGENT = re.compile(
    rf"^{_WH_NOUN} (?:{_DID} )?(?:[a-z]+(?:ed|es|en)|made|makes|read|held|grew|took|gave|ran|drew|wrote|sent|kept|"
    rf"brought|caught|got|found)\b(?P<about>.*{_ITEM}.*)$"
)
# "What was the policy number of patient N's insurance": a property of what the patient has, when the
# catalog holds that thing (`ground` checks); "the marital status of patient N's daughter" keeps its reading.
# Also a property at or after it ("the pharmacy queue length at patient N's last pharmacy order", "the
# prognosis given with patient N's first diagnosis"), which the shapes below read as the thing itself.
_OF_POSSESSED = re.compile(
    rf"\b(?:what|which) (?:is|was|are|were) (?:the |a |an )?(?P<attr>(?:[a-z-]+'s )?(?!{_NOT_A_NOUN})[a-z-]+(?: [a-z-]+){{0,2}}?) "
    rf"(?:of|for|on|in|at|after|during|before|(?:given|made|done|used|noted) (?:with|at|for|during|after)) (?:the |a |an )?"
    rf"(?:(?:[a-z0-9-]+ ){{0,4}}?{_PATIENT}'s (?P<about>[a-z-]+(?: [a-z-]+){{0,3}}?)(?: (?:on|in|"
    rf"during|at|from|for|when)\b|\?|$)|(?P<by>[a-z-]+(?: [a-z-]+)?) (?:that|which|who) (?!{_NOT_A_NOUN})[a-z]+ {_PATIENT}\b)"
)
# A property asked of a thing the catalog names, not of a patient ("what is the storage temperature of the
# heparin vials", "list the customer service hours of each insurance", "what turnaround time does the
# creatinine lab test have", "which insurance has the highest deductible"): the attribute is the property.
# Why: the shapes above read a property only of a patient or a numbered item, so a property of a drug, a
# test, an insurance or a care unit that no column holds went to the learned model, which passed most of
# them (round 19: costs, lot numbers, how a thing looked). Read only where the shapes above read nothing,
# and only of a thing one of whose words the catalog holds (`_of_a_thing`).
_DET = r"(?:the |a |an |each |every |all |any |this |that |these |those )?"
# The property's first word is a noun; a later one may be "time" or "day" ("turnaround time").
_PROP = (rf"(?P<attr>(?!{_NOT_IN_NOUN})[a-z-]+(?: (?!(?:is|was|are|were|the|a|an|of|did|does|do|has|had|have)\b)"
         rf"[a-z-]+){{0,2}}?)")  # fmt: skip
_THING = r"(?P<about>(?!(?:patient|subject|person|people)s?\b)(?:[a-z0-9'-]+ ){0,3}?[a-z0-9'-]+)"
_THING_END = (r"(?: (?:that|which|who|whom|was|were|is|are|has|had|have|does|do|did|given|prescribed|ordered|used|"
              r"recorded|charted|measured|administered|taken|in|on|at|for|during|from|to|of|by|with|patient|"
              r"subject)\b|[?.]?$)")  # fmt: skip
# A verb an agent does to a thing ("analyses", "supplied", "makes").
_ACTS = (r"(?!(?:is|was|are|were|has|does|goes|uses)\b)(?:[a-z]{3,}(?:es|ed)|makes|made|runs|ran|reads|holds|held|takes|"
         r"took|gives|gave|draws|drew|sends|sent|keeps|kept|brings|brought|sells|sold|builds|built)")  # fmt: skip
_MOST = r"(?:highest|lowest|most|least|largest|smallest|best|worst|longest|shortest|greatest|fewest)"
OF_A_THING: tuple[re.Pattern, ...] = tuple(
    re.compile(p)
    for p in (
        rf"^(?:what|which|who) (?:is|was|are|were) (?:the |a |an )?{_PROP} (?:of|for|on|in|at) {_DET}{_THING}{_THING_END}",
        rf"^(?:what|which) {_PROP} (?:is|was|are|were) (?:used|needed|required) (?:for|on|in|by|with) {_DET}{_THING}{_THING_END}",
        rf"^(?:list|show|give|tell|find|get|name)(?: me)? (?:the |all )?{_PROP} (?:of|for) {_DET}{_THING}{_THING_END}",
        rf"^(?:what|which) {_PROP} (?:does|do|did|is|was|are|were) {_DET}{_THING} (?:have|has|had|need|needs|require|"
        r"requires|use|uses|carry|carries|come in|belong to|run on)\b",
        rf"^(?:what|which) {_DET}{_THING} (?:has|had|have|is|was|are|were) the {_MOST} {_PROP}(?: (?:in|of|among|for|at)\b|[?.]?$)",
    )
)
# Who or what acts on a thing the catalog names: "what machine analyses the hemoglobin samples", "which company
# makes the heparin" (round 20's thirteenth set let these through). Read only to decline: an agent whose words
# the catalog holds ("which caregiver documented the heart rate") is left to the learned model, never held.
_AGENT_OF_A_THING = re.compile(rf"^(?:what|which) {_PROP} (?:{_DID} )?{_ACTS} {_DET}{_THING}{_THING_END}")
# A relative clause ends the attribute: "the name of the nurse who cared for …".
_CLAUSE = re.compile(r" (?:who|that|which|whom|whose|when|where)\b.*$")

# Words that say how something is asked, not what: never the attribute's own content.
GENERIC = frozenset(
    """a an the of for to in on at by with from and or any all each every this that these those his her
    their its whose which what who whom when where how many much is was are were be been being do does did
    has have had patient patients subject subjects person people current currently recent recently recorded
    record records documented listed list name names number numbers date dates time times day days year
    years type types kind kinds value values total count amount first last latest earliest most least
    previous next exact exactly full actual main primary usual overall average mean maximum minimum max min
    hospital stay stays admission admissions visit visits icu during own known given method way reading
    readings measurement measurements result results daily weekly monthly yearly hourly instance aggregate
    accumulated cumulative newly detected discovered found measured month week incident event episode done
    performed conducted test tests microbiological examination highest lowest largest smallest greatest
    differ difference change changes sum""".split()
)


def stem(word: str) -> str:
    """A light stem so "allergies"/"allergy" and "documents"/"document" meet; over-stemming only
    joins words, which errs towards grounded (answerable)."""
    w = word.strip("'-").removesuffix("'s")
    for suffix, repl, keep in (("ies", "y", 4), ("sses", "ss", 4), ("es", "", 5), ("s", "", 4),
                               ("ing", "", 5), ("ed", "", 5)):  # fmt: skip
        if w.endswith(suffix) and len(w) - len(suffix) >= keep - len(repl) and not w.endswith("ss"):
            return w[: len(w) - len(suffix)] + repl
    return w


def words(text: str) -> list[str]:
    return _WORD.findall(str(text or "").lower().replace("_", " "))


def stems_of(text: str) -> set[str]:
    return {stem(w) for w in words(text)}


# -- a column's name in words -------------------------------------------------------------------
#
# Column names join words ("highnormalvalue", "isopenbag", "edregtime") or shorten them ("event_txt",
# "amountuom", "spec_type_desc"), so a question asking for "the normal high value of the heart rate item"
# or "the event text of the last administration" found no catalog text saying "high" or "text" and was
# declined "No column records …" (round 20's sets and valid). A name is read as the words it is made of:
# each part between underscores that is not an English word itself is split into English words (the
# split whose words are the most frequent, symspellpy's English frequency dictionary, which the match
# stage's speller already ships) and the shortenings columns use are read out in full.
# symspellpy's own `SymSpell.word_segmentation` (edit distance 0) is not used: on the bundled catalog's
# 229 name parts it reads 12 otherwise, 5 even with this dictionary (words of three letters or more,
# the shortenings), because it admits pieces no dictionary holds: "hadm" → "had m", "emar" → "e mar",
# "hcpcs" → "hc pcs" (round 22; test_grounding_name_words pins those whole).

# Shortenings of words in column names, read out in full (MIMIC-IV's and common SQL naming).
SHORTENED = {
    "txt": "text", "uom": "unit of measure", "desc": "description", "descr": "description", "cd": "code",
    "val": "value", "num": "number", "rx": "prescription", "seq": "sequence", "curr": "current",
    "prev": "previous", "spec": "specimen", "org": "organism", "ab": "antibiotic", "disp": "dispensed",
    "hr": "hour", "hrs": "hours", "dept": "department", "los": "length of stay", "dod": "date of death",
    "param": "parameter", "ed": "emergency department", "reg": "registration", "disch": "discharge",
    "proc": "procedure", "prod": "product", "sched": "schedule", "ref": "reference", "qty": "quantity",
    "amt": "amount", "dt": "date", "tm": "time", "temp": "temperature", "wt": "weight", "ht": "height",
    "dx": "diagnosis", "px": "procedure", "med": "medication", "meds": "medications", "admit": "admission",
    "icu": "icu",
}  # fmt: skip
# Short words a name may join ("is|open|bag", "links|to", "in|time"); any other piece of a split must be
# a word of at least three letters or a shortening, so "hadm" or "gsn" are never split into letters.
_SHORT_WORDS = frozenset("is in to of on at by id no".split())
_SPLIT_DEPTH = 20  # the longest word a split looks for


@functools.cache
def _english() -> dict[str, float]:
    """Each English word's log frequency (symspellpy's English frequency dictionary, 82,765 words)."""
    text = (
        importlib.resources.files("symspellpy")
        .joinpath("frequency_dictionary_en_82_765.txt")
        .read_text("utf-8")
    )
    counts = {
        w: int(n) for w, _, n in (line.partition(" ") for line in text.splitlines()) if n.strip().isdigit()
    }
    total = sum(counts.values())
    return {w: math.log(n / total) for w, n in counts.items()}


def _piece_cost(piece: str, english: dict[str, float]) -> float | None:
    """How unlikely a piece of a split is (None: not a piece): a shortening costs as a rare word."""
    if piece in SHORTENED:
        return -math.log(1e-7)
    if piece in english and (len(piece) >= 3 or piece in _SHORT_WORDS):
        return -english[piece]
    return None


@functools.cache
def _split(part: str) -> tuple[str, ...]:
    """One lower-case part of a name as the words it joins ("highnormalvalue" → high, normal, value),
    the most likely split; the part itself when it is a word, a shortening, or splits into none."""
    english = _english()
    if part in english or part in SHORTENED or len(part) < 4:
        return (part,)
    best: list[tuple[float, int] | None] = [(0.0, 0)] + [None] * len(part)
    for end in range(1, len(part) + 1):
        for start in range(max(0, end - _SPLIT_DEPTH), end):
            cost = _piece_cost(part[start:end], english) if best[start] is not None else None
            if cost is not None and (best[end] is None or best[start][0] + cost < best[end][0]):
                best[end] = (best[start][0] + cost, start)
    if best[-1] is None:
        return (part,)
    pieces, end = [], len(part)
    while end:
        start = best[end][1]
        pieces.append(part[start:end])
        end = start
    return tuple(reversed(pieces))


def name_words(name: str) -> str:
    """A table's or a column's name as the words it is made of, shortenings read out in full
    ("highnormalvalue" → "high normal value", "event_txt" → "event text", "amountuom" → "amount unit of
    measure"): what a question may call the column."""
    out = []
    for part in re.split(r"[^a-z]+", str(name or "").lower()):
        for piece in _split(part) if part else ():
            out.append(SHORTENED.get(piece, piece))
    return " ".join(out)


# "the name of the drug", "drug name", "lab test names": what a text says has a name.
_NAMED = re.compile(r"\b(?:name|label|title)s? of (?:the |a |an |each |every )?([a-z]+(?: [a-z]+)?)|"
                    r"\b([a-z]+) (?:name|label|title)s?\b")  # fmt: skip


def named_of(text: str) -> set[str]:
    """Stems of the things a text says have a name ("Name of the drug" → {drug})."""
    out = set()
    for m in _NAMED.finditer(str(text or "").lower().replace("_", " ")):
        out |= {stem(w) for w in words(m.group(1) or m.group(2)) if w not in GENERIC}
    return out


_COLUMN_NAME = re.compile(r"^[a-z0-9_]+\.([a-z0-9_]+): ")


def _texts_of(texts: Iterable[str]) -> dict[str, frozenset[int]]:
    """Each stem with the indexes of the texts that say it."""
    out: dict[str, set[int]] = {}
    for n, t in enumerate(texts):
        for s in stems_of(t):
            out.setdefault(s, set()).add(n)
    return {s: frozenset(ns) for s, ns in out.items()}


class Vocabulary:
    """Every word stem the catalog's texts use (names split at underscores, docs, synonyms, linked
    values, approved questions): what the database can be asked about in words; and the things
    those texts say have a name (drugs, tests, units; people have none in de-identified data)."""

    def __init__(
        self,
        texts: Iterable[str] = (),
        *,
        stems: Iterable[str] = (),
        named: Iterable[str] = (),
        schema: Iterable[str] = (),
        people: Iterable[str] = (),
        events: Iterable[str] = (),
        categories: Iterable[str] = (),
        context: Iterable[str] = (),
        values: Iterable[str] = (),
    ) -> None:
        texts, values = list(texts), list(values)
        self.stems: frozenset[str] = frozenset(stems).union(*(stems_of(t) for t in texts))
        # Linked values (drug names, lab labels, ICD titles) hold nearly every English word ("car",
        # "school", "guardian" in diagnosis titles), so a word only they say holds an attribute only
        # where the attribute names one of them in full (`unnamed_values`): "the hemoglobin of patient
        # N" names the lab label "Hemoglobin"; "the car of patient N" names no value.
        value_stems = frozenset().union(*(stems_of(v) for v in values))
        self.value_words: frozenset[str] = value_stems - self.stems
        self.value_names: dict[str, tuple[frozenset[str], ...]] = _value_names(values, self.value_words)
        self.stems |= value_stems
        texts = [*texts, *values]
        # Words said only in passing: a table's prose ("time windows for vitals") or a category's
        # values ("EMERGENCY ROOM" in admission_location). They may qualify an attribute ("room
        # temperature") but never hold it: "the windows of the icu" or "the hospital room" is not
        # recorded because a doc mentions windows or a value names a room.
        self.context: frozenset[str] = frozenset().union(*(stems_of(t) for t in context)) - self.stems
        self.named: frozenset[str] = frozenset(named).union(*(named_of(t) for t in texts))
        # For events (`asked_event`): the words of the catalog's docs without example or linked
        # values ("MARRIED" is a marital status, not an event with a date), the words of the docs
        # of columns that record a person ("provider who admitted the patient"), and the verbs
        # approved questions ask about ("when was patient N prescribed …").
        self.schema: frozenset[str] = frozenset(w for t in schema for w in words(t))
        self.people: frozenset[str] = frozenset(w for t in people for w in words(t))
        self.events: frozenset[str] = frozenset(events)
        self.categories: frozenset[str] = frozenset(w for t in categories for w in words(t))
        # A column named for a thing names it ("admissions.insurance: ...", "prescriptions.drug: ...").
        self.named |= {
            stem(w) for t in texts for w in words(_COLUMN_NAME.findall(t)[0] if _COLUMN_NAME.match(t) else "")
        }
        self._texts = texts  # indexed by `texts_of` only when a phrase is first checked

    @functools.cached_property
    def texts_of(self) -> dict[str, frozenset[int]]:
        """Which texts say each stem, so the words of one phrase must be said by one text together
        (`together`). Empty when the vocabulary was given stems alone: no phrase is checked then."""
        return _texts_of(self._texts)

    def together(self, a: str, b: str) -> bool:
        """Whether one text (a column's, a table's names, a value, an approved question) holds both
        words: "room temperature" is not held where one text says "emergency room" and another
        "temperature". True when no texts were indexed (nothing to check against)."""
        if not self.texts_of:
            return True
        return bool(self._texts_saying(a) & self._texts_saying(b))

    def _texts_saying(self, word: str) -> frozenset[int]:
        return self.texts_of.get(stem(word), frozenset()) | self.texts_of.get(word, frozenset())

    def __contains__(self, word: str) -> bool:
        return stem(word) in self.stems or word in self.stems or stem(word) in self.context

    def holds(self, word: str) -> bool:
        """A column, a table's names, a thing's value or an approved question says the word."""
        return stem(word) in self.stems or word in self.stems

    def unnamed_values(self, content: Iterable[str]) -> tuple[str, ...]:
        """The words of an attribute (its content words) that only linked values say, and no value
        the attribute names in full says: "car" in "what car does patient N drive" (a diagnosis title
        says "car driver injured …", which the attribute does not name), not "glucose" in "the
        glucose of patient N" (the lab label "Glucose (whole blood)" is named whole)."""
        content = list(content)
        said = {stem(w) for w in content}
        return tuple(
            w
            for w in content
            if not _QUALIFIER.fullmatch(w)
            and stem(w) in self.value_words
            and (w not in self.stems or w in self.value_words)
            and not any(name <= said for name in self.value_names.get(stem(w), ()))
        )


# A participle qualifies what is asked ("the body mass index noted", "the last lab drawn"), never names
# it: a value saying it grounds it as before.
_QUALIFIER = re.compile(r"[a-z]+ed|found|grown|made|read|held|kept|sent|taken|given|drawn|run|done")


def _value_names(values: Iterable[str], value_words: frozenset[str]) -> dict[str, tuple[frozenset[str], ...]]:
    """Each word only values say → the names of the values that say it: a value's content stems
    without its parentheses ("BMI (kg/m2)" → {bmi}), and its head before a comma ("Anxiety state,
    unspecified" → {anxiety, state}), so an attribute naming either names the value."""
    out: dict[str, set[frozenset[str]]] = {}
    for v in values:
        plain = re.sub(r"\([^)]*\)", " ", str(v))
        for part in {plain, plain.split(",", 1)[0]}:
            name = frozenset(stem(w) for w in words(part) if w not in GENERIC and len(w) > 2)
            for s in name & value_words:
                out.setdefault(s, set()).add(name)
    return {s: tuple(names) for s, names in out.items()}


@dataclass(frozen=True)
class Grounding:
    """The attribute a question asks for and its words no catalog text uses; for an event
    (`asked_event`), what is asked of it ("when", "who", "whether") in `event`."""

    attribute: str
    missing: tuple[str, ...]
    event: str = ""
    phrase: str = ""  # an event's words in the question ("serve in the military"), for the decline
    of: str = ""  # asked of what the patient has, not of the patient ("marital status" of a daughter)
    thing: str = ""  # a property of a thing given to the patient ("the lot number of the insulin")
    whose: str = ""  # an event of someone the patient has ("did patient N's father die"), not the patient's
    # A property asked of a thing the catalog names: the thing ("each insurance" in "the deductible of each insurance").
    about: str = ""

    @property
    def grounded(self) -> bool:
        return not self.missing


# "Is there any record that patient N was seen by a dietitian" asks whether that happened: read as
# "was patient N seen by a dietitian" (or "did patient N wore …", "what is the flu vaccine of patient N"),
# so the attribute or the event is grounded as in a plain question.
_RECORD_OF = r"^(?:is|was|are) there (?:any |a )?(?:records?|evidence|documentation|mention) "
_EXISTENCE = (
    (re.compile(rf"{_RECORD_OF}(?:that|whether) (?P<s>{_PATIENT}(?:'s [a-z-]+(?: [a-z-]+)?)?) (?P<aux>was|were|has|had|is) "),
     r"\g<aux> \g<s> "),
    (re.compile(rf"{_RECORD_OF}(?:that|whether) (?P<s>{_PATIENT}) (?P<v>[a-z-]+) "), r"did \g<s> \g<v> "),
    (re.compile(rf"{_RECORD_OF}of (?:the |a |an |any )?(?P<x>[a-z-]+(?: [a-z-]+){{0,2}}?) (?:(?:that|which) )?(?:(?:for|of|in|on|to) )?"
                rf"(?P<s>{_PATIENT})\b"), r"what is the \g<x> of \g<s>"),
)  # fmt: skip


# A statistic over patients ("what percentage of patients admitted in 2150 were vegetarian", "the top
# three hometowns of patients aged 80 or above", "the average daily step count of patients with diabetes",
# "how many patients of each religion", "the distribution of education levels among patients") asks of
# each of them what a question about one patient asks: read as that question ("was patient 0
# vegetarian", "what is the hometown of patient 0"), so the attribute is grounded as it is there. Why: the
# shapes above read no attribute in a statistic, so the learned model alone decided (round 17's cohort
# set: 44 of 64 unanswerable let through). Only over patients or their admissions: "the average heart
# rate of the nurses" or "the top four pharmacies where prescriptions were filled" asks of someone or
# something else, and keeps the plain reading.
_POPULATION = (r"(?:(?:the|all|those|these|our) )?(?:(?!of\b)[a-z0-9'-]+ ){0,3}?(?:patients|people|persons|subjects|"
               r"admissions|men|women|adults|individuals)\b")  # fmt: skip
_OFTEN = r"(?:common(?:ly)?|frequent(?:ly)?|often|popular|usual(?:ly)?)"
_RANKED = rf"(?:top (?:[a-z0-9]+ )?(?:(?:most |least )?{_OFTEN} )?|(?:[a-z0-9]+ )?(?:most|least) {_OFTEN} )"
# What was done to the things counted ("the most often performed treatments", "laboratory tests undertaken
# by patients"): not the attribute, which is the noun.
_DONE = (r"(?:performed|ordered|taken|undertaken|given|done|prescribed|charted|recorded|measured|administered|"
         r"received|used|drawn|seen|sent|collected|conducted|carried|made|found|diagnosed|treated|tested|run|"
         r"obtained|reported|documented|assigned|billed|coded)")  # fmt: skip
_NOT_STAT = rf"(?!{_NOT_A_NOUN}|(?:patients|people|admissions)\b|{_DONE}\b)"
_STAT_NOUN = (rf"(?:{_DONE} )?(?P<attr>{_NOT_STAT}[a-z-]+(?: {_NOT_STAT}[a-z-]+){{0,2}}?(?: of {_NOT_STAT}[a-z-]+"
              rf"(?: {_NOT_STAT}[a-z-]+)?)?)")  # fmt: skip
_STATISTIC = r"(?:average|mean|median|total|typical|usual|overall|maximum|minimum|highest|lowest)"
_COHORT = (
    # "what percentage of patients … were vegetarian" / "… had an autopsy": the last "were" or "had" says it.
    (re.compile(rf"^(?:what|which) (?:is |was |are |were )?(?:the )?(?:percentage|percent|proportion|fraction|share|rate|"
                rf"ratio) of {_POPULATION}.* (?P<aux>were|was|had been|had|have|has) (?P<pred>(?:(?!\b(?:were|was|had|have|"
                rf"has)\b)[^?.])+)[?.]?$"), "share"),
    # "what are the top three hometowns of patients aged 80 or above"
    (re.compile(rf"^(?:what|which) (?:are|were|is|was) the {_RANKED}{_STAT_NOUN} (?:of|among|for|in|on|at|from|by|that|"
                rf"which|where|{_DONE}) "
                rf"(?=.*\b(?:patients|people|admissions|subjects|men|women)\b)"), "what"),
    # "what is the average daily step count of patients with diabetes"
    (re.compile(rf"^(?:what|which) (?:is|was|are|were) the {_STATISTIC} {_STAT_NOUN} (?:of|for|among|in|per|across) "
                rf"{_POPULATION}"), "what"),
    # "what is the distribution of education levels among patients admitted in 2150"
    (re.compile(rf"^(?:what|which) (?:is|was|are|were) the (?:distribution|breakdown|spread|mix) of {_STAT_NOUN} "
                rf"(?:among|of|for|in|across) {_POPULATION}"), "what"),
    # "how many patients of each religion were admitted in 2150"
    (re.compile(rf"^how many {_POPULATION} (?:of|with|in|from|by|per) (?:each|every) (?P<attr>[a-z-]+(?: [a-z-]+){{0,2}}?)"
                r"(?: (?:were|was|are|is|have|had|did|in|on|at|since|during|who|that)\b.*)?[?.]?$"), "what"),
)  # fmt: skip


def _one_of(text: str) -> str:
    """A statistic over patients read as the question it asks of one of them ("" when it is not one)."""
    for pattern, shape in _COHORT:
        m = pattern.search(text)
        if not m:
            continue
        if shape == "what":
            return f"what is the {m.group('attr')} of patient 0?"
        aux, pred = m.group("aux"), m.group("pred").strip()
        return f"{'was' if aux in ('were', 'was', 'had been') else 'did'} patient 0 {'' if aux in ('were', 'was', 'had been') else 'have '}{pred}?"
    return ""


def _plain(question: str) -> str:
    """The question lower-cased on one line, an existence question read as the question it wraps and
    a statistic over patients as the question it asks of one of them."""
    text = " ".join(str(question or "").lower().replace("’", "'").split())
    for pattern, plain in _EXISTENCE:
        if pattern.search(text):
            return pattern.sub(plain, text, count=1)
    return _one_of(text) or text


def asked_attribute(question: str) -> str:
    """The noun phrase the question asks for ("wedding date"), or "" when its shape is not one
    of ATTRIBUTE_PATTERNS."""
    return _asked(question)[0]


def _asked(question: str, vocabulary: Vocabulary | None = None) -> tuple[str, str]:
    """(the attribute, the thing it is a property of when that is not the patient: "lot number",
    "insulin" in "the lot number of the insulin administered to patient N"). With a `vocabulary`, a
    property of a thing the patient has is read as asked of it when the catalog holds the thing."""
    text = _plain(question)
    for pattern, attribute in ASKED_BY_PHRASE:
        if pattern.search(text):
            return attribute, ""
    for pattern in PROPERTY_PATTERNS:
        m = pattern.search(text)
        if m and _owner_held(m.group("about"), vocabulary):
            attr = _CLAUSE.sub("", m.group("attr")).strip(" -'")
            return HOW_ADJECTIVES.get(attr, attr), ""
    m = _OF_POSSESSED.search(text) if vocabulary is not None else None
    if m and _holds_all(m.group("about") or m.group("by"), vocabulary):
        return _CLAUSE.sub("", m.group("attr")).strip(" -'"), ""
    attribute, thing = _asked_by_shape(text)
    if not attribute:
        m = _WH_AGENT.search(text)
        if m and _owner_held(m.group("about"), vocabulary):
            return _CLAUSE.sub("", m.group("attr")).strip(" -'"), ""
        return _of_a_thing(text, vocabulary)[0], ""
    return attribute, thing


_A_FIGURE = re.compile(r" (?:of|at|=|is|equal to|above|below|over|under) [\d.]")


# A property that opens with a statistic is computed over the thing's rows, and the quantity it is of is
# often one phrase cut at its "of" ("the mean length of stay per ward": length-of-stay, a `los` column):
# no reading of a property of a thing (a SQLite ward table with `los_days` was declined "No column records
# the mean length" in round 20's CI).
_A_STATISTIC = re.compile(rf"^(?:{_STATISTIC}|avg|number|count|sum|amount)\b")


def _of_a_thing(text: str, vocabulary: Vocabulary | None) -> tuple[str, str]:
    """(the property, the thing) of a question asking a property of a thing the catalog names
    (`OF_A_THING`), or ("", ""): the thing must have a word a column, a table, a value or an approved
    question holds, and the property a content word (not "the value of", "the number of"). A numbered
    item's property keeps `_ITEM_PROPERTY`'s reading, never a decline ("the human-readable label of lab
    item N"), and a property of a figure is computed, not held ("the percentile ranking of a glucose
    value of 176.0", answerable in EHRSQL train: the train CV blocked it); a code is a thing ("the long
    title of icd-9 diagnosis code 4019" is held)."""
    if vocabulary is None or _ITEM_PROPERTY.search(text):
        return "", ""
    for pattern in (*OF_A_THING, _AGENT_OF_A_THING):
        m = pattern.search(text)
        if not m:
            continue
        prop = _CLAUSE.sub("", m.group("attr")).strip(" -'")
        about = m.group("about")
        if pattern is _AGENT_OF_A_THING and all(w in vocabulary for w in words(prop) if w not in GENERIC):
            continue  # an agent the catalog holds: no reading (never held by this shape)
        if _A_STATISTIC.match(prop):
            return (
                "",
                "",
            )  # computed over the thing's rows, not held by it ("the mean length of stay per ward")
        if _A_FIGURE.match(text, m.end("about")):
            return "", ""  # of a figure ("a glucose value of 176.0"): a rank or a share is computed
        if any(w not in GENERIC and len(w) > 2 for w in words(prop)) and any(
            vocabulary.holds(w) for w in words(about) if w not in GENERIC and len(w) > 2
        ):
            return prop, about
    return "", ""


def _owner_held(about: str, vocabulary: Vocabulary | None) -> bool:
    """Whether what a property is asked of is the patient's or a thing the catalog holds ("patient N's
    last blood culture"), not someone the patient has ("the husband of patient N"); without a
    vocabulary, no owner is taken as held (the plain reading stays)."""
    m = _OWNER.search(about)
    if not m:
        return True
    owner = m.group("a") or m.group("b")
    nouns = [w for w in words(owner) if w not in GENERIC and len(w) > 2]
    return vocabulary is not None and all(vocabulary.holds(w) for w in nouns) if nouns else True


def _asked_by_shape(text: str) -> tuple[str, str]:
    """The attribute as ATTRIBUTE_PATTERNS read it."""
    for pattern in ATTRIBUTE_PATTERNS:
        m = pattern.search(text)
        if m:
            attr = re.sub(rf"^((?:full |first |last )?name of ){_PATIENT}'s ", r"\1", m.group("attr"))
            attr = _CLAUSE.sub("", attr).strip(" -'")
            return HOW_ADJECTIVES.get(attr, attr), (m.groupdict().get("thing") or "").strip()
    return "", ""


_NAME_OF = re.compile(
    r"^(?:full |first |last )?name of (?:the |a |an |his |her |their )?(?P<x>.+)$|^(?P<y>.+?)'s (?:full |first |last )?name$"
)


def names_a_person(attribute: str) -> bool:
    """ "name of the spouse", "doctor's name": a name, which de-identified data holds of no one."""
    return bool(_NAME_OF.match(attribute))


def _holds_all(phrase: str, vocabulary: Vocabulary) -> bool:
    """Every content word of a thing is one a column, a table or an approved question holds."""
    nouns = [w for w in words(phrase) if w not in GENERIC and len(w) > 2]
    return bool(nouns) and all(vocabulary.holds(w) for w in nouns)


_WHO_FIRST = re.compile(r"^who (?!(?:is|was|are|were|will|would|can|could|should)\b)")


def _who_or_item(question: str, vocabulary: Vocabulary) -> Grounding | None:
    """The readings that come first: who did something ("who approved …"), and an item's property the
    catalog holds ("the label of lab item N"; never a decline)."""
    text = _plain(question)
    if _WHO_FIRST.match(text):
        event = ground_event(question, vocabulary)
        if event is not None:
            return event
    item = _ITEM_PROPERTY.search(text)
    asked = (item.group("attr") or item.group("attr2")) if item else ""
    content = [w for w in words(asked) if w not in GENERIC and len(w) > 2]
    return Grounding(asked, ()) if content and all(w in vocabulary for w in content) else None


def ground(question: str, vocabulary: Vocabulary) -> Grounding | None:
    """None when neither an attribute nor an event is read; else the attribute with the words of
    it the catalog lacks. A name is missing when it is asked of something no text says has one
    ("the name of the family doctor": the data holds de-identified provider ids). A question that
    opens "who <did>" asks for the one who did it ("who approved the urgent admission of patient N"),
    never for the thing it did it to."""
    first = _who_or_item(question, vocabulary)
    if first is not None:
        return first
    attribute, thing = _asked(question, vocabulary)
    content = [w for w in words(attribute) if w not in GENERIC and len(w) > 2]
    if not content:
        return ground_event(question, vocabulary)
    missing = tuple(w for w in content if w not in vocabulary) or vocabulary.unnamed_values(content)
    if missing and thing:
        attribute = f"{attribute} of the {thing}"
    if not missing:
        missing = _said_only_in_passing(question, attribute, content, vocabulary)
    m = _NAME_OF.match(attribute)
    if m and not missing:
        things = {stem(w) for w in words(m.group("x") or m.group("y")) if len(w) > 2}
        if things and not things & vocabulary.named:
            missing = ("name",)
    prop, about = _of_a_thing(_plain(question), vocabulary) if missing and not thing else ("", "")
    return Grounding(
        attribute, missing, of=_owned(question, attribute) if missing else "", thing=thing,
        about=about if prop == attribute else "",
    )  # fmt: skip


def apart(attribute: str, vocabulary: Vocabulary) -> tuple[str, ...]:
    """The words of a noun compound ("room temperature", "tubing length") that no one text holds
    together with its head (the last word), when the head is held: the compound is then held only
    word by word, not as a phrase. Why: each word was held by some text ("emergency room" in an
    approved question, "tubing change" in a table's synonyms), so a room's temperature or a tube's
    length read as grounded as "the marital status". Not a decline by itself (the demo catalog says
    "body temperature" nowhere either); `confidently_grounded` needs the phrase held. Only the
    compound before a preposition ("the tubing length of the iv": the length of the tubing)."""
    compound = re.split(r" (?:of|for|in|on|at|from|by|with|during|after|before) ", attribute, maxsplit=1)[0]
    content = [w for w in words(compound) if w not in GENERIC and len(w) > 2]
    if len(content) < 2 or not vocabulary.holds(content[-1]):
        return ()
    return tuple(w for w in content[:-1] if not vocabulary.together(w, content[-1]))


def confidently_grounded(g: Grounding | None, catalog: Vocabulary) -> bool:
    """Whether the attribute asked for is held in so many words by the catalog itself (`catalog`: the
    columns' names, docs and example values, the tables' names and synonyms; not linked values, whose
    diagnosis titles hold nearly any word, nor approved questions):
    grounded, every content word held by a text that records things (not only said in passing, "room"
    in "EMERGENCY ROOM"), and a compound's words by one text together (`apart`). Never an event, a
    property of a thing given or an attribute of someone else (their words are held for the patient or
    the thing, not for what is asked). What makes the learned model's veto need more evidence
    (model.GROUND_MARGIN): the model knows the library's kinds, and blocked answerable questions about
    attributes the library never asks for (marital situation, injection sites) though the catalog
    holds them."""
    if g is None or not g.grounded or g.event or g.thing or g.of:
        return False
    content = [w for w in words(g.attribute) if w not in GENERIC and len(w) > 2]
    return bool(content) and all(catalog.holds(w) for w in content) and not apart(g.attribute, catalog)


def _said_only_in_passing(
    question: str, attribute: str, content: list[str], vocabulary: Vocabulary
) -> tuple[str, ...]:
    """One noun asked for ("the windows", "the hospital room") said only in passing is not held; in a
    longer phrase ("drg mortality score") the other words may name the column. A state said by a
    category's value ("was patient N female": "F = female") is recorded as that value."""
    nouns = [w for w in content if w not in LIGHT_VERBS and not re.search(r"(?:ed|ing)$", w)]
    if len(nouns) != 1 or vocabulary.holds(nouns[0]):
        return ()
    state = _STATE.search(" ".join(str(question or "").lower().replace("’", "'").split()))
    return () if state and state.group("attr") == attribute else (nouns[0],)


_OWNED = re.compile(
    rf"\b(?:the |a |an )?(?P<of>[a-z-]+(?: [a-z-]+){{0,2}}?) of {_PATIENT}'s (?P<owner>[a-z-]+(?: [a-z-]+)?)\b"
)


def _owned(question: str, owner: str) -> str:
    """The attribute asked of someone or something the patient has ("the marital status of patient
    N's daughter" → "marital status"), for a decline naming the column that holds it for the
    patient alone; "" when the question is not of that shape."""
    text = " ".join(str(question or "").lower().replace("’", "'").split())
    for m in _OWNED.finditer(text):
        if owner.startswith(m.group("owner")):
            of = re.sub(r"^(?:(?:what|which|who|is|was|are|were|the|a|an|how) )+", "", m.group("of"))
            return "" if of in GENERIC else of
    return ""


def attribute_key(question: str) -> frozenset[str]:
    """The content stems of the attribute a question asks for (empty when none is read): two
    questions asking for one attribute in other words share it ("how much does X cost", "the
    price of Y" → {cost})."""
    attribute, thing = _asked(question)  # "the dose of the opioid given to …": of that thing only
    return frozenset(stem(w) for w in words(f"{attribute} {thing}") if w not in GENERIC and len(w) > 2)


def column_words(name: str, meaning: str, values: str) -> tuple[frozenset[str], tuple[frozenset[str], ...]]:
    """What a column says it records, for `column_holding`: the stems of its name and doc, and
    each example value's own words ("BMI (kg/m2)" → {bmi}; "EMERGENCY ROOM" stays one phrase, so
    it does not say the column records rooms)."""
    phrases = tuple(
        frozenset(stem(w) for w in words(re.sub(r"\([^)]*\)", " ", v)))
        for v in re.split(r"[,;]", values or "")
    )
    return frozenset(stems_of(f"{name} {name_words(name)} {meaning}")), tuple(p for p in phrases if p)


def column_holding(
    grounded: Grounding | None, columns: dict[str, tuple[frozenset[str], tuple[frozenset[str], ...]]]
) -> str:
    """The column whose name or doc holds every content word of the asked-for attribute, or one
    of whose values is that attribute ("race" → admissions.race, "bmi" → omr.result_name); "" when
    none: the catalog then does not say in so many words that it records it."""
    if grounded is None or not grounded.grounded or grounded.thing:
        # A property of a thing ("the dosage of an opioid") is held only if the thing is: the
        # learned model decides.
        return ""
    wanted = {stem(w) for w in words(grounded.attribute) if w not in GENERIC and len(w) > 1}
    if not wanted:
        return ""
    # A value tells what a column holds only for a column that names things ("BMI" in
    # omr.result_name), not for a category ("HOME" in discharge_location is not the home), and
    # a value has no time or author: "when was patient N married" is not held by "MARRIED".
    by_value = grounded.event not in ("when", "who")
    asks_time = grounded.event == "when" or any(stem(w) in _TIME_STEMS for w in words(grounded.attribute))
    for name, (own, values) in columns.items():
        if _TIME_COLUMN.search(name) and not asks_time:
            # A time column records when, never who or how much: its doc's other words ("time the
            # pharmacist verified the order") do not make it hold "which pharmacist verified …".
            continue
        if wanted <= own or (by_value and _NAMES_THINGS.search(name) and wanted in values):
            return name
    return ""


_NAMES_THINGS = re.compile(r"(?:label|_name|name|title|test|description|category)$")
# A column that records a moment (pharmacy.verifiedtime, admissions.admittime, chartdate, patients.dod)
# and the words that ask for one.
_TIME_COLUMN = re.compile(r"(?:time|date|_dt|\.dod)$")
_TIME_STEMS = frozenset(
    stem(w)
    for w in "time times date dates day days hour hours minute minutes year years month months when moment "
    "datetime timestamp week weeks".split()
)


def names_things(column: str) -> bool:
    """A column whose values are names of things ("BMI" in omr.result_name), not categories."""
    return bool(_NAMES_THINGS.search(column))


# -- events: what happened to a patient, and who did it ---------------------------------------
#
# "When did patient N get married", "on what day was patient N born", "who visited patient N":
# no noun names the attribute; the verb names an event. The database records an event only when
# its docs say so ("Time of hospital admission", "provider who ordered the test"), so the verb
# must be a word of the docs (not of a value: "MARRIED" is a marital status, recorded with no
# date) or one approved questions ask about; "who" asks for a person, held only where a column
# recording a person says it records who did that.

# Verbs that say something happened without saying what (the thing is their object), or that
# every stay has (arriving, leaving): never the event's content.
LIGHT_VERBS = frozenset(
    """be been being is was were are have has had having get gets got gotten getting go goes went gone
    going come came coming take takes took taken taking undergo undergoes underwent undergone receive
    receives received receiving do does did done make made stay stayed spend spent need needed show
    showed use used start started begin began end ended leave left enter entered arrive arrived return
    returned move moved visit visited see seen saw experience experiences experienced suffer suffers
    suffered encounter encountered develop develops developed present presented require required obtain
    obtained ever last first still also already previously recently once again currently""".split()
)
_PARTICIPLE = (r"(?:[a-z-]{2,}(?:ed|en)|born|wed|hit|hurt|cut|shot|bred|fed|sold|paid|told|held|kept|brought|bought|"
               r"caught|taught|sent|spent|lent|built|felt|drawn|drove|flown|grown|known|shown|thrown|worn|torn|sworn|"
               r"written|ridden|hidden|stolen|chosen|spoken|woken)")  # fmt: skip
_SUBJECT = rf"(?:{_PATIENT}(?:'s [a-z-]+(?: [a-z-]+){{0,2}}?)?|(?:the |a |an )?[a-z-]+(?: [a-z-]+){{0,2}}? of {_PATIENT})"
_ADVERB = r"(?:(?:ever|first|last|recently|previously|already|once|still|finally|actually) )?"
_BECOME = r"(?:(?:get|got|become|became|been|being) )?"
# "was/were X <participle>" and "did/does X <verb>": the participle must look like one, so "was
# patient N alive" or "is patient N in the icu" read no event.
_HAPPENED = (rf"(?:(?:was|were|is|has|had) {_SUBJECT} {_ADVERB}{_BECOME}(?P<verb>{_PARTICIPLE})|(?:did|does|do) "
             rf"{_SUBJECT} {_ADVERB}{_BECOME}(?P<base>[a-z-]+))\b")  # fmt: skip
EVENT_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (asks, re.compile(p))
    for asks, p in (
        ("who", rf"\bwho (?:(?:has|had|have) )?(?!(?:is|was|are|were|did|does|do|will|would|can|could|should)\b)"
                rf"(?P<verb>[a-z-]+) (?:the |a |an |his |her |their )?(?:[a-z-]+ ){{0,3}}?{_PATIENT}\b"),
        # "who signed off the last lab test result of patient N", "who paid for the vancomycin prescribed to patient N"
        ("who", rf"^who (?:(?:has|had|have) )?(?!(?:is|was|are|were|did|does|do|will|would|can|could|should)\b)"
                rf"(?P<verb>[a-z-]+)(?: (?:off|up|out|over|for|on|to|with|in))? (?:[a-z0-9'-]+ ){{0,6}}?{_PATIENT}\b"),
        ("when", rf"\b(?:when|(?:in|on|at|during) (?:what|which) (?:year|month|day|date|time)|what (?:year|month|day|"
                 rf"date|time)) {_HAPPENED}"),
        ("whether", rf"^{_HAPPENED}"),
        ("whether", rf"\b(?:where|how) (?:does|did|do) {_PATIENT} {_ADVERB}(?P<base>[a-z-]+)\b"),
    )
)  # fmt: skip
# What "who" asks of is never light in itself ("who visited", "who saw"), only these are.
_WHO_LIGHT = frozenset("be been is was were are have has had do does did get got".split())


def asked_event(question: str) -> tuple[str, str]:
    """(what is asked: "who" / "when" / "whether", the verb) of a question about an event that
    happened to a patient, or ("", "") when none is read or its verb is a light one."""
    text = _plain(question)
    for asks, pattern in EVENT_PATTERNS:
        m = pattern.search(text)
        if not m:
            continue
        word = m.groupdict().get("verb") or m.groupdict().get("base") or ""
        light = _WHO_LIGHT if asks == "who" else LIGHT_VERBS
        if word and word not in light and word not in GENERIC and len(word) > 2:
            return asks, word
        return "", ""
    return "", ""


def same_word(a: str, b: str) -> bool:
    """ "admit"/"admitted", "prescribed"/"prescription", "died"/"die": one word in two forms (a
    shared start of 6 letters, or one a short extension of the other); "serve"/"service",
    "married"/"marital" and "married"/"mar" (medication administration record) are not."""
    if a == b:
        return True
    short, long = sorted((a, b), key=len)
    if long.startswith(short) and (
        (len(short) >= 4 and len(long) - len(short) <= 3) or len(long) - len(short) == 1
    ):
        return True
    n = 0
    for x, y in zip(a, b):  # noqa: B905 - the shorter word bounds the common start
        if x != y:
            break
        n += 1
    return n >= 6 or (n >= 5 and n >= len(short) - 2)


def _said(word: str, said: frozenset[str]) -> bool:
    w = stem(word)
    return any(same_word(word, s) or same_word(w, s) for s in said if s[:2] == word[:2])


def event_key(question: str) -> str:
    """What an approved question asks of which event ("when was patient N prescribed …" →
    "when:prescribed"), "" when none: a later question asking the same of that event is grounded
    by it. "Was patient N married" (a marital status) does not ground when it happened."""
    asks, verb = asked_event(question)
    return f"{asks}:{verb}" if verb else ""


def _approved(asks: str, verb: str, events: frozenset[str]) -> bool:
    """Approved questions ask this of this event (knowing when it happened tells whether it did)."""
    said = {
        e.partition(":")[2]
        for e in events
        if e.partition(":")[0] in ({asks, "when"} if asks == "whether" else {asks})
    }
    return _said(verb, frozenset(said))


def ground_event(question: str, vocabulary: Vocabulary) -> Grounding | None:
    """The event a question asks about, missing when no doc and no approved question says it is
    recorded; None when no event is read or the vocabulary carries no docs (nothing to check)."""
    asks, verb = asked_event(question)
    if not verb or not vocabulary.schema:
        return None
    said = {
        "who": vocabulary.people,
        "when": vocabulary.schema,
        "whether": vocabulary.schema | vocabulary.categories,
    }[asks]
    held = (
        _approved(asks, verb, vocabulary.events)
        or _said(verb, said)
        or _any_held(question, asks, verb, vocabulary)
    )
    whose = _whose_event(question, verb, vocabulary)
    return Grounding(verb, () if held and not whose else (verb,), asks, _phrase(question, verb), whose=whose)


def _any_held(question: str, asks: str, verb: str, vocabulary: Vocabulary) -> bool:
    """ "Has patient N acquired any medication", "was patient N involved in any medical procedure":
    whether the patient had any of a thing a table holds, the verb a paraphrase of having it (the
    grounding hung on approved questions using that verb). Only "any" and only a thing whose every
    content word a table or column holds: "did patient N serve in any army" stays an event."""
    if asks != "whether":
        return False
    m = re.search(
        rf"\b{re.escape(verb)} (?:(?:in|with|to|for|on|from) )?any (?P<x>[a-z-]+(?: [a-z-]+)?)\b",
        _plain(question),
    )
    return bool(m) and any(_holds_all(x, vocabulary) for x in (m.group("x"), m.group("x").split()[0]))


# "did patient N's father die", "when did the husband of patient N retire": the event is theirs.
_OTHER_SUBJECT = re.compile(
    rf"\b{_PATIENT}'s (?P<a>[a-z-]+(?: [a-z-]+)??) {_ADVERB}{_BECOME}(?P<v1>[a-z-]+)\b"
    rf"|\b(?:did|does|do|was|were|is|has|had) (?:the |a |an |his |her |their )(?P<b>[a-z-]+) of {_PATIENT} "
    rf"{_ADVERB}{_BECOME}(?P<v2>[a-z-]+)\b"
)


def _whose_event(question: str, verb: str, vocabulary: Vocabulary) -> str:
    """Who an event happened to when it is someone the patient has ("father"), not the patient or
    what the catalog records of the patient ("patient N's potassium measured", "patient N's last
    stay ended": the words are the catalog's); "" otherwise."""
    text = " ".join(str(question or "").lower().replace("’", "'").split())
    for m in _OTHER_SUBJECT.finditer(text):
        owner, said = (m.group("a"), m.group("v1")) if m.group("a") else (m.group("b"), m.group("v2"))
        if said != verb:
            continue
        nouns = [w for w in words(owner) if w not in GENERIC and len(w) > 2]
        if nouns and not any(vocabulary.holds(w) for w in nouns):
            return owner
    return ""


def _phrase(question: str, verb: str) -> str:
    """The question's own words from the verb on, for the decline ("serve in the military")."""
    text = " ".join(str(question or "").lower().replace("’", "'").split())
    m = re.search(rf"\b{re.escape(verb)}\b((?: [a-z0-9'-]+){{0,6}})", text)
    return (verb + (m.group(1) if m else "")).strip()


def event_asked(g: Grounding) -> str:
    """What an event question asks, in a decline's words: 'who visited patient N in the hospital',
    '"born" or its date', '"serve in the military" (whether or when it happened)'."""
    phrase = g.phrase or g.attribute
    if g.event == "who":
        return f"who {phrase}"
    return f'"{phrase}" or its date' if g.event == "when" else f'"{phrase}" (whether or when it happened)'


def no_column_reason(attribute: str) -> str:
    """The decline of an attribute no column records and none is near: "No column in this database
    records the wedding date, so askdb cannot answer this." """
    the = "" if re.match(r"(?:the|a|an|any|his|her|their) ", attribute) else "the "
    return f"No column in this database records {the}{attribute}, so askdb cannot answer this."


def event_reason(g: Grounding) -> str:
    """The decline of an event no doc records, when no column is near enough to name."""
    return f"No table or column in this database records {event_asked(g)}, so askdb cannot answer this."
