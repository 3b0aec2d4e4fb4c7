"""The training-time answers carry a mixture of experts' active parameters, and the inverse
question names the answer that overflows (mutation, issue 42)."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.training import devices_for_duration, flop_budget, training_time

H100 = get_hardware("h100")  # dense bf16 989.5e12 FLOP/s


def test_training_time_counts_and_keeps_the_active_params() -> None:
    got = training_time(H100, 8, 0.5, params=4e9, tokens=1e12, active_params=1e9)
    assert got.active_params == 1e9
    assert got.flops == 6e21  # 6 · 1e9 active · 1e12 tokens, not 6 · 4e9 · 1e12
    assert training_time(H100, 8, 0.5, params=4e9, tokens=1e12).active_params is None


def test_devices_for_duration_keeps_the_active_params() -> None:
    got = devices_for_duration(H100, 86400.0, 0.5, params=4e9, tokens=1e12, active_params=1e9)
    assert got.active_params == 1e9
    assert got.flops == 6e21


def test_the_days_with_whole_devices_can_overflow_and_say_so() -> None:
    # the longest finite duration (≈ 1.798e308 s) at MFU 1e-20: one device does 989.5e12 ·
    # 1e-20 · 1.798e308 ≈ 1.779e303 FLOPs in it; 1000.0000001 times that is forgiven to 1000
    # devices (one part in 1e9), which then take 1.0000000001 × the duration: past the float
    duration = 1.7976931348623157e308
    per_device = 989.5e12 * 1e-20 * duration
    with pytest.raises(InputError, match=r"^the training time overflows a float"):
        devices_for_duration(H100, duration, 1e-20, flops=per_device * 1000.0000001)


def test_the_default_dtype_is_bf16_and_a_chip_without_it_says_so() -> None:
    fp32_only = dataclasses.replace(H100, dense_flop_per_s={"fp32": 67e12})
    message = r"^h100-sxm lists no dense bf16 peak for dtype 'bf16'; it lists: fp32$"
    with pytest.raises(InputError, match=message):
        training_time(fp32_only, 8, 0.5, flops=1e20)
    with pytest.raises(InputError, match=message):
        devices_for_duration(fp32_only, 86400.0, 0.5, flops=1e20)
    with pytest.raises(InputError, match=message):
        flop_budget(fp32_only, 8, 86400.0)
