"""README after the match stage merges into main's README (run from the repo root, on main's version)."""

from pathlib import Path

p = Path("README.md")
s = p.read_text()
old = """matcher rule. It receives what it needs through the ports in `engine.py` and returns frozen values
(`Outcome`, `MatchInfo`, `GateVerdict`, `AnswerabilityVerdict`); tests build it with in-memory
fake ports (`tests/askdb/pipeline/test_engine.py`). A new refusal rule of the library matcher is a
rule of the match stage (its rules run in order, each with its fixtures) and its code in
`match_reasons.py`.
"""
new = """matcher rule. It receives what it needs through the ports in `engine.py` and returns frozen values
(`Outcome`, `MatchInfo`, `GateVerdict`, `AnswerabilityVerdict`); tests build it with in-memory
fake ports (`tests/askdb/pipeline/test_engine.py`).

**The match stage** (`match/` in the core: answering from the verified library with no LLM) reads
in one direction; its `__init__.py` lists the modules in reading order:
the question is read once (`reading.py`: a frozen `Reading` of tokens, typed values, operator words,
masked text); the library (`index.py`: entries, vectors, each template's family of paraphrases)
votes for templates (`library.py`); each template tried goes through the **rules** in the order of
the one tuple `rules.RULES`, binding (`binding.py`) and the risk model (`features.py`, `risk.py`);
`calibrate.py` holds the one calibration (`calibrate_library`) and the one decision to answer
(`decide_answer`) that the app and `benchmarks/ehrsql.py` both call. Word lists are data beside the
code that reads them (`words.py`, `operators.py`, a rule's own module).
*A new refusal rule* is one module in `match/rules/` (a function `(reading, candidate, bound) ->
list[Reason]`), a code in `match/reasons.py`, one line in `rules.RULES` at its stage, and cases in
the fixture corpus: `tests/askdb/pipeline/match/test_corpus.py` runs ~700 questions through the
matcher and fails on any decision that changed; regenerate the expected decisions with
`.venv/bin/python -m tests.askdb.pipeline.match.corpus --update` and review the diff of
`fixtures/cases.jsonl`.
"""
assert old in s, "main's Core paragraph changed: insert the match-stage paragraph by hand"
s = s.replace(old, new)
s = s.replace(
    "- **Offline answering** (`askdb/pipeline/templates.py`, `offline.py`, `library.py`): each",
    "- **Offline answering** (the match stage, `askdb/pipeline/match/`): each",
)
s = s.replace(
    "Each refusal has a code (`askdb/pipeline/match_reasons.py`, kept",
    "Each refusal has a code (`askdb/pipeline/match/reasons.py`, kept",
)
s = s.replace(
    "validation, templates, the offline matcher, the engine |",
    "validation, the match stage (`match/`: templates, rules, risk), the engine |",
)
p.write_text(s)
