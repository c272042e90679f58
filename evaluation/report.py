"""The self-contained HTML report: inline CSS and inline SVG charts, no external URL, so the
file can be mailed, archived or opened offline. The SVG builders are pure functions."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from evaluation import metrics
from evaluation.selectors import evaluation_failures

PALETTE = ("#2f6db5", "#e08a2c", "#3a9b5c", "#c0392b", "#8e6bbf", "#7f8c8d")
OUTCOME_COLORS = {
    metrics.CORRECT: "#3a9b5c",
    metrics.CORRECT_ABSTENTION: "#7fbf8e",
    metrics.MISSED: "#e0b04a",
    metrics.WRONG: "#c0392b",
    metrics.ANSWERED_UNANSWERABLE: "#e06c5c",
    metrics.GOLD_ERROR: "#95a5a6",
}
OUTCOME_LABELS = {
    metrics.CORRECT: "correct answer",
    metrics.CORRECT_ABSTENTION: "correct abstention",
    metrics.MISSED: "abstained, was answerable",
    metrics.WRONG: "wrong answer",
    metrics.ANSWERED_UNANSWERABLE: "answered the unanswerable",
    metrics.GOLD_ERROR: "gold SQL failed (excluded)",
}


def fmt(value: Any, *, digits: int = 1, pct: bool = False) -> str:
    """A number for people: "—" for missing, percentages for ratios."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and not pct:
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value * 100:.{digits}f}%" if pct else f"{value:,.{digits}f}"
    return str(value)


def svg_hbar(
    rows: Sequence[tuple[str, Sequence[float | None]]],
    *,
    series: Sequence[str] = (),
    colors: Sequence[str] | None = None,
    row_colors: Sequence[str] | None = None,
    negative_color: str | None = None,
    unit: str = "",
    title: str = "",
    digits: int = 1,
) -> str:
    """Horizontal bars, one group per row and one bar per series; negative values grow left of
    a zero line (RS goes negative). Missing values leave a gap labelled "—". `row_colors` colours
    each row's (single) bar by row instead of by series."""
    colors = list(colors or PALETTE)
    per = max(1, max((len(v) for _, v in rows), default=1))
    bar, gap, label_w, plot_w, pad = 14, 10, 190, 380, 70
    legend_h = 20 if series else 0
    height = legend_h + len(rows) * (per * bar + gap) + gap + 4
    width = label_w + plot_w + pad
    values = [v for _, vs in rows for v in vs if v is not None]
    lo, hi = min([0.0, *values]), max([0.0, *values])
    span = (hi - lo) or 1.0
    neg_pad = 64 if lo < 0 else 0  # room for the value written left of a negative bar
    plot_w -= neg_pad

    def x(v: float) -> float:
        return label_w + neg_pad + (v - lo) / span * plot_w

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{html.escape(title)}" class="chart">'
    ]
    if title:
        out.append(f"<title>{html.escape(title)}</title>")
    for n, name in enumerate(series):
        lx = label_w + n * 110
        out.append(f'<rect x="{lx}" y="4" width="10" height="10" fill="{colors[n % len(colors)]}"/>')
        out.append(f'<text x="{lx + 14}" y="13" class="legend">{html.escape(name)}</text>')
    y = legend_h + gap
    for r, (label, vs) in enumerate(rows):
        group_h = per * bar
        out.append(
            f'<text x="{label_w - 6}" y="{y + group_h / 2 + 4:.1f}" text-anchor="end">{html.escape(label)}</text>'
        )
        for n, v in enumerate(vs):
            by = y + n * bar
            if v is None:
                out.append(f'<text x="{x(0) + 4:.1f}" y="{by + bar - 3}" class="value">—</text>')
                continue
            x0, x1 = sorted((x(0), x(v)))
            color = row_colors[r % len(row_colors)] if row_colors else colors[n % len(colors)]
            if v < 0 and negative_color:
                color = negative_color
            out.append(
                f'<rect x="{x0:.1f}" y="{by + 1}" width="{max(x1 - x0, 1):.1f}" height="{bar - 2}" '
                f'fill="{color}"><title>{html.escape(label)}: {v:.{digits}f}{unit}</title></rect>'
            )
            tx, anchor = (x1 + 4, "start") if v >= 0 else (x0 - 4, "end")
            out.append(
                f'<text x="{tx:.1f}" y="{by + bar - 3}" text-anchor="{anchor}" class="value">'
                f"{v:.{digits}f}{unit}</text>"
            )
        y += group_h + gap
    zx = x(0)
    out.append(f'<line x1="{zx:.1f}" y1="{legend_h + 4}" x2="{zx:.1f}" y2="{height - 2}" class="axis"/>')
    out.append("</svg>")
    return "".join(out)


