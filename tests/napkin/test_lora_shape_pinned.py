"""``--lora``'s adapters on a preset (mutation, issue 42): targets in the model's order, by the
reference model's names, with peft's names refused with a hint, and a sparse block refused."""

from __future__ import annotations

import re

import pytest

from tensorledger.errors import InputError
from tensorledger.napkin.adapters import LoraShape, lora_shape
from tensorledger.napkin.transformer import get_preset

TINY = get_preset("tiny")
LINEARS = "query, key, value, output, gate, up, down, head"


def test_targets_come_in_the_models_order_without_nf4_by_default() -> None:
    assert lora_shape(TINY, 4, ("gate", "output")) == LoraShape(
        rank=4, targets=("output", "gate"), nf4=False)
    assert lora_shape(TINY, 4).targets == ("query", "value")  # peft's usual pair


def test_a_peft_name_is_refused_with_the_reference_name() -> None:
    message = ("--lora-targets: tiny (the reference model) has no linear 'q_proj' (peft's "
               f"q_proj is the reference model's query); its linear modules: {LINEARS}")
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        lora_shape(TINY, 4, ("q_proj",))


def test_an_unknown_name_is_refused_without_a_hint() -> None:
    message = ("--lora-targets: tiny (the reference model) has no linear 'bogus'; its linear "
               f"modules: {LINEARS}")
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        lora_shape(TINY, 4, ("bogus",))


def test_experts_alone_are_refused() -> None:
    with pytest.raises(InputError, match=r"^--lora is priced on dense blocks; tiny-moe's experts"):
        lora_shape(get_preset("tiny-moe"), 4)


def test_nf4_is_carried() -> None:
    assert lora_shape(TINY, 4, nf4=True).nf4 is True
