"""The timing harness: warm-up, repeats and statistics (no assertion on elapsed time)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from tensorledger.bench import measure, synchronize
from tensorledger.bench.harness import HIGH_SPREAD, _statistics
from tensorledger.errors import InputError


def test_statistics_by_hand() -> None:
    m = _statistics("x", "cpu", "perf_counter", 3, 1, [4.0, 1.0, 3.0, 2.0, 5.0])
    assert m.median_s == 3.0 and m.min_s == 1.0 and m.max_s == 5.0
    # inclusive quartiles of 1..5: Q1 = 2, Q3 = 4, IQR = 2, spread = 2 / 3
    assert (m.q1_s, m.q3_s, m.iqr_s) == (2.0, 4.0, 2.0)
    assert m.spread == pytest.approx(2 / 3)
    assert m.warning is not None and "67%" in m.warning
    steady = _statistics("x", "cpu", "perf_counter", 3, 1, [1.0, 1.0, 1.01, 1.0])
    assert steady.spread < HIGH_SPREAD and steady.warning is None


def test_measure_counts_calls_with_a_fake_clock() -> None:
    calls = []
    ticks = itertools.count(0.0, 0.5)  # every reading of the clock advances it by 0.5 s

    def fake_clock() -> float:
        return next(ticks)

    m = measure(lambda: calls.append(1), warmup=4, min_repeats=6, budget_s=0.0,
                clock=fake_clock)
    # first sample: one call, 0.5 s ≥ min_sample_s, so one call per sample; budget 0 → stop
    # at min_repeats samples: 4 warm-up calls + 6 timed calls
    assert m.number == 1 and len(m.samples_s) == 6
    assert len(calls) == 4 + 6
    assert all(s == 0.5 for s in m.samples_s) and m.median_s == 0.5 and m.iqr_s == 0.0


def test_measure_batches_short_functions() -> None:
    ticks = itertools.count(0.0, 1e-5)  # each clock reading advances 10 µs

    def fake_clock() -> float:
        return next(ticks)

    m = measure(lambda: None, warmup=0, min_repeats=3, budget_s=0.0, min_sample_s=1e-3,
                clock=fake_clock)
    assert m.number >= 10 and len(m.samples_s) == 3
    assert m.median_s == pytest.approx(1e-5 / m.number)  # per call


def test_measure_real_function_runs() -> None:
    m = measure(lambda: sum(range(1000)), budget_s=0.01, min_repeats=3)
    assert len(m.samples_s) >= 3 and m.min_s <= m.median_s <= m.max_s


def test_bad_arguments() -> None:
    with pytest.raises(InputError):
        measure(lambda: None, min_repeats=0)
    synchronize("cpu")
    synchronize("meta")


def test_pooled_measurements_by_hand() -> None:
    from tensorledger.bench.harness import pooled

    a = _statistics("step", "cpu", "perf_counter", 2, 1, [4.0, 1.0, 3.0])
    b = _statistics("step", "cpu", "perf_counter", 0, 2, [2.0, 5.0])
    m = pooled([a, b])
    # the five samples 1..5: median 3, quartiles 2 and 4, as one measurement of them
    assert m.samples_s == (4.0, 1.0, 3.0, 2.0, 5.0)
    assert (m.median_s, m.min_s, m.max_s, m.q1_s, m.q3_s) == (3.0, 1.0, 5.0, 2.0, 4.0)
    assert m.warmup == 2 and m.number == 1 and m.name == "step"
    with pytest.raises(InputError):
        pooled([])


def _clock(increments: list[float], then: float) -> Callable[[], float]:
    """A fake clock advancing by each of ``increments`` on successive readings, then by
    ``then`` on every reading after."""
    steps = itertools.chain(increments, itertools.repeat(then))
    now = [0.0]

    def read() -> float:
        now[0] += next(steps)
        return now[0]

    return read


def test_calls_per_sample_are_set_by_the_fastest_calibration_call() -> None:
    # the first single call waits 16 ms (a stalled thread), the next two take 0.3 ms (the
    # start reading of each sample adds 0, its end reading the call's time)
    waits = [0.0, 16e-3, 0.0, 3e-4, 0.0, 3e-4]
    one = measure(lambda: None, clock=_clock(waits, 1e-3), warmup=0, budget_s=0,
                  min_repeats=1)
    assert one.number == 1  # 16 ms is past min_sample_s (1 ms): one call a sample
    fastest = measure(lambda: None, clock=_clock(waits, 1e-3), warmup=0, budget_s=0,
                      min_repeats=1, calibration_calls=3)
    assert fastest.number == 4  # 0.3 ms doubled until a sample lasts 1 ms: 1.2 ms at 4 calls


def test_warmup_runs_until_its_seconds_have_passed() -> None:
    def calls(warmup_s: float) -> int:
        made: list[int] = []
        measure(lambda: made.append(1), clock=_clock([], 2e-3), warmup=0,
                warmup_s=warmup_s, budget_s=0, min_repeats=1)
        return len(made)

    # 2 ms a reading: the warm-up starts at 2 ms, so runs until 7 ms; its readings at 4 and 6
    # ms call once each, the one at 8 ms stops it
    assert calls(5e-3) - calls(0.0) == 2
