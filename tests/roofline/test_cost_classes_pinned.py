"""``cost_class``, ``pieces`` and ``updates_in_place`` (roofline/cost_classes.py) pinned where
the mutation run of issue 42 found them untested: each class's borders (which category a name
counts in), the attention blocks at each size where the block grows, and records that lack a
field.  Each expectation is worked out beside it."""

from __future__ import annotations

from types import SimpleNamespace as Rec

import pytest

from tensorledger.roofline.cost_classes import cost_class, pieces, updates_in_place


def test_only_an_optimizers_elementwise_ops_update_in_place() -> None:
    assert updates_in_place("elementwise", "optimizer")
    assert not updates_in_place("optimizer", "optimizer")  # the category must be elementwise
    assert not updates_in_place("elementwise", "backward")
    assert not updates_in_place("matmul", "forward")


@pytest.mark.parametrize(("op", "category", "phase", "precision", "expected"), [
    # a name's class holds only in its category: exp in a norm written out is the norm's,
    # its row reductions and divisions a class of the norm's apart; softmax as an elementwise
    # op is elementwise, a mean outside a norm a reduction
    ("aten.exp.default", "normalization", "", "", "normalization"),
    ("aten.div.Tensor", "normalization", "", "", "normalization-dividing"),
    ("aten.rsqrt.default", "normalization", "backward", "", "normalization-dividing"),
    # a forward op of a matmul, a norm, an elementwise op or a copy is a class apart; an
    # attention's, an embedding's and the optimizer's are not
    ("aten.rsqrt.default", "normalization", "forward", "", "normalization-dividing-forward"),
    ("aten.mm.default", "matmul", "forward", "", "matmul-forward"),
    ("aten._to_copy.default", "copy", "forward", "bf16", "copy-forward-bf16"),
    ("aten.add.Tensor", "elementwise", "forward", "", "elementwise-forward"),
    ("aten._scaled_dot_product_flash_attention_for_cpu.default", "attention", "forward",
     "", "attention"),
    ("aten.embedding.default", "embedding", "forward", "", "embedding"),
    ("aten.mm.default", "matmul", "other", "", "matmul"),
    ("aten.mean.dim", "normalization", "", "", "normalization-reduction"),
    ("aten.sum.dim_IntList", "normalization", "backward", "", "normalization-reduction"),
    ("aten.mean.dim", "reduction", "", "", "reduction"),
    # an attention's backward kernel is a class apart from its forward, in any precision;
    # a name with "backward" in it counts only in attention
    ("aten._scaled_dot_product_flash_attention_for_cpu_backward.default", "attention",
     "backward", "", "attention-backward"),
    ("aten._scaled_dot_product_flash_attention_for_cpu_backward.default", "attention",
     "backward", "bf16", "attention-backward-bf16"),
    ("aten._scaled_dot_product_flash_attention_for_cpu.default", "attention", "forward",
     "bf16", "attention-bf16"),
    ("aten.gelu_backward.default", "elementwise", "backward", "", "elementwise-costly"),
    ("aten.native_layer_norm_backward.default", "normalization", "", "bf16",
     "normalization-fused-bf16"),
    ("aten.div.Tensor", "normalization", "", "bf16", "normalization-dividing-bf16"),
    ("aten._softmax.default", "elementwise", "", "", "elementwise"),
    ("aten._softmax.default", "normalization", "", "", "normalization-fused"),
    ("aten.native_layer_norm_backward.default", "normalization", "", "",
     "normalization-fused"),
    ("aten.div_.Tensor", "elementwise", "", "", "elementwise-dividing"),
    ("aten.sqrt.default", "elementwise", "backward", "", "elementwise-dividing"),
    ("aten.tanh_backward.default", "elementwise", "backward", "", "elementwise-costly"),
    # the optimizer's class comes before costly and dividing
    ("aten.sqrt.default", "elementwise", "optimizer", "", "elementwise-optimizer"),
    ("aten.mul.Tensor", "elementwise", "optimizer", "", "elementwise-optimizer"),
    # a precision is appended to the class the op has without it, the phase kept
    ("aten.add_.Tensor", "elementwise", "optimizer", "bf16", "elementwise-optimizer-bf16"),
    ("aten.gelu.default", "elementwise", "forward", "fp16", "elementwise-costly-forward-fp16"),
    ("aten._softmax.default", "normalization", "", "bf16", "normalization-fused-bf16"),
    # a view is a view in any dtype; without a precision the category stands
    ("aten.view.default", "view", "forward", "bf16", "view"),
    ("aten.view.default", "view", "forward", "", "view"),
    ("aten.mm.default", "matmul", "backward", "", "matmul"),
])
def test_cost_class(op: str, category: str, phase: str, precision: str, expected: str) -> None:
    assert cost_class(op, category, phase, precision) == expected


