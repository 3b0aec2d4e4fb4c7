"""``tensorledger roofline`` end to end (meta prediction; a small real measurement)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.hardware.target import default_target
from tensorledger.roofline import predict_op
from tensorledger.workload import trace_model
from tests.conftest import assert_one_line_error


def test_prediction_json_matches_a_second_path(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("roofline", "--model", "tiny", "--batch", "2", "--seq", "16", "--hardware",
              "a100", "--json", "--per-op").json()
    # the CLI's defaults: train, mixed-bf16, the --hardware chip's program (an H100's)
    run = trace_model("tiny", batch=2, seq=16, target=default_target())
    chip = get_hardware("a100")
    expected = [predict_op(i, r, chip).time_s for i, r in enumerate(run.trace.records)]
    assert doc["prediction"]["time_s"] == pytest.approx(sum(expected))
    assert [o["time_s"] for o in doc["prediction"]["ops"]] == pytest.approx(expected)
    assert doc["prediction"]["flops"] == run.trace.flops
    assert doc["prediction"]["tokens_per_s"] == pytest.approx(32 / sum(expected))
    assert doc["comparison"] is None and doc["uncovered"] == {}


def test_table_and_plot(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plot = tmp_path / "roof.png"
    result = cli("roofline", "--model", "tiny", "--batch", "1", "--seq", "8", "--plot",
                 str(plot), "--overlay", "h100", "--hardware", "a100")
    assert result.code == 0, result.stderr
    assert "Predicted time by category" in result.stdout
    assert "expected step" in result.stdout and "roofline bound" in result.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"roofline plot written to {plot}" in result.stdout


def test_measure_on_cpu(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("roofline", "--model", "tiny", "--batch", "1", "--seq", "8", "--measure",
              "--budget", "0.05", "--json").json()
    c = doc["comparison"]
    # the profiler's calls line up with the trace's, bar the composite ops it also shows
    assert c["measured_step_s"] > 0 and c["matched_by"].startswith("position (")
    assert c["error"] == pytest.approx(c["predicted_step_s"] / c["measured_step_s"] - 1)
    assert sum(k["predicted_s"] for k in c["categories"]) == pytest.approx(c["predicted_step_s"])
    assert c["measured_mfu"] == pytest.approx(c["flops"] / c["measured_step_s"]
                                              / c["peak_flop_per_s"])
    # six rounds by default: each measured median has its interval, the smallest and largest
    # of the six (1 − 2/64 = 96.9%), so the median lies within it
    low, high = c["residual_interval_s"]
    assert low <= c["residual_s"] <= high
    for k in c["categories"]:
        if k["measured_s"] > 0:
            low, high = k["measured_interval_s"]
            assert low <= k["measured_s"] <= high


@pytest.mark.parametrize(("args", "fragment"), [
    (["--hardware", "h1000"], "unknown hardware"),
    (["--plot", "out.gif"], "use a name ending in .png"),
    (["--plot", "/nonexistent/dir/x.png"], "does not exist"),
    (["--step", "sideways"], "unknown step"),
    (["--batch", "0"], "--batch must be between 1 and"),
])
def test_errors(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],  # type: ignore[no-untyped-def]
                fragment: str) -> None:
    # run in tmp_path and ask for a plot there (unless the case names its own), so that a
    # command that went on to write one before refusing would leave a file behind
    monkeypatch.chdir(tmp_path)
    plot = [] if "--plot" in args else ["--plot", "roof.png"]
    result = cli("roofline", "--model", "tiny", "--batch", "1", "--seq", "8", *plot, *args)
    assert_one_line_error(result, fragment)
    assert not list(tmp_path.iterdir())


def test_local_without_profile(cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path))
    assert_one_line_error(cli("roofline", "--model", "tiny", "--hardware", "local"),
                          "tensorledger probe")


def test_measure_takes_the_step_and_its_ops_in_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole steps and a profiled step in turn, so a spell falls on both alike; the step's
    time is the median of every round's samples, a category's the median of the rounds."""
    import statistics

    import tensorledger.bench.harness as harness
    import tensorledger.bench.optiming as optiming
    from tensorledger.ledger.roofline import roofline_report
    from tensorledger.workload import resolve_workload

    order: list[str] = []
    samples: list[float] = []
    real_measure, real_calls = harness.measure, optiming.profile_calls

    def measure(*args: Any, **kwargs: Any) -> Any:
        order.append("step")
        part = real_measure(*args, **kwargs)
        samples.extend(part.samples_s)
        return part

    def profile_calls(*args: Any, **kwargs: Any) -> Any:
        order.append(f"profile × {kwargs['repeats']}")
        return real_calls(*args, **kwargs)

    monkeypatch.setattr(harness, "measure", measure)
    monkeypatch.setattr(optiming, "profile_calls", profile_calls)
    work = resolve_workload("tiny", batch=1, seq=8, precision="fp32", device="cpu")
    run = roofline_report(work, get_hardware("h100"), measure_step=True, budget_s=0.03,
                          timing_runs=3)
    assert order == ["step", "profile × 1"] * 3
    assert run.comparison is not None
    assert run.comparison.measured_step_s == pytest.approx(statistics.median(samples))


