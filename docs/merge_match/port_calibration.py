"""Port askdb/services/calibration.library_cross_validate to match.calibrate_library (run from the repo root)."""

from pathlib import Path

p = Path("askdb/services/calibration.py")
s = p.read_text()
i = s.index(
    "    # The ordinary folds, the sibling pass (match.cross_validate: risk training only), the file.\n"
)
j = s.index("    count = [0]\n", i)
s = s[:i] + s[j:]
i = s.index(
    "    state = dict(index=index, values=values, catalog=catalog, executor=executor, dialect=source.dialect,"
)
j = s.index("def _cv_task(")
k = s.index("    return samples\n", j) + len("    return samples\n")
new = '''    lookup, probe, same = _cv_callbacks(executor, source.dialect)
    found = match.calibrate_library(
        index, lambda held: index.matrix[held], is_correct=lambda entry, best: same(best.sql, entry.template.sql),
        lookup=lookup, values=values, catalog=catalog, probe=probe, progress=one_more,
        labelled=[(q, gold, v) for (q, gold), v in zip(labelled, masked, strict=True)], same=same,
        wrong_answer_cost=settings.ASKDB_WRONG_ANSWER_COST,
    )  # fmt: skip
    samples, siblings, risk, at = found.samples, found.siblings, found.risk, found.expected
    return {
        "risk": risk.to_dict(), "threshold": round(risk.threshold, 4),
        "wrong_answer_cost": settings.ASKDB_WRONG_ANSWER_COST,
        "held_out": found.asked, "matched": len(samples), "correct_matches": sum(ok for _, ok in samples),
        "sibling_matches": len(siblings), "sibling_correct": sum(ok for _, ok in siblings),
        "answered": at["answered"], "expected_coverage": at["coverage"], "precision": at["precision"],
        "templates": len(index.families), "examples": len(index.entries),
        "mode": "grouped cross-validation" + (" + file" if labelled else ""), "at": timezone.now().isoformat(),
    }  # fmt: skip


def _cv_callbacks(executor, dialect: str):
    """Value lookups, probes and result comparisons for one calibration, each asked of the database
    once (results, lookups and probes are remembered across its questions)."""
    results: dict[str, Any] = {}
    lookups: dict[tuple[str, str], list] = {}
    probes: dict[str, bool] = {}

    def rows(sql: str):
        if sql not in results:
            try:
                results[sql] = executor.execute(sql, timeout_s=10, row_cap=1000).rows
            except ExecutionError as exc:
                results[sql] = exc
        return results[sql]

    def same(sql: str, gold: str) -> bool:
        if " ".join(sql.lower().split()) == " ".join(gold.lower().split()):
            return True
        a, b = rows(sql), rows(gold)
        return not isinstance(a, Exception) and not isinstance(b, Exception) and results_match(a, b)

    def lookup(table_column: str, text: str):
        key = (table_column, text.lower())
        if key not in lookups:
            lookups[key] = column_values_like(executor, table_column, text, dialect=dialect)
        return lookups[key]

    def probe(sql: str) -> bool:
        if sql not in probes:
            probes[sql] = source_probe(executor, sql)
        return probes[sql]

    return lookup, probe, same
'''
s = s[:i] + new + s[k:]
s = s.replace("\nCV_FOLDS = match.CV_FOLDS\n", "\n")
p.write_text(s)
