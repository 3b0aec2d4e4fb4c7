"""Every result prints as a short summary whose figures are the object's own fields.

One GPT-2 training step (3,838 ops, fp32 on meta) stands behind every object: the default
dataclass reprs of these hold every op and every timeline point (GPT-2's trace at batch 8,
seq 1024 printed about 480,000 characters).
"""

from __future__ import annotations

import re

import pytest

from tensorledger.bench.harness import _statistics
from tensorledger.hardware import get_hardware
from tensorledger.ledger.account import Ledger, account_run
from tensorledger.ledger.roofline import RooflineRun
from tensorledger.ledger.trace import TraceReport
from tensorledger.summary import summary
from tensorledger.workload import StepTrace, resolve_workload

#: A gpt2-sized result prints in a few lines at most.
SHORT = 400
_SCALE = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


@pytest.fixture(scope="module")
def step() -> tuple[Ledger, StepTrace]:
    work = resolve_workload("gpt2", batch=1, seq=64, precision="fp32")
    return account_run(work, get_hardware("h100"))


def _number(text: str, pattern: str) -> float:
    found = re.search(pattern, text)
    assert found is not None, (pattern, text)
    return float(found.group(1).replace(",", ""))


def _bytes(text: str, label: str) -> float:
    found = re.search(rf"{label} ([0-9.]+) ([KMGT]?B)\b", text)
    assert found is not None, (label, text)
    return float(found.group(1)) * _SCALE[found.group(2)]


def test_summary_joins_its_parts() -> None:
    assert summary("X", "a", "", "b") == "X(a, b)"


def test_trace_and_its_records(step: tuple[Ledger, StepTrace]) -> None:
    trace = step[1].trace
    text = repr(trace)
    assert len(text) < SHORT and len(repr(trace.records)) > 100 * SHORT
    assert _number(text, r"([\d,]+) ops") == len(trace.records)
    assert _number(text, r"([\d.e]+) FLOPs") == pytest.approx(trace.flops, rel=5e-4)
    assert _bytes(text, r"FLOPs,") == pytest.approx(trace.bytes, rel=5e-4)
    assert _number(text, r"([\d,]+) uncovered") == len(trace.uncovered)
    assert f"on {trace.device}" in text
    matmul = next(r for r in trace.records if r.op == "aten.mm.default")
    line = repr(matmul)
    assert f"#{matmul.index} aten.mm.default ({matmul.phase} in {matmul.module})" in line
    assert _number(line, r"([\d.e]+) FLOPs") == pytest.approx(matmul.flops, rel=5e-4)


def test_trace_summary_and_modules(step: tuple[Ledger, StepTrace]) -> None:
    s = step[0].trace
    text = repr(s)
    assert len(text) < SHORT
    assert _number(text, r"([\d,]+) ops") == s.ops == len(step[1].trace.records)
    assert _number(text, r"([\d.e]+) FLOPs") == pytest.approx(s.flops, rel=5e-4)
    assert s.six_n_d is not None
    assert _number(text, r"([\d.]+) × 6·N·D") == pytest.approx(s.six_n_d.ratio, abs=5e-4)
    assert sum(s.phase_flops().values()) == s.flops == sum(s.category_flops().values())
    root = repr(s.modules)
    assert len(root) < SHORT
    assert _number(root, r"([\d,]+) children") == len(s.modules.children)


def test_memory(step: tuple[Ledger, StepTrace]) -> None:
    memory = step[0].memory
    text = repr(memory)
    assert len(text) < SHORT
    assert _bytes(text, "peak") == pytest.approx(memory.peak_bytes, rel=5e-4)
    assert f"after {memory.peak_op} ({memory.peak_phase})" in text
    for category, nbytes in memory.by_category().items():
        if nbytes:
            assert _bytes(text, category) == pytest.approx(nbytes, rel=5e-4)
    timeline = repr(memory.timeline)
    assert len(timeline) < SHORT
    assert _number(timeline, r"([\d,]+) points") == len(memory.timeline.points)
    assert _number(timeline, r"([\d,]+) storages") == memory.timeline.storages


def test_workload_step_and_reports(step: tuple[Ledger, StepTrace]) -> None:
    ledger, run = step
    work = repr(run.work)
    assert work == "Workload(gpt2: train, batch 1 × seq 64, fp32, adamw (for-loop), on meta)"
    text = repr(run)
    assert len(text) < SHORT and work in text and repr(run.trace) in text
    assert _number(text, r"([\d,]+) params") == run.params
    report = TraceReport.of(run, 2)
    assert len(repr(report)) < SHORT and repr(report.summary) in repr(report)
    roofline = RooflineRun(model=ledger.model, built_by=ledger.built_by, step=ledger.step,
                           batch=ledger.batch, seq=ledger.seq, device=ledger.device,
                           precision=ledger.precision, optimizer=ledger.optimizer,
                           tokens=ledger.tokens_per_step,
                           uncovered={}, prediction=ledger.roofline, comparison=None,
                           measurement_warning=None, hardware_unreliable=())
    for text in (repr(roofline), repr(ledger)):
        assert len(text) < SHORT
        assert f"MFU {ledger.mfu:.3f}" in text
        # 21.44 ms → 0.02144 s: four significant digits of the predicted step
        for pattern, seconds in ((r"([\d.]+) (ms|µs) per step expected", ledger.step_time_s),
                                 (r"bound ([\d.]+) (ms|µs)", ledger.roofline.ideal_time_s)):
            shown = re.search(pattern, text)
            assert shown is not None
            unit = {"ms": 1e-3, "µs": 1e-6}[shown.group(2)]
            assert float(shown.group(1)) * unit == pytest.approx(seconds, rel=5e-4)
    assert _number(repr(ledger), r"([\d.e]+) FLOPs") == pytest.approx(ledger.trace.flops,
                                                                        rel=5e-4)


