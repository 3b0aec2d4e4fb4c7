"""The probe's ops timed by name (``bench.probe_ops``): GELU, log-softmax and the embedding's
backward in bf16, each kernel replayed alone, their bytes by the trace's rules worked out by
hand here; a fake clock times every sample, so each rate is known."""

from __future__ import annotations

import pytest
import torch

from tensorledger.bench.probe import _Timer
from tensorledger.bench.probe_kernels import KernelPlan, probe_kernels
from tests.bench.test_probe_noise import FakeClock

MEDIAN_S = 2e-3
PLAN = KernelPlan(**{**KernelPlan.none().__dict__, "stream_dtypes": ("bf16",),
                     "op_rows": (4,), "op_width": 32})


def _found():  # type: ignore[no-untyped-def]
    timer = _Timer(torch.device("cpu"), FakeClock([MEDIAN_S]), 0.10, 0)
    return probe_kernels(timer, PLAN, budget_s=0.005, cold_bytes=0, max_elements=0,
                         slow_call_s=1.0, say=lambda _: None)


def test_each_ops_bytes_by_hand() -> None:
    found = _found()
    moved = {(o.op, o.direction): o.bytes_moved for o in found.ops}
    # GELU and log-softmax on (4, 32) bf16, 256 B a tensor: x read, y written; the backward
    # reads the gradient and x (or y) and writes dx
    assert moved["aten.gelu", "forward"] == 2 * 4 * 32 * 2
    assert moved["aten.gelu_backward", "backward"] == 3 * 4 * 32 * 2
    assert moved["aten._log_softmax", "forward"] == 2 * 4 * 32 * 2
    assert moved["aten._log_softmax_backward_data", "backward"] == 3 * 4 * 32 * 2
    # the embedding: a table of 16 · 4 = 64 rows of 32 / 4 = 8, 256 int64 tokens; forward
    # reads the tokens (2,048 B) and their rows (256 · 8 · 2 = 4,096 B) and writes as much;
    # backward reads the gradient (4,096 B) and the tokens and writes the whole table's
    # gradient (64 · 8 · 2 = 1,024 B)
    assert moved["aten.embedding", "forward"] == 2048 + 2 * 4096
    assert moved["aten.embedding_dense_backward", "backward"] == 4096 + 2048 + 1024
    for o in found.ops:
        assert o.median_s == pytest.approx(MEDIAN_S)
        assert o.bytes_per_s == pytest.approx(o.bytes_moved / MEDIAN_S)
    # one curve an op, by its bytes, named by its aten op (and GELU's tanh kernel apart)
    (size, rate), = found.curves["op.bf16.aten.gelu_backward"]
    assert (size, rate) == (768.0, pytest.approx(768 / MEDIAN_S))
    assert sorted(name for name in found.curves if name.startswith("op.")) == sorted(
        f"op.bf16.{o.op}" + (".tanh" if o.kind == "gelu-tanh" else "") for o in found.ops)
    assert {(o.op, o.variant) for o in found.ops if o.kind == "gelu-tanh"} == {
        ("aten.gelu", "tanh"), ("aten.gelu_backward", "tanh")}


def test_an_op_figure_set_aside_enters_no_curve() -> None:
    timer = _Timer(torch.device("cpu"), FakeClock([MEDIAN_S]), 0.10, 0)
    timer.why["gelu bf16 4 × 32 backward"] = "spread 60% after 2 retries"
    found = probe_kernels(timer, PLAN, budget_s=0.005, cold_bytes=0, max_elements=0,
                          slow_call_s=1.0, say=lambda _: None)
    assert "op.bf16.aten.gelu_backward" not in found.curves
    assert "op.bf16.aten.gelu" in found.curves
    assert found.set_aside == ("gelu bf16 4 × 32 backward",)


def test_a_traced_gelu_is_priced_from_its_own_curve() -> None:
    """A bf16 GELU's backward in a traced step, (16, 32): 3 · 16 · 32 · 2 = 3,072 B, priced
    at its own curve (768 B at 1 GB/s, 30,720 B at 2 GB/s), log-log between, by hand."""
    import math

    from tensorledger.hardware import Hardware
    from tensorledger.roofline.kernel_rates import stream_rate
    from tensorledger.trace import trace

    x = torch.randn(16, 32, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(16, 32, dtype=torch.bfloat16)
    ops = [r for r in trace(lambda: torch.nn.functional.gelu(x).backward(grad)).records
           if r.op.startswith("aten.gelu_backward")]
    assert len(ops) == 1 and ops[0].bytes_read + ops[0].bytes_written == 3072
    chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
                    dense_flop_per_s={"fp32": 1.0},
                    curves={"op.bf16.aten.gelu_backward": ((768.0, 1e9), (30720.0, 2e9))})
    # log(3072 / 768) / log(30720 / 768) = log 4 / log 40 of the way from 1 to 2 GB/s in logs
    t = math.log(4) / math.log(40)
    assert stream_rate(ops[0], chip, 3072) == pytest.approx(1e9 * 2**t)


def test_the_probe_table_shows_each_op_at_its_rate() -> None:
    from rich.console import Console

    from tensorledger.bench import probe
    from tensorledger.report.bench import probe_view
    from tensorledger.units import format_bandwidth
    from tests.bench.test_probe_noise import SMALL

    result = probe("cpu", clock=FakeClock([1e-3]), kernels=PLAN, **SMALL)
    out = Console(width=400)
    with out.capture() as captured:
        for line in probe_view(result, "local.toml"):
            out.print(line)
    rows = {line.split("│")[1].strip(): line for line in captured.get().splitlines()
            if "aten." in line}
    # 1 ms a call: GELU's forward 512 B, its backward 768 B (test_each_ops_bytes_by_hand)
    assert format_bandwidth(512 / 1e-3) in rows["aten.gelu bf16"]
    assert format_bandwidth(768 / 1e-3) in rows["aten.gelu_backward bf16"]
    assert "4×32" in rows["aten.embedding_dense_backward bf16"]
    # the tanh kernel's rows apart, named by their variant
    assert format_bandwidth(768 / 1e-3) in rows["aten.gelu_backward (tanh) bf16"]


def test_a_traced_tanh_gelu_is_priced_from_its_own_kernels_curve() -> None:
    """GELU's tanh approximation (GPT-2's ``gelu_new``) is traced with its variant, and priced
    from the tanh kernel's curve, the exact GELU from its own: both (16, 32) bf16 backwards
    move 3,072 B; flat curves at 1 GB/s (tanh) and 4 GB/s (exact) give 3.072 and 0.768 µs."""
    from tensorledger.hardware import Hardware
    from tensorledger.roofline.kernel_rates import stream_rate
    from tensorledger.trace import trace

    x = torch.randn(16, 32, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(16, 32, dtype=torch.bfloat16)
    chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
                    dense_flop_per_s={"fp32": 1.0},
                    curves={"op.bf16.aten.gelu_backward": ((768.0, 4e9), (30720.0, 4e9)),
                            "op.bf16.aten.gelu_backward.tanh": ((768.0, 1e9), (30720.0, 1e9))})
    for approximate, variant, seconds in (("tanh", "tanh", 3.072e-6), ("none", "", 0.768e-6)):
        records = trace(lambda a=approximate: torch.nn.functional.gelu(
            x, approximate=a).backward(grad)).records
        backward, = (r for r in records if r.op.startswith("aten.gelu_backward"))
        forward, = (r for r in records if r.op.startswith("aten.gelu."))
        assert (forward.variant, backward.variant) == (variant, variant)
        assert 3072 / stream_rate(backward, chip, 3072) == pytest.approx(seconds)
