"""FACTS.md's worked examples for time and FLOP budgets, arithmetic beside each expectation."""

from __future__ import annotations

import math

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin import devices_for_duration, flop_budget, training_flops, training_time

H100 = get_hardware("h100")


def test_seventy_billion_on_1024_h100s() -> None:
    result = training_time(H100, 1024, 0.5, params=70e9, tokens=15e12)
    assert result.flops == pytest.approx(6.3e24)  # 6 · 70e9 · 15e12
    assert result.peak_flop_per_s == 989.5e12  # 1979e12 with sparsity / 2
    assert result.cluster_flop_per_s == pytest.approx(989.5e12 * 0.5 * 1024)  # 5.066e17
    assert result.flops_per_day == pytest.approx(989.5e12 * 0.5 * 1024 * 86400)  # 4.377e22
    # 6.3e24 / 4.3772e22 = 143.93 days
    assert result.time_days == pytest.approx(6.3e24 / (989.5e12 * 0.5 * 1024 * 86400))
    assert round(result.time_days, 1) == 143.9
    assert [s.unit for s in result.steps] == ["flops", "flop_per_s", "flop_per_s",
                                               "flops_per_day", "days"]
    assert result.steps[-1].value == pytest.approx(result.time_days)


def test_flops_given_directly() -> None:
    result = training_time(H100, 1024, 0.5, flops=3.14e23)  # GPT-3's published budget
    assert result.time_days == pytest.approx(3.14e23 / (989.5e12 * 0.5 * 1024) / 86400)  # 7.17
    assert result.steps[0].formula == "given"


def test_inverse_devices_for_thirty_days() -> None:
    result = devices_for_duration(H100, 30 * 86400, 0.5, flops=6.3e24)
    exact = 6.3e24 / (989.5e12 * 0.5 * 30 * 86400)  # 4912.69
    assert result.devices_exact == pytest.approx(exact)
    assert result.devices == math.ceil(exact) == 4913
    assert result.time_days_with_devices <= 30
    # one device fewer would not finish in time
    assert 6.3e24 / (989.5e12 * 0.5 * (result.devices - 1)) / 86400 > 30


def test_budget_eight_h100_two_weeks() -> None:
    result = flop_budget(H100, 8, 14 * 86400)
    assert result.flops == pytest.approx(989.5e12 * 8 * 14 * 86400)  # 9.5752e21
    assert round(result.flops / 1e21, 1) == 9.6


def test_training_flops() -> None:
    assert training_flops(70e9, 15e12) == pytest.approx(6 * 70e9 * 15e12)


@pytest.mark.parametrize(("count", "mfu"), [(0, 0.5), (8, 0.0), (8, 1.5), (8, float("nan"))])
def test_bad_inputs(count: int, mfu: float) -> None:
    with pytest.raises(InputError):
        training_time(H100, count, mfu, params=1e9, tokens=1e12)


def test_dtype_selects_the_peak() -> None:
    fp8 = training_time(H100, 1, 0.5, flops=1e21, dtype="fp8")
    bf16 = training_time(H100, 1, 0.5, flops=1e21, dtype="bf16")
    assert bf16.time_s / fp8.time_s == pytest.approx(1979 / 989.5)  # fp8 peak is twice bf16's
