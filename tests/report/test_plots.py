"""The matplotlib figures, inspected as objects: roofs and their labels, which roof is the
run's, the ridge, the legends, point areas, the memory peak's label and the phase boundaries.

Every expectation comes from a second path: the catalog's numbers by hand, the trace records'
own dtypes, categories and phases, not from the code that draws."""

from __future__ import annotations

from collections import Counter
from itertools import combinations, pairwise
from pathlib import Path
from typing import Any

import pytest
from matplotlib.collections import PathCollection
from matplotlib.colors import to_rgb
from matplotlib.legend import Legend
from matplotlib.text import Annotation, Text

from tensorledger.hardware import get_hardware
from tensorledger.ledger.memory import memory_of
from tensorledger.report.memory import memory_figure, write_memory_plot
from tensorledger.report.number_line import number_line, number_line_figure
from tensorledger.report.roofline import (
    CATEGORY_COLOURS,
    plot_roofline,
    roofline_figure,
    roofs,
)
from tensorledger.roofline import predict
from tensorledger.units import format_bytes
from tensorledger.workload import StepTrace, resolve_workload, trace_workload

H100 = get_hardware("h100")
MATRIX = ("matmul", "attention")


@pytest.fixture(scope="module")
def fp32_run() -> StepTrace:
    return trace_workload(resolve_workload("tiny", batch=2, seq=12, precision="fp32"))


@pytest.fixture(scope="module")
def bf16_run() -> StepTrace:
    return trace_workload(resolve_workload("tiny", batch=2, seq=12, precision="mixed-bf16"))


def _legends(figure: Any) -> dict[str, Legend]:
    axes = figure.axes[0]
    found = [c for c in axes.get_children() if isinstance(c, Legend)]
    return {legend.get_title().get_text(): legend for legend in found}


def _texts(legend: Legend) -> list[str]:
    return [t.get_text() for t in legend.get_texts()]


def _matrix_dtype(run: StepTrace) -> str:
    """A second path to the run's dtype: the input dtype carrying most matrix FLOPs."""
    flops: Counter[str] = Counter()
    for record in run.trace.records:
        if record.category in MATRIX and record.flops:
            flops[H100.compute_key(record.input_dtypes[0])] += record.flops
    return flops.most_common(1)[0][0]


def test_coinciding_peaks_share_one_labelled_roof() -> None:
    # H100 SXM dense: fp64 67, fp32 66.9 (0.15% apart), bf16 = fp16 989.5, tf32 494.7,
    # fp8 1979 TFLOP/s: six floating keys (int8 is no float), four distinct peaks, four lines.
    drawn = roofs(H100, "fp32")
    assert [r.keys for r in drawn] == [("fp8",), ("bf16", "fp16"), ("tf32",), ("fp64", "fp32")]
    assert drawn[-1].peak_flop_per_s == pytest.approx(66.9e12)  # drawn at the run's own peak
    assert roofs(H100, "fp64")[-1].peak_flop_per_s == pytest.approx(67e12)
    assert drawn[-1].label(H100) == "h100-sxm fp64/fp32 (67 TFLOP/s / 66.9 TFLOP/s)"
    assert drawn[1].label(H100) == "h100-sxm bf16/fp16 (989.5 TFLOP/s)"  # one rate, shared


@pytest.mark.parametrize(("name", "expected_key", "ridge"), [
    # 66.9e12 / 3.35e12 = 19.97 FLOP/B
    ("fp32_run", "fp32", 66.9e12 / 3.35e12),
    # 989.5e12 / 3.35e12 = 295.4 FLOP/B
    ("bf16_run", "bf16", 989.5e12 / 3.35e12),
])
def test_the_runs_dtype_roof_and_ridge_are_emphasised(request: pytest.FixtureRequest, name: str,
                                                      expected_key: str, ridge: float) -> None:
    run: StepTrace = request.getfixturevalue(name)
    assert _matrix_dtype(run) == expected_key
    prediction = predict(run.trace.records, H100, tokens=run.work.tokens)
    figure = roofline_figure(prediction, H100)
    axes = figure.axes[0]
    roof_lines = [line for line in axes.get_lines() if line.get_label().startswith("h100-sxm")]
    assert len(roof_lines) == 4  # fp8, bf16/fp16, tf32, fp64/fp32
    widest = max(roof_lines, key=lambda line: line.get_linewidth())
    assert sum(line.get_linewidth() == widest.get_linewidth() for line in roof_lines) == 1
    assert expected_key in widest.get_label().split(" ")[1].split("/")
    assert widest.get_label().endswith("this run's dtype")
    assert max(widest.get_ydata()) == pytest.approx(H100.dense_flop_per_s[expected_key])
    ridges = [line for line in axes.get_lines()
              if len(set(line.get_xdata())) == 1 and line.get_linestyle() == "--"]
    assert len(ridges) == 1
    assert ridges[0].get_xdata()[0] == pytest.approx(ridge)
    notes = [t.get_text() for t in axes.texts]
    assert any(f"({'h100-sxm'} {expected_key})" in n and n.startswith("ridge") for n in notes)
    assert _texts(_legends(figure)["roofs (dense peaks)"]) == [
        line.get_label() for line in roof_lines]