def test_measurement() -> None:
    samples = [0.002, 0.001, 0.003, 0.004, 0.005]
    m = _statistics("step", "cpu", "perf_counter", 1, 1, samples)
    text = repr(m)
    assert text.startswith("Measurement('step', median 3 ms, ")  # the middle of 1..5 ms
    assert "5 samples" in text and "on cpu" in text


def test_napkin_results() -> None:
    from tensorledger.napkin import (
        devices_for_duration,
        devices_needed,
        flop_budget,
        largest_model,
        training_time,
    )

    h100 = get_hardware("h100")  # 80 GB, dense bf16 989.5 TFLOP/s
    # 6 · 70e9 · 15e12 = 6.3e24 FLOPs / (1024 · 0.5 · 989.5e12) / 86,400 = 143.9 days
    assert repr(training_time(h100, 1024, 0.5, params=70e9, tokens=15e12)) == (
        "TrainingTime(6.3e24 FLOPs on 1,024 × h100-sxm at MFU 0.5, 143.9 days)")
    # 8 · 989.5e12 · 1e6 s = 7.916e21 FLOPs; 1e6 s / 86,400 = 11.57 days
    assert repr(flop_budget(h100, 8, 1e6)) == (
        "FlopBudget(8 × h100-sxm for 11.57 days at MFU 1, 7.916e21 FLOPs)")
    # bf16 params and grads, fp32 moments: 2 + 2 + 4 + 4 = 12 bytes; 8 · 80e9 / 12 = 53.33e9
    assert repr(largest_model(h100, 8, "lecture", "adamw")) == (
        "LargestModel(8 × h100-sxm, bf16-fp32-states + adamw at 12 bytes per parameter, "
        "53.33B params)")
    # 70e9 · 12 / 80e9 = 10.5 → 11 devices
    assert repr(devices_needed(h100, 70e9, "lecture", "adamw")) == (
        "DevicesNeeded(70B params, bf16-fp32-states + adamw at 12 bytes per parameter, "
        "11 × h100-sxm)")
    # 3.14e23 / (0.5 · 989.5e12 · 30 · 86,400) = 244.9 → 245 devices
    assert repr(devices_for_duration(h100, 30 * 86_400, 0.5, flops=3.14e23)) == (
        "DevicesForDuration(3.14e23 FLOPs within 30 days at MFU 0.5, 245 × h100-sxm)")


def test_meter_summary() -> None:
    import torch

    from tensorledger import Meter
    from tests.bench.meter_helpers import TEST_CPU, FakeClock

    model = torch.nn.Embedding(10, 4)
    clock = FakeClock()
    meter = Meter(model, hardware=TEST_CPU, quiet=True, every=0, warmup_steps=2, clock=clock)
    for t in [0.5, 0.5, 0.030, 0.010, 0.020, 0.040]:  # the first two are warm-up
        with meter.step():
            model(torch.zeros(3, 5, dtype=torch.long))
            clock.advance(t)
    # measured 10, 20, 30, 40 ms: median 25 ms; 4 steps × 15 tokens / 0.1 s = 600 tokens/s;
    # a lookup is a gather, 0 FLOPs: MFU 0
    assert repr(meter.close()) == (
        "MeterSummary(4 steps measured on test-cpu, median 25 ms per step, 600 tokens/s, "
        "MFU 0.000)")


def test_prediction_hardware_and_comparison_reprs(step: tuple[Ledger, StepTrace]) -> None:
    from tensorledger.roofline.compare import compare

    ledger, _ = step
    prediction = ledger.roofline
    text = repr(prediction)
    assert len(text) < SHORT and text.startswith("RooflinePrediction(")
    assert _number(text, r"\b([0-9,]+) ops") == len(prediction.ops)
    assert _number(text, r"MFU ([0-9.]+)") == round(prediction.mfu, 3)
    op = repr(prediction.ops[0])
    assert len(op) < SHORT and f"#0 {prediction.ops[0].op}" in op
    chip = repr(get_hardware("h100"))
    assert len(chip) < SHORT and "'h100-sxm'" in chip and "7 dense peaks" in chip  # 7 listed
    result = compare(prediction, [], measured_step_s=2 * prediction.time_s, peak_flop_per_s=1.0)
    assert repr(result).endswith("error -50.0%)")  # predicted / (2 × predicted) − 1
