"""The report's inline SVG charts, built from numbers alone (no database)."""

from __future__ import annotations

import re

from evaluation import metrics, report
from evaluation.metrics import ItemScore


def bars(svg: str) -> list[tuple[float, float]]:
    """(x, width) of each bar."""
    return [
        (float(x), float(w))
        for x, w in re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height', svg)
    ]


def test_hbar_grows_negative_values_left_of_the_zero_line_and_escapes_labels():
    svg = report.svg_hbar([("<b>RS(0)</b>", [50.0]), ("RS(10)", [-100.0]), ("none", [None])], title="t & t")
    assert "<b>" not in svg and "&lt;b&gt;RS(0)&lt;/b&gt;" in svg and "t &amp; t" in svg
    zero = float(re.search(r'<line x1="([\d.]+)"', svg).group(1))
    (pos_x, pos_w), (neg_x, neg_w) = bars(svg)
    assert pos_x == zero and neg_x + neg_w == zero  # one starts, the other ends at zero
    assert abs(neg_w - 2 * pos_w) < 0.2  # to scale (coordinates rounded to 0.1)
    assert "—" in svg  # the missing value is marked, not drawn as 0
    assert "-100.0" in svg


def test_hbar_colours_by_row_and_negative_colour():
    svg = report.svg_hbar([("a", [1.0]), ("b", [2.0])], row_colors=["#111111", "#222222"])
    assert 'fill="#111111"' in svg and 'fill="#222222"' in svg
    svg = report.svg_hbar([("a", [1.0]), ("b", [-2.0])], negative_color="#ff0000")
    assert svg.count('fill="#ff0000"') == 1


def test_lines_break_at_missing_points():
    svg = report.svg_lines([0.0, 0.5, 1.0], {"precision": [0.5, None, 1.0], "coverage": [1.0, 0.5, 0.0]})
    polylines = re.findall(r'<polyline points="([^"]+)"', svg)
    assert sorted(len(p.split()) for p in polylines) == [1, 1, 3]  # precision split in two, coverage whole


def test_charts_from_a_summary_are_self_contained():
    items = [
        ItemScore("1", True, False, correct=True, confidence=0.9, stages_ms={"embed": 5.0}, library_confidence=0.8,
                  library_correct=True),
        ItemScore("2", False, True, stages_ms={"embed": 7.0}),
        ItemScore("3", True, False, correct=False, confidence=0.2, stages_ms={"embed": 9.0}),
    ]  # fmt: skip
    charts = report.charts(metrics.summarize(items))
    assert set(charts) == {"latency", "outcomes", "rs", "rs_thresholds", "library_curve"}
    for svg in charts.values():
        assert svg.startswith("<svg") and svg.endswith("</svg>")
        assert "href" not in svg and "<script" not in svg
    assert "RS(N=3)" in charts["rs"]


def test_fmt():
    assert report.fmt(None) == "—"
    assert report.fmt(0.4567, pct=True) == "45.7%"
    assert report.fmt(1234) == "1,234"
    assert report.fmt(-287.25) == "-287.2"
