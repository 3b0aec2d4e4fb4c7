"""A probe that notices noise: figures re-measured, and marked when they stay spread; residual
times never negative.  The noise comes from a fake clock, so nothing here depends on how busy
the machine is."""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorledger.bench import probe, profile_toml
from tensorledger.bench.harness import measure
from tensorledger.bench.probe_noise import one_thread
from tensorledger.hardware import load_hardware_file

probe_module = importlib.import_module("tensorledger.bench.probe")  # the module, not probe()

SMALL = {"dtypes": ("fp32",), "sizes": (16, 32), "buffer_bytes": 2**16, "budget_s": 0.01,
         "attention_seqs": (16,), "bandwidth_sweep": False}


@pytest.fixture(autouse=True)
def small_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # the matmul's cold operands rotate through twice the last-level cache: a 64 KiB one
    # keeps the real matmuls few (the clock is fake; what they compute does not matter); one
    # thread leaves no team to check (these tests are about spread: test_probe_settle.py has
    # the stalled teams)
    monkeypatch.setattr(probe_module, "_last_level_cache_bytes", lambda: 2**16)
    with one_thread():
        yield


class FakeClock:
    """Advances by the next of ``steps`` (seconds) on every reading."""

    def __init__(self, steps: list[float]) -> None:
        self.now = 0.0
        self.steps = itertools.cycle(steps)
        self.readings = 0

    def __call__(self) -> float:
        self.now += next(self.steps)
        self.readings += 1
        return self.now


def test_a_steady_clock_marks_nothing() -> None:
    result = probe("cpu", clock=FakeClock([1e-3]), **SMALL)  # every sample exactly 1 ms
    assert result.unreliable == ()
    assert "unreliable" not in profile_toml(result)


def test_a_noisy_clock_marks_or_sets_aside_every_figure(tmp_path: Path) -> None:
    # samples of 1, 2, 4 and 8 ms (the interquartile range far above 10% of the median)
    # everywhere but in the matmul sweep, whose every reading is 1 ms
    noisy = FakeClock([1e-3, 2e-3, 4e-3, 8e-3])
    steady = FakeClock([1e-3])
    phase = {"clock": steady}

    def progress(line: str) -> None:
        phase["clock"] = steady if line.startswith("matmul") else noisy

    def clock() -> float:
        return phase["clock"]()

    result = probe("cpu", clock=clock, progress=progress, **SMALL)
    # a point of a curve is left out; figures the profile cannot do without are marked
    figures = [s.figure for s in result.set_aside]
    assert figures[0] == "attention fp32 16"
    assert result.attention == () and "attention.fp32" not in result.curves
    # and every figure of the recipes' kernels (attention by dtype, bf16 streams, casts):
    # measured, set aside, in no curve
    assert result.kernels is not None and figures[1:] == list(result.kernels.set_aside)
    assert result.kernels.attention == () and result.kernels.streams == ()
    assert not any(name.startswith(("attention.", "cast.", "bandwidth."))
                   for name in result.curves)
    labels = [u.split(" (spread")[0] for u in result.unreliable]
    assert labels == ["copy bandwidth 65536 B", "triad bandwidth 65536 B", "one bare op",
                      "per-op overhead", "per-op overhead, inference"]
    assert all(float(u.rsplit("spread ", 1)[1].rstrip("%)")) > 10 for u in result.unreliable)
    path = tmp_path / "local.toml"
    path.write_text(profile_toml(result))
    assert load_hardware_file(path).unreliable == result.unreliable


def test_a_noisy_clock_everywhere_leaves_nothing_to_price() -> None:
    from tensorledger.errors import DeviceError

    with pytest.raises(DeviceError, match="the probe's matmul figures stayed too noisy to use"):
        probe("cpu", clock=FakeClock([1e-3, 2e-3, 4e-3, 8e-3]), **SMALL)


