"""gate_causes' replay: the written sets scored again from one recording of the gates' fits and
vectors reproduce every recorded verdict with no training and no encoding, and a change to the rules
shows up as changed verdicts (the replay runs the current rules, it does not read back the verdicts)."""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.benchmark_modules import load_benchmark


class BagOfWords:
    """A deterministic stand-in for MiniLM (hashed bag of words), counting the texts it encodes."""

    def __init__(self) -> None:
        self.encoded = 0

    def encode_questions(self, texts):
        self.encoded += len(texts)
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z]{4,}", t.lower()):
                out[i, zlib.crc32(w.encode()) % 64] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    encode_docs = encode_questions


@pytest.fixture
def causes(monkeypatch):
    return load_benchmark(monkeypatch, "gate_causes.py", "bench_gate_causes")


@pytest.fixture
def small_set(tmp_path, causes) -> Path:
    rows = [json.loads(x) for x in causes.THING_PROPERTY_SET.read_text().splitlines() if x.strip()][:24]
    path = tmp_path / "small_set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_replay_reproduces_the_recorded_verdicts_without_encoding(causes, small_set, monkeypatch):
    recorder = BagOfWords()
    monkeypatch.setattr(causes, "_local", lambda: recorder)
    kept, scored = causes.record(None, paths=(small_set,))
    assert len(kept["verdicts"]["small_set"]) == 24 and recorder.encoded > 0

    def never():
        raise AssertionError("the replay encoded a text the recording holds")

    monkeypatch.setattr(causes, "_local", never)
    again, changed = causes.replay(kept)
    assert changed == {"small_set": 0}
    for key in ("unanswerable", "answerable", "auc"):
        assert again["small_set"][key] == scored["small_set"][key]
    assert again["small_set"]["missed"] == scored["small_set"]["missed"]


def test_a_replay_runs_the_current_rules_not_the_recorded_verdicts(causes, small_set, monkeypatch):
    """The attack: a replay that read its verdicts back would hide every change it is for."""
    monkeypatch.setattr(causes, "_local", BagOfWords)
    kept, scored = causes.record(None, paths=(small_set,))
    from askdb.answerability import rules

    declined = rules.Finding("out_of_scope", "test", "everything", "Declined by a test rule.", True)
    monkeypatch.setattr(rules, "findings", lambda *a, **k: [declined])
    again, changed = causes.replay(kept)
    passed_before = 24 - sum(k["declined"] for k in scored["small_set"]["by_kind"].values())
    assert changed["small_set"] >= passed_before > 0  # and those the model declined now score 0
    assert again["small_set"]["answerable_blocked"] == 1.0 and again["small_set"]["missed"] == []
