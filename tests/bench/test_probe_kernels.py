"""The probe's kernels beyond the matmul: attention by dtype, direction and head width, bf16
elementwise ops and casts, as curves of the profile.  A fake clock times every sample, so
the rates are known by hand and nothing depends on how busy the machine is."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tensorledger.bench import probe, profile_toml
from tensorledger.bench.probe import _Timer
from tensorledger.bench.probe_kernels import KernelPlan, default_plan, probe_kernels
from tensorledger.hardware import load_hardware_file
from tests.bench.test_probe_noise import SMALL, FakeClock

PLAN = KernelPlan(attention_dtypes=("fp32", "bf16"), seqs=(24, 40), head_dims=(8, 16),
                  batch=3, heads=5, stream_dtypes=("bf16",),
                  casts=(("fp32", "bf16"), ("bf16", "fp32")), buffers=(1000, 3000, 10**6),
                  loops=(), norm_tokens=(), op_rows=())


#: The clock moves 2 ms a reading: every sample is one call of 2 ms (above the harness's
#: 1 ms minimum sample, so it times one call a sample).
MEDIAN_S = 2e-3


def _timer() -> _Timer:
    return _Timer(torch.device("cpu"), FakeClock([MEDIAN_S]), 0.10, 0)


def test_kernels_by_hand() -> None:
    said: list[str] = []
    found = probe_kernels(_timer(), PLAN, budget_s=0.005, cold_bytes=0, max_elements=5000,
                          slow_call_s=1.0, say=said.append)
    assert [(a.dtype, a.head_dim, a.seq, a.direction) for a in found.attention] == [
        (dtype, d, s, direction) for dtype in ("fp32", "bf16") for d in (8, 16)
        for s in (24, 40) for direction in ("forward", "backward")]
    for a in found.attention:
        # causal attention counted in full: two products of 2·s·s·d per head, B·H heads;
        # the backward 2.5× (s 40, d 16: 3·5·2·2·40·40·16 = 768,000)
        forward = 3 * 5 * 2 * (2 * a.seq * a.seq * a.head_dim)
        assert a.flops == (forward if a.direction == "forward" else 5 * forward // 2)
        assert a.median_s == pytest.approx(MEDIAN_S)
        assert a.flop_per_s == pytest.approx(a.flops / MEDIAN_S)
    # buffers of 10⁶ elements lie above max_elements and are left out
    assert [(s.kernel, s.dtype, s.elements) for s in found.streams] == [
        *((kernel, "bf16", n) for n in (1000, 3000) for kernel in ("copy", "triad")),
        *(("cast", pair, n) for pair in ("fp32-bf16", "bf16-fp32") for n in (1000, 3000))]
    moved = {(s.kernel, s.dtype, s.elements): s.bytes_moved for s in found.streams}
    assert moved["copy", "bf16", 3000] == 2 * 2 * 3000  # read and write 2 bytes an element
    assert moved["triad", "bf16", 3000] == 3 * 2 * 3000
    assert moved["cast", "fp32-bf16", 1000] == (4 + 2) * 1000  # read 4, write 2
    curves = found.curves
    assert sorted(curves) == sorted(
        [f"attention-head.{t}.{d}.d{w}" for t in ("fp32", "bf16") for d in ("forward", "backward")
         for w in (8, 16)] + ["bandwidth.bf16", "cast.fp32-bf16", "cast.bf16-fp32"])
    # s 24 and 40, d 8: 3·5·2·2·s²·8 FLOPs forward, each over the fake clock's median, the
    # curve by the FLOPs of one of the 3 · 5 sequences and heads
    assert [x for point in curves["attention-head.bf16.forward.d8"] for x in point
            ] == pytest.approx([x for f in (3 * 5 * 2 * 2 * s * s * 8 for s in (24, 40))
                                for x in (f / 15, f / MEDIAN_S)])
    # copy and triad at once: one point per bytes moved, sizes increasing
    assert [size for size, _ in curves["bandwidth.bf16"]] == [4000, 6000, 12000, 18000]
    assert "attention bf16, sequence 40, head width 16" in said


def test_a_dtype_without_an_attention_kernel_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.bench.probe_kernels as kernels

    real = kernels.attention_points

    def no_fp16(timer, dtype, *rest, **options):  # type: ignore[no-untyped-def]
        if dtype == "fp16":
            raise RuntimeError("\"flash_attention\" not implemented for 'Half'")
        return real(timer, dtype, *rest, **options)

    monkeypatch.setattr(kernels, "attention_points", no_fp16)
    plan = KernelPlan(attention_dtypes=("fp16", "fp32"), seqs=(16,), head_dims=(8,),
                      stream_dtypes=(), casts=(), buffers=())
    found = probe_kernels(_timer(), plan, budget_s=0.005, cold_bytes=0, max_elements=0,
                          slow_call_s=1.0, say=lambda _: None)
    assert found.skipped == ("attention fp16",)
    assert {a.dtype for a in found.attention} == {"fp32"}


def test_the_probe_writes_the_curves_into_the_profile(tmp_path: Path) -> None:
    plan = KernelPlan(attention_dtypes=("bf16",), seqs=(16,), head_dims=(8,),
                      stream_dtypes=("bf16",), casts=(("fp32", "bf16"),), buffers=(512,),
                      loops=(8,), loop_elements=4096, norm_tokens=(4,))
    result = probe("cpu", clock=FakeClock([1e-3]), kernels=plan, **SMALL)
    assert result.kernels is not None and len(result.kernels.attention) == 2
    for name in ("attention-head.bf16.forward.d8", "attention-head.bf16.backward.d8",
                 "bandwidth.bf16", "strided.bf16", "norm.bf16.forward",
                 "cast.fp32-bf16"):
        assert result.curves[name] == result.kernels.curves[name]
    path = tmp_path / "local.toml"
    path.write_text(profile_toml(result))
    assert dict(load_hardware_file(path).curves) == result.curves
    # the plan none: nothing beyond what the probe measured before
    bare = probe_kernels(_timer(), KernelPlan.none(), budget_s=0.005, cold_bytes=0,
                         max_elements=10**6, slow_call_s=1.0, say=lambda _: None)
    assert bare.curves == {} and bare.attention == bare.streams == ()


def test_the_default_plan_follows_the_dtypes_probed() -> None:
    plan = default_plan("cpu", ("fp32", "bfloat16", "fp16"))
    assert plan.attention_dtypes == ("fp32", "bf16", "fp16")
    assert plan.stream_dtypes == ("bf16",)
    assert plan.casts == (("fp32", "bf16"), ("bf16", "fp32"))
    assert default_plan("cpu", ("fp32",), (32, 64)).seqs == (32, 64)
    quick = KernelPlan.quick()
    assert len(quick.seqs) * len(quick.head_dims) < len(plan.seqs) * len(plan.head_dims)


def test_a_kernel_figure_set_aside_enters_no_curve() -> None:
    """A figure the timer sets aside (still noisy after its retries) gives no curve point:
    the bf16 forward at s 40, d 8 and the bf16 copy of 3,000 elements (6,000 B) are marked so,
    and only they are missing from what the probe keeps."""
    timer = _timer()
    timer.why["attention bf16 40 d8 forward"] = "spread 250% after 2 retries"
    timer.why["copy eager bf16 bandwidth 6000 B"] = "spread 80% after 2 retries"
    found = probe_kernels(timer, PLAN, budget_s=0.005, cold_bytes=0, max_elements=5000,
                          slow_call_s=1.0, say=lambda _: None)
    kept = {(a.dtype, a.seq, a.head_dim, a.direction) for a in found.attention}
    assert ("bf16", 40, 8, "forward") not in kept and ("bf16", 40, 8, "backward") in kept
    assert len(kept) == 2 * 2 * 2 * 2 - 1
    streams = {(s.kernel, s.dtype, s.elements) for s in found.streams}
    assert ("copy", "bf16", 3000) not in streams and ("triad", "bf16", 3000) in streams
    assert len(streams) == 4 + 4 - 1
    assert found.set_aside == ("attention bf16 40 d8 forward", "copy eager bf16 bandwidth 6000 B")


def test_decode_products_by_hand() -> None:
    """Each row count times one weight warm and weights rotating cold; the rate is the
    weight's bytes over the fake clock's 2 ms, the curve keyed by the working set."""
    plan = KernelPlan.none()
    plan = KernelPlan(**{**plan.__dict__, "matvec_dtypes": ("fp32", "bf16"),
                         "matvec_rows": (4, 1), "matvec_weight": (32, 16),
                         "matvec_cold_bytes": 10_000})
    said: list[str] = []
    found = probe_kernels(_timer(), plan, budget_s=0.005, cold_bytes=0, max_elements=0,
                          slow_call_s=1.0, say=said.append)
    # fp32: a weight of 16 × 32 × 4 = 2,048 B; ⌈10,000 / 2,048⌉ = 5 weights cold: 10,240 B;
    # bf16: 1,024 B, ⌈10,000 / 1,024⌉ = 10 weights: 10,240 B
    assert [(m.dtype, m.rows, m.working_set, m.weight_bytes) for m in found.matvec] == [
        ("fp32", 1, 2048, 2048), ("fp32", 1, 10240, 2048),
        ("fp32", 4, 2048, 2048), ("fp32", 4, 10240, 2048),
        ("bf16", 1, 1024, 1024), ("bf16", 1, 10240, 1024),
        ("bf16", 4, 1024, 1024), ("bf16", 4, 10240, 1024)]
    flat = [x for point in found.curves["matvec.fp32.m4"] for x in point]
    assert flat == pytest.approx([2048, 2048 / MEDIAN_S, 10240, 2048 / MEDIAN_S])
    flat = [x for point in found.curves["matvec.bf16.m1"] for x in point]
    assert flat == pytest.approx([1024, 1024 / MEDIAN_S, 10240, 1024 / MEDIAN_S])
    assert "decode product in bf16, 4 rows, warm and cold weights" in said
    # a figure set aside enters no curve
    timer = _timer()
    timer.why["matvec fp32 m1 10240 B"] = "spread 40% after 2 retries"
    kept = probe_kernels(timer, plan, budget_s=0.005, cold_bytes=0, max_elements=0,
                         slow_call_s=1.0, say=lambda _: None)
    assert [x for point in kept.curves["matvec.fp32.m1"] for x in point] == pytest.approx(
        [2048, 2048 / MEDIAN_S])
    assert kept.set_aside == ("matvec fp32 m1 10240 B",)


def test_strided_loops_by_hand() -> None:
    """An add of a head-split view to a contiguous tensor, by inner loop: the bytes of three
    tensors over the fake clock's 2 ms, the curve keyed by the loop, and the trace's own rule
    (``OpRecord.inner_loop``) finds the same loop in the probe's add."""
    import tensorledger.bench.probe_kernels as kernels
    from tensorledger.trace import trace

    plan = KernelPlan(**{**KernelPlan.none().__dict__, "stream_dtypes": ("bf16",),
                         "loops": (16, 4), "loop_elements": 1000})
    said: list[str] = []
    found = probe_kernels(_timer(), plan, budget_s=0.005, cold_bytes=0, max_elements=0,
                          slow_call_s=1.0, say=said.append)
    # loop 4: 1000 // (4 · 4) = 62 rows, 62 · 4 · 4 · 2 B = 1,984 B a tensor, 3 moved;
    # loop 16: 1000 // 64 = 15 rows, 15 · 4 · 16 · 2 = 1,920 B
    assert [(p.loop, p.bytes_moved) for p in found.loops] == [(4, 3 * 1984), (16, 3 * 1920)]
    assert [x for point in found.curves["strided.bf16"] for x in point] == pytest.approx(
        [4, 3 * 1984 / MEDIAN_S, 16, 3 * 1920 / MEDIAN_S])
    assert "elementwise bf16 in inner loops of 16 elements" in said
    for loop in (4, 16):
        view = torch.ones(5, 4, loop, dtype=torch.bfloat16).transpose(0, 1)
        contiguous = torch.ones(4, 5, loop, dtype=torch.bfloat16)
        records = trace(lambda v=view, c=contiguous: torch.add(v, c)).records
        assert [r.inner_loop for r in records if r.category == "elementwise"] == [loop]
    # a loop set aside enters no curve
    timer = _timer()
    timer.why[kernels._loop_label("bf16", 4)] = "spread 40% after 2 retries"
    kept = probe_kernels(timer, plan, budget_s=0.005, cold_bytes=0, max_elements=0,
                         slow_call_s=1.0, say=lambda _: None)
    assert [size for size, _ in kept.curves["strided.bf16"]] == [16]
    assert kept.set_aside == ("strided bf16 add, inner loop 4",)


