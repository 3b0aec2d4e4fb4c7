"""The selection rules' argument reading and the scaled matmul's packed operand, called on
shape-only stand-ins (mutation, issue 42): k named or positional, the default dimension on a
1-D tensor, a bool that is not a dimension, a row of one element, a width of zero."""

from __future__ import annotations

from typing import Any

from tensorledger.costs.registry import Rule, lookup
from tensorledger.costs.selection import topk_flops


class T:
    """A shape and nothing else (no dtype)."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape


class Typed(T):
    def __init__(self, dtype: str, *shape: int) -> None:
        super().__init__(*shape)
        self.dtype = dtype


def _rule(op: str) -> Rule:
    found = lookup(op)
    assert found is not None
    return found


def _flops(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return _rule(op).flops(args, kwargs, None)


def test_topk_reads_k_by_name_or_position() -> None:
    # 6 · 8 = 48 elements against a heap of 2: ⌈log₂ 3⌉ = 2 each → 96
    assert _flops("aten.topk", (T(6, 8),), {"k": 2}) == 96
    assert _flops("aten.topk", (T(6, 8), 2), {}) == 96
    assert _flops("aten.topk", (T(6, 8), 2, 0), {}) == 96


def test_topk_defaults_to_the_last_dimension_of_a_1d_tensor() -> None:
    # 8 elements, k 3: ⌈log₂ 4⌉ = 2 → 16 (dimension −1 is the only one there is)
    assert _flops("aten.topk", (T(8), 3), {}) == 16


def test_topk_over_rows_of_one_and_of_none() -> None:
    # rows of one element, k 1: one compare each, 6 (⌈log₂ 2⌉ = 1)
    assert _flops("aten.topk", (T(6, 1), 1), {}) == 6
    assert topk_flops(6, 1, 1) == 6
    # an empty row: nothing compared, whatever the count of elements says
    assert topk_flops(0, 0, 0) == 0
    assert topk_flops(12, 0, 2) == 0


def test_sort_takes_the_first_int_that_is_not_a_bool_as_its_dimension() -> None:
    # (stable=True, dim=0) as positional values: rows of 6, ⌈log₂ 6⌉ = 3 → 60 · 3 = 180
    # (True read as dimension 1 would give rows of 10: 60 · 4 = 240)
    assert _flops("aten.sort", (T(6, 10), True, 0), {}) == 180


def test_scaled_mm_reads_the_first_operand_for_fp4_packing() -> None:
    # (4 × 3) · (6 × 5) with K packed two fp4 to an element in the first operand: 2 · 4 · 5 ·
    # (2 · 3) = 240; the second operand's dtype is not read
    packed = Typed("torch.float4_e2m1fn_x2", 4, 3)
    plain = Typed("torch.float8_e4m3fn", 6, 5)
    assert _flops("aten._scaled_mm", (packed, plain), {}) == 240
    assert _flops("aten._scaled_mm", (plain, packed), {}) == 2 * 6 * 3 * 5  # 180, not packed


def test_scaled_mm_of_operands_with_no_dtype_is_unpacked() -> None:
    # 2 · 4 · 5 · 3 = 120
    assert _flops("aten._scaled_mm", (T(4, 3), T(3, 5)), {}) == 120


def test_a_zero_dimensional_tensor_is_one_row_of_one() -> None:
    # top-1 of a scalar: one element, one compare; sorting one element compares nothing
    assert _flops("aten.topk", (T(), 1), {}) == 1
    assert _flops("aten.sort", (T(),), {}) == 0


def test_sorting_rows_of_one_compares_nothing() -> None:
    # ⌈log₂ 1⌉ = 0 compares for each of 6 rows of one element
    assert _flops("aten.sort", (T(6, 1),), {}) == 0
