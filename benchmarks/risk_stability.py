"""How much the nested CV's answered count moves when the risk fit's few wrong samples move.

`python benchmarks/risk_stability.py --dump FILE` runs the EHRSQL train grouped cross-validation once
(the same calibrate_library the benchmark and the app run; no valid question is asked) and writes its
held-out samples: features, correct, fold, which pass, and the question's paraphrase group and
template. `python benchmarks/risk_stability.py FILE` then refits the risk on those samples under
perturbations (bootstrap resamples, k random wrong samples dropped, other fold seeds) and reports the
spread of the nested CV's answered count and precision: each ordinary sample scored by a risk fitted
without its fold (core.match.fold_risks), at the threshold of the wrong-answer cost.

Why: a risk fit that moves hundreds of answers on four samples is not a calibrated risk. Train only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def dump(path: Path, *, cost: float = 10.0) -> None:
    """One grouped CV on train; every sample with its fold, pass, group and template, as JSON."""
    import ehrsql

    from core.match import calibrate as C

    ehrsql._setup_django()
    lib = ehrsql.build(ehrsql.load_split("train"))
    runner = ehrsql.Runner(lib.executor)
    seen: list[tuple[str, object]] = []
    original = C.cross_validate

    def recording(*args, details=None, siblings=False, **kwargs):
        mine: list = []
        out = original(*args, details=mine, siblings=siblings, **kwargs)
        seen.extend(("siblings" if siblings else "fold", entry) for entry, _, _ in mine)
        if details is not None:
            details.extend(mine)
        return out

    fitted: list = []
    original_fold_risks = C.fold_risks

    def capturing(samples, folds, **kwargs):
        fitted.append((list(samples), list(folds)))
        return original_fold_risks(samples, folds, **kwargs)

    C.cross_validate, C.fold_risks = recording, capturing
    try:
        risk, cv, _ = ehrsql.calibrate(lib, runner, cost=cost)
    finally:
        C.cross_validate, C.fold_risks = original, original_fold_risks
    samples, folds = fitted[-1]
    entries = [e for k, e in seen if k == "fold"] + [e for k, e in seen if k == "siblings"]
    ordinary = sum(1 for k, _ in seen if k == "fold")
    assert len(entries) == len(samples), (len(entries), len(samples))
    rows = [
        {
            "x": x,
            "ok": ok,
            "fold": f,
            "kind": "fold" if n < ordinary else "siblings",
            "group": e.group,
            "key": e.key,
        }
        for n, ((x, ok), f, e) in enumerate(zip(samples, folds, entries, strict=True))
    ]
    asked = len(lib.index.entries)
    path.write_text(
        json.dumps(
            {
                "asked": asked,
                "cost": cost,
                "risk": risk.to_dict(),
                "cv": {k: v for k, v in cv.items() if k not in ("fold_risks", "wrong_answers")},
                "rows": rows,
            }
        )
    )
    print(f"{len(rows)} samples ({sum(not r['ok'] for r in rows)} wrong) -> {path}", file=sys.stderr)


def refold(rows: list[dict], seed: int) -> list[int]:
    """Other folds of the same shape: a paraphrase group (a whole template where the CV held the
    template out, and in the sibling pass) hashed with a seed; seed 0 keeps the CV's own folds."""
    from core.match.calibrate import CV_FOLDS, whole_template

    if seed == 0:
        return [r["fold"] for r in rows]
    out = []
    for r in rows:
        group = r["key"] if r["kind"] == "siblings" or whole_template(r["key"]) else r["group"]
        out.append(int(hashlib.sha1(f"{seed}:{group}".encode()).hexdigest(), 16) % CV_FOLDS)
    return out


def nested(
    rows: list[dict], folds: list[int], train: list[int], fit, threshold: float, scored: list[int]
) -> tuple[int, int]:
    """(answered, right) of the ordinary samples `scored`, each scored by `fit` on the `train` rows of
    the other folds (a row index may appear more than once: a bootstrap)."""
    answered = right = 0
    for fold in sorted(set(folds)):
        model = fit([(rows[i]["x"], rows[i]["ok"]) for i in train if folds[i] != fold])
        for i in scored:
            if folds[i] == fold and model.predict(rows[i]["x"]) >= threshold:
                answered += 1
                right += rows[i]["ok"]
    return answered, right


