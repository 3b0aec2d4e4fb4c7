"""Bytes per parameter for every precision × optimizer; the lecture's 53.3e9 parameters."""

from __future__ import annotations

import math

import pytest

from tensorledger.errors import UnknownNameError
from tensorledger.hardware import get_hardware
from tensorledger.napkin import (
    OPTIMIZERS,
    PRECISIONS,
    bytes_per_param,
    devices_needed,
    largest_model,
    tensor_memory,
)

# FACTS.md: optimizer state in fp32 — SGD 0, momentum 4, Adagrad 4, RMSprop 4, Adam/AdamW 8.
FP32_STATE = {"sgd": 0, "momentum": 4, "adagrad": 4, "rmsprop": 4, "adam": 8, "adamw": 8,
              "lion": 4}


@pytest.mark.parametrize(("optimizer", "state_bytes"), sorted(FP32_STATE.items()))
def test_fp32_state_bytes(optimizer: str, state_bytes: int) -> None:
    assert bytes_per_param("fp32", optimizer).optimizer_bytes_per_param == state_bytes


@pytest.mark.parametrize(("precision", "parts"), [
    ("fp32", (4, 4, 0, 8)),  # 16 bytes/param with AdamW
    ("bf16", (2, 2, 0, 4)),  # moments in bf16: 2 · 2
    ("mixed-bf16", (4, 4, 0, 8)),  # fp32 weights are the master copy
    ("bf16-master", (2, 2, 4, 8)),  # Megatron-style: 2 + 2 + 4 + 8 = 16
    ("bf16-fp32-states", (2, 2, 0, 8)),  # the lecture: 2 + 2 + 4 + 4 = 12
])
def test_adamw_breakdowns(precision: str, parts: tuple[int, int, int, int]) -> None:
    b = bytes_per_param(precision, "adamw")
    assert (b.params_bytes_per_param, b.grads_bytes_per_param, b.master_bytes_per_param,
            b.optimizer_bytes_per_param) == parts
    assert b.total_bytes_per_param == sum(parts)


def test_every_pair_adds_up() -> None:
    for precision in PRECISIONS:
        for optimizer in OPTIMIZERS:
            b = bytes_per_param(precision, optimizer)
            assert b.total_bytes_per_param == pytest.approx(
                b.params_bytes_per_param + b.grads_bytes_per_param + b.master_bytes_per_param
                + b.optimizer_bytes_per_param)


def test_eight_bit_adam() -> None:
    # two 1-byte moments plus one fp32 absmax per 2048 values for each: 2 + 2·4/2048
    for precision in ("fp32", "bf16"):
        state = bytes_per_param(precision, "adam8bit").optimizer_bytes_per_param
        assert state == pytest.approx(2 + 8 / 2048)


def test_aliases_and_unknown_names() -> None:
    assert bytes_per_param("lecture", "adamw") == bytes_per_param("bf16-fp32-states", "adamw")
    with pytest.raises(UnknownNameError, match=r"unknown optimizer 'adan'; "
                       r"did you mean adam, adamw\? known: adagrad"):
        bytes_per_param("fp32", "adan")
    with pytest.raises(UnknownNameError, match="unknown precision 'fp12'"):
        bytes_per_param("fp12", "sgd")


def test_largest_model_on_eight_h100s() -> None:
    result = largest_model(get_hardware("h100"), 8, "bf16-fp32-states", "adamw")
    assert result.memory_bytes == 8 * 80e9
    assert result.params == pytest.approx(8 * 80e9 / 12)  # 5.333e10
    assert round(result.params / 1e9, 1) == 53.3
    assert "activations" in result.caveat


def test_devices_for_seventy_billion() -> None:
    result = devices_needed(get_hardware("h100"), 70e9, "bf16-fp32-states", "adamw")
    assert result.total_bytes == pytest.approx(70e9 * 12)  # 840 GB
    assert result.devices == math.ceil(840e9 / 80e9) == 11  # 10.5 → 11


def test_tensor_memory() -> None:
    assert tensor_memory((4, 8), "fp32").bytes == 128  # 32 elements · 4 bytes
    big = tensor_memory((49152, 12288), "fp32")
    assert big.bytes == 49152 * 12288 * 4 == 2304 * 2**20  # 2304 MiB
    assert round(big.bytes / 1e9, 2) == 2.42
    assert tensor_memory((3,), "fp4").bytes == 2  # 12 bits round up to 2 bytes
