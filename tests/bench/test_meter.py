"""The live meter on the tiny preset, on the CPU, timed by a clock the tests move.

No test reads the wall clock: every time figure comes from a FakeClock advanced by known
durations, so each expected figure is derived here by hand from the same durations.
"""

from __future__ import annotations

import io
import json
import math
import statistics
from collections.abc import Iterator

import pytest
import torch

from tensorledger.bench import measure
from tensorledger.bench.meter import Meter
from tensorledger.napkin.transformer import forward_flops_per_token, get_preset
from tensorledger.trace import trace
from tests.bench.meter_helpers import TEST_CPU, FakeClock, timed, tiny_run

# a cycle of step durations with spread (median 11 ms); measured windows span whole cycles
DURATIONS = [0.010, 0.012, 0.009, 0.013, 0.011]
LOADING_S = 0.004


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _meter(model: torch.nn.Module, clock: FakeClock, **options: object) -> Meter:
    settings: dict[str, object] = {"hardware": TEST_CPU, "every": 5, "warmup_steps": 3,
                                   "quiet": True, "clock": clock}
    settings.update(options)
    return Meter(model, **settings)  # type: ignore[arg-type]


def test_flops_per_step_equal_a_trace_of_the_same_step_and_the_closed_form() -> None:
    run = tiny_run()
    batch, seq = 3, 20
    tokens = run.batch(batch, seq)
    meter = _meter(run.model, FakeClock(), every=0)
    for _ in range(3):
        with meter.step():
            run.step(tokens)
    (count,) = meter.recordings
    independent = trace(run.step, tokens)  # the very same step function, traced on its own
    assert count.flops == independent.flops
    assert count.flops_causal_halved == independent.flops_causal_halved
    assert count.tokens == batch * seq  # counted from the token ids the model was called with
    assert count.uncovered == {}
    # matrix work against the closed form: linear layers 1 + 2 (backward) times forward;
    # fused attention 1 + 2.5 (backward recomputes the scores) times forward
    closed = forward_flops_per_token(get_preset("tiny"), seq, "full")
    linear = batch * seq * (closed.attention_projections_flops + closed.mlp_flops
                            + closed.head_flops)
    attention = batch * seq * (closed.attention_scores_flops + closed.attention_values_flops)
    assert count.matrix_flops == {"fp32": 3 * linear + 7 * attention // 2}
    assert meter.close().flops_per_step == independent.flops


def test_mfu_agrees_with_the_harness_on_the_same_step_times() -> None:
    """The meter and ``bench.measure`` time the same step on the same clock; the step's clock
    moves by the same cycle of durations under both, and the meter also sees data loading
    between steps.  MFU from the harness is trace FLOPs / harness median / fp32 peak; the
    meter's must agree (it does exactly: the same times, FLOPs and peak) though it excluded its
    recorded first step, its warm-up and the loading time itself."""
    run = tiny_run()
    tokens = run.batch(2, 16)
    clock = FakeClock()
    step = timed(lambda: run.step(tokens), clock, DURATIONS)
    meter = _meter(run.model, clock)
    for _ in range(3 + 20):  # 3 warm-up steps (the first recorded), then 4 whole cycles
        clock.advance(LOADING_S)
        with meter.step():
            step()
    summary = meter.close()
    harness = measure(step, clock=clock, warmup=3, min_repeats=20, max_repeats=20, budget_s=0)
    flops = trace(run.step, tokens).flops
    harness_mfu = flops / harness.median_s / TEST_CPU.dense_flop_per_s["fp32"]
    assert summary.mfu_median == pytest.approx(harness_mfu, rel=0.05)
    assert summary.mfu_median == pytest.approx(harness_mfu, rel=1e-12)
    assert summary.step_time is not None
    assert summary.step_time.median_s == pytest.approx(statistics.median(DURATIONS))
    assert summary.outside_time_median_s == pytest.approx(LOADING_S)
    # aggregate MFU: FLOPs of 20 steps over their summed time, 4 cycles of 55 ms
    assert summary.mfu == pytest.approx(20 * flops / (4 * sum(DURATIONS)) / 100e9)
    assert summary.outside_share == pytest.approx(20 * LOADING_S / (20 * LOADING_S + 0.22))
    assert summary.peak is not None and summary.peak.label == "fp32"
    assert (summary.steps, summary.measured_steps, summary.recorded_steps) == (23, 20, 1)
    assert summary.tokens_per_s == pytest.approx(20 * 32 / 0.22)
    assert 0 < summary.mfu < 1


def test_under_autocast_mfu_uses_the_bf16_peak() -> None:
    run = tiny_run()
    tokens = run.batch(2, 16)
    clock = FakeClock()
    meter = _meter(run.model, clock, warmup_steps=1)
    for _ in range(6):
        with meter.step():
            run.step(tokens, autocast=True)
            clock.advance(0.01)
    summary = meter.close()
    (count,) = meter.recordings
    assert set(count.matrix_flops) == {"bf16"}  # the parameters are fp32; the matmuls are not
    assert summary.peak is not None and summary.peak.flop_per_s == 300e9
    assert summary.mfu == pytest.approx(count.flops / 0.01 / 300e9)


def test_gradient_accumulation_counts_every_micro_batch() -> None:
    run = tiny_run()
    micro = [run.batch(2, 16, seed=s) for s in range(4)]
    clock = FakeClock()
    meter = _meter(run.model, clock, warmup_steps=1)
    for _ in range(4):
        with meter.step():  # one optimizer step around all four micro-batches
            run.accumulated(micro)
            clock.advance(0.05)
    summary = meter.close()
    (count,) = meter.recordings
    assert count.tokens == 4 * 2 * 16  # no arithmetic by the user
    assert count.flops == trace(run.accumulated, micro).flops
    assert summary.tokens_per_s == pytest.approx(128 / 0.05)


def test_a_new_shape_is_recorded_once_and_counted_from_then_on() -> None:
    run = tiny_run()
    short, long = run.batch(2, 8), run.batch(2, 24)
    clock = FakeClock()
    meter = _meter(run.model, clock, warmup_steps=0, every=3)
    plan = [short, short, long, long, long, short, long]
    intervals = []
    for tokens in plan:
        with meter.step():
            run.step(tokens)
            clock.advance(0.01)
        if meter.steps % 3 == 0:
            intervals.append(meter.metrics())
    summary = meter.close()
    assert [c.tokens for c in meter.recordings] == [16, 48]  # steps 1 and 4
    short_flops = trace(run.step, short).flops
    long_flops = trace(run.step, long).flops
    # step 3 met the new shape and its interval closed before step 4 recorded it: timed, not
    # counted; steps 1 and 4 ran under the recorder and are left out of every figure
    assert summary.recorded_steps == 2 and summary.uncounted_steps == 1
    assert summary.measured_steps == 5
    assert summary.flops == 2 * short_flops + 2 * long_flops  # steps 2, 6 and 5, 7
    assert intervals[0]["flops_per_step"] == short_flops  # step 2 alone
    assert intervals[1]["flops_per_step"] == (long_flops + short_flops) / 2  # steps 5 and 6


def test_a_step_of_a_new_shape_is_counted_when_recorded_within_its_interval() -> None:
    run = tiny_run()
    short, long = run.batch(2, 8), run.batch(2, 24)
    clock = FakeClock()
    meter = _meter(run.model, clock, warmup_steps=0, every=0)
    for tokens in (short, long, long):
        with meter.step():
            run.step(tokens)
            clock.advance(0.01)
    summary = meter.close()
    # step 2 (long) is counted from step 3's recording, made before its interval closed
    assert summary.recorded_steps == 2 and summary.uncounted_steps == 0
    assert summary.flops == trace(run.step, long).flops


def _jsonl_lines(meter: Meter) -> list[str]:
    assert meter.jsonl_path is not None
    return meter.jsonl_path.read_text().splitlines()


def test_jsonl_metrics_and_the_stderr_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = tiny_run()
    tokens = run.batch(2, 16)
    clock = FakeClock()
    stream = io.StringIO()
    meter = _meter(run.model, clock, quiet=False, stream=stream, warmup_steps=1,
                   jsonl=tmp_path / "meter.jsonl")
    assert meter.metrics() == {"step": 0.0}
    for _ in range(10):
        clock.advance(0.002)
        with meter.step():
            run.step(tokens)
            clock.advance(0.02)
    metrics = meter.metrics()
    summary = meter.close()
    flops = meter.recordings[0].flops
    # the second interval (steps 6-10): 5 steps of 20 ms, 32 tokens each
    assert metrics["step"] == 10 and metrics["step_time_s"] == pytest.approx(0.02)
    assert metrics["outside_time_s"] == pytest.approx(0.002)
    assert metrics["tokens_per_s"] == pytest.approx(32 / 0.02)
    assert metrics["flop_per_s"] == pytest.approx(flops / 0.02)
    assert metrics["mfu"] == pytest.approx(flops / 0.02 / 100e9)
    assert metrics["cluster_mfu"] == metrics["mfu"] and metrics["world_size"] == 1
    assert metrics["peak_memory_bytes"] > 0
    assert all(isinstance(v, float) for v in metrics.values())
    records = [json.loads(line) for line in _jsonl_lines(meter)]
    kinds = [r["kind"] for r in records]
    assert kinds == ["step"] * 5 + ["interval"] + ["step"] * 5 + ["interval", "summary"]
    steps = [r for r in records if r["kind"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 11))
    assert steps[0]["recorded"] and steps[0]["mfu"] is None and steps[0]["outside_time_s"] is None
    assert all(r["flops"] == flops for r in steps)
    assert records[-1]["mfu"] == pytest.approx(summary.mfu)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("meter step 5 | 20 ms/step + 2 ms outside | 1.6K tok/s")
    assert "MFU" in lines[1] and "(fp32 on test-cpu)" in lines[1]
    assert lines[2].startswith("meter summary: 9 of 10 steps measured on test-cpu (injected "
                               "clock); left out: the first 1 (warm-up) and 1 recorded")
    assert any(line.strip().startswith("MFU ") for line in lines)


def test_rank_paths(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = torch.nn.Linear(2, 2)
    named = Meter(model, hardware=TEST_CPU, jsonl=tmp_path / "m-{rank}.jsonl", quiet=True)
    assert named.jsonl_path == tmp_path / "m-0.jsonl"
    named.close()


def test_mfu_above_one_is_refused() -> None:
    run = tiny_run()
    tokens = run.batch(2, 16)
    clock = FakeClock()
    meter = _meter(run.model, clock, hardware=TEST_CPU, every=0)
    for _ in range(2):
        with meter.step():
            run.step(tokens)
            clock.advance(1e-6)  # ~7e7 FLOPs in 1 µs: 7e13 FLOP/s on a 1e11 chip
    with pytest.raises(Exception) as caught:
        meter.flush()
    _one_sentence(caught.value, "MFU", "above 1", "test-cpu", "hardware=")


def _one_sentence(error: BaseException, *fragments: str) -> None:
    from tensorledger.errors import TensorLedgerError

    assert isinstance(error, TensorLedgerError), type(error)
    text = str(error)
    assert "\n" not in text and text.count(". ") == 0, text
    for fragment in fragments:
        assert fragment in text, (fragment, text)


def test_misuse_is_one_clear_sentence(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = torch.nn.Linear(4, 4)
    meter = Meter(model, hardware=TEST_CPU, quiet=True, every=0)
    with meter.step(tokens=8), pytest.raises(Exception) as nested, meter.step(tokens=8):
        pass
    _one_sentence(nested.value, "already open")
    context = meter.step(tokens=8)
    with context:
        pass
    with pytest.raises(Exception) as twice, context:
        pass
    _one_sentence(twice.value, "already entered")
    for bad in (0, -3, 1.5, True):
        with pytest.raises(Exception) as caught:
            meter.step(tokens=bad)  # type: ignore[arg-type]
        _one_sentence(caught.value, "tokens must be a positive whole number")
    with pytest.raises(Exception) as unknown:
        Meter(model, hardware="h1000")
    _one_sentence(unknown.value, "unknown hardware 'h1000'", "h100-sxm")
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path))  # no probed profile there
    with pytest.raises(Exception) as undetected:
        Meter(model)
    _one_sentence(undetected.value, "cannot tell which hardware", "hardware=", "probe")
    with pytest.raises(Exception) as no_tokens, meter.step():
        model(torch.ones(2, 4))  # float features: no token ids to count
    _one_sentence(no_tokens.value, "cannot tell how many tokens", "tokens=")
    meter.close()
    with pytest.raises(Exception) as closed:
        meter.step(tokens=1)
    _one_sentence(closed.value, "closed")


def test_a_step_that_raises_is_not_counted_and_the_error_goes_on() -> None:
    run = tiny_run()
    tokens = run.batch(2, 8)
    clock = FakeClock()
    meter = _meter(run.model, clock, warmup_steps=0, every=0)
    with pytest.raises(RuntimeError, match="boom"), meter.step():
        run.model(tokens)
        raise RuntimeError("boom")
    assert meter.steps == 0 and meter.recordings == ()
    for _ in range(2):  # the recorder was let go: the next steps record and time normally
        with meter.step():
            run.step(tokens)
            clock.advance(0.01)
    assert meter.close().flops_per_step == trace(run.step, tokens).flops


def test_local_profile_is_the_default_on_the_cpu(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "local.toml").write_text(
        '[local]\nname = "probed cpu"\nmemory = "8GB"\nmemory_bandwidth = "20GB/s"\n'
        '[local.dense]\nfp32 = "50GFLOP/s"\n')
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path))
    meter = Meter(torch.nn.Linear(2, 2), quiet=True)
    assert meter.hardware.id == "local" and meter.hardware.dense_flop_per_s["fp32"] == 50e9
    meter.close()


