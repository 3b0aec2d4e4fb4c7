"""The plotly figures of the HTML report, inspected as objects: the same roofs, emphasis, ridge,
peak label and phase boundaries as the matplotlib plots, from a second path each."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from itertools import pairwise
from typing import Any

import pytest

import tensorledger
from tensorledger.report.html import ledger_figures
from tensorledger.units import format_bytes


@pytest.fixture(scope="module", params=["fp32", "mixed-bf16"])
def ledger(request: pytest.FixtureRequest) -> Any:
    return tensorledger.account("tiny", "h100", batch=2, seq=12, precision=request.param)


def test_roofline_roofs_merged_and_the_runs_emphasised(ledger: Any) -> None:
    figure = ledger_figures(ledger)["roofline"]
    roofs = sorted((t for t in figure.data if t.mode == "lines"), key=lambda t: t.legendrank)
    # H100: fp8 1979, bf16 = fp16 989.5, tf32 494.7, fp64 67 ≈ fp32 66.9 TFLOP/s: four lines
    assert [t.name.split(" (")[0] for t in roofs] == [
        "h100-sxm fp8", "h100-sxm bf16/fp16", "h100-sxm tf32", "h100-sxm fp64/fp32"]
    key = "fp32" if ledger.precision == "fp32" else "bf16"  # matmuls run in the recipe's dtype
    thick = [t for t in roofs if t.line.width == max(r.line.width for r in roofs)]
    assert len(thick) == 1 and key in thick[0].name.split(" ")[1].split("/")
    assert thick[0].name.endswith("this run's dtype")
    # the ridge: the peak over 3.35 TB/s: 66.9e12 / 3.35e12 = 19.97, 989.5e12 / 3.35e12 = 295.4
    ridge = {"fp32": 66.9e12, "bf16": 989.5e12}[key] / 3.35e12
    (line,) = [s for s in figure.layout.shapes if s.x0 == s.x1]
    assert line.x0 == pytest.approx(ridge)
    assert any(a.text.startswith("ridge") and f"({key})" in a.text
               for a in figure.layout.annotations)
    categories = [t for t in figure.data if t.mode == "markers"]
    assert [t.name for t in categories] == sorted(
        {o.category for o in ledger.roofline.ops if o.flops > 0 and o.bytes > 0})
    # diameter² ∝ share: every op of a category at one spot is one point with their share
    step_s = sum(o.time_s for o in ledger.roofline.ops)
    share: Counter[tuple[str, float, float]] = Counter()
    for o in ledger.roofline.ops:
        if o.flops > 0 and o.bytes > 0:
            share[(o.category, o.intensity_flop_per_byte, o.attained_flop_per_s)] += (
                o.time_s / step_s)
    drawn = [(t.name, x, y, size) for t in categories
             for x, y, size in zip(t.x, t.y, t.marker.size, strict=True)]
    assert sorted((c, x, y) for c, x, y, _ in drawn) == sorted(share)
    ratios = [size**2 / share[(c, x, y)] for c, x, y, size in drawn if share[(c, x, y)] >= 1e-3]
    assert len(ratios) >= 10 and max(ratios) == pytest.approx(min(ratios))


def test_memory_timeline_peak_and_phases(ledger: Any) -> None:
    figure = ledger_figures(ledger)["memory-timeline"]
    peak_bytes = max(p.total_bytes for p in ledger.memory.timeline.points)
    assert peak_bytes == ledger.memory.peak_bytes
    (peak,) = [a for a in figure.layout.annotations if a.text.startswith("peak ")]
    assert format_bytes(peak_bytes, "auto") in peak.text
    # phase boundaries from a fresh trace of the same workload: where a record's phase changes
    from tensorledger.hardware import get_hardware
    from tensorledger.hardware.target import target_of
    from tensorledger.workload import resolve_workload, trace_workload

    records = trace_workload(resolve_workload(
        "tiny", batch=2, seq=12, precision=ledger.precision,
        target=target_of(get_hardware(ledger.hardware)))).trace.records
    starts = [(r.index, r.phase) for prev, r in pairwise(records) if r.phase != prev.phase]
    assert {phase for _, phase in starts} >= {"backward", "optimizer"}
    assert [s.x0 for s in figure.layout.shapes] == [i - 0.5 for i, _ in starts]
    assert [a.text for a in figure.layout.annotations if a.text.endswith(" →")] == [
        f"{phase} →" for phase in (records[0].phase, *(phase for _, phase in starts))]


def test_time_by_module_groups_repeats_as_the_table_does_and_names_the_optimizer(
        ledger: Any) -> None:
    # issue 41: twelve ungrouped `blocks.N.mlp.up` bars and an unnamed `(root)` bar
    figure = ledger_figures(ledger)["time-by-module"]
    (bars,) = figure.data
    names, times_ms = list(bars.y)[::-1], list(bars.x)[::-1]  # drawn bottom-up, slowest on top
    # a second path to the groups: each block index replaced by its range, times summed
    blocks = sorted({int(found) for t in ledger.roofline.by_module
                     for found in re.findall(r"\.blocks\.(\d+)", t.name)})
    span = f"{{{blocks[0]}..{blocks[-1]}}}"
    grouped: defaultdict[str, float] = defaultdict(float)
    counts: defaultdict[str, int] = defaultdict(int)
    for t in ledger.roofline.by_module:
        key = re.sub(r"\.blocks\.\d+", f".blocks.{span}", t.name)
        grouped[key] += t.time_s * 1e3
        counts[key] += 1
    expected = {(key or "optimizer step and ops outside modules")
                + (f" ×{counts[key]}" if counts[key] > 1 else ""): ms
                for key, ms in grouped.items()}
    slowest = dict(sorted(expected.items(), key=lambda item: -item[1])[:15])
    assert len(expected) > 15 and len(names) == 15  # tiny: 16 groups, the top 15 drawn
    assert dict(zip(names, times_ms, strict=True)) == pytest.approx(slowest)
    assert not any(re.search(r"\.blocks\.\d", name) for name in names)  # no block alone
    assert "(root)" not in names and "optimizer step and ops outside modules" in names
    assert any(".attention" in name for name in names)
    assert times_ms == sorted(times_ms, reverse=True)


def test_memory_breakdown_draws_categories_and_says_the_peak(ledger: Any) -> None:
    figure = ledger_figures(ledger)["memory-breakdown"]
    (bars,) = figure.data
    # the peak is a moment, not a category (issue 41): it is in the title, not a bar
    assert list(bars.x) == ["parameters", "gradients", "optimizer state", "saved activations"]
    m = ledger.memory
    assert list(bars.y) == pytest.approx([m.params_bytes / 1e9, m.grads_bytes / 1e9,
                                          m.optimizer_state_bytes / 1e9,
                                          m.saved_activation_bytes / 1e9])
    assert format_bytes(m.peak_bytes, "auto") in figure.layout.title.text


def test_roofline_ticks_carry_their_units(ledger: Any) -> None:
    # issue 41: plotly wrote 1e10 FLOP/s as "10B" (read as bytes) beside "1T"
    axes = ledger_figures(ledger)["roofline"].layout
    for axis, unit in ((axes.yaxis, "FLOP/s"), (axes.xaxis, "FLOP/B")):
        assert axis.tickmode == "array"
        assert all(text.endswith(unit) for text in axis.ticktext)
        assert all(math.log10(v) == pytest.approx(round(math.log10(v))) for v in axis.tickvals)
        assert "B" not in {text.split(" ")[0][-1] for text in axis.ticktext}
    texts = dict(zip(axes.yaxis.tickvals, axes.yaxis.ticktext, strict=True))
    assert texts[1e10] == "10 GFLOP/s" and texts[1e12] == "1 TFLOP/s"
    # the run's roof (H100 fp32 66.9 TFLOP/s or bf16 989.5 TFLOP/s) lies between two ticks
    peak = ledger.peak_flop_per_s
    assert min(axes.yaxis.tickvals) < peak < max(axes.yaxis.tickvals)


def test_memory_timeline_starts_at_the_first_op(ledger: Any) -> None:
    # issue 41: the x axis started at −500 on gpt2
    layout = ledger_figures(ledger)["memory-timeline"].layout
    last = ledger.memory.timeline.points[-1].index
    assert tuple(layout.xaxis.range) == (0, last + 0.5)
    assert all(a.x >= 0 for a in layout.annotations)
