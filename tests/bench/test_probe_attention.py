"""Attention timed at two head counts: a head's time is the slope between the two calls, a
call's own cost the rest, and the roofline prices an op of any head count as that call cost
plus its heads' time.  A fake clock that each call moves by (its own cost + its heads × a
head's time) stands in for the machine, so the figures are known by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as functional

from tensorledger.bench import probe, profile_toml
from tensorledger.bench.probe import _Timer
from tensorledger.bench.probe_kernels import KernelPlan, probe_kernels
from tensorledger.hardware import load_hardware_file
from tensorledger.roofline.kernel_rates import attention_rate
from tensorledger.trace import trace
from tests.bench.test_probe_noise import SMALL

#: (a call's own seconds, seconds a sequence × head) of the fake machine, by direction
FORWARD = (4e-3, 1e-3)
BACKWARD = (9e-3, 2.5e-3)
#: batch 2 at 6 heads and at 1: calls of 12 and 2 sequences × heads
PLAN = KernelPlan(attention_dtypes=("fp32",), seqs=(16, 32), head_dims=(8,), batch=2,
                  heads=6, few_heads=1, stream_dtypes=(), casts=(), buffers=(), loops=(),
                  norm_tokens=())


class CallClock:
    """A clock that the attention calls move; while ``ticking`` (the probe's other figures)
    each reading moves it 1 ms as well."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ticking = False

    def __call__(self) -> float:
        self.now += 1e-3 if self.ticking else 0.0
        return self.now

    def follow(self, line: str) -> None:
        """The probe's progress: tick but while it times the kernels' attention."""
        self.ticking = not (line.startswith("attention fp32") and "head width" in line)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> CallClock:
    """Each replayed attention kernel moves the clock by its own cost and its heads' time
    (its first output, (batch, heads, seq, width), counts them)."""
    import tensorledger.bench.probe_attention as attention

    clock = CallClock()
    real = attention.kernel_calls

    def timed(step, category):  # type: ignore[no-untyped-def]
        def moved(direction, call):  # type: ignore[no-untyped-def]
            own, head = FORWARD if direction == "forward" else BACKWARD

            def run() -> object:
                out = call()
                first = out[0]  # the forward's output, the backward's query gradient
                clock.now += own + first.shape[0] * first.shape[1] * head
                return out
            return run

        return {d: call._replace(run=moved(d, call.run))
                for d, call in real(step, category).items()}

    monkeypatch.setattr(attention, "kernel_calls", timed)
    return clock


def _found(clock: CallClock, timer: _Timer | None = None):  # type: ignore[no-untyped-def]
    return probe_kernels(timer or _Timer(torch.device("cpu"), clock, 0.10, 0), PLAN,
                         budget_s=0.05, cold_bytes=0, max_elements=0, slow_call_s=1.0,
                         say=lambda _: None)


def test_a_heads_time_and_a_calls_own_by_hand(clock: CallClock) -> None:
    found = _found(clock)
    assert [(a.seq, a.direction, a.heads, a.few_heads) for a in found.attention] == [
        (s, d, 12, 2) for s in (16, 32) for d in ("forward", "backward")]
    for a in found.attention:
        own, head = FORWARD if a.direction == "forward" else BACKWARD
        # 12 heads: 4 + 12 · 1 = 16 ms forward, 9 + 12 · 2.5 = 39 ms backward; 2 heads: 6, 14
        assert a.median_s == pytest.approx(own + 12 * head)
        assert a.few_s == pytest.approx(own + 2 * head)
        # the slope (16 − 6) / (12 − 2) = 1 ms; the rest 16 − 12 · 1 = 4 ms
        assert a.head_s == pytest.approx(head) and a.call_s == pytest.approx(own)
    curves = found.curves
    # a head's FLOPs (2 · 2 · s² · 8 forward, 2.5× backward) over its 1 ms (2.5 ms), and
    # 1 / 4 ms = 250 calls a second (1 / 9 ms backward)
    assert [x for p in curves["attention-head.fp32.forward.d8"] for x in p] == pytest.approx(
        [x for s in (16, 32) for x in (4 * s * s * 8, 4 * s * s * 8 / 1e-3)])
    assert [x for p in curves["attention-head.fp32.backward.d8"] for x in p] == pytest.approx(
        [x for s in (16, 32) for x in (10 * s * s * 8, 10 * s * s * 8 / 2.5e-3)])
    assert [rate for _, rate in curves["attention-call.fp32.forward.d8"]] == pytest.approx(
        [250.0, 250.0])
    assert [rate for _, rate in curves["attention-call.fp32.backward.d8"]] == pytest.approx(
        [1 / 9e-3, 1 / 9e-3])


def test_the_roofline_prices_any_head_count_from_the_two(clock: CallClock,
                                                         tmp_path: Path) -> None:
    """Through the profile file: a traced attention of 4 × 16 = 64 heads at 32 tokens takes
    4 + 64 · 1 = 68 ms forward and 9 + 64 · 2.5 = 169 ms backward; at one call's mean a head
    (16 ms / 12 heads, 39 / 12) it would have been 85.3 and 208 ms."""
    result = probe("cpu", clock=clock, progress=clock.follow, kernels=PLAN, **SMALL)
    path = tmp_path / "local.toml"
    path.write_text(profile_toml(result))
    chip = load_hardware_file(path)
    q, k, v = (torch.randn(4, 16, 32, 8, requires_grad=True) for _ in range(3))

    def step() -> None:
        functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    ops = [r for r in trace(step).records if r.category == "attention"]
    assert len(ops) == 2
    for op in ops:
        own, head = BACKWARD if "backward" in op.op else FORWARD
        rate = attention_rate(op, chip, "fp32")
        assert rate is not None
        assert op.flops / rate == pytest.approx(own + 64 * head)


def test_a_smaller_call_set_aside_leaves_the_mean_a_head(clock: CallClock) -> None:
    """The 2-head forward at 16 tokens still noisy after its retries: that point's head time
    is its 12-head call's mean (16 ms / 12), with no call cost; the figure is named."""
    timer = _Timer(torch.device("cpu"), clock, 0.10, 0)
    timer.why["attention fp32 16 d8 forward, 2 heads"] = "spread 90% after 2 retries"
    found = _found(clock, timer)
    first = found.attention[0]
    assert (first.seq, first.direction, first.few_heads) == (16, "forward", 0)
    assert first.head_s == pytest.approx(16e-3 / 12) and first.call_s == 0
    assert found.attention[1].call_s == pytest.approx(BACKWARD[0])
    assert found.set_aside == ("attention fp32 16 d8 forward, 2 heads",)
    # its curve point is the mean a head; the other sequence length keeps its call cost
    head_flops = 4 * 16 * 16 * 8
    assert found.curves["attention-head.fp32.forward.d8"][0] == pytest.approx(
        (head_flops, head_flops / (16e-3 / 12)))
    (size, calls), = found.curves["attention-call.fp32.forward.d8"]
    assert (size, calls) == (4 * 32 * 32 * 8, pytest.approx(250.0))


def test_the_probe_table_shows_a_calls_own_cost(clock: CallClock) -> None:
    """Each attention row: the 12-head call's median and rate; beneath it the call's own
    4 ms (9 ms backward) and a head's rate, its FLOPs over 1 ms (2.5 ms)."""
    from rich.console import Console

    from tensorledger.report.bench import probe_view
    from tensorledger.units import format_duration, format_flop_rate

    result = probe("cpu", clock=clock, progress=clock.follow, kernels=PLAN, **SMALL)
    out = Console(width=400)
    with out.capture() as captured:
        for line in probe_view(result, "local.toml"):
            out.print(line)
    # rows: seq 16's two calls' own, then seq 32's forward (2), its call (3), backward (4),
    # its call (5)
    rows = [line for line in captured.get().splitlines() if "seq 32, d 8" in line
            or "call's own" in line]
    flops = 12 * 4 * 32 * 32 * 8  # 12 heads of 2 · 2 · 32² · 8
    assert "attention fp32 forward" in rows[2] and "12 heads" in rows[2]
    assert format_duration(16e-3) in rows[2] and format_flop_rate(flops / 16e-3) in rows[2]
    assert format_duration(4e-3) in rows[3] and "2 heads" in rows[3]
    assert f"{format_flop_rate(flops / 12 / 1e-3)} a head" in rows[3]
    assert "attention fp32 backward" in rows[4] and format_duration(9e-3) in rows[5]
    assert f"{format_flop_rate(2.5 * flops / 12 / 2.5e-3)} a head" in rows[5]


def test_a_replayed_kernel_computes_what_the_step_did() -> None:
    """``kernel_calls``' replays, a second path to the same numbers: the forward's output
    is what ``scaled_dot_product_attention`` returned, the backward's gradients what
    autograd left in ``.grad``; neither replay builds a graph."""
    from tensorledger.bench.probe_tensors import kernel_calls

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 4, requires_grad=True) for _ in range(3))
    grad = torch.randn(2, 3, 8, 4)
    outputs = []

    def step() -> None:
        out = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        outputs.append(out.detach())
        out.backward(grad)

    calls = kernel_calls(step, "attention")
    assert sorted(calls) == ["backward", "forward"]
    assert calls["forward"].op == "aten._scaled_dot_product_flash_attention_for_cpu"
    assert calls["backward"].op == calls["forward"].op + "_backward"
    forward = calls["forward"].run()
    backward = calls["backward"].run()
    assert forward[0].requires_grad is False and backward[0].requires_grad is False
    torch.testing.assert_close(forward[0], outputs[0])
    for replayed, tensor in zip(backward, (q, k, v), strict=True):
        torch.testing.assert_close(replayed, tensor.grad)