def test_import_tensorledger_stays_torch_free_and_exports_meter() -> None:
    import subprocess
    import sys

    script = ("import sys, tensorledger\n"
              "assert 'torch' not in sys.modules\n"
              "assert 'Meter' in tensorledger.__all__\n"
              "from tensorledger.bench.meter import Meter\n"
              "assert tensorledger.Meter is Meter\n"
              "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_summary_statistics_by_hand() -> None:
    model = torch.nn.Embedding(10, 4)
    clock = FakeClock()
    meter = Meter(model, hardware=TEST_CPU, quiet=True, every=0, warmup_steps=2, clock=clock)
    times = [0.5, 0.5, 0.030, 0.010, 0.020, 0.040]  # the first two are warm-up
    for t in times:
        with meter.step():
            model(torch.zeros(3, 5, dtype=torch.long))
            clock.advance(t)
    summary = meter.close()
    assert summary.step_time is not None
    # measured 10, 20, 30, 40 ms: median 25 ms; inclusive quartiles 17.5 and 32.5 ms
    assert summary.step_time.median_s == pytest.approx(0.025)
    assert summary.step_time.iqr_s == pytest.approx(0.015)
    assert summary.tokens == 4 * 15 and summary.tokens_per_s == pytest.approx(60 / 0.1)
    # an embedding lookup is a gather: 0 FLOPs, so MFU is 0 against the fp32 peak
    assert summary.flops_per_step == 0 and summary.mfu == 0.0
    assert not math.isnan(summary.tokens_per_s_median or math.nan)


def test_an_unwritable_jsonl_path_is_one_sentence(tmp_path) -> None:  # type: ignore[no-untyped-def]
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(Exception) as caught:
        Meter(torch.nn.Linear(2, 2), hardware=TEST_CPU, jsonl=blocker / "m.jsonl")
    _one_sentence(caught.value, "cannot write the meter's JSON lines")
