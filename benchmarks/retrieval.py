"""Retrieval quality and latency: `python benchmarks/retrieval.py [--source S] [--questions FILE]`.

Prints all-tables recall@3/5/8 (a question counts only when *every* table it needs is
retrieved, after join expansion), per-table recall, the mean number of tables returned (so
expansion cannot buy recall unnoticed), and p50/p95 of embed, table scoring and value linking.
Runs against the configured source: load the MIMIC-IV demo first for the bundled question set
(`python manage.py load_mimic ../shared/mimic-iv-demo-2.2`).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import yaml
from _django import percentile, setup, table

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source")
    parser.add_argument("--questions", type=Path, default=HERE / "data" / "retrieval_questions.yaml")
    parser.add_argument("--misses", action="store_true", help="list the questions missed at k=5")
    args = parser.parse_args()
    setup()
    from metadata_admin.selectors import retrieve
    from metadata_admin.services import source_get

    source = source_get(args.source)
    from metadata_admin.models import TableDoc

    questions = yaml.safe_load(args.questions.read_text())["questions"]
    present = {d.qualified_name for d in TableDoc.objects.filter(source=source, exists_in_source=True)}
    absent = [q for q in questions if not set(q["tables"]) <= present]
    questions = [q for q in questions if set(q["tables"]) <= present]
    retrieve(source=source, question="warm up the model")  # model load is not retrieval latency

    rows, timings = [], {"embed": [], "tables": [], "values": [], "total": []}
    per_table_hit: Counter = Counter()
    per_table_need: Counter = Counter()
    misses = []
    for k in (3, 5, 8):
        hits, returned = 0, 0
        for q in questions:
            t0 = time.perf_counter()
            result = retrieve(source=source, question=q["question"], k=k)
            total = (time.perf_counter() - t0) * 1000
            got = {t.qualified for t in result.tables}
            need = set(q["tables"])
            returned += len(got)
            hits += need <= got
            if k == 5:
                for name, ms in result.timings_ms.items():
                    timings[name].append(ms)
                timings["total"].append(total)
                for t in need:
                    per_table_need[t] += 1
                    per_table_hit[t] += t in got
                if not need <= got:
                    misses.append((q["question"], sorted(need - got)))
        rows.append(
            [
                f"recall@{k} (all tables)",
                hits / len(questions),
                f"{returned / len(questions):.1f} tables/question",
            ]
        )
    print(f"source {source.name}: {len(questions)} questions from {args.questions.name}", end="")
    print(f" ({len(absent)} left out: they need tables this source lacks)\n" if absent else "\n")
    print(table(["metric", "value", "note"], rows))
    print()
    print(
        table(
            ["stage", "p50 ms", "p95 ms"],
            [[n, percentile(v, 50), percentile(v, 95)] for n, v in timings.items()],
        )
    )
    print()
    per_table = sorted(per_table_need, key=lambda t: (per_table_hit[t] / per_table_need[t], t))
    print(
        table(
            ["table (k=5)", "needed", "recall"],
            [[t, per_table_need[t], per_table_hit[t] / per_table_need[t]] for t in per_table],
        )
    )
    if args.misses:
        print("\nmissed at k=5:")
        for question, missing in misses:
            print(f"  - {question}  → missing {', '.join(missing)}")


if __name__ == "__main__":
    main()
