"""Plain-word rules for the kinds of question no clinical database answers, with their reasons.

The learned model (`model`) decides from what a library taught it; these rules name *why*, and
catch the kinds a small library has never shown it: questions about the future, requests for
advice or opinions, attempts to identify or contact a person, questions that are not about the
patient data at all, and questions about information no column of this catalog holds.

Each rule is a regular expression written from the kinds of question reviewers flag (the
EHRSQL train split's unanswerable questions, and the issue's examples) or from what a clinical
research database commonly lacks (allergy lists, smoking habits, diets, details about staff),
never from held-out data; a rule that declines any of EHRSQL train's answerable questions is
narrowed until it declines none. A rule is "decisive" when it alone declines a question (its wording is unambiguous, e.g.
"should be prescribed", "phone number"); every rule is also a feature the learned combiner
weighs, so a softer hint ("next", "family") only declines together with the model.

Concepts ("blood type", "patient addresses") are checked against the catalog's column docs: a
concept some column documents (MIMIC's admissions.insurance, language, marital_status, race) is
not absent, so questions about it pass; one no column mentions is "not in the schema".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.prompts import CATEGORY_LABELS  # noqa: F401  (the rules' name for them)

KINDS = ("not_in_schema", "future", "advice", "private", "out_of_scope")
PRIORITY = ("private", "out_of_scope", "not_in_schema", "advice", "future")

# The gate category each kind is recorded under (the LLM gate's categories, plus two of ours).
CATEGORY = {
    "not_in_schema": "not_in_schema",
    "future": "future_data",
    "advice": "advice",
    "private": "private_data",
    "out_of_scope": "out_of_scope",
}

KIND_LABELS = {
    "not_in_schema": "not in the database",
    "future": "about the future",
    "advice": "advice or opinion",
    "private": "identifies or contacts a person",
    "out_of_scope": "outside this database's scope",
}

# Said when the kind comes from the flagged question this one resembles, not from its own words.
KIND_REASONS = {
    "not_in_schema": "it asks for information no table or column in this database holds",
    "future": "it asks about the future, and the database only holds what happened up to its as-of date",
    "advice": "it asks for advice or an opinion, and the database records the care given, not what is best",
    "private": "it would identify or contact a person, and the data is de-identified",
    "out_of_scope": "it is not about the patient records this database holds",
}

# What a researcher reads for each category, whoever declined (this gate or the LLM's check), is
# CATEGORY_LABELS, kept with the gate's categories in core/prompts.py (below the models).


@dataclass(frozen=True)
class Finding:
    """One rule that fired: its kind, the words that triggered it, and the sentence to show."""

    kind: str
    rule: str
    evidence: str
    reason: str
    decisive: bool

    def to_json(self) -> dict:
        return {"kind": self.kind, "rule": self.rule, "evidence": self.evidence, "reason": self.reason,
                "decisive": self.decisive}  # fmt: skip


@dataclass(frozen=True)
class Rule:
    name: str
    kind: str
    pattern: str
    reason: str  # may use {evidence}
    decisive: bool = True

    def search(self, text: str) -> re.Match | None:
        return re.search(self.pattern, text, re.IGNORECASE)


@dataclass(frozen=True)
class Concept:
    """Information researchers ask for that a clinical catalog may or may not document."""

    name: str
    pattern: str  # how a question asks for it
    covered_by: str  # words that, in a column's name or doc, mean the catalog holds it
    what: str  # "patient addresses": fills "The database has no {what}"
    decisive: bool = True


_PATIENT = r"(?:patient|subject|person|he|she|they|him|her|them)"

RULES: tuple[Rule, ...] = (
    # -- the future, predictions --------------------------------------------------------------
    Rule("predict", "future",
         r"\b(?:predict\w*|forecast\w*|prognos\w*|projected|extrapolat\w*)\b",
         "This asks for a prediction ({evidence}); the database records what has happened up to its "
         "as-of date, so askdb cannot answer it."),
    Rule("will_happen", "future",
         r"\b(?:will|going to|gonna|is (?:he|she|they) likely to|is likely to|expected to)\b(?![^?]*\bcost\b)"
         r"[^?.]{0,60}\b(?:be|get|have|need|die|survive|visit|return|come|receive|develop|stay|take|go|"
         r"admitted|discharged|given|provided|done|readmitted|recover)\b",
         "This asks about the future ({evidence}); the database only holds what happened up to its "
         "as-of date, so askdb cannot answer it."),
    Rule("next_time", "future",
         r"\b(?:next (?:year|month|week|visit|appointment|admission|time|dose|stay)|tomorrow|in the (?:coming|next) "
         r"\w+|upcoming|from now on|in the future|be able to visit|scheduled (?:to|for)|earliest (?:scheduled|next)|"
         r"next visit)\b",
         "This asks about the future ({evidence}); the database only holds what happened up to its "
         "as-of date, so askdb cannot answer it."),
    # Generic future wording: "will"/"shall" about anything but a price ("how much will it cost" asks
    # for a recorded charge) and not a polite request ("will you list…").
    Rule("will_generic", "future",
         r"\b(?:will|shall|won'?t)\b(?!\s+you\b)(?![^?]*\b(?:cost|charge|price|pay|spend|bill)\w*)",
         "This asks about the future ({evidence}); the database only holds what happened up to its "
         "as-of date, so askdb cannot answer it."),
    Rule("likelihood", "future",
         r"\b(?:how likely|likelihood|chances? (?:of|that)|probability (?:of|that)|odds (?:of|that)|risk of "
         r"(?:dying|death|readmission|relapse|recurrence|developing|getting)|in the next \d+|within the next|"
         r"from (?:today|now) on|later (?:this|today)|how long until|anticipated|estimated (?:date|time)|when can "
         r"(?:he|she|they|patient \d+|the patient) (?:go|be|leave)|next (?:hospital |icu )?(?:admission|visit|"
         r"appointment|dose|surgery|operation|procedure|check-?up|exam\w*|treatment|prescription|follow-?up)s?)\b",
         "This asks about what may happen ({evidence}); the database only holds what happened up to its "
         "as-of date, so askdb cannot answer it."),
    Rule("may_be_admitted", "future",
         r"\b(?:may|can|could|might) be (?:admitted|hospitali[sz]ed|transferred|discharged)\b",
         "This asks what could happen next ({evidence}); the database only records what did happen, so "
         "askdb cannot answer it."),
    # -- advice and opinion -------------------------------------------------------------------
    Rule("should", "advice",
         r"\b(?:should|ought to|must)\b(?:[^?.]{0,40})\b(?:be |i |we |you |he |she |they )?"
         r"(?:prescrib\w*|give|given|administer\w*|taken|take|do|done|use|used|avoid\w*|follow\w*|recommend\w*|"
         r"treat\w*|prepare\w*|visit\w*|start\w*|stop\w*)\b",
         "This asks for advice ({evidence}); the database records the care patients received, not what "
         "should be done, so askdb cannot answer it."),
    Rule("should_not", "advice",
         r"\b(?:should ?n[o']t|should not|must not|not to be (?:given|taken|administered)|isn'?t to be|"
         r"to avoid|contraindicat\w*)\b",
         "This asks for advice ({evidence}); the database records the care patients received, not what "
         "should be done, so askdb cannot answer it."),
    Rule("recommend", "advice",
         r"\b(?:recommend\w*|advis\w*|best (?:way|treatment|drug|medication|option|choice)|what (?:to|should i) "
         r"do|precaution\w*|guideline\w*|protocol\w*|proc+edural|is it safe|in your opinion|checklist|"
         r"what to prepare|prepare (?:before|for)|preparation for|suggestions? for|tips? (?:on|for)|things to do|"
         r"how (?:do you|to) proceed|steps? (?:after|before|to take))\b",
         "This asks for advice or an opinion ({evidence}); the database records the care patients "
         "received, not what is best, so askdb cannot answer it."),
    Rule("is_it_ok", "advice",
         r"\b(?:is it (?:okay|ok|safe|advisable|necessary|wise|a good idea|better)|can (?:i|he|she|they|we) "
         r"(?:safely )?(?:take|eat|drink|use|stop|start|combine|mix|exercise)|what (?:do|would) you (?:suggest|think|"
         r"recommend|advise)|do you think|your opinion|which is better|is \w+ better than|how (?:do|should|can|could) "
         r"(?:i|we|you) (?:best )?(?:treat|manage|prevent|avoid|reduce|lower|improve|care for|cure|help)|how to "
         r"(?:treat|prevent|manage|cure|reduce|lower|avoid|care for|deal with)|(?:a |the )?cure for|worth it|"
         r"good idea|bad idea)\b",
         "This asks for advice or an opinion ({evidence}); the database records the care patients "
         "received, not what is best, so askdb cannot answer it."),
    # -- identifying or contacting a person ---------------------------------------------------
    Rule("identify", "private",
         r"\b(?:re-?identif\w*|identify (?:the |this |that |a )?(?:patient|person|subject|him|her)|de-?anonymi\w*|"
         r"real (?:name|identity)|who (?:exactly )?is (?:patient|subject) \d+|(?:full |first |last |sur)name of "
         r"(?:the )?(?:patient|subject)|(?:patient|subject) \d+'?s? (?:full |first |last )?name\b|"
         r"social security|ssn|passport|driver'?s licen[cs]e|medical record number|mrn)\b",
         "This would identify a person ({evidence}); the data is de-identified and askdb will not help "
         "re-identify anyone."),
    Rule("contact", "private",
         r"\b(?:contact|reach|call|e-?mail|(?:(?<=^)|(?<=\bto )|(?<=\bcan )|(?<=\bi )|(?<=\bwe )|(?<=\byou )|"
         r"(?<=please )|(?<=\band )|(?<=\bor ))text(?! values?\b)|locate|track down|get in touch with)\b[^?.]{0,30}\b"
         r"(?:patient|subject|family|relatives?|next of kin|him|her|them)\b(?![^?.]*\b(?:hospital|icu|ward|"
         r"emergency|careunit)\b)",
         "This asks how to contact or find a person ({evidence}); the data is de-identified and askdb "
         "will not help reach anyone."),
    # -- not about the patient data ------------------------------------------------------------
    Rule("non_medical", "out_of_scope",
         r"\b(?:weather|forecast for|stock price|bitcoin|football|soccer|recipe|joke|poem|song|movie|"
         r"capital of|translate|python code|write (?:me )?(?:a|an|some) (?:code|program|story|essay|email)|"
         r"who won|lottery|horoscope|president|election|capital city|movie|music|sports?|stock market|crypto\w*|"
         r"tourist|hotel|restaurant|sunrise|sunset)\b",
         "This is not a question about the patient data in this database ({evidence}), so askdb cannot "
         "answer it."),
    Rule("hospital_operations", "out_of_scope",
         r"\b(?:how many (?:operating|operation) rooms|(?:operating|operation) rooms? (?:are |is )?(?:available|now|"
         r"exist\w*|free|open|there)|single rooms?|rooms? (?:are )?available|available rooms?|bed availability|"
         r"quarantine room|disinfect\w*|steriliz\w*|outpatient schedule|(?:rounds|office hours|shifts?) "
         r"(?:of|for|with|today)|dr\. ?\w+'?s? (?:rounds|schedule|outpatient|office)|rounds and procedures|"
         r"reimburs\w*|insurance (?:claim|coverage|policy)|parking|cafeteria|visiting hours|ward id|"
         r"id of (?:the )?ward|ward (?:identification|number))\b",
         "This is about running the hospital ({evidence}), not about the patient records this database "
         "holds, so askdb cannot answer it."),
    Rule("staffing", "out_of_scope",
         r"\b(?:how many (?:doctors|nurses|physicians|staff|employees|beds)|on (?:duty|call)|(?:doctor|nurse|"
         r"physician|surgeon|staff)s?'?s? (?:schedule|shifts?|salary|rota)|beds? (?:are |is )?(?:available|free|empty|"
         r"vacant)|vacan(?:t|cy|cies)|waiting (?:time|list)|opening hours|gift shop|canteen|how many [a-z-]+ (?:work|works|"
         r"worked|working|are employed|were employed|volunteer\w*) (?:at|in|for)|(?:nurse|staff|doctor|physician)s?[- ]to[- ]"
         r"(?:patient|bed)s? ratios?|staffing (?:levels?|ratios?))\b",
         "This is about running the hospital ({evidence}), not about the patient records this database "
         "holds, so askdb cannot answer it."),
    # The database as a thing, not what it records: who keeps it, when it was updated, its version.
    Rule("about_the_database", "out_of_scope",
         r"\b(?:when|who|how|where) (?:was|is|were|did|does) (?:this|the) (?:database|dataset|data set)\b(?! (?:record|hold|"
         r"show|say|contain|keep|list)\w*)|\b(?:maintains?|maintained|updates?|updated|created|built|owns|runs|hosts|curates?)"
         r" (?:this|the) (?:database|dataset|data set)\b|\b(?:this|the) (?:database|dataset|data set)'?s? (?:last )?"
         r"(?:update\w*|version|maintainers?|owners?|administrators?|size in|creators?)\b|\b(?:version|owner|maintainer|"
         r"creator|administrator|last update) of (?:this|the) (?:database|dataset|data set)\b",
         "This asks about the database itself ({evidence}), not about the patient records it holds, so askdb "
         "cannot answer it."),
    Rule("general_knowledge", "out_of_scope",
         r"\b(?:what (?:is|are) (?:the )?(?:definition|meaning|mechanism|half-life)s? of|what does (?:the )?(?:term |"
         r"word |abbreviation )?\S+ (?:mean|stand for)|explain (?:what|how|why)|mechanism of action|what causes|is "
         r"\S+ contagious|how does \S+ work)\b",
         "This asks for general medical knowledge ({evidence}), not for what the patient records show, so "
         "askdb cannot answer it."),
    Rule("other_department", "out_of_scope",
         r"\b(?:(?:an)?other|different) (?:medical )?(?:department|hospital|clinic|institution)s?\b",
         "This asks about care given elsewhere ({evidence}); the database only holds this hospital's "
         "records, so askdb cannot answer it."),
    Rule("external_knowledge", "out_of_scope",
         r"\bicd-?11\b|\bicd-?10-?(?:pcs|cm)? (?:code )?(?:for|of) icd-?11\b",
         "This needs a code system the database does not hold ({evidence}), so askdb cannot answer it."),
    # "The value of a test patient N had", "how much of a medication did patient N receive": the answer
    # depends on which test or drug, and the question leaves it open ("a", "some", "any"). Not whether
    # any was had ("did patient N have any lab test") or which one it was ("the name of the drug").
    Rule("unnamed_test_or_drug", "not_in_schema",
         r"\b(?:values?|results?|readings?|outcomes?|doses?|dosages?|amounts?|levels?|units?|(?:how much|quantity) of)"
         r" (?:(?:of|from|did|does|do|for|in|on) )?(?:a|an|some|any|one) (?:lab |laboratory |blood |medical )?"
         r"(?:tests?|drugs?|medications?|medicines?|measurements?|labs?|exams?)\b(?! (?:named|called|label+ed|titled)\b)",
         "This asks for {evidence} without naming which one; the database records each test and drug by its "
         "own name, and the answer depends on which, so askdb cannot answer it. Name the test or drug."),
    # "A medication that should be taken regularly": which drugs count as regular is a class no prescription
    # records (EHRSQL train labels every such question unanswerable); not a daily aggregate ("daily maximum
    # weight") nor a drug's own frequency ("how often was furosemide given").
    Rule("regular_medication", "not_in_schema",
         r"\b(?:medications?|medicines?|drugs?|meds)\b,? (?:that|which) (?:(?:should|must|needs? to|has to|have to|is to|"
         r"are to|is|are|was|were) )?(?:be )?(?:(?:taken|given|used) )?(?:regularly|routinely|daily|every day|all the "
         r"time|chronically)\b(?: (?:taken|given|used))?|\bsomething to take all the time\b|\b(?:regular|routine|daily) "
         r"medications?\b",
         "This asks for {evidence}; the database records each prescription with its own dates, not which drugs "
         "count as taken regularly, so askdb cannot answer it. Name the drug."),
    # "Any additional stool test": additional to tests the question never names, so nothing says which
    # count. Not "any other": ICD titles begin with "Other" ("any other endoscopy of small intestine");
    # not a drug's own name ("extra strength"); not when the question names the reference ("besides").
    Rule("unstated_reference", "not_in_schema",
         r"\b(?:any|some) (?:additional|further|extra)\b(?! strength)(?![^?]*\b(?:than|besides|apart from|except|aside from|"
         r"beyond|on top of)\b)",
         "This asks for {evidence} ones without naming what they are additional to; the database records each "
         "test, drug or procedure given, not which ones count as additional, so askdb cannot answer it. Ask for "
         "the test, drug or procedure itself (whether, when or how often it was given)."),
)  # fmt: skip

CONCEPTS: tuple[Concept, ...] = (
    Concept("address", r"\b(?:home |street |postal |mailing )?address(?:es)?\b|\bwhere (?:does|did) "
            rf"{_PATIENT} (?:\d+ )?live\b|\bzip ?code\b|\bpostcode\b",
            r"\baddress|\bzip\b|postcode|postal", "patient addresses"),
    Concept("phone", r"\b(?:phone|telephone|mobile|cell) (?:number|no\.?)s?\b|\bphone\b|\bfax\b",
            r"\bphone|telephone", "phone numbers"),
    Concept("email", r"\be-?mail(?: address)?\b", r"e-?mail", "e-mail addresses"),
    Concept("blood_type", r"\bblood ?(?:type|group)s?\b|\b(?:type|kind|sort)s? of blood\b|\brh factor\b|"
            r"\babo\b", r"blood (?:type|group)|\babo\b", "blood types"),
    Concept("family_history", r"\bfamily history\b(?! of (?:malignant|other|diabetes|ischemic)\b)|"
            r"\b(?:his|her|hisher|their)(?: ?/ ?(?:his|her))? family\b|'s family\b|"
            r"\bin (?:the|his|her|their) family\b|\bhereditary\b|"
            r"\binherited (?:disease|condition|disorder)s?\b|\bfamily of a person\b", r"family history",
            "family histories", decisive=False),
    Concept("travel", r"\btravel\w*\b|\babroad\b|\boverseas\b|\banother country\b|\bforeign countr",
            r"\btravel", "travel histories"),
    Concept("genetics", r"\bgenetic\w*\b|\bgenom\w*\b|\bchromosom\w*\b|\bdna (?:test|sequenc)\w*|\bgene "
            r"(?:test|panel|and)\w*", r"genetic|genom|genotyp", "genetic test results"),
    Concept("covid", r"\bcovid\b|\bcovid-?19\b|\bsars-?cov-?2\b|\bcoronavirus\b", r"covid|sars-?cov",
            "COVID-19 test results"),
    Concept("side_effects", r"\bside[- ]effects?\b|\badverse (?:reaction|event)s?\b|\bill effects?\b|\bcomplications? (?:when|while|"
            r"during) (?:undergoing|receiving|having)\b",
            r"side effect|adverse (?:reaction|event)", "records of side effects"),
    Concept("appointments", r"\bappointments?\b", r"appointment", "appointment schedules"),
    Concept("occupation", r"\boccupation\b|\bprofession\b|\bemployer\b|\bjob title\b|\bwhat (?:does|did) "
            rf"{_PATIENT} (?:\d+ )?do for a living\b", r"occupation|employ", "occupations"),
    Concept("income", r"\bincome\b|\bsalary\b|\bwages?\b|\bnet worth\b", r"\bincome|salary", "incomes"),
    Concept("religion", r"\breligio\w*\b|\bfaith\b", r"religio", "religions"),
    Concept("education", r"\beducation(?:al)? (?:level|attainment)\b|\bschooling\b|\bdegree (?:did|does)\b",
            r"education", "education levels"),
    Concept("birth_date", r"\b(?:date of birth|birth ?dates?|birthdays?|born on|day (?:he|she|they) (?:was|were) "
            r"born)\b", r"\bbirth|\bdob\b", "birth dates (ages are kept, birth dates are not)"),
    Concept("cause_of_death", r"\bcauses? of (?:death|dying)\b|\bwhy did (?:patient \d+|the patient|he|she|they) "
            r"die\b|\bwhat (?:killed|did (?:patient \d+|the patient|\w+) (?:die|pass away) (?:of|from))\b|\b(?:died|dying) "
            r"(?:of|from) what\b", r"cause of death", "causes of death"),
    Concept("staff_names", r"\b(?:names? of (?:the |his |her |their )?(?:doctor|physician|nurse|surgeon|attending|"
            r"caregiver)s?|(?:doctor|physician|nurse|surgeon)'s name|who (?:was|is|were|are) (?:the |his |her |"
            r"their )?(?:attending |treating |primary |responsible )?(?:doctor|physician|nurse|surgeon|caregiver)s?)\b",
            r"(?:provider|caregiver|physician|doctor|staff|nurse) names?\b", "names of doctors or nurses"),
    Concept("clinical_notes", r"\b(?:clinical|doctor'?s?|physician'?s?|nurs(?:e|ing)'?s?|progress|discharge|"
            r"radiology) (?:notes?|summary|summaries|reports?)\b|\bnotes? (?:written|taken) (?:by|about)\b",
            r"\bnotes?\b|report text|discharge summar", "clinical notes or reports"),
    Concept("room_numbers", r"\b(?:room|bed) (?:number|no\.?|id)s?\b|\bwhich (?:room|bed)\b",
            r"\broom\b|\bbed (?:number|id)", "room or bed numbers"),
    Concept("satisfaction", r"\b(?:satisf(?:ied|action)|feedback|complaints? (?:about|from|against)|ratings? of)\b",
            r"satisf|feedback", "records of patient satisfaction or feedback"),
    # What the patient said: their own words, ratings or reports ("how did patient N describe the pain",
    # "did patient N report feeling dizzy"), held only with notes or patient-reported answers; a charted
    # value ("the pain level charted for patient N") or a diagnosis ("chest pain") is recorded and passes.
    Concept("patient_words", rf"\b(?:did|does|do|would|could) (?:the )?{_PATIENT}(?: \d+)? (?:ever )?(?:say|tell|report|"
            r"describe|rate|complain|mention|state|express|admit)\b|\bhow (?:did|does|would) (?:the )?"
            rf"{_PATIENT}(?: \d+)? (?:describe|rate|say)\b|\b(?:in|with) (?:his|her|their|the patient's) own words\b|"
            r"\b(?:patient|subject) \d+ (?:said|told|reported|described|complained|stated|mentioned)\b",
            r"\bnotes?\b|report text|patient[- ]reported|chief ?complaint|survey|questionnaire",
            "records of what patients said or reported (no notes or patient-reported answers)"),
    Concept("nationality", r"\b(?:nationality|nationalities|citizenship|country of (?:birth|origin)|birthplace|"
            r"place of birth|immigration status)\b", r"nationalit|citizenship|birthplace|country",
            "nationalities or places of birth"),
    Concept("personal_life", r"\b(?:sexual orientation|political (?:views?|party|affiliation)|hobb(?:y|ies)|"
            r"pets?|favou?rite)\b", r"hobb|orientation|politic", "personal details of this kind"),
    Concept("photos", r"\b(?:photo(?:graph)?s?|pictures?|selfies?) of\b", r"photo|\bimage", "photographs"),
    Concept("imaging", r"\b(?:x-?ray|ct|mri|ultrasound|radiology|scan) (?:image|images|pixels?|films?)\b|"
            r"\bdicom\b", r"dicom|\bimage", "medical images"),
    # What an image showed ("did the chest ct show a nodule", "visible on the x-ray", "the ejection fraction
    # on the echocardiogram"): radiology findings, held only with radiology reports' text; a procedure
    # ("diagnostic ultrasound of heart") is recorded and passes.
    Concept("imaging_findings", r"\b(?:x-?rays?|ct|cat scan|mri|ultrasound|echocardiograms?|echo|sonograms?|scans?|"
            r"radiographs?|mammograms?|angiograms?|imaging)\b(?! (?:procedures?|orders?)\b)[^?.]{0,30}\b(?:show(?:s|ed|ing)?|"
            r"reveal\w*|demonstrat\w*|findings?|visible|detect\w*|impressions?)\b|\b(?:visible|seen|found|detected) (?:on|in) "
            r"(?:the |a |an |his |her |patient \d+'s )?(?:[a-z-]+ ){0,2}(?:x-?rays?|ct|mri|ultrasound|scans?|echo\w*|images?)\b"
            r"|\b(?:on|from|in) (?:the |a |an |his |her |patient \d+'s )?(?:last |first |latest |most recent )?"
            r"(?:echocardiogram|echo|mri|ct scan|x-?ray)\b",
            r"radiology\.text|radiology (?:reports?|notes?|findings?)|imaging (?:findings?|results?|reports?)",
            "imaging results (what a scan or an x-ray showed)"),
    # Care the hospital did not give or see: a drug taken at home, readings by paramedics, what happened
    # before the patient arrived. Not a discharge location ("discharged home").
    Concept("outside_care", r"\b(?:at (?:his |her |their )?home|home (?:doses?|medications?|meds|readings?|"
            r"measurements?|monitor\w*)|before (?:arriving|coming|getting|being brought) (?:to|at|in)|paramedics?|by (?:the )?"
            r"(?:ems|emts?|ambulance crew)|pre-?hospital|over[- ]the[- ]counter|outside (?:the|this) hospital|at a pharmacy|"
            r"fill(?:ed)? (?:the |his |her |their )?(?:discharge )?prescriptions?)\b",
            r"home medications?|medication reconciliation|medrecon|pre-?hospital|paramedic",
            "records of care outside the hospital (at home, before arrival, at a pharmacy)"),
    Concept("opioid_dose", r"\bdos(?:e|age) of (?:an |the )?(?:prescribed )?opi(?:oid|ate)|\bopi(?:oid|ate)s? "
            r"(?:dose|dosage)\b|\bprescribed opi(?:oid|ate)\b", r"opioid", "opioid classes of drugs",
            decisive=False),
    # Patient-phrased only: "diagnosed with allergic rhinitis" or "nicotine dependence, cigarettes"
    # names a recorded diagnosis and passes.
    Concept("allergies", rf"\b(?:is|was|are|were) (?:{_PATIENT}|patient \d+) allergic\b|\ballergies\b(?! (?:diagnos|"
            r"status))|\ballergy (?:list|history|records?|information|profile)\b|\ballergic to\b",
            r"allerg", "allergy lists"),
    Concept("habits", rf"\b(?:does|did|do) (?:{_PATIENT}|patient \d+) (?:smoke|drink|exercise)\b|\b(?:a|an|"
            r"heavy|current|former) (?:smoker|drinker)\b|\bsmoking (?:status|history|habits?)\b|\bhow (?:many|much) "
            r"(?:cigarettes|alcohol|coffee)\b|\balcohol (?:consumption|intake|habits?)\b|\bexercise (?:habits?|"
            r"routine)\b|\bsocial history\b", r"smok|social history|alcohol", "smoking, drinking or exercise habits"),
    Concept("diet", r"\bdiet(?:ary)?\b(?! (?:supplement|soda|pills?|counsel\w*|surveillance|deficien\w*)\b)|\bwhat (?:did|does) (?:patient \d+|he|she|"
            r"they) eat\b|\bmeals?\b|\bfood (?:preferences?|intake)\b", r"\bdiet|\bmeal|nutrition",
            "diets or meals"),
    Concept("staff_details", r"\b(?:religion|age|gender|sex|nationality|experience|specialty|qualifications?|"
            r"licen[cs]e|salary|phone|education)s? of (?:the |his |her |their |a |that )?(?:attending |treating |"
            r"primary |responsible |on-duty )?(?:doctor|physician|nurse|surgeon|caregiver|staff|attending)s?\b|"
            r"\b(?:doctor|physician|nurse|surgeon|caregiver)'?s? (?:religion|age|gender|nationality|experience|"
            r"specialty|qualifications?|licen[cs]e|salary)\b|\b(?:how old|how experienced) (?:is|was|are|were) (?:the |"
            r"his |her |their |that )?(?:attending |treating )?(?:doctor|physician|nurse|surgeon|caregiver)s?\b|"
            r"\byears of experience (?:does|did|do|has|have) (?:the |his |her |their |that )?(?:doctor|physician|nurse|"
            r"surgeon|caregiver)s?\b",
            r"(?:caregiver|provider|staff|nurse|doctor|physician)s? (?:age|gender|religion|experience|specialty)",
            "details about doctors or nurses"),
    Concept("hospital_name", r"\b(?:name of (?:the|this|that) hospital|hospital'?s name|hospital name|which hospital "
            r"(?:is|was) (?:this|it))\b", r"hospital name|name of the hospital", "hospital names"),
    Concept("consent", r"\bconsent(?:s|ed)?\b|\badvance directives?\b|\bdo[- ]not[- ]resuscitate order\b",
            r"consent|directive", "consent forms or advance directives"),
    Concept("drug_classes", r"\bimmuno[- ]?(?:cancer|oncolog|cauter)\w*|\banti-?cancer drugs?\b|\bdrugs? "
            r"(?:against|that work to treat) cancer\b|\bchemotherapy drugs?\b|\bdrug class(?:es)?\b",
            r"drug class|\batc\b", "drug classes"),
)  # fmt: skip

_COMPILED_CONCEPTS = [(c, re.compile(c.pattern, re.IGNORECASE), re.compile(c.covered_by, re.IGNORECASE))
                      for c in CONCEPTS]  # fmt: skip
FEATURE_NAMES = tuple(f"rule_{k}" for k in KINDS)


def absent_concepts(column_texts: Iterable[str]) -> frozenset[str]:
    """Concepts no column of the catalog documents (by name or doc text)."""
    text = "\n".join(column_texts)
    return frozenset(c.name for c, _, covered in _COMPILED_CONCEPTS if not covered.search(text))


def _evidence(match: re.Match) -> str:
    return " ".join(match.group(0).split())


def _future_dates(question: str, as_of_year: int | None) -> Finding | None:
    if not as_of_year:
        return None
    for m in re.finditer(r"\b(1[89]\d\d|2\d\d\d)\b", question):
        if int(m.group(1)) > as_of_year:
            return Finding("future", "after_as_of", m.group(1),
                           f"This asks about {m.group(1)}, after the data's as-of year {as_of_year}; the "
                           "database cannot hold what has not happened yet.", True)  # fmt: skip
    return None


def findings(question: str, *, absent: Iterable[str] = (), as_of_year: int | None = None) -> list[Finding]:
    """Every rule the question trips, decisive ones first."""
    text = " ".join(str(question or "").split())
    found = []
    for rule in RULES:
        m = rule.search(text)
        if m:
            ev = _evidence(m)
            found.append(
                Finding(rule.kind, rule.name, ev, rule.reason.format(evidence=f'"{ev}"'), rule.decisive)
            )
    absent = set(absent)
    for concept, pattern, _ in _COMPILED_CONCEPTS:
        if concept.name not in absent:
            continue
        m = pattern.search(text)
        if m:
            found.append(Finding("not_in_schema", concept.name, _evidence(m),
                                 f"The database has no {concept.what}, so askdb cannot answer this.",
                                 concept.decisive))  # fmt: skip
    date = _future_dates(text, as_of_year)
    if date:
        found.append(date)
    return ordered(found)


def ordered(found: Iterable[Finding]) -> list[Finding]:
    """Decisive first; among them the most specific kind names the reason ("will the weather be…"
    is about the weather before it is about the future)."""
    return sorted(found, key=lambda f: (not f.decisive, PRIORITY.index(f.kind)))


def rule_features(found: Sequence[Finding]) -> list[float]:
    """One feature per kind: 1 for a decisive hit, 0.5 for a soft one, else 0."""
    out = []
    for kind in KINDS:
        hits = [f for f in found if f.kind == kind]
        out.append(1.0 if any(f.decisive for f in hits) else 0.5 if hits else 0.0)
    return out