def test_step_timings_take_their_rounds_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workloads timed in rounds taken in turn (as bench_roofline does): each round times
    its own step, and each report's measured step is the median of its own rounds' samples
    only, never the other workload's."""
    import statistics

    import tensorledger.bench.harness as harness
    from tensorledger.errors import InputError
    from tensorledger.ledger.roofline import StepTiming
    from tensorledger.workload import resolve_workload

    order: list[Any] = []
    real_measure = harness.measure

    def measure(step: Any, **kwargs: Any) -> Any:
        order.append(step)  # which workload's step this round times
        return real_measure(step, **kwargs)

    monkeypatch.setattr(harness, "measure", measure)
    chip = get_hardware("h100")
    # the wider step profiles three steps a round: the time between ops is each round's
    # step times the median share of their spans outside their calls
    small, wide = (StepTiming(resolve_workload("tiny", batch=batch, seq=8, precision="fp32",
                                               device="cpu"), chip, profiled=profiled)
                   for batch, profiled in ((1, 1), (3, 3)))
    with pytest.raises(InputError, match="take one round at least"):
        small.report()
    for _ in range(2):
        for timing in (small, wide):
            timing.round(0.02, warmup=1)
    assert order == [small.step.run, wide.step.run] * 2
    assert len(small.parts) == len(wide.parts) == 2
    assert len(small.calls) == 2 and len(wide.calls) == 6
    for timing in (small, wide):
        run = timing.report()
        assert run.comparison is not None
        own = [s for part in timing.parts for s in part.samples_s]
        assert run.comparison.measured_step_s == pytest.approx(statistics.median(own))
        assert run.batch == timing.work.batch
        each = len(timing.calls) // 2
        assert all(calls.span_s is not None and calls.span_s >= sum(c.time_s for c in calls)
                   for calls in timing.calls)
        assert run.comparison.residual_s == pytest.approx(statistics.median(
            part.median_s * statistics.median(
                (calls.span_s - sum(c.time_s for c in calls)) / calls.span_s
                for calls in timing.calls[i * each:(i + 1) * each])
            for i, part in enumerate(timing.parts)))
    # priced again on another chip after its rounds (a calibration fitted meanwhile): the
    # prediction is the other chip's, the measured rounds the same
    from tensorledger.roofline import predict

    before = small.report().comparison
    a100 = get_hardware("a100")
    small.reprice(a100)
    after = small.report().comparison
    assert before is not None and after is not None
    assert after.hardware == a100.id and after.measured_step_s == before.measured_step_s
    assert after.predicted_step_s == pytest.approx(
        predict(small.traced.records, a100, tokens=small.work.tokens).time_s)
    assert after.predicted_step_s != pytest.approx(before.predicted_step_s)
