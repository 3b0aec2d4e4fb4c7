"""Closed forms of a fine-tuning step's state with adapters (LoRA, QLoRA): a frozen base in its
stored dtype or in 4-bit NF4, and adapters that alone have gradients and optimizer state.

NF4 as torchao stores it (``NF4Tensor``, the QLoRA format of Dettmers et al., 2023), for a
weight of ``n`` elements made from ``w``-byte floats, blocks of 64, 256 scales per factor:

- the 4-bit codes, two to a byte:                  n / 2 bytes
- an int8 absmax scale per block of 64:            n / 64 bytes
- a factor per 256 of those scales, in the weight's dtype: n / 16,384 values, except that
  with exactly one such block torchao keeps the whole expanded row of 256 it took it from
- the mean the scales were centred on and the 16-value code book: 17 values

So a bf16 weight costs 0.5 + 1/64 + 2/16,384 bytes a parameter (4.126 bits) plus 34 bytes.

>>> nf4_bytes(4096 * 14_336, 2)    # 29,360,128 + 917,504 + 7,168 + 34
30284834
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorledger.errors import InputError
from tensorledger.napkin.recipes import Optimizer, Precision, RecipeBytes, recipe_bytes

__all__ = ["NF4_BLOCK", "NF4_SCALER_BLOCK", "adapter_recipe", "frozen_bytes", "nf4_bytes"]

#: Elements per absmax block, and block scales per second-level factor (torchao's defaults).
NF4_BLOCK = 64
NF4_SCALER_BLOCK = 256


def nf4_bytes(numel: int, itemsize: int) -> int:
    """Bytes torchao's NF4 keeps for a weight of ``numel`` elements of ``itemsize`` bytes."""
    whole = NF4_BLOCK * NF4_SCALER_BLOCK
    if numel <= 0 or numel % whole:
        raise InputError(f"an NF4 weight holds a multiple of {whole:,} elements, got {numel:,}")
    factors = numel // whole
    factor_values = NF4_SCALER_BLOCK if factors == 1 else factors
    return numel // 2 + numel // NF4_BLOCK + (factor_values + 1 + 16) * itemsize


def frozen_bytes(tensors: Sequence[tuple[int, int, bool]]) -> int:
    """Bytes of frozen tensors given as (elements, bytes an element, stored in NF4).

    >>> frozen_bytes([(16_384, 2, True), (97 * 128, 2, False)])   # 8,192 + 256 + 273·2 + 24,832
    33826
    """
    return sum(nf4_bytes(n, width) if nf4 else n * width for n, width, nf4 in tensors)


def adapter_recipe(precision: Precision, optimizer: Optimizer, numels: Sequence[int],
                   itemsize: int) -> RecipeBytes | None:
    """The adapters' parameters, gradients and optimizer state under ``precision``, for
    adapters of ``itemsize`` bytes an element (peft keeps them in fp32 over a bf16 base: fp32
    gradients and states then, with no master copy); None where the recipe's master copy or
    fp32 shadow of an fp32 adapter has no closed form here."""
    if itemsize == precision.param_bytes:
        return recipe_bytes(precision, optimizer, numels)
    if itemsize == 4 and precision.name == "bf16":
        return recipe_bytes("fp32", optimizer, numels)
    return None