def svg_lines(
    xs: Sequence[float],
    series: dict[str, Sequence[float | None]],
    *,
    x_label: str = "",
    title: str = "",
    y_max: float = 1.0,
) -> str:
    """Lines over a shared x axis (0..1 by default on both axes), points marked, gaps for None."""
    width, height, left, right, top, bottom = 560, 260, 50, 20, 28, 40
    pw, ph = width - left - right, height - top - bottom
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    x_span = (x_hi - x_lo) or 1.0

    def px(v: float) -> float:
        return left + (v - x_lo) / x_span * pw

    def py(v: float) -> float:
        return top + ph - (v / y_max) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{html.escape(title)}" class="chart">'
    ]
    if title:
        out.append(f"<title>{html.escape(title)}</title>")
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        ty = py(tick * y_max)
        out.append(f'<line x1="{left}" y1="{ty:.1f}" x2="{width - right}" y2="{ty:.1f}" class="grid"/>')
        out.append(
            f'<text x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end" class="value">{tick * y_max:g}</text>'
        )
    for tick in (x_lo, (x_lo + x_hi) / 2, x_hi):
        out.append(
            f'<text x="{px(tick):.1f}" y="{height - bottom + 16}" text-anchor="middle" class="value">{tick:g}</text>'
        )
    if x_label:
        out.append(
            f'<text x="{left + pw / 2:.1f}" y="{height - 6}" text-anchor="middle">{html.escape(x_label)}</text>'
        )
    for n, (name, ys) in enumerate(series.items()):
        color = PALETTE[n % len(PALETTE)]
        segments, current = [], []
        for xv, yv in zip(xs, ys, strict=True):
            if yv is None:
                if current:
                    segments.append(current)
                current = []
            else:
                current.append((px(xv), py(yv)))
        if current:
            segments.append(current)
        for seg in segments:
            points = " ".join(f"{a:.1f},{b:.1f}" for a, b in seg)
            out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>')
            out.extend(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{color}"/>' for a, b in seg)
        lx = left + n * 140
        out.append(f'<rect x="{lx}" y="6" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{lx + 14}" y="15" class="legend">{html.escape(name)}</text>')
    out.append(
        f'<line x1="{left}" y1="{top + ph}" x2="{width - right}" y2="{top + ph}" class="axis"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" class="axis"/></svg>'
    )
    return "".join(out)


def charts(m: dict[str, Any]) -> dict[str, str]:
    """The report's charts from an evaluation's metrics."""
    latency = m.get("latency_ms", {})
    stages = [(name, [s.get("p50"), s.get("p95")]) for name, s in latency.items() if s.get("n")]
    outcomes = m.get("outcomes", {})
    rs = m.get("rs", {})
    sweep = m.get("confidence", {}).get("sweep", [])
    curve = m.get("library_curve", [])
    return {
        "latency": svg_hbar(stages, series=["p50", "p95"], unit=" ms", title="Per-stage latency (ms)"),
        "outcomes": svg_hbar(
            [(OUTCOME_LABELS[k], [float(outcomes.get(k, 0))]) for k in metrics.OUTCOMES],
            row_colors=[OUTCOME_COLORS[k] for k in metrics.OUTCOMES],
            title="Outcomes (questions)",
            digits=0,
        )
        if outcomes
        else "",
        "rs": svg_hbar(
            [
                (f"RS({c})" if c != "N" else f"RS(N={m.get('rs_n', '?')})", [rs.get(str(c))])
                for c in metrics.RS_PENALTIES
            ],
            title="Reliability score by penalty",
            negative_color=OUTCOME_COLORS[metrics.WRONG],
        ),
        "rs_thresholds": svg_hbar(
            [(f"confidence ≥ {row['threshold']:g}", [row["rs"]]) for row in sweep],
            title="RS(10) when abstaining below a confidence threshold",
            negative_color=OUTCOME_COLORS[metrics.WRONG],
        ),
        "library_curve": svg_lines(
            [row["threshold"] for row in curve],
            {
                "coverage": [row["coverage"] for row in curve],
                "precision": [row["precision"] for row in curve],
            },
            x_label="library match confidence threshold",
            title="Library coverage and precision by confidence threshold",
        )
        if curve
        else "",
    }


def report_context(*, evaluation, items: Sequence) -> dict[str, Any]:
    m = evaluation.metrics or {}
    ex = m.get("execution_accuracy", {})
    ans = m.get("answerability", {})
    rs = m.get("rs", {})
    lib = m.get("library", {})
    tuned = m.get("confidence", {}).get("tuned", {})
    headline = [
        (
            "Execution accuracy",
            fmt(ex.get("accuracy"), pct=True),
            f"{fmt(ex.get('correct'))} of {fmt(ex.get('total'))} answerable",
        ),
        *[
            (
                f"RS({c})",
                fmt(rs.get(str(c))),
                "N = " + fmt(m.get("rs_n")) if c == "N" else "penalty " + str(c),
            )
            for c in metrics.RS_PENALTIES
        ],
        ("Abstention precision", fmt(ans.get("precision"), pct=True), "unanswerable = positive"),
        (
            "Abstention recall",
            fmt(ans.get("recall"), pct=True),
            f"TP {fmt(ans.get('tp'))}, FN {fmt(ans.get('fn'))}",
        ),
        ("Abstention F1", fmt(ans.get("f1"), pct=True), f"FP {fmt(ans.get('fp'))}, TN {fmt(ans.get('tn'))}"),
        ("Abstention AUC", fmt(ans.get("auc"), digits=3), "by abstention score"),
    ]
    counts = m.get("counts", {})
    usage = m.get("usage", {})
    return {
        "evaluation": evaluation,
        "m": m,
        "headline": headline,
        "counts": counts,
        "usage": {
            "tokens_prompt": fmt(usage.get("tokens_prompt")),
            "tokens_completion": fmt(usage.get("tokens_completion")),
            "cost": f"${usage.get('cost_usd', 0):.4f}",
            "per_question": fmt(usage.get("tokens_per_question")),
        },
        "latency": [
            (name, fmt(s.get("p50")), fmt(s.get("p95")), fmt(s.get("n")))
            for name, s in m.get("latency_ms", {}).items()
        ],
        "sweep": [
            (f"{row['threshold']:g}", fmt(row["rs"]), fmt(row["coverage"], pct=True))
            for row in m.get("confidence", {}).get("sweep", [])
        ],
        "tuned": {
            k: fmt(v) if k != "best_threshold" else (f"{v:g}" if v is not None else "—")
            for k, v in tuned.items()
        },
        "runs_with_confidence": m.get("confidence", {}).get("runs_with_confidence", 0),
        "library": {
            "answered": fmt(lib.get("answered")),
            "coverage": fmt(lib.get("coverage"), pct=True),
            "precision": fmt(lib.get("precision"), pct=True),
            "accuracy": fmt(lib.get("execution_accuracy"), pct=True),
            "rs": [(c, fmt((lib.get("rs") or {}).get(str(c)))) for c in metrics.RS_PENALTIES],
        },
        "curve": [
            (
                f"{row['threshold']:g}",
                fmt(row["answered"]),
                fmt(row["coverage"], pct=True),
                fmt(row["precision"], pct=True),
            )
            for row in m.get("library_curve", [])
            if row["answered"] and round(row["threshold"] * 10, 6).is_integer()  # every 0.1 in the table
        ],
        "categories": [
            (name, fmt(c["questions"]), fmt(c["accuracy"], pct=True), fmt(c["rs10"]))
            for name, c in m.get("by_category", {}).items()
        ],
        "charts": {k: mark_safe(v) for k, v in charts(m).items()},  # built from numbers and escaped labels
        "failures": [
            {"item": i, "label": OUTCOME_LABELS.get(i.verdict, i.verdict)}
            for i in evaluation_failures(evaluation=evaluation, limit=25)
        ],
        "items_total": len(items),
        "items_done": sum(1 for i in items if i.done),
    }


def report_render(*, evaluation, items: Sequence) -> str:
    """The report as one HTML document."""
    return render_to_string("evaluation/report.html", report_context(evaluation=evaluation, items=items))
