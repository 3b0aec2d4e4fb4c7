"""The meter's expected MFU, derived by hand from the roofline's time model.

The step is one bias-free ``Linear(16, 8)`` forward on a batch of 4 (two ops: a view and a
matmul), on a made-up chip whose peaks, bandwidth and expected efficiencies make every term of
the time model a round number.  The clock is a FakeClock: no test reads the wall clock.
"""

from __future__ import annotations

import io

import pytest
import torch

from tensorledger.bench.meter import Meter
from tensorledger.hardware import Hardware
from tensorledger.hardware.chip import Efficiency
from tensorledger.roofline.model import predict
from tensorledger.trace import trace
from tests.bench.meter_helpers import TEST_CPU, FakeClock

# TEST_CPU (fp32 100 GFLOP/s, 50 GB/s) with expected efficiencies: matmuls at half the peak
# at every size, streams at a quarter of the bandwidth, 2 µs per op
EFFICIENT_CPU = Hardware(
    id="test-cpu-expected", name="a made-up CPU with expected efficiencies",
    memory_bytes=64e9, memory_bandwidth_bytes_per_s=50e9,
    dense_flop_per_s={"fp32": 100e9, "bf16": 300e9},
    efficiency=Efficiency(matmul={"default": ((1.0, 0.5),)}, attention=None,
                          memory_bandwidth=0.25, op_overhead_s=2e-6))

STEP_S = 1e-5  # the fake clock's step
FLOPS = 2 * 4 * 16 * 8  # the matmul: 1,024
BYTES = 4 * 16 * 4 + 8 * 16 * 4 + 4 * 8 * 4  # x 256 + W 512 read, 128 written: 896


def _run(hardware: Hardware, steps: int = 6) -> tuple[Meter, io.StringIO]:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8, bias=False)
    x = torch.ones(4, 16)
    clock = FakeClock()
    out = io.StringIO()
    meter = Meter(model, hardware=hardware, every=0, warmup_steps=1, clock=clock, stream=out)
    for _ in range(steps):
        with meter.step(tokens=4):
            model(x)
            clock.advance(STEP_S)
    return meter, out


def test_expected_mfu_by_hand_at_the_catalogs_efficiencies() -> None:
    meter, out = _run(EFFICIENT_CPU)
    summary = meter.close()
    # the matmul: compute 1024 / (100e9 · 0.5) = 20.48 ns, memory 896 / (50e9 · 0.25)
    # = 71.68 ns, the bound's 10.24 and 17.92 ns below them: max 71.68 ns + 2 µs per op;
    # the view (t) launches no kernel and moves nothing: 0
    expected_s = max(FLOPS / (100e9 * 0.5), BYTES / (50e9 * 0.25)) + 2e-6
    assert expected_s == pytest.approx(2.07168e-6, rel=1e-12)
    assert summary.expected_step_time_s == pytest.approx(expected_s, rel=1e-12)
    # the same FLOPs and fp32 peak as the measured MFU, over the expected time
    expected_mfu = FLOPS / (100e9 * expected_s)  # 1024 / 207,168 = 0.004943
    assert summary.expected_mfu == pytest.approx(expected_mfu, rel=1e-12)
    measured_mfu = FLOPS / (100e9 * STEP_S)  # 1024 / 1e6 = 0.001024
    assert summary.mfu == pytest.approx(measured_mfu, rel=1e-12)
    assert summary.expected_name == "expected MFU (the catalog's expected efficiencies)"
    # the second path: the roofline's own prediction of the same records
    model, x = torch.nn.Linear(16, 8, bias=False), torch.ones(4, 16)
    records = trace(lambda: model(x)).records
    assert predict(records, EFFICIENT_CPU).time_s == pytest.approx(expected_s, rel=1e-12)
    text = out.getvalue()
    assert "expected MFU (the catalog's expected efficiencies) 0.005" in text
    assert f"measured / expected {measured_mfu / expected_mfu:.2f}" in text  # 0.21
    metrics = meter.metrics()
    assert metrics["expected_mfu"] == pytest.approx(expected_mfu, rel=1e-12)


def test_each_step_and_interval_carry_the_expected_figure() -> None:
    meter, out = _run(EFFICIENT_CPU, steps=4)
    interval = meter.flush()
    expected_s = BYTES / (50e9 * 0.25) + 2e-6
    # steps 2-4 are timed (the first was recorded); each is priced alike
    assert interval.steps == 3
    assert interval.expected_step_time_s == pytest.approx(expected_s, rel=1e-12)
    assert interval.expected_mfu == pytest.approx(FLOPS / (100e9 * expected_s), rel=1e-12)
    assert ", expected 0.005" in out.getvalue()
    meter.close()


def test_a_chip_with_no_efficiencies_expects_the_roofline_bound() -> None:
    meter, _ = _run(TEST_CPU)
    summary = meter.close()
    # no efficiencies, no overhead: the bound, max(1024 / 100e9, 896 / 50e9) = 17.92 ns
    bound_s = max(FLOPS / 100e9, BYTES / 50e9)
    assert summary.expected_step_time_s == pytest.approx(bound_s, rel=1e-12)
    assert summary.expected_mfu == pytest.approx(FLOPS / (100e9 * bound_s), rel=1e-12)  # 0.571
    assert summary.expected_name == "expected MFU (the datasheet alone: the roofline bound)"