def test_a_wide_figure_is_measured_again_and_the_tightest_kept(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    spreads = iter([0.5, 0.05])  # wide, then within 10%: accepted on the retry
    calls = []
    budgets: list[float | None] = []

    def fake_measure(fn, **options):  # type: ignore[no-untyped-def]
        calls.append(options["name"])
        budgets.append(options.get("budget_s"))
        spread = next(spreads)
        m = measure(lambda: None, budget_s=0, min_repeats=1, warmup=0)
        return m.__class__(**{**m.__dict__, "spread": spread})

    monkeypatch.setattr(probe_module, "measure", fake_measure)
    timer = probe_module._Timer(probe_module.torch.device("cpu"), lambda: 0.0, 0.10, 2)
    assert timer(lambda: None, "matmul fp32 64").spread == 0.05
    assert calls == ["matmul fp32 64"] * 2 and timer.unreliable == []
    # stays wide: three attempts and a fourth four times as long, the tightest (30%) kept
    spreads = iter([0.5, 0.3, 0.4, 0.35])
    calls.clear()
    budgets.clear()
    assert timer(lambda: None, "copy bandwidth 65536 B", budget_s=0.5).spread == 0.3
    assert budgets == [0.5, 0.5, 0.5, 0.5 * 4]
    assert len(calls) == 4 and timer.unreliable == ["copy bandwidth 65536 B (spread 30%)"]
    assert timer.why == {"copy bandwidth 65536 B": "spread 30%, limit 10%; the tightest of 4, "
                         "the last 4× longer"}


def test_residual_time_is_never_negative() -> None:
    from tensorledger.bench.optiming import OpTime
    from tensorledger.hardware import get_hardware
    from tensorledger.roofline import predict
    from tensorledger.roofline.compare import compare
    from tests.roofline.test_model import Op

    ops = [Op("aten.mm.default", "matmul", 2 * 64**3, 6 * 64 * 64, 2 * 64 * 64)]
    prediction = predict(ops, get_hardware("h100"))
    # the profiler's op took 9 ms, the whole step (a separate run) 5 ms: a busy machine
    result = compare(prediction, [[OpTime("aten.mm.default", 9e-3)]], measured_step_s=5e-3,
                     peak_flop_per_s=1e12)
    assert result.unattributed_s == 0.0 and result.ops_exceed_step
    calm = compare(prediction, [[OpTime("aten.mm.default", 3e-3)]], measured_step_s=5e-3,
                   peak_flop_per_s=1e12)
    assert calm.unattributed_s == pytest.approx(2e-3) and not calm.ops_exceed_step


def test_predictions_with_an_unreliable_profile_say_so(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "noisy.toml"
    path.write_text('name = "noisy"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n'
                    'op_overhead = "5us"\nunreliable = ["matmul fp32 256 (spread 40%)"]\n'
                    '[dense]\nfp32 = "100GFLOP/s"\n')
    result = cli("roofline", "--model", "tiny", "--batch", "1", "--seq", "8", "--precision",
                 "fp32", "--hardware", str(path))
    assert result.code == 0, result.stderr
    assert "marks 1 figure(s) unreliable" in result.stdout
    assert "matmul fp32 256 (spread 40%)" in result.stdout
    as_json = cli("roofline", "--model", "tiny", "--batch", "1", "--seq", "8", "--precision",
                  "fp32", "--hardware", str(path), "--json")
    import json

    assert json.loads(as_json.stdout)["hardware_unreliable"] == ["matmul fp32 256 (spread 40%)"]


def test_the_matmul_sweep_is_timed_in_rounds_over_every_size() -> None:
    said: list[str] = []
    result = probe("cpu", clock=FakeClock([1e-3]), rounds=3, progress=said.append, **SMALL)
    sweep = [line for line in said if line.startswith("matmul")]
    # the first round over both sizes, then two more rounds taken in turn
    assert sweep == ["matmul fp32 16×16", "matmul fp32 32×32",
                     "matmul fp32 16×16, round 2 of 3", "matmul fp32 32×32, round 2 of 3",
                     "matmul fp32 16×16, round 3 of 3", "matmul fp32 32×32, round 3 of 3"]
    # every sample 1 ms: the pooled median, and 2·n³ FLOPs over it
    assert [p.n for p in result.matmul] == [16, 32]
    assert [x for p in result.matmul for x in (p.median_s, p.flop_per_s)] == pytest.approx(
        [1e-3, 2 * 16**3 / 1e-3, 1e-3, 2 * 32**3 / 1e-3])
    assert result.unreliable == ()


def test_a_size_slower_than_the_limit_is_measured_once() -> None:
    said: list[str] = []
    probe("cpu", clock=FakeClock([2.0]), rounds=3, slow_call_s=1.0, progress=said.append,
          **SMALL)
    # 2 s a call: the sweep stops after the first size, which no later round takes again
    assert [line for line in said if line.startswith("matmul")] == ["matmul fp32 16×16"]