def test_linear_products_by_hand() -> None:
    """A linear layer's product, tokens × width against a 4·width × width weight, both cold:
    2 · tokens · width · 4·width FLOPs over the fake clock's 2 ms, the curve keyed by them."""
    import tensorledger.bench.probe_kernels as kernels

    plan = KernelPlan(**{**KernelPlan.none().__dict__, "linear_dtypes": ("fp32", "bf16"),
                         "linear_widths": (16, 8), "linear_tokens": 4,
                         "matvec_cold_bytes": 10_000})
    said: list[str] = []
    found = probe_kernels(_timer(), plan, budget_s=0.005, cold_bytes=0, max_elements=0,
                          slow_call_s=1.0, say=said.append)
    # width 8: 2 · 4 · 8 · 32 = 2,048 FLOPs; width 16: 2 · 4 · 16 · 64 = 8,192
    assert [(p.dtype, p.width, p.flops) for p in found.linear] == [
        ("fp32", 8, 2048), ("fp32", 16, 8192), ("bf16", 8, 2048), ("bf16", 16, 8192)]
    for name in ("linear.fp32", "linear.bf16"):
        assert [x for point in found.curves[name] for x in point] == pytest.approx(
            [2048, 2048 / MEDIAN_S, 8192, 8192 / MEDIAN_S])
    assert "linear layer in bf16, 4 tokens × 16, cold" in said
    timer = _timer()
    timer.why[kernels._linear_label("fp32", 4, 16)] = "spread 40% after 2 retries"
    kept = probe_kernels(timer, plan, budget_s=0.005, cold_bytes=0, max_elements=0,
                         slow_call_s=1.0, say=lambda _: None)
    assert [size for size, _ in kept.curves["linear.fp32"]] == [2048]
    assert kept.set_aside == ("linear fp32 4 × 16 → 64, cold",)
    # the default plan probes them in the dtypes of the decode products, a quick one fewer
    assert default_plan("cpu", ("fp32", "bf16")).linear_dtypes == ("fp32", "bf16")
    assert len(KernelPlan.quick().linear_widths) < len(KernelPlan().linear_widths)


