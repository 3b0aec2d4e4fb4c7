"""The edges of a few cost rules pinned by hand (mutation, issue 42): a convolution's
``transposed`` flag given by name or at position 6, an output given as a tuple, a reduction
over groups of one element, an empty output list, CUDA's empty log-sigmoid buffer, an output
with no shape, and a dunder op name that is not an in-place form."""

from __future__ import annotations

import sys

import pytest

import tensorledger.costs as costs_package
from tensorledger.costs import registry
from tensorledger.costs.elementwise import reduction_flops
from tests.costs.rules_support import direct, meta

# A 3×3 convolution of 3 into 4 channels over a 7×7 input: a 5×5 output.  Every count below is
# 2 · batch · (weight elements) · (grid points) with batch 2 and 4·3·3·3 = 108 weight elements.
X, W, Y = meta(2, 3, 7, 7), meta(4, 3, 3, 3), meta(2, 4, 5, 5)
ON_OUTPUT = 2 * 2 * 108 * 25  # the output grid, 5·5: 10,800
ON_INPUT = 2 * 2 * 108 * 49  # the input grid, 7·7 (a transposed convolution): 21,168
STRIDE_PADDING_DILATION = ([1, 1], [0, 0], [1, 1])


def test_convolution_reads_transposed_by_name_when_not_positional() -> None:
    six = (X, W, None, *STRIDE_PADDING_DILATION)  # no position 6: the flag is named or absent
    assert direct("aten.convolution", six, {"transposed": True}, out=Y) == ON_INPUT
    assert direct("aten.convolution", six, {"transposed": False}, out=Y) == ON_OUTPUT
    assert direct("aten.convolution", six, {}, out=Y) == ON_OUTPUT  # absent: not transposed


def test_convolution_reads_transposed_at_position_6() -> None:
    seven = (X, W, None, *STRIDE_PADDING_DILATION, True)
    assert direct("aten.convolution", seven, {}, out=Y) == ON_INPUT
    nine = (X, W, None, *STRIDE_PADDING_DILATION, False, [0, 0], 1)
    assert direct("aten.convolution", nine, {"transposed": True}, out=Y) == ON_OUTPUT


def test_a_convolution_output_given_as_a_tuple_is_read_from_its_first_tensor() -> None:
    nine = (X, W, None, *STRIDE_PADDING_DILATION, False, [0, 0], 1)
    # a second tensor of another grid (3·3) after the output must not be read
    assert direct("aten.convolution", nine, {}, out=(Y, meta(2, 4, 3, 3))) == ON_OUTPUT
    assert direct("aten.convolution", nine, {}, out=[Y]) == ON_OUTPUT
    forward = (X, W, [3, 3], None, [1, 1], [0, 0])
    assert direct("aten._slow_conv2d_forward", forward, {}, out=(Y, meta(2, 4, 3, 3))) \
        == ON_OUTPUT
    assert direct("aten._slow_conv2d_forward", forward, {}, out=Y) == ON_OUTPUT


def test_a_reduction_over_groups_of_one_adds_nothing() -> None:
    assert reduction_flops("sum", n_in=3, n_out=3) == 0  # 3 groups of 1: 3 - 3 = 0 adds
    assert reduction_flops("sum", n_in=0, n_out=0) == 0  # an empty tensor
    assert reduction_flops("max", n_in=5, n_out=5) == 0


def test_a_reduction_with_an_empty_output_list_counts_one_result() -> None:
    # no output tensor to read: one group of all 3·4 = 12 inputs, 12 - 1 = 11 adds
    assert direct("aten.sum", (meta(3, 4),), out=()) == 11
    assert direct("aten.sum", (meta(3, 4),), out=[]) == 11


def test_log_sigmoid_forward_counts_its_output_not_the_buffer() -> None:
    # (output, buffer): CUDA's kernel returns an empty buffer; 4 FLOPs a element of the 2·3 output
    out = (meta(2, 3), meta(0))
    assert direct("aten.log_sigmoid_forward", (meta(2, 3),), out=out) == 4 * 6


def test_an_output_with_no_shape_is_counted_by_the_first_argument() -> None:
    # a Python number as the output: the 2·3 input's elements, one multiply each
    assert direct("aten.mul", (meta(2, 3), 2.0), out=12.0) == 6


def test_a_dunder_name_is_not_an_in_place_form() -> None:
    assert registry.lookup("aten.resize_") is not None
    # "resize__" ends in "__": a dunder spelling is never stripped to "resize_"
    assert registry.lookup("aten.resize__") is None
    assert registry.lookup("aten.__and__") is not None
    assert registry.lookup("aten.__iand__") is None


def test_lookup_loads_the_rule_modules_it_has_not_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    # a fresh table and optimizer.py not yet imported: lookup imports the rule modules itself
    monkeypatch.setattr(registry, "_RULES", {})
    monkeypatch.setattr(registry, "_LOADED", False)
    monkeypatch.delitem(sys.modules, "tensorledger.costs.optimizer")
    monkeypatch.delattr(costs_package, "optimizer")
    assert registry.lookup("aten._fused_adam_") is not None
    assert registry.lookup("aten._fused_adam_") is not None  # loaded once, found again