def test_categories_sizes_and_palettes(bf16_run: StepTrace) -> None:
    prediction = predict(bf16_run.trace.records, H100, tokens=bf16_run.work.tokens)
    figure = roofline_figure(prediction, H100)
    axes = figure.axes[0]
    legends = _legends(figure)
    plotted = sorted({r.category for r in bf16_run.trace.records
                      if r.flops > 0 and r.bytes_read + r.bytes_written > 0})
    assert _texts(legends["op category"]) == plotted
    # every roof grey or black, every category coloured: no colour shared
    roof_colours = {to_rgb(line.get_color()) for line in axes.get_lines()
                    if line.get_label().startswith("h100-sxm")}
    assert all(r == g == b for r, g, b in roof_colours)
    category_colours = {to_rgb(CATEGORY_COLOURS[c]) for c in plotted}
    assert not roof_colours & category_colours
    assert len(category_colours) == len(plotted)
    # area ∝ share of the step: one constant k with area = k × share for every point drawn
    # above the floor; a point's share is that of all the ops of its category at its spot
    step_s = sum(o.time_s for o in prediction.ops)
    share: Counter[tuple[str, float, float]] = Counter()
    for o in prediction.ops:
        if o.flops > 0 and o.bytes > 0:
            share[(o.category, o.intensity_flop_per_byte, o.attained_flop_per_s)] += (
                o.time_s / step_s)
    ratios, drawn = [], 0
    for collection in (c for c in axes.collections if isinstance(c, PathCollection)):
        category = collection.get_label()
        for (x, y), size in zip(collection.get_offsets(), collection.get_sizes(), strict=True):
            drawn += 1
            if share[(category, x, y)] >= 0.001:
                ratios.append(size / share[(category, x, y)])
    assert drawn == len(share) and len(ratios) >= 10
    assert max(ratios) == pytest.approx(min(ratios))
    assert max(share.values()) * min(ratios) >= 100  # the slowest spot is a point one sees
    # the size legend: 1%, 10%, 50% with marker areas (markersize²) 1 : 10 : 50
    size_legend = legends["point area"]
    assert _texts(size_legend) == ["1% of the step", "10% of the step", "50% of the step"]
    areas = [h.get_markersize() ** 2 for h in size_legend.legend_handles]
    assert areas[1] / areas[0] == pytest.approx(10) and areas[2] / areas[0] == pytest.approx(50)
    assert areas[0] == pytest.approx(min(ratios) * 0.01)  # same scale as the points