def perturbations(rows: list[dict], *, repeats: int = 10, drops: tuple[int, ...] = (1, 2)):
    """(name, folds, train rows) for the unperturbed CV and each perturbation."""
    every = list(range(len(rows)))
    ordinary = [i for i in every if rows[i]["kind"] == "fold"]
    yield "as is", refold(rows, 0), every, ordinary
    for seed in range(1, 4):
        yield f"fold seed {seed}", refold(rows, seed), every, ordinary
    wrong = [i for i in every if not rows[i]["ok"]]
    for k in drops:
        for r in range(repeats):
            gone = set(random.Random(1000 * k + r).sample(wrong, min(k, len(wrong))))
            kept = [i for i in every if i not in gone]
            yield f"drop {k} wrong", refold(rows, 0), kept, [i for i in ordinary if i not in gone]
    for r in range(repeats):
        rng = random.Random(r)
        yield "bootstrap", refold(rows, 0), [rng.randrange(len(rows)) for _ in every], ordinary


def spread(found, fit, threshold: float, *, seeds: tuple[int, ...] = (1, 2, 3), drops: int = 10) -> dict:
    """The nested CV's answered count of a calibration (core.match.LibraryCalibration) refitted with
    `fit` on bootstrap resamples of its samples (one per seed) and with each of its wrong samples
    (at most `drops`) left out in turn: the spread the benchmark reports beside the count."""
    rows = [{"x": x, "ok": ok, "kind": "fold"} for x, ok in found.samples]
    rows += [{"x": x, "ok": ok, "kind": "siblings"} for x, ok in found.siblings]
    folds = list(found.sample_folds) + list(found.sibling_folds)
    every = list(range(len(rows)))
    ordinary = [i for i in every if rows[i]["kind"] == "fold"]
    boot = []
    for seed in seeds:
        rng = random.Random(seed)
        boot.append(nested(rows, folds, [rng.randrange(len(rows)) for _ in every], fit, threshold, ordinary))
    dropped = []
    for gone in [i for i in every if not rows[i]["ok"]][:drops]:
        kept = [i for i in every if i != gone]
        dropped.append(nested(rows, folds, kept, fit, threshold, [i for i in ordinary if i != gone]))
    answered = [a for a, _ in boot + dropped]
    return {
        "bootstrap": [a for a, _ in boot],
        "one_wrong_dropped": [
            min((a for a, _ in dropped), default=None),
            max((a for a, _ in dropped), default=None),
        ],
        "range": [min(answered), max(answered)] if answered else None,
        "worst_precision": round(min((r / a for a, r in boot + dropped if a), default=1.0), 4),
    }


def report(path: Path, fits: dict, *, repeats: int = 10) -> dict:
    """Per fit: the answered count and precision of the nested CV under every perturbation."""
    from core.match.risk import answer_threshold

    data = json.loads(path.read_text())
    rows, threshold = data["rows"], answer_threshold(data["cost"])
    print(
        f"{len(rows)} samples, {sum(r['kind'] == 'fold' for r in rows)} ordinary, "
        f"{sum(not r['ok'] for r in rows)} wrong ({sum(not r['ok'] and r['kind'] == 'fold' for r in rows)} ordinary)",
        file=sys.stderr,
    )
    out = {}
    cases = list(perturbations(rows, repeats=repeats))
    for name, fit in fits.items():
        got: dict[str, list[tuple[int, int]]] = {}
        for case, folds, train, scored in cases:
            got.setdefault(case, []).append(nested(rows, folds, train, fit, threshold, scored))
        answered = [a for v in got.values() for a, _ in v]
        out[name] = {
            "as_is": got["as is"][0],
            "range": [min(answered), max(answered)],
            "sd": round(statistics.pstdev(answered), 1),
            "worst_precision": round(min(r / a for v in got.values() for a, r in v if a), 4),
            "cases": {
                c: [min(a for a, _ in v), max(a for a, _ in v), sum(a - r for a, r in v)]
                for c, v in got.items()
            },
        }
        print(name, json.dumps(out[name]), file=sys.stderr)
    return out


def fits() -> dict:
    """The risk fits compared: the current one and the candidates."""
    from core.match import risk as R

    def variant(**kwargs):
        def fit(samples):
            return R.fit_calibration(samples, features=R.RISK_FEATURES, threshold=0.0, **kwargs)

        return fit

    def unanchored(samples):  # fit_risk before: a plain fit, the hand-set defaults below 2 wrong answers
        fitted = R.fit_calibration(samples, features=R.RISK_FEATURES)
        return fitted if fitted.samples else R.DEFAULT_RISK

    out = {"fit_risk": R.fit_risk, "unanchored (before)": unanchored}
    for l2, b in ((1.0, 1.0), (10.0, 10.0)):
        out[f"prior, l2 {l2:g}, intercept l2 {b:g}"] = variant(l2=l2, prior=R.DEFAULT_RISK, intercept_l2=b)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("file", type=Path)
    parser.add_argument("--dump", action="store_true")
    args = parser.parse_args()
    if args.dump:
        dump(args.file)
    else:
        print(json.dumps(report(args.file, fits()), indent=1))
