"""The evaluation harness end to end against an oracle LLM: proves the plumbing, not a model.

A scripted OpenAI-compatible server on loopback answers the gate with each question's benchmark
category and generation with its gold SQL (K identical candidates), so every loss in the numbers
comes from askdb itself: the answerability model declining, the library answering, validation,
execution, comparison. Usage (on a state folder that holds the MIMIC-IV demo and a library):

    ASKDB_HOME=.askdb/dev python benchmarks/scripted_eval.py benchmarks/data/mimiciv/test.json [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GATE, WRITE = "You screen questions", "You write one"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("questions", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="/tmp/askdb-scripted-eval")
    args = parser.parse_args()

    from tests.support.scripted_llm import Reply, ScriptedLLM

    items = {" ".join(i["question"].split()): i for i in json.loads(args.questions.read_text())}

    def lookup(body: dict) -> dict:
        question = " ".join(str(body["messages"][-1]["content"]).split())
        return items.get(question, {})

    def gate(body: dict) -> str:
        category = lookup(body).get("category", "answerable")
        category = "out_of_scope" if category == "missing_field" else category
        return json.dumps({"category": category, "reason": f"benchmark says {category}"})

    def write(body: dict) -> list[str]:
        sql = lookup(body).get("sql") or "SELECT 1 AS no_gold_sql"
        return [f"```sql\n{sql}\n```"] * (body.get("n") or 1)

    with ScriptedLLM() as llm:
        llm.when(GATE, Reply(gate))
        llm.when(WRITE, Reply(write))
        llm.default = Reply("The result is shown above.")
        os.environ.update(LLM_BASE_URL=llm.base_url, LLM_MODEL="oracle", LLM_API_KEY="x", LLM_MAX_RETRIES="0")
        from benchmarks._django import setup

        setup()
        from django.core.management import call_command

        call_command("evaluate", "--questions", str(args.questions), "--workers", str(args.workers),
                     "--out", args.out, "--name", "scripted-oracle")  # fmt: skip


if __name__ == "__main__":
    main()
