"""How long the inner loop of an elementwise op's kernel runs, from its tensors' layouts.

An eager elementwise kernel (torch's TensorIterator) walks its output in memory order and
merges neighbouring dimensions into one loop wherever every operand steps through both
evenly.  Where one operand does not (a head-split view read across heads, the half of a
rotary embedding's last dimension, a transposed gradient, a table broadcast over the batch
beside a tensor that is not), the kernel runs many short inner loops, and on a CPU their
cost dominates below a few dozen elements: on a 2-core EPYC, adding a bf16
(batch, heads, seq, 16) view of a (batch, seq, heads, 16) tensor to a contiguous one ran at
8 GB/s where two contiguous tensors ran at 67 GB/s (issue 43).  The trace records each op's
inner loop (:func:`inner_loop`); the roofline prices the op from the probe's curve of such
loops (``strided.<dtype>``, by loop length).  Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["inner_loop"]

Layout = tuple[Sequence[int], Sequence[int]]  # (shape, strides)


def inner_loop(output: Layout, inputs: Sequence[Layout]) -> int:
    """The elements of the innermost loop of a kernel writing ``output`` from ``inputs``
    (broadcast from the right): the output's dimensions in memory order, innermost first,
    merged while every operand's stride over the next is its stride over those merged times
    their elements (a broadcast operand's stride is 0); 0 where one loop spans the output.

    >>> contiguous = ((8, 4, 256, 16), (16384, 4096, 16, 1))
    >>> heads = ((8, 4, 256, 16), (16384, 16, 64, 1))  # (batch, seq, heads, 16) read by head
    >>> inner_loop(contiguous, [contiguous, contiguous]), inner_loop(heads, [heads])
    (0, 0)
    >>> inner_loop(heads, [heads, contiguous]), inner_loop(contiguous, [heads])
    (16, 16)
    >>> half = ((8, 4, 256, 8), (16384, 4096, 16, 1))  # x[..., :8] of the contiguous one
    >>> inner_loop(((8, 4, 256, 8), (8192, 2048, 8, 1)), [half])
    8
    >>> table = ((256, 16), (16, 1))  # a (seq, 16) table broadcast over batch and heads
    >>> inner_loop(contiguous, [contiguous, table]), inner_loop(heads, [heads, table])
    (4096, 16)
    >>> rows = ((2048, 64), (64, 1))  # a norm's x · rsqrt(mean): one scale per row
    >>> inner_loop(rows, [rows, ((2048, 1), (1, 1))])
    64
    >>> inner_loop(((1,), (1,)), [((1,), (1,))])  # one element
    0
    """
    shape, strides = output
    rank = len(shape)
    if len(strides) != rank:
        return 0  # a layout without strides (sparse, nested): not priced as strided
    operands = [tuple(strides)]
    for in_shape, in_strides in inputs:
        offset = rank - len(in_shape)
        if offset < 0 or len(in_strides) != len(in_shape):
            continue  # no layout to read (or not broadcast to the output): not walked
        operands.append(tuple(0 if d < offset or in_shape[d - offset] == 1
                              else in_strides[d - offset] for d in range(rank)))
    order = sorted((d for d in range(rank) if shape[d] != 1),
                   key=lambda d: (abs(strides[d]), -d))
    if not order:
        return 0
    first = order[0]
    loop = shape[first]
    for dim in order[1:]:
        if any(steps[dim] != steps[first] * loop for steps in operands):
            return loop
        loop *= shape[dim]
    return 0
