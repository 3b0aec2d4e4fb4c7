"""einsum costs: hand counts, torch's FlopCounterMode on the same contraction, bad patterns."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.costs.einsum import einsum_cost, parse_einsum
from tensorledger.errors import EinsumError

PATTERN = "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2"


def test_lecture_example_by_hand() -> None:
    cost = einsum_cost(PATTERN, {"batch": 2, "seq1": 3, "seq2": 3, "hidden": 4}, "bf16")
    assert cost.flops == 2 * 2 * 3 * 3 * 4          # 144
    assert cost.bytes_read == 2 * (2 * 3 * 4) * 2   # two bf16 operands of 24 values: 96
    assert cost.bytes_written == 2 * 3 * 3 * 2      # 36
    assert cost.intensity_flop_per_byte == pytest.approx(144 / 132)
    m = cost.matmul
    assert m is not None
    assert (m.batch, m.m, m.n, m.k, m.flops) == (2, 3, 3, 4, 144)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 4), st.integers(2, 5), st.integers(2, 5), st.integers(2, 5))
def test_two_operand_flops_match_flop_counter(b: int, m: int, n: int, k: int) -> None:
    # sizes of 1 make torch contract with mul + sum instead of bmm: not the oracle's case
    sizes = {"b": b, "m": m, "n": n, "k": k}
    cost = einsum_cost("b m k, b k n -> b m n", sizes)
    with FlopCounterMode(display=False) as oracle:
        torch.einsum("bmk,bkn->bmn", torch.empty(b, m, k, device="meta"),
                     torch.empty(b, k, n, device="meta"))
    assert cost.flops == oracle.get_total_flops() == 2 * b * m * n * k


def test_other_shapes() -> None:
    # transpose: no arithmetic; sum over an axis: one add per term; outer product: P multiplies
    assert einsum_cost("a b -> b a", {"a": 3, "b": 4}).flops == 0
    assert einsum_cost("a b -> a", {"a": 3, "b": 4}).flops == 12
    outer = einsum_cost("a, b -> a b", {"a": 3, "b": 4})
    assert outer.flops == 12
    assert outer.matmul is not None and outer.matmul.k == 1
    assert einsum_cost("a b, b c, c d -> a d", {"a": 2, "b": 3, "c": 4, "d": 5}).matmul is None


@pytest.mark.parametrize(("pattern", "fragment"), [
    ("a b, b c", "'->'"),
    ("a b, b c -> a z", "'z'"),
    ("a a, b -> a", "'a' appears twice"),
    ("a 1x -> a", "'1x'"),
    ("a b, -> a", "no axes"),
])
def test_malformed_patterns_name_the_problem(pattern: str, fragment: str) -> None:
    with pytest.raises(EinsumError, match=fragment.replace("(", r"\(")):
        parse_einsum(pattern)


def test_sizes_must_match_the_axes() -> None:
    with pytest.raises(EinsumError, match="no size for axis 'b'"):
        einsum_cost("a b -> a", {"a": 2})
    with pytest.raises(EinsumError, match="axis 'c' is not in"):
        einsum_cost("a b -> a", {"a": 2, "b": 3, "c": 4})
