"""The adapters' closed forms pinned (mutation, issue 42): NF4 bytes at one and two
second-level factors and their refusals, the adapters' recipe by width, the words a step
names itself by, a block's frozen bytes."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.napkin.adapters import (
    FULL_FINE_TUNE,
    AdapterCounts,
    LoraShape,
    adapter_recipe,
    nf4_bytes,
    step_words,
)
from tensorledger.napkin.recipes import recipe_bytes, resolve_optimizer, resolve_precision


def test_nf4_bytes_at_one_and_two_factors() -> None:
    # 16,384 elements = one factor block, whose expanded row of 256 is kept:
    # 16,384 / 2 + 16,384 / 64 + (256 + 1 + 16) · 2 = 8,192 + 256 + 546
    assert nf4_bytes(16_384, 2) == 8_994
    # 32,768 in fp32: 16,384 + 512 + (2 factors + 1 + 16) · 4
    assert nf4_bytes(32_768, 4) == 16_972


@pytest.mark.parametrize("numel", [0, -16_384, 1, 16_385])
def test_nf4_refuses_what_is_not_whole_blocks(numel: int) -> None:
    with pytest.raises(InputError, match=f"^an NF4 weight holds a multiple of 16,384 elements, "
                                         f"got {numel:,}$"):
        nf4_bytes(numel, 2)


NUMELS = [1000, 24]  # two tensors, 1,024 parameters


def test_adapters_of_the_recipe_width_take_the_recipe() -> None:
    bf16, adamw = resolve_precision("bf16"), resolve_optimizer("adamw")
    got = adapter_recipe(bf16, adamw, NUMELS, 2)
    assert got == recipe_bytes(bf16, adamw, NUMELS)
    assert got is not None and got.params_bytes == 2_048  # 2 · 1,024
    fp32 = resolve_precision("fp32")
    assert adapter_recipe(fp32, adamw, NUMELS, 4) == recipe_bytes(fp32, adamw, NUMELS)


def test_fp32_adapters_over_a_16_bit_base_are_priced_in_fp32() -> None:
    adamw = resolve_optimizer("adamw")
    got = adapter_recipe(resolve_precision("bf16-master"), adamw, NUMELS, 4)
    assert got == recipe_bytes("fp32", adamw, NUMELS)
    assert got is not None
    assert (got.params_bytes, got.grads_bytes, got.master_bytes) == (4_096, 4_096, 0)


@pytest.mark.parametrize(("precision", "itemsize"), [("fp32", 2), ("bf16", 1), ("fp32", 8)])
def test_other_widths_have_no_recipe(precision: str, itemsize: int) -> None:
    assert adapter_recipe(resolve_precision(precision), resolve_optimizer("adamw"), NUMELS,
                          itemsize) is None


def test_a_step_names_its_adapters() -> None:
    lora = LoraShape(rank=8, targets=("query", "value"))
    qlora = LoraShape(rank=4, targets=("key", "down"), nf4=True)
    assert lora.describe() == "LoRA r=8 on query, value"
    assert qlora.describe() == "QLoRA r=4 on key, down over a 4-bit NF4 base"
    assert lora.fine_tune() == "LoRA fine-tune, r=8 on query, value"
    assert qlora.fine_tune() == "QLoRA fine-tune, r=4 on key, down, base in 4-bit NF4"
    assert step_words(qlora) == "QLoRA fine-tune, r=4 on key, down, base in 4-bit NF4"
    assert step_words(None) == FULL_FINE_TUNE == "full fine-tune"


def test_a_blocks_frozen_bytes_are_nf4_plus_the_rest_at_their_width() -> None:
    counts = AdapterCounts(layer_params=0, head_params=0, params=0, layer_rank_values=0,
                           layer_matrices=50, layer_quantized=20, layer_quantized_bytes=100)
    assert counts.layer_frozen_bytes(2.5) == 175.0  # 100 + (50 − 20) · 2.5