def test_layer_norms_by_hand() -> None:
    """A bf16 layer norm with weight and bias, forward and backward apart: the bytes each
    op moves over the fake clock's 2 ms, the curves keyed by those bytes."""
    import tensorledger.bench.probe_kernels as kernels

    plan = KernelPlan(**{**KernelPlan.none().__dict__, "stream_dtypes": ("bf16",),
                         "norm_width": 8, "norm_tokens": (16, 4)})
    said: list[str] = []
    found = probe_kernels(_timer(), plan, budget_s=0.005, cold_bytes=0, max_elements=0,
                          slow_call_s=1.0, say=said.append)
    # 4 tokens × 8, 2 bytes each: the forward reads x 64, weight 16, bias 16 and writes
    # y 64, mean 8, rstd 8 = 176 B; the backward reads dy 64, x 64, mean 8, rstd 8,
    # weight 16, bias 16 and writes dx 64, dweight 16, dbias 16 = 272 B.
    # 16 tokens: 256 + 32 + 256 + 32 + 32 = 608 forward; 256 · 2 + 32 · 2 + 32 + 256 + 32
    # = 896 backward
    assert [(p.direction, p.tokens, p.bytes_moved) for p in found.norms] == [
        ("forward", 4, 176), ("backward", 4, 272), ("forward", 16, 608), ("backward", 16, 896)]
    assert [x for point in found.curves["norm.bf16.backward"] for x in point] == pytest.approx(
        [272, 272 / MEDIAN_S, 896, 896 / MEDIAN_S])
    assert "layer norm in bf16, 16 tokens × 8" in said
    timer = _timer()
    timer.why[kernels._norm_label("bf16", 4, 8) + " forward"] = "spread 40% after 2 retries"
    kept = probe_kernels(timer, plan, budget_s=0.005, cold_bytes=0, max_elements=0,
                         slow_call_s=1.0, say=lambda _: None)
    assert [size for size, _ in kept.curves["norm.bf16.forward"]] == [608]
    assert kept.set_aside == ("layer norm bf16 4 × 8 forward",)


