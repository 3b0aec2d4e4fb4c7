"""The probe's figures on a busy machine, with a fake clock: a wild round taken again, a thread
team stalled by another process caught, and a figure that stays noisy set aside — never a peak,
and named in the output.  Nothing here reads the wall clock's values."""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from rich.console import Console

from tensorledger.bench import probe, profile_toml
from tensorledger.bench.probe import ProbeResult
from tensorledger.bench.probe_noise import LONGER
from tensorledger.errors import DeviceError
from tensorledger.hardware import load_hardware_file
from tensorledger.report.bench import probe_view

probe_module = importlib.import_module("tensorledger.bench.probe")

SMALL = {"dtypes": ("fp32",), "sizes": (16, 32), "buffer_bytes": 2**16, "budget_s": 0.01,
         "attention_seqs": (16,), "bandwidth_sweep": False, "rounds": 3}


class ScriptedClock:
    """A fake clock that advances on every reading by ``step(line, threads)``: ``line`` the
    probe's latest progress line (what it is measuring), ``threads`` torch's CPU threads."""

    def __init__(self, step: Callable[[str, int], float]) -> None:
        self.step = step
        self.line = ""
        self.now = 0.0
        self.said: list[str] = []

    def __call__(self) -> float:
        self.now += self.step(self.line, torch.get_num_threads())
        return self.now

    def progress(self, line: str) -> None:
        self.line = line
        self.said.append(line)


@pytest.fixture(autouse=True)
def small_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # the cold operands rotate through twice the last-level cache: a 64 KiB one keeps the
    # tests' real matmuls few (the clock is fake; what they compute does not matter)
    monkeypatch.setattr(probe_module, "_last_level_cache_bytes", lambda: 2**16)


@pytest.fixture
def threads() -> Iterator[Callable[[int], None]]:
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _text(result: ProbeResult) -> str:
    out = Console(width=400)
    with out.capture() as captured:
        for line in probe_view(result, "local.toml"):
            out.print(line)
    return captured.get()


def test_a_wild_first_round_is_taken_again_not_pooled(threads: Callable[[int], None]) -> None:
    # the first round of the 16³ matmul reads 16 ms a call, every other reading 2 ms (one call
    # a sample, as min_sample_s is 1 ms): the probe's old floor, which pooling kept (and
    # marked unreliable: the pooled IQR spans 2 to 16 ms)
    threads(1)  # no thread team to check: this is about rounds alone
    clock = ScriptedClock(lambda line, _: 16e-3 if line == "matmul fp32 16×16" else 2e-3)
    result = probe("cpu", clock=clock, progress=clock.progress, **SMALL)
    assert "matmul fp32 16×16, again (a round 8× slower than the fastest)" in clock.said
    # the round dropped and taken again: every sample kept is 2 ms, 2·16³ / 2 ms = 4.096e6
    assert [p.n for p in result.matmul] == [16, 32]
    assert [x for p in result.matmul for x in (p.median_s, p.flop_per_s)] == pytest.approx(
        [2e-3, 2 * 16**3 / 2e-3, 2e-3, 2 * 32**3 / 2e-3])
    assert result.unreliable == () and result.set_aside == ()


def test_a_stalled_thread_team_is_caught_and_taken_again(threads: Callable[[int], None]) -> None:
    # another process holds a core until the probe takes a round again: each call on two
    # threads waits 16 ms for its second thread, the same call on one thread takes 2 ms.  The
    # samples agree with each other (spread 0), so only the one-thread check can see it.
    threads(2)
    state = {"busy": True}

    def step(line: str, count: int) -> float:
        if ", again (" in line:
            state["busy"] = False
        return 16e-3 if state["busy"] and count > 1 else 2e-3

    clock = ScriptedClock(step)
    result = probe("cpu", clock=clock, progress=clock.progress, **SMALL)
    assert ("matmul fp32 16×16, again (stalled: 2 threads took 16 ms a call, one thread 2 ms; "
            "another process holds a core)") in clock.said
    assert [p.n for p in result.matmul] == [16, 32]
    assert [p.median_s for p in result.matmul] == pytest.approx([2e-3, 2e-3])
    assert result.set_aside == ()


def test_a_team_that_stays_stalled_prices_nothing(threads: Callable[[int], None]) -> None:
    threads(2)
    clock = ScriptedClock(lambda _, count: 16e-3 if count > 1 else 2e-3)
    with pytest.raises(DeviceError, match=r"stayed too noisy to use .*: matmul fp32 16 "
                       r"\(stalled: 2 threads took 16 ms a call, one thread 2 ms; another "
                       r"process holds a core; after 3 rounds and 3 more"):
        probe("cpu", clock=clock, progress=clock.progress, **SMALL)
    # taken again twice (the retries), then once longer, as a spread figure is
    assert clock.said.count("matmul fp32 16×16, again (stalled: 2 threads took 16 ms a call, "
                            "one thread 2 ms; another process holds a core)") == 3


