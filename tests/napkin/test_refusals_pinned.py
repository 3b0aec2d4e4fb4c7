"""A refused napkin question names what was wrong (rule 5): the input by its name, or the
intermediate answer that left a float's range.  The overflows are reached with a made-up chip
whose peak is 1e300 FLOP/s or whose memory is 1e300 bytes, and with inputs near the float's
edge (about 1.8e308)."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.arithmetic import MAX_COUNT, check_count, whole_devices
from tensorledger.napkin.fit import devices_needed, largest_model
from tensorledger.napkin.training import (
    devices_for_duration,
    flop_budget,
    training_flops,
    training_time,
)

H100 = get_hardware("h100")
FAST = dataclasses.replace(H100, dense_flop_per_s={k: 1e300 for k in H100.dense_flop_per_s})
ROOMY = dataclasses.replace(H100, memory_bytes=1e300)


@pytest.mark.parametrize(("call", "start"), [
    (lambda: training_flops(0, 5), "params must be a positive number"),
    (lambda: training_flops(5, 0), "tokens must be a positive number"),
    (lambda: training_time(H100, 0, 0.5, flops=1e20), "count must be a whole number"),
    (lambda: devices_for_duration(H100, 0, 0.5, flops=1e20), "duration must be a positive"),
    (lambda: flop_budget(H100, 0, 60.0), "count must be a whole number"),
    (lambda: flop_budget(H100, 8, 0.0), "duration must be a positive"),
    (lambda: largest_model(H100, 0, "fp32", "adam"), "count must be a whole number"),
    (lambda: devices_needed(H100, 0, "fp32", "adam"), "params must be a positive number"),
])
def test_a_bad_input_is_named(call: object, start: str) -> None:
    with pytest.raises(InputError, match=f"^{start}"):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(("call", "what"), [
    # 6 · 1e200 · 1e200 = 6e400
    (lambda: training_flops(1e200, 1e200), "FLOP count 6·N·D"),
    # 1e300 · 1 · 2^62 ≈ 4.6e318
    (lambda: training_time(FAST, 2**62, 1.0, flops=1e20), "cluster FLOP/s"),
    # 1e300 · 1e4 = 1e304 FLOP/s, · 86400 s ≈ 8.6e308
    (lambda: training_time(FAST, 10_000, 1.0, flops=1e20), "FLOPs per day"),
    # 989.5e12 · 1e-300 ≈ 1e-285 FLOP/s; 1e300 FLOPs over that ≈ 1e585 s
    (lambda: training_time(H100, 1, 1e-300, flops=1e300), "training time"),
    # 1e300 · 1 · 1e10 s = 1e310
    (lambda: devices_for_duration(FAST, 1e10, 1.0, flops=1e20), "FLOPs per device"),
    # 1e300 FLOPs over 989.5e12 · 1e-300 · 1 s ≈ 1e585 devices
    (lambda: devices_for_duration(H100, 1.0, 1e-300, flops=1e300), "number of devices"),
    # 1e300 · 1e10 = 1e310
    (lambda: flop_budget(FAST, 8, 1e10), "FLOP budget"),
    # 1e300 B · 1e10 devices = 1e310
    (lambda: largest_model(ROOMY, 10**10, "fp32", "adam"), "memory of all devices"),
    # 1e308 params · 16 B = 1.6e309
    (lambda: devices_needed(H100, 1e308, "fp32", "adam"), "memory for the model"),
])
def test_an_overflowing_answer_names_the_quantity(call: object, what: str) -> None:
    with pytest.raises(InputError, match=f"^the {re.escape(what)} overflows"):
        call()  # type: ignore[operator]


@pytest.mark.parametrize("call", [
    # 1e300 FLOPs over 989.5e12 FLOP/s · 1 s ≈ 1e285 devices, finite but past 2^63 − 1
    lambda: devices_for_duration(H100, 1.0, 1.0, flops=1e300),
    # 1e300 params · 16 B over 80e9 B ≈ 2e290 devices
    lambda: devices_needed(H100, 1e300, "fp32", "adam"),
])
def test_more_devices_than_a_count_holds_is_refused_by_name(call: object) -> None:
    with pytest.raises(InputError, match=r"^the number of devices is .*more than 2\^63 - 1"):
        call()  # type: ignore[operator]


def test_whole_devices_names_an_overflow() -> None:
    with pytest.raises(InputError, match=r"^the number of devices overflows"):
        whole_devices("number of devices", math.inf)


def test_check_count_bounds_and_how_it_shows_a_bad_value() -> None:
    assert check_count("ranks", MAX_COUNT) == MAX_COUNT  # 2^63 − 1 itself is a count
    with pytest.raises(InputError, match=r"^ranks must .*, got True$"):
        check_count("ranks", True)
    # a repr of 30 characters is shown; −10^28 is "-1" and 28 zeros
    with pytest.raises(InputError, match=rf"got {-10**28}$"):
        check_count("ranks", -10**28)
    # 10^30 has 31 digits: too long to show, so it is described
    with pytest.raises(InputError, match=r"got a number of 31 digits$"):
        check_count("ranks", 10**30)