def test_overlay_draws_a_second_chip_dotted(fp32_run: StepTrace, tmp_path: Path) -> None:
    prediction = predict(fp32_run.trace.records, H100)
    a100 = get_hardware("a100")
    figure = roofline_figure(prediction, H100, overlay=a100)
    dotted = [line for line in figure.axes[0].get_lines()
              if line.get_label().startswith(a100.id)]
    assert dotted and all(line.get_linestyle() == ":" for line in dotted)
    assert sum(line.get_label().endswith("this run's dtype") for line in dotted) == 1
    written = plot_roofline(prediction, H100, tmp_path / "roof.png", overlay=a100)
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_memory_plot_marks_the_peak_and_the_phases(fp32_run: StepTrace, tmp_path: Path
                                                   ) -> None:
    ledger = memory_of(fp32_run)
    figure = memory_figure(ledger)
    axes = figure.axes[0]
    points = ledger.timeline.points
    assert ledger.peak_bytes == max(p.total_bytes for p in points)  # a second path to the peak
    notes = [t for t in axes.texts if isinstance(t, Annotation)]
    peak_notes = [t for t in notes if t.get_text().startswith("peak ")]
    assert len(peak_notes) == 1
    assert format_bytes(ledger.peak_bytes, "auto") in peak_notes[0].get_text()
    peak_index = next(p.index for p in points if p.total_bytes == ledger.peak_bytes)
    assert peak_notes[0].xy[0] == peak_index
    # phase boundaries: where a trace record's phase differs from the one before
    records = fp32_run.trace.records
    starts = [(r.index, r.phase) for prev, r in pairwise(records)
              if r.phase != prev.phase]
    assert {phase for _, phase in starts} >= {"backward", "optimizer"}
    lines = [line for line in axes.get_lines() if line.get_label() == "_phase boundary"]
    assert [line.get_xdata()[0] for line in lines] == [i - 0.5 for i, _ in starts]
    assert [t.get_text() for t in notes if t.get_text().endswith(" →")] == [
        f"{phase} →" for phase in (records[0].phase, *(phase for _, phase in starts))]
    assert _texts(axes.get_legend()) == ["parameters", "gradients", "optimizer state",
                                         "saved activations", "temporaries"]
    written = write_memory_plot(ledger, tmp_path / "memory.png")
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _overlaps(figure: Any) -> list[tuple[str, str]]:
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    labels = [t for t in figure.axes[0].get_xticklabels() if t.get_visible() and t.get_text()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels]
    return [(a, b) for (a, box_a), (b, box_b) in combinations(boxes, 2)
            if box_a.overlaps(box_b)]


@pytest.mark.parametrize("formats", [("fp8_e4m3fn", "fp8_e5m2"), ("fp4_e2m1", "fp6_e2m3"),
                                     ("fp4_e2m1", "fp8_e4m3fn")])
def test_number_line_tick_labels_do_not_collide(formats: tuple[str, ...], tmp_path: Path
                                                ) -> None:
    figure = number_line_figure(formats)
    assert _overlaps(figure) == []
    ticks = [t.get_text() for t in figure.axes[0].get_xticklabels() if t.get_text()]
    assert len(ticks) >= 5  # the axis still says where the values are
    names = [t.get_text().split("\n")[0] for t in figure.axes[0].get_yticklabels()]
    assert names == list(formats)
    written = number_line(formats, tmp_path / "line.png")
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_frontier_labels_do_not_overlap() -> None:
    # issue 41: `plan --plot` of llama-3-70b on 64 H100s, 4M tokens of 8192 (488 sequences):
    # two frontier layouts lie 0.5 GB apart near 66 GB and their labels overlapped
    from tensorledger.napkin.transformer import get_preset
    from tensorledger.plan.layouts import plan_layouts
    from tensorledger.report.plan import plan_figure

    plan = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                        global_batch_seqs=488, tokens=15e12)
    figure = plan_figure(plan)
    axes = figure.axes[0]
    notes = [t for t in axes.texts if isinstance(t, Annotation)]
    # the six fastest frontier layouts are named, fastest first, each at its own point
    front = plan.frontier[:6]
    assert [n.xy for n in notes] == [(r.time.step_s, r.memory.total_bytes / 1e9) for r in front]
    assert [n.get_text().split(",")[0] for n in notes] == [r.layout for r in front]
    assert min(abs(a.memory.total_bytes - b.memory.total_bytes)
               for a, b in pairwise(front)) < 1e9  # points closer than 1 GB: the hard case
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    # the labels' own boxes (an Annotation's extent includes its leader line)
    boxes = [Text.get_window_extent(n, renderer) for n in notes]
    legend = axes.get_legend().get_window_extent(renderer)
    assert [(i, j) for (i, a), (j, b) in combinations(enumerate(boxes), 2) if a.overlaps(b)] == []
    assert not any(box.overlaps(legend) for box in boxes)
    plot_area = axes.get_window_extent(renderer)
    assert all(plot_area.contains(box.x0, box.y0) and plot_area.contains(box.x1, box.y1)
               for box in boxes)