def test_attention_is_timed_before_any_one_thread_check(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """A CPU's fused attention runs slower for the rest of a process once its thread count
    has changed, so the probe times every attention figure (the fp32 sweep and the
    kernels') first, with the one-thread check off; the matmul sweep's checks come after."""
    import importlib

    from tests.bench.test_probe_noise import FakeClock

    probing = importlib.import_module("tensorledger.bench.probe")  # the module, not probe()

    events: list[str] = []
    real = probing.one_thread

    def counted():  # type: ignore[no-untyped-def]
        events.append("one thread")
        return real()

    monkeypatch.setattr(probing, "one_thread", counted)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # a thread team to check
    plan = KernelPlan(attention_dtypes=("fp32",), seqs=(16,), head_dims=(8,),
                      stream_dtypes=(), casts=(), buffers=(), loops=(), norm_tokens=())
    result = probing.probe("cpu", clock=FakeClock([1e-4]), kernels=plan,
                           progress=events.append, **SMALL)
    attention = [i for i, e in enumerate(events) if e.startswith("attention")]
    checks = [i for i, e in enumerate(events) if e == "one thread"]
    assert len(attention) == 2 and checks  # the sweep's sequence 16, the kernels' d8
    assert max(attention) < min(checks)
    assert result.kernels is not None and len(result.kernels.attention) == 2
