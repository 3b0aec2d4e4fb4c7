"""The inner loop of a pointwise kernel, recorded from the layouts of its real tensors
(``OpRecord.inner_loop``): a second path beside ``trace.layout``'s doctests, through the
recorder and torch's own strides."""

from __future__ import annotations

import torch

from tensorledger.trace import trace


def _loops(step) -> list[tuple[str, str, int]]:  # type: ignore[no-untyped-def]
    return [(r.op, r.category, r.inner_loop) for r in trace(step).records]


def test_pointwise_ops_record_the_loop_their_layouts_leave() -> None:
    x = torch.randn(2, 5, 3, 16)  # (batch, seq, heads, width)
    heads = x.transpose(1, 2)  # (batch, heads, seq, width): a view, width contiguous
    contiguous = torch.randn(2, 3, 5, 16)
    # one loop over everything: both contiguous
    assert _loops(lambda: contiguous + contiguous) == [("aten.add.Tensor", "elementwise", 0)]
    # the view beside a contiguous tensor: loops of its 16 contiguous elements
    assert _loops(lambda: heads + contiguous) == [("aten.add.Tensor", "elementwise", 16)]
    # the view alone: torch writes the output in the view's order, one loop
    assert _loops(lambda: heads * 2.0) == [("aten.mul.Tensor", "elementwise", 0)]
    # a rotary embedding's half: x[..., :8] of rows of 16, read 8 at a time
    assert _loops(lambda: -contiguous[..., :8]) == [
        ("aten.slice.Tensor", "view", 0), ("aten.neg.default", "elementwise", 8)]
    # in place: the contiguous destination written from the view
    assert _loops(lambda: contiguous.add_(heads)) == [("aten.add_.Tensor", "elementwise", 16)]
    # a row's scale broadcast along it (a norm's x · rsqrt(mean)): loops of the row's 16
    rows = torch.randn(30, 16)
    assert _loops(lambda: rows * rows.mean(-1, keepdim=True)) == [
        ("aten.mean.dim", "reduction", 0), ("aten.mul.Tensor", "elementwise", 16)]
    # a copy making the view contiguous reads it in loops of 16
    assert _loops(lambda: heads.contiguous()) == [("aten.clone.default", "copy", 16)]


def test_kernels_that_are_not_pointwise_record_no_loop() -> None:
    """A matmul of a transposed operand, a fused norm over a broadcast weight: their kernels
    loop their own way, and the record says 0."""
    a = torch.randn(8, 16).t()
    b = torch.randn(8, 4)
    records = trace(lambda: a @ b).records
    assert "matmul" in {r.category for r in records}
    assert [r.inner_loop for r in records] == [0] * len(records)
    norm = torch.nn.LayerNorm(16)
    x = torch.randn(4, 5, 16).transpose(0, 1)
    records = trace(lambda: norm(x)).records
    assert "normalization" in {r.category for r in records}
    assert {r.inner_loop for r in records if r.category == "normalization"} == {0}