def test_the_probe_table_shows_each_new_kernel_at_its_rate() -> None:
    """The probe's table rows of the strided adds, the cold linear products and the layer
    norms: each at the rate its point was measured at (fake clock, 1 ms a call), formatted
    as the rest of the table formats rates."""
    from rich.console import Console

    from tensorledger.report.bench import probe_view
    from tensorledger.units import format_bandwidth, format_flop_rate

    plan = KernelPlan(**{**KernelPlan.none().__dict__, "stream_dtypes": ("bf16",),
                         "loops": (8,), "loop_elements": 4096, "norm_width": 8,
                         "norm_tokens": (4,), "linear_dtypes": ("fp32",),
                         "linear_widths": (8,), "linear_tokens": 4, "matvec_cold_bytes": 4096})
    result = probe("cpu", clock=FakeClock([1e-3]), kernels=plan, **SMALL)
    out = Console(width=400)
    with out.capture() as captured:
        for line in probe_view(result, "local.toml"):
            out.print(line)
    text = captured.get()
    # loop 8: 4096 // 32 = 128 rows, 128 · 4 · 8 · 2 = 8,192 B a tensor, 3 moved in 1 ms
    assert "add bf16, strided" in text and format_bandwidth(3 * 8192 / 1e-3) in text
    # 2 · 4 · 8 · 32 = 2,048 FLOPs in 1 ms
    assert "linear fp32, operands cold" in text and format_flop_rate(2048 / 1e-3) in text
    # the layer norm's forward 176 B and backward 272 B (test_layer_norms_by_hand), in 1 ms
    assert "layer norm bf16 forward" in text and format_bandwidth(176 / 1e-3) in text
    assert "layer norm bf16 backward" in text and format_bandwidth(272 / 1e-3) in text
