"""Which questions the answerability gate gets wrong, and why: EHRSQL train's grouped
cross-validation (whole kinds of unanswerable question and whole SQL-template families of
answerable ones held out, as `make bench-answerability` trains) and the demo set
(tests/askdb/answerability/demo_set.jsonl, the gate trained on the demo library).

    .venv/bin/python benchmarks/gate_causes.py [--data ../shared/ehrsql-2024-dev] [--list]

Each answerable question blocked is counted under its cause: a decisive `rule` (named), the
catalog `grounding` (the attribute's missing words) or the learned `model` (below its threshold,
no column holding the attribute). The similarity floor acts in the pipeline, not here. Valid is
never read. The learned model's held-out scores do not depend on the rules or the grounding, so
they are kept in `.askdb/cache/gate_cv.pkl` and a change to the rules or the grounding is
measured again in seconds (`--retrain` fits them again).

`--record` scores every written set by both gates (the demo gate trained on the demo library, the
EHRSQL gate on train) and the train CV once, keeping the gates' fits, every vector they used and
every verdict in `.askdb/cache/gate_record.pkl`; `--replay` scores them all again from it with the
current rules and grounding (no training, no encoding but a new attribute phrase's) and says which
verdicts changed: a change to the rules or the grounding measured everywhere in seconds. A change to
the learned model needs a new recording.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "ehrsql-2024-dev"
CACHE = ROOT / ".askdb" / "cache" / "gate_cv.pkl"
DEMO_SET = ROOT / "tests" / "askdb" / "answerability" / "demo_set.jsonl"
# Kinds the demo set lacks, written before round 9 changed the grounding (scored the same way).
NEW_KINDS_SET = ROOT / "tests" / "askdb" / "answerability" / "new_kinds_set.jsonl"
# Attributes whose words the catalog has but no column holds, and answerable kinds in unusual
# wording (round 10, written before round 10 changed the gate).
CATALOG_WORDS_SET = ROOT / "tests" / "askdb" / "answerability" / "catalog_words_set.jsonl"
# Synonyms no catalog text has, and things MIMIC-IV does not hold (round 11, written before round
# 11 changed the gate). Both are held out: scored only with --all-sets, to report.
SYNONYMS_SET = ROOT / "tests" / "askdb" / "answerability" / "synonyms_set.jsonl"
# Ambiguous or underspecified questions (a class of drugs or tests no column names, a duration of an
# event with no end, "a test" with no name, doses compared without units, vague times) and their
# specified twins (round 12, written before round 12 changed the gate): scored only with --ambiguity,
# to measure before and after, never to tune on.
AMBIGUITY_SET = ROOT / "tests" / "askdb" / "answerability" / "ambiguity_set.jsonl"
# What a researcher asks that MIMIC-IV does not record (imaging findings, scores, outcomes after
# discharge, reasons, staging, trials...) and its look-alikes (round 13, written before round 13
# changed the gate): scored only with --researcher, measured before and once after, never tuned on.
RESEARCHER_SET = ROOT / "tests" / "askdb" / "answerability" / "researcher_set.jsonl"
# Times with no anchor, existence questions, the hospital as an organisation, outcomes after
# discharge, patient-reported things and their look-alikes (round 14, written before round 14
# changed the gate): scored only with --unanchored, measured before and once after, never tuned on.
UNANCHORED_SET = ROOT / "tests" / "askdb" / "answerability" / "unanchored_set.jsonl"
# Rare attributes MIMIC-IV holds asked in words and sentence forms the catalog does not use, and an
# unanswerable look-alike of each (round 15, written before round 15 changed the gate): scored only
# with --unseen, by the demo gate and by the gate trained on EHRSQL train (the one valid meets).
UNSEEN_WORDS_SET = ROOT / "tests" / "askdb" / "answerability" / "unseen_words_set.jsonl"
# Attributes of real MIMIC-IV entities no column holds (prices, brands, makers, who approved or mixed,
# how it felt) beside look-alikes the layout holds (round 16, written before round 16 changed the gate):
# scored only with --entity, by the demo and the EHRSQL gates, read once before and once after.
ENTITY_ATTRIBUTES_SET = ROOT / "tests" / "askdb" / "answerability" / "entity_attributes_set.jsonl"
# Cohort statistics (shares, top-N, averages, trends, distributions over patients) asking for an attribute
# MIMIC-IV holds or a look-alike it does not (round 17, written before round 17 changed the gate): scored
# only with --cohort, by the demo and the EHRSQL gates, read once before and once after.
COHORT_SET = ROOT / "tests" / "askdb" / "answerability" / "cohort_set.jsonl"
# Relations between events, people, stays and conditions (the time between two events, two patients
# compared, a cohort filtered by a condition, clinical shorthand, derived measures, absence, a patient's
# own stays compared, what came before or after) with look-alikes MIMIC-IV does not record (round 18,
# written before round 18 changed the gate): scored only with --relations, by both gates, before and after.
RELATIONS_SET = ROOT / "tests" / "askdb" / "answerability" / "relations_set.jsonl"
# Questions whose words touch a real column but ask for something no column holds (the insurance
# company's phone number, the admission location's address, a lab test's price) beside the column's
# own question (round 19, written before round 19 changed the gate): scored only with --column-touch,
# by both gates, counts only (held out: never listed).
COLUMN_TOUCH_SET = ROOT / "tests" / "askdb" / "answerability" / "column_touch_set.jsonl"
# A property asked of a thing a column names (a drug, a lab test, an insurance, a care unit) that no
# column holds, beside the look-alike asking a property a column does hold (round 20, written before
# round 20 changed the gate): the set round 20 built on, with --thing-property or --both-gates.
THING_PROPERTY_SET = ROOT / "tests" / "askdb" / "answerability" / "thing_property_set.jsonl"
# A column asked for in the words its name joins or shortens ("the normal high value" of `highnormalvalue`,
# "the event text" of `event_txt`), beside a look-alike asking a property no column holds (round 21,
# written before round 21 changed the gate): scored by both gates with --both-gates or a recording.
SPLIT_WORDS_SET = ROOT / "tests" / "askdb" / "answerability" / "split_words_set.jsonl"
# Kinds none of the other sets holds (physiological tests, body measures no column records, who viewed or
# edited the record, exposures, safety incidents, communication needs, implants, biobank samples), each
# beside a look-alike MIMIC-IV holds (session 25, written before session 25 changed the gate).
FRESH25_SET = ROOT / "tests" / "askdb" / "answerability" / "fresh25_set.jsonl"
# Every written set, as --both-gates and the recording score them.
ALL_SETS = (DEMO_SET, NEW_KINDS_SET, SYNONYMS_SET, CATALOG_WORDS_SET, AMBIGUITY_SET, RESEARCHER_SET, UNANCHORED_SET,
            UNSEEN_WORDS_SET, ENTITY_ATTRIBUTES_SET, COHORT_SET, RELATIONS_SET, COLUMN_TOUCH_SET,
            THING_PROPERTY_SET, SPLIT_WORDS_SET, FRESH25_SET)  # fmt: skip
# Held out: their numbers are read, their questions never listed.
HELD_OUT = (RELATIONS_SET.stem, COLUMN_TOUCH_SET.stem)
RECORDING = ROOT / ".askdb" / "cache" / "gate_record.pkl"
DEMO_LIBRARY = ROOT / "benchmarks" / "data" / "mimiciv" / "train.json"
AS_OF_YEAR = 2100
SIMILARITY_FLOOR = 0.15  # config/settings/base.py ASKDB_SIMILARITY_FLOOR's default


def _catalog():
    from askdb.answerability.data import docs_catalog
    from metadata_admin.docs import BUNDLED_DOCS, read_docs

    return docs_catalog(read_docs([BUNDLED_DOCS]))


def _train_cv(data_dir: Path, retrain: bool, say, hold_out: str = "family") -> dict:
    """The learned model's held-out scores on train (cached: they take minutes); `hold_out`: how
    answerable questions are held out (TrainConfig.answerable_hold_out), each cached apart."""
    cache = CACHE if hold_out == "family" else CACHE.with_name(f"gate_cv_{hold_out}.pkl")
    if cache.exists() and not retrain:
        return pickle.loads(cache.read_bytes())
    from ehrsql_answerability import _items, linked_values

    from askdb.answerability.model import MiniLMEncoder, TrainConfig, TrainQuestion, train

    tables, columns = _catalog()
    items = _items(data_dir, "train")
    questions = [TrainQuestion(i["id"], i["question"], i["answerable"], (), "file", i["sql"]) for i in items]
    values = linked_values(data_dir)
    result = train(questions, tables, columns, encoder=MiniLMEncoder.installed(),
                   config=TrainConfig(as_of_year=AS_OF_YEAR, answerable_hold_out=hold_out), progress=say,
                   values=values)  # fmt: skip
    out = {"questions": questions, "values": values, "held_out": result.held_out, "dealings": result.dealings,
           "threshold": result.threshold, "vectors": result.library_vectors, "combiner": result.combiner}  # fmt: skip
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps(out))
    return out


def cv_causes(cv: dict) -> dict:
    """Gate F1 / answerable blocked over every dealing, and each blocked answerable question and
    each unanswerable one let through, with its cause, under the current rules and grounding."""
    from askdb.answerability import model as m

    tables, columns = _catalog()
    questions, oof, dealings, threshold = cv["questions"], cv["held_out"], cv["dealings"], cv["threshold"]
    texts = [q.text for q in questions]
    y = np.array([q.answerable for q in questions], dtype=bool)
    absent = m.rules.absent_concepts(c.text for c in columns)
    by_rule = m.rule_verdicts(texts, absent, AS_OF_YEAR, m.specified.Specifics(tables, columns, cv["values"]))
    encoder = m.MiniLMEncoder.installed()
    meaning = m.MeaningGrounding(encoder, columns, encoder.encode_docs([c.text for c in columns]))
    readings = m.grounding_readings(questions, tables, columns, cv["values"], dealings, meaning)
    by_ground = readings.ungrounded
    held = m.held_verdicts(questions, tables, columns, cv["values"], dealings) & ~by_rule[None, :]
    phrases = m.value_phrases(cv["values"])
    named = np.array([m.names_value(t, phrases) for t in texts], dtype=bool)
    margin = m.margin_of(named[None, :], readings.confident)
    gate = m.gate_probability(
        oof.ravel(), (by_rule[None, :] | by_ground).ravel(), held.ravel(), margin.ravel()
    )
    passed = (gate >= threshold).reshape(len(dealings), -1)
    metrics = m.classification_metrics(gate, np.tile(y, len(dealings)), threshold)
    model_only = m.classification_metrics(oof.ravel(), np.tile(y, len(dealings)), threshold)
    blocked: Counter = Counter()
    let_through: Counter = Counter()
    for r in range(len(dealings)):
        for i, q in enumerate(questions):
            cause = (
                "rule" if by_rule[i] else "grounding" if by_ground[r, i] else "" if passed[r, i] else "model"
            )
            if q.answerable and cause:
                blocked[(cause, q.text)] += 1
            elif not q.answerable and not cause:
                by_model = oof[r, i] >= threshold * margin[r, i]
                let_through[("held" if held[r, i] and not by_model else "model", q.text)] += 1
    return {"gate": metrics, "model": model_only, "blocked": blocked, "let_through": let_through,
            "dealings": len(dealings), "floor": floor_causes(cv, passed, y), "passed": passed}  # fmt: skip


def floor_causes(cv: dict, passed: np.ndarray, y: np.ndarray, floor: float = SIMILARITY_FLOOR) -> dict:
    """The similarity floor simulated: after the gate passes a question, the pipeline declines it
    when no table doc is as close as `floor` (the best table-doc cosine of the question's MiniLM
    vector, as retrieval scores it). Counted per (question, dealing) the gate passed: answerable
    ones the floor would block (an upper bound: a library answer above its threshold is not
    vetoed by the floor, and the CV does not match) and unanswerable ones it would catch."""
    from askdb.answerability.model import MiniLMEncoder

    tables, _ = _catalog()
    docs = MiniLMEncoder.installed().encode_docs([t.text for t in tables])
    best = (np.asarray(cv["vectors"]) @ docs.T).max(axis=1)
    below = np.broadcast_to(best < floor, passed.shape)
    answerable = np.broadcast_to(y, passed.shape)
    return {
        "floor": floor,
        "answerable_passed": int((passed & answerable).sum()),
        "answerable_blocked": int((passed & answerable & below).sum()),
        "unanswerable_caught": int((passed & ~answerable & below).sum()),
        "best_p5_answerable": float(np.percentile(best[y], 5)),
    }


def ehrsql_fit(cv: dict) -> dict:
    """The fit of the gate trained on EHRSQL train (the cached one: the gate valid meets)."""
    fit = {k: cv[k] for k in ("combiner", "threshold", "values", "vectors")}
    return {**fit, "library": [(q.id, q.text, q.answerable) for q in cv["questions"]]}


def ehrsql_gate(cv: dict, encoder=None):
    """The gate trained on EHRSQL train, with no "now": the sets' years (2150) are the demo's, not
    EHRSQL's. `encoder`: MiniLM unless given (a recording's)."""
    return _gate_of(ehrsql_fit(cv), encoder or _minilm(), "ehrsql-train")


def ehrsql_causes(cv: dict, paths: tuple[Path, ...]) -> dict[str, dict]:
    """Written sets scored by the gate trained on EHRSQL train."""
    gate = ehrsql_gate(cv)
    return {f"{path.stem} (EHRSQL gate)": _score(gate, path) for path in paths}


def _score(gate, path: Path) -> dict:
    from askdb.answerability.data import score_items

    return score_items(gate, [json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def demo_gate(encoder=None):
    """The gate trained on the demo library, as tests/askdb/answerability trains it, and its fit
    ({combiner, threshold, library, vectors}: what a recording keeps to build it again)."""
    from askdb.answerability.model import LocalEncoder, TrainConfig, TrainQuestion, train
    from infra.providers.embeddings import LocalEmbedder

    encoder = encoder or LocalEncoder(LocalEmbedder())
    tables, columns = _catalog()
    library = [
        TrainQuestion(i["id"], i["question"], i["category"] == "answerable", tuple(i.get("tables") or ()),
                      "file", i.get("sql") or "")
        for i in json.loads(DEMO_LIBRARY.read_text())
    ]  # fmt: skip
    result = train(library, tables, columns, encoder=encoder, config=TrainConfig())
    fit = {"combiner": result.combiner, "threshold": result.threshold, "values": [],
           "library": [(q.id, q.text, q.answerable) for q in library], "vectors": result.library_vectors}  # fmt: skip
    return _gate_of(fit, encoder, "demo-set"), fit


def _gate_of(fit: dict, encoder, version: str):
    """A gate built from a fit, scoring with `encoder`."""
    from askdb.answerability.model import AnswerabilityModel

    tables, columns = _catalog()
    return AnswerabilityModel(
        encoder, fit["combiner"], fit["threshold"], tables, columns, fit["library"], version=version,
        values=fit["values"], vector_cache=dict(zip([t for _, t, _ in fit["library"]], fit["vectors"], strict=True)),
    )  # fmt: skip


def demo_causes(
    all_sets: bool = False,
    ambiguity: bool = False,
    researcher: bool = False,
    unanchored: bool = False,
    unseen: bool = False,
    entity: bool = False,
    cohort: bool = False,
    relations: bool = False,
    column_touch: bool = False,
    thing_property: bool = False,
) -> dict[str, dict]:
    """The demo set and the new-kinds set scored by a gate trained on the demo library, as
    tests/askdb/answerability does."""
    gate, _ = demo_gate()
    return {
        path.stem: _score(gate, path)
        for path in (
            DEMO_SET,
            NEW_KINDS_SET,
            *((SYNONYMS_SET, CATALOG_WORDS_SET) if all_sets else ()),
            *((AMBIGUITY_SET,) if ambiguity else ()),
            *((RESEARCHER_SET,) if researcher else ()),
            *((UNANCHORED_SET,) if unanchored else ()),
            *((UNSEEN_WORDS_SET,) if unseen else ()),
            *((ENTITY_ATTRIBUTES_SET,) if entity else ()),
            *((COHORT_SET,) if cohort else ()),
            *((RELATIONS_SET,) if relations else ()),
            *((COLUMN_TOUCH_SET,) if column_touch else ()),
            *((THING_PROPERTY_SET,) if thing_property else ()),
        )
    }


# -- the replay: every set by both gates and the train CV, from one recording ----------------------


class RecordedEncoder:
    """An encoder that keeps every vector it hands out, by text, and hands the same one out again:
    a replay then gets the very vectors the recording's gates got (a batch and a single encoding may
    differ in the last bits), and only a text never seen (a new attribute phrase) is encoded, by the
    encoder `load` returns, loaded only then."""

    def __init__(self, load, memo: dict | None = None) -> None:
        self._load, self._inner = load, None
        self.memo: dict[str, dict] = memo or {"questions": {}, "docs": {}}

    def _vectors(self, kind: str, texts) -> np.ndarray:
        texts = list(texts)
        new = [t for t in dict.fromkeys(texts) if t not in self.memo[kind]]
        if new:
            self._inner = self._inner or self._load()
            encode = self._inner.encode_questions if kind == "questions" else self._inner.encode_docs
            self.memo[kind].update(zip(new, encode(new), strict=True))
        if not texts:
            return np.zeros((0, len(next(iter(self.memo[kind].values()), ()))), dtype=np.float32)
        return np.vstack([self.memo[kind][t] for t in texts])

    def encode_questions(self, texts) -> np.ndarray:
        return self._vectors("questions", texts)

    def encode_docs(self, texts) -> np.ndarray:
        return self._vectors("docs", texts)


class _Noting:
    """A gate that notes each verdict it gives (passed, the gate's probability), in order."""

    def __init__(self, gate) -> None:
        self.gate, self.threshold, self.verdicts = gate, gate.threshold, []

    def score(self, question: str, **kw):
        s = self.gate.score(question, **kw)
        self.verdicts.append((bool(s.answerable), float(s.gate_probability)))
        return s


def score_noted(gate, paths, suffix: str = "") -> tuple[dict[str, dict], dict[str, list]]:
    """Each set's figures and its verdicts in order, keyed by the set's name (+ `suffix`)."""
    scored, verdicts = {}, {}
    for path in paths:
        noting = _Noting(gate)
        scored[path.stem + suffix] = _score(noting, path)
        verdicts[path.stem + suffix] = noting.verdicts
    return scored, verdicts


def _minilm():
    from askdb.answerability.model import MiniLMEncoder

    return MiniLMEncoder.installed()


def _local():
    from askdb.answerability.model import LocalEncoder
    from infra.providers.embeddings import LocalEmbedder

    return LocalEncoder(LocalEmbedder())


EHRSQL = " (EHRSQL gate)"


def record(cv: dict | None, paths=ALL_SETS) -> tuple[dict, dict[str, dict]]:
    """Score every set by both gates (and the train CV when `cv` is given) and keep what a replay
    needs: each gate's fit, every vector it used, every verdict."""
    out: dict = {"gates": {}, "verdicts": {}, "sets": [str(p) for p in paths]}
    scored: dict[str, dict] = {}
    demo_encoder = RecordedEncoder(_local)
    gate, fit = demo_gate(demo_encoder)
    s, v = score_noted(gate, paths)
    scored.update(s)
    out["verdicts"].update(v)
    out["gates"]["demo"] = {"fit": fit, "memo": demo_encoder.memo, "version": "demo-set"}
    if cv is not None:
        ehrsql_encoder = RecordedEncoder(_minilm)
        s, v = score_noted(ehrsql_gate(cv, ehrsql_encoder), paths, EHRSQL)
        scored.update(s)
        out["verdicts"].update(v)
        out["gates"]["ehrsql"] = {
            "fit": ehrsql_fit(cv),
            "memo": ehrsql_encoder.memo,
            "version": "ehrsql-train",
        }
        causes = cv_causes(cv)
        out["cv_passed"] = causes["passed"]
        scored["train CV"] = causes
    return out, scored


def replay(recording: dict, cv: dict | None = None) -> tuple[dict[str, dict], dict[str, int]]:
    """Every recorded set scored again by the recorded gates under the current rules and grounding,
    and, per set, how many verdicts differ from the recording (the train CV's too when `cv` is given)."""
    scored: dict[str, dict] = {}
    changed: dict[str, int] = {}
    paths = [Path(p) for p in recording["sets"]]
    for key, load, suffix in (("demo", _local, ""), ("ehrsql", _minilm, EHRSQL)):
        kept = recording["gates"].get(key)
        if kept is None:
            continue
        gate = _gate_of(kept["fit"], RecordedEncoder(load, kept["memo"]), kept["version"])
        s, v = score_noted(gate, paths, suffix)
        scored.update(s)
        for name, verdicts in v.items():
            changed[name] = sum(a != b for a, b in zip(verdicts, recording["verdicts"][name], strict=True))
    if cv is not None and "cv_passed" in recording:
        causes = cv_causes(cv)
        scored["train CV"] = causes
        changed["train CV"] = int((causes["passed"] != recording["cv_passed"]).sum())
    return scored, changed


def _summary(name: str, m: dict, blocked: float) -> str:
    u = m["unanswerable"]
    return (f"{name}: unanswerable F1 {u['f1']:.3f} (precision {u['precision']:.3f}, recall {u['recall']:.3f}), "
            f"answerable blocked {blocked:.1%}, AUC {m.get('auc') or 0:.3f}")  # fmt: skip


def _print_cv(c: dict, listing: bool) -> None:
    """The train CV's figures and, by cause, what the gate blocks and lets through."""
    print(
        _summary(
            f"train CV ({c['dealings']} dealings), gate", c["gate"], 1 - c["gate"]["answerable"]["recall"]
        )
    )
    print(_summary("train CV, model alone", c["model"], 1 - c["model"]["answerable"]["recall"]))
    f = c["floor"]
    print(f"similarity floor {f['floor']} after the gate (question × dealing): blocks {f['answerable_blocked']} of "
          f"{f['answerable_passed']} answerable passed, catches {f['unanswerable_caught']} unanswerable let through; "
          f"5th percentile of answerable best table-doc cosine {f['best_p5_answerable']:.3f}")  # fmt: skip
    for title, counter in (
        ("answerable blocked", c["blocked"]),
        ("unanswerable let through", c["let_through"]),
    ):
        by_cause = Counter()
        for (cause, _), n in counter.items():
            by_cause[cause] += n
        print(f"{title} (question × dealing): {dict(by_cause)}")
        if listing:
            for (cause, text), n in sorted(counter.items()):
                print(f"  {cause:>16} ×{n}  {text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--retrain", action="store_true", help="fit the learned model's held-out scores again"
    )
    parser.add_argument("--list", action="store_true", help="list the questions, not only the counts")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-cv", action="store_true", help="the written sets only")
    parser.add_argument(
        "--all-sets",
        action="store_true",
        help="also the held-out sets (synonyms, catalog words): to report, never to tune",
    )
    parser.add_argument(
        "--ambiguity",
        action="store_true",
        help="also the ambiguity set: to measure before and after, never to tune",
    )
    parser.add_argument(
        "--researcher",
        action="store_true",
        help="also the researcher set: to measure before and after, never to tune",
    )
    parser.add_argument(
        "--unanchored",
        action="store_true",
        help="also the seventh set (unanchored times, existence...): before and once after, never to tune",
    )
    parser.add_argument(
        "--hold-out",
        choices=("family", "attribute"),
        default="family",
        help="answerable questions held out by SQL template family or, harder, by attribute (tables + column)",
    )
    parser.add_argument(
        "--unseen",
        action="store_true",
        help="also the eighth set (rare attributes in unseen words), by the demo and the EHRSQL gates",
    )
    parser.add_argument(
        "--entity",
        action="store_true",
        help="also the ninth set (attributes of real entities no column holds), by the demo and the EHRSQL gates",
    )
    parser.add_argument(
        "--cohort",
        action="store_true",
        help="also the tenth set (cohort statistics over patients), by the demo and the EHRSQL gates",
    )
    parser.add_argument(
        "--relations",
        action="store_true",
        help="also the eleventh set (relations between events, people, stays), by both gates: counts only",
    )
    parser.add_argument(
        "--column-touch",
        action="store_true",
        help="also the twelfth set (words touching a real column, asking what none holds), by both gates: counts only",
    )
    parser.add_argument(
        "--thing-property",
        action="store_true",
        help="also the thirteenth set (a property of a thing a column names), by both gates",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"score every set by both gates and the train CV once and keep it all in {RECORDING.name}",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="score every set by both gates and the train CV again from the recording: which verdicts changed",
    )
    parser.add_argument(
        "--both-gates",
        action="store_true",
        help="score all twelve sets by the EHRSQL gate too (the demo gate's selection is the other flags')",
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    t0 = time.monotonic()
    say = lambda s: print(f"[{time.monotonic() - t0:6.1f}s] {s}", flush=True)  # noqa: E731
    if args.record or args.replay:
        return _record_or_replay(args, say)
    scored = {}
    ehrsql_sets = (
        args.unseen or args.entity or args.cohort or args.relations or args.column_touch or args.thing_property
        or args.both_gates
    )  # fmt: skip
    if not args.skip_cv or ehrsql_sets:
        cv = _train_cv(args.data, args.retrain, say, args.hold_out)
        if not args.skip_cv:
            _print_cv(cv_causes(cv), args.list)
        if ehrsql_sets:
            paths = (
                *((UNSEEN_WORDS_SET,) if args.unseen else ()),
                *((ENTITY_ATTRIBUTES_SET,) if args.entity else ()),
                *((COHORT_SET,) if args.cohort else ()),
                *((RELATIONS_SET,) if args.relations else ()),
                *((COLUMN_TOUCH_SET,) if args.column_touch else ()),
                *((THING_PROPERTY_SET,) if args.thing_property else ()),
            )
            if args.both_gates:  # every set the demo gate scores
                paths = ALL_SETS
            scored.update(ehrsql_causes(cv, paths))
    if not args.skip_demo:
        scored.update(
            demo_causes(
                args.all_sets,
                args.ambiguity,
                args.researcher,
                args.unanchored,
                args.unseen,
                args.entity,
                args.cohort,
                args.relations,
                args.column_touch,
                args.thing_property,
            )
        )
    _print_sets(scored, args.list)
    return 0


def _print_sets(scored: dict[str, dict], listing: bool, changed: dict[str, int] | None = None) -> None:
    """Each set's figures; with `listing`, what it blocks and lets through (never a held-out set's)."""
    for name, d in scored.items():
        if name == "train CV":
            continue
        print(_summary(name, d, d["answerable_blocked"]) + f", gate p50 {d['p50_ms']:.2f} ms")
        print(f"{name} answerable blocked by cause: {dict(Counter(b['cause'] for b in d['blocked']))}")
        print(f"{name} unanswerable let through: {len(d['missed'])}")
        if changed is not None:
            print(f"{name} verdicts changed from the recording: {changed[name]}")
        if listing and not name.startswith(HELD_OUT):  # held out: never listed
            for b in d["blocked"]:
                print(f"  blocked {b['cause']:>16}  {b['question']}  → {b['reason']}")
            for k in d["by_kind"].values():
                print(f"  a decline: {k['example']}")
            for q in d["missed"]:
                print(f"  let through  {q}")


def _record_or_replay(args: argparse.Namespace, say) -> int:
    """--record: score and keep everything; --replay: score it again from the recording."""
    cv = None if args.skip_cv else _train_cv(args.data, args.retrain, say, args.hold_out)
    if args.record:
        kept, scored = record(cv)
        RECORDING.parent.mkdir(parents=True, exist_ok=True)
        RECORDING.write_bytes(pickle.dumps(kept))
        say(f"recorded {len(kept['verdicts'])} set × gate verdict lists in {RECORDING}")
        changed = None
    else:
        scored, changed = replay(pickle.loads(RECORDING.read_bytes()), cv)
        say(f"replayed: {sum(changed.values())} verdicts changed from the recording")
    if "train CV" in scored:
        _print_cv(scored["train CV"], args.list)
        if changed is not None:
            print(f"train CV verdicts (question × dealing) changed from the recording: {changed['train CV']}")
    _print_sets(scored, args.list, changed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