def test_a_figure_that_stays_noisy_is_not_used_as_a_peak(threads: Callable[[int], None],
                                                          tmp_path: Path) -> None:
    # issue 43: the 32³ matmul's samples stay spread (readings of 0.1, 1 and 10 ms in turn)
    # through its retries and its longer measurement; every other reading is 2 ms.  At face
    # value its median (about 0.1 ms a call) would be the peak, 2·32³ / 1e-4 = 655 MFLOP/s.
    threads(1)
    noisy = itertools.cycle([1e-4, 1e-3, 1e-2])
    clock = ScriptedClock(lambda line, _: next(noisy) if line.startswith("matmul fp32 32×32")
                          else 2e-3)
    result = probe("cpu", clock=clock, progress=clock.progress, **SMALL)
    againsts = [line for line in clock.said if line.startswith("matmul fp32 32×32, again")]
    assert len(againsts) == 3  # two retries, then one LONGER times as long
    # the peak and the curve are the 16³ matmul's alone: 2·16³ / 2 ms = 4.096e6 FLOP/s
    assert result.dense_flop_per_s == {"fp32": pytest.approx(2 * 16**3 / 2e-3)}
    ((flops, rate),) = result.curves["matmul.fp32"]
    assert (flops, rate) == (2 * 16**3, pytest.approx(2 * 16**3 / 2e-3))
    assert [p.n for p in result.matmul] == [16]
    (aside,) = result.set_aside
    assert aside.figure == "matmul fp32 32"
    assert aside.reason.startswith("spread ") and aside.reason.endswith(
        f"limit 10%; after 3 rounds and 3 more, the last {LONGER:g}× longer")
    assert float(aside.reason.split()[1].rstrip("%,")) > 10
    # the output says which figure it set aside, and why: terminal, profile and JSON
    text = _text(result)
    assert "set aside: 1 figure(s)" in text and f"matmul fp32 32 ({aside.reason})" in text
    profile = profile_toml(result)
    assert f"#   matmul fp32 32 ({aside.reason})" in profile
    path = tmp_path / "local.toml"
    path.write_text(profile)
    chip = load_hardware_file(path)
    assert dict(chip.dense_flop_per_s) == result.dense_flop_per_s
    assert "matmul fp32 32" not in " ".join(chip.unreliable)
    from tensorledger.report.json import to_jsonable

    assert to_jsonable(result)["set_aside"] == [{"figure": "matmul fp32 32",
                                                 "reason": aside.reason}]


def test_a_dtype_whose_every_size_is_noisy_is_left_out(threads: Callable[[int], None]) -> None:
    # bf16's figures stay spread (issue 43: spreads of 1,784%, 22% and 26%, priced at a bf16
    # peak of 678.8 GFLOP/s beside fp32's 176.1): no bf16 peak, so bf16 work is priced at
    # fp32's (roofline.model.compute_key_for)
    threads(1)
    noisy = itertools.cycle([1e-4, 1e-3, 1e-2])
    clock = ScriptedClock(lambda line, _: next(noisy) if line.startswith("matmul bf16")
                          else 2e-3)
    result = probe("cpu", clock=clock, progress=clock.progress,
                   **{**SMALL, "dtypes": ("fp32", "bf16")})
    assert set(result.dense_flop_per_s) == {"fp32"} and "matmul.bf16" not in result.curves
    assert [s.figure for s in result.set_aside] == ["matmul bf16 16", "matmul bf16 32",
                                                    "matmul bf16"]
    assert "no peak" in result.set_aside[-1].reason


def test_without_a_steady_fp32_figure_the_probe_refuses(threads: Callable[[int], None]) -> None:
    # fp32 prices every op outside a matmul: a profile of bf16 alone would price them at bf16's
    # rate (on a CPU without bf16 units, an emulation), so the probe says so instead
    threads(1)
    noisy = itertools.cycle([1e-4, 1e-3, 1e-2])
    clock = ScriptedClock(lambda line, _: next(noisy) if line.startswith("matmul fp32")
                          else 2e-3)
    with pytest.raises(DeviceError, match=r"the probe's fp32 matmul figures stayed too noisy "
                       r"to use .*: matmul fp32 16 \(spread .*; probe again on a quieter "
                       r"machine, or allow a wider spread$"):
        probe("cpu", clock=clock, progress=clock.progress,
              **{**SMALL, "dtypes": ("fp32", "bf16")})


def test_a_stalled_bandwidth_figure_is_left_out_of_the_curve(
        threads: Callable[[int], None]) -> None:
    # the eager-op copies and adds split over the thread team too: stalled (16 ms a call on two
    # threads, 2 ms on one) through every retry, they leave the bandwidth curve
    threads(2)
    clock = ScriptedClock(lambda line, count: 16e-3 if line.startswith("eager-op") and count > 1
                          else 2e-3)
    result = probe("cpu", clock=clock, progress=clock.progress,
                   **{**SMALL, "bandwidth_sweep": True})
    reason = ("stalled: 2 threads took 16 ms a call, one thread 2 ms; another process holds a "
              "core; after 4 measurements")
    assert [(s.figure, s.reason) for s in result.set_aside] == [
        ("copy eager bandwidth 65536 B", reason), ("triad eager bandwidth 65536 B", reason)]
    assert "bandwidth" not in result.curves
    assert not any(p.fresh_output for p in result.bandwidth)
    # the warm DRAM figures were steady: 2·65536 and 3·65536 bytes in 2 ms
    assert result.memory_bandwidth_bytes_per_s == pytest.approx(3 * 2**16 / 2e-3)