def test_without_split_a_norms_parts_and_an_attentions_backward_keep_their_category() -> None:
    # the class a profile fitted before they were split off prices them by
    assert cost_class("aten.mean.dim", "normalization", split=False) == "normalization"
    # nor is a forward op apart, and without its forward class apart alone the rest stands
    assert cost_class("aten.mean.dim", "normalization", "forward", split=False) == (
        "normalization")
    assert cost_class("aten.mean.dim", "normalization", "forward", "bf16",
                      forward_apart=False) == "normalization-reduction-bf16"
    assert cost_class("aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
                      "attention", "backward", "bf16", split=False) == "attention-bf16"
    assert cost_class("aten.div.Tensor", "normalization", "backward", "bf16",
                      split=False) == "normalization-bf16"
    # and nothing else moves
    assert cost_class("aten.native_layer_norm.default", "normalization",
                      split=False) == "normalization-fused"
    assert cost_class("aten.div.Tensor", "elementwise", split=False) == (
        "elementwise-dividing")


def test_cost_class_defaults_to_no_phase_and_no_precision() -> None:
    # without a phase an in-place add is no optimizer's; without a precision no suffix
    assert cost_class("aten.add_.Tensor", "elementwise") == "elementwise"
    assert cost_class("aten.mm.default", "matmul") == "matmul"


def test_a_copys_pieces_are_its_rows() -> None:
    # (3, 5): 15 // 5 = 3 rows; (2, 4, 6): 48 // 6 = 8 rows; a scalar () is 1 piece; an empty
    # last dimension (4, 0) moves nothing: 0.  3 + 8 + 1 + 0 = 12
    copy = Rec(category="copy", output_shapes=((3, 5), (2, 4, 6), (), (4, 0)))
    assert pieces(copy) == 12.0
    assert pieces(Rec(category="copy")) == 0.0  # no shapes recorded
    # a vector (5,) is one row of 5
    assert pieces(Rec(category="copy", output_shapes=((5,),))) == 1.0


@pytest.mark.parametrize(("queries", "expected"), [
    # batch 2 × heads 3 × ⌈queries / block⌉; the block 32 below 192 positions, 64 below 768,
    # then 256
    (191, 2 * 3 * 6),  # ⌈191/32⌉ = 6 (5.97)
    (192, 2 * 3 * 3),  # ⌈192/64⌉ = 3
    (767, 2 * 3 * 12),  # ⌈767/64⌉ = 12 (11.98)
    (768, 2 * 3 * 3),  # ⌈768/256⌉ = 3
    (193, 2 * 3 * 4),  # ⌈193/64⌉ = 4 (3.02)
    (769, 2 * 3 * 4),  # ⌈769/256⌉ = 4 (3.004)
    (1, 2 * 3 * 1),  # ⌈1/32⌉ = 1
    (33, 2 * 3 * 2),  # ⌈33/32⌉ = 2
])
def test_attention_blocks(queries: int, expected: int) -> None:
    op = Rec(category="attention", input_shapes=((2, 3, queries, 64), (2, 3, queries, 64)))
    assert pieces(op) == float(expected)


def test_attention_without_four_dimensions_has_no_pieces() -> None:
    # a query of 3 dimensions, no shapes, or a missing field: the blocks are not known: 0
    assert pieces(Rec(category="attention", input_shapes=((3, 40, 16),))) == 0.0
    assert pieces(Rec(category="attention", input_shapes=())) == 0.0
    assert pieces(Rec(category="attention")) == 0.0


def test_costly_elementwise_pieces_are_flops_and_missing_fields_count_nothing() -> None:
    assert pieces(Rec(category="elementwise", op="aten.exp.default", flops=300)) == 300.0
    assert pieces(Rec(category="elementwise", op="aten.exp.default")) == 0.0  # no flops field
    assert pieces(Rec(category="elementwise", flops=300)) == 0.0  # no op name: not costly
    # a costly name outside elementwise is not priced by FLOPs
    assert pieces(Rec(category="normalization", op="aten.exp.default", flops=300)) == 0.0


def test_matmul_pieces_are_its_bytes() -> None:
    assert pieces(Rec(category="matmul", bytes_read=100, bytes_written=7)) == 107.0
    assert pieces(Rec(category="matmul", bytes_written=7)) == 7.0  # read missing: 0
    assert pieces(Rec(category="matmul", bytes_read=100)) == 100.0  # written missing: 0
    assert pieces(Rec(category="view", bytes_read=100, bytes_written=7)) == 0.0
