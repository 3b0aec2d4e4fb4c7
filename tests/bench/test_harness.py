"""The timing harness: warm-up, repeats and statistics (no assertion on elapsed time)."""

from __future__ import annotations

import itertools

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
