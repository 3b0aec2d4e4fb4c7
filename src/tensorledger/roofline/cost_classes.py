"""How a calibrated profile classes an op (``Calibration``: a scale on its kernel time, a cost
a call and a cost a piece, each by class), and which elementwise ops an optimizer runs in
place: the rules :func:`~tensorledger.roofline.model.predict_op` and the calibration's fit
(:mod:`tensorledger.ledger.calibrate`) share.  Torch-free.
"""

from __future__ import annotations

import math
from typing import Any

from tensorledger.costs import packet
from tensorledger.costs.elementwise import REDUCTION_FLOPS

__all__ = ["COSTLY_ELEMENTWISE", "DIVIDING_ELEMENTWISE", "FORWARD_APART", "cost_class",
           "pieces", "updates_in_place"]

#: Normalization ops that are one kernel for the whole norm (the others are the parts of a
#: norm written out: mul, pow, mean, rsqrt); elementwise ops that divide or take roots (one
#: slow instruction an element); and elementwise ops whose time grows with their arithmetic:
#: powers and transcendental functions, which a calibration prices a FLOP (``pieces``) — on
#: a 2-core EPYC, priced with division and roots as one class by bytes, GELU's time in a
#: step came out 41–63% under its measured time and ``addcdiv_``'s 3.8 to 5.5 times over it.
_FUSED = ("norm", "softmax")
DIVIDING_ELEMENTWISE = frozenset({
    "aten.div", "aten.div_", "aten.addcdiv", "aten.addcdiv_", "aten.sqrt", "aten.rsqrt"})
COSTLY_ELEMENTWISE = frozenset({
    "aten.pow", "aten.exp", "aten.log", "aten.tanh", "aten.tanh_backward", "aten.sigmoid",
    "aten.sigmoid_backward", "aten.sin", "aten.cos", "aten.erf", "aten.gelu",
    "aten.gelu_backward", "aten.silu", "aten.silu_backward"})
#: The categories whose forward ops are a class apart from their backward ops (``cost_class``).
FORWARD_APART = frozenset({"matmul", "normalization", "elementwise", "copy"})


def updates_in_place(category: str, phase: str) -> bool:
    """Whether an op of ``category`` in ``phase`` is an optimizer's elementwise op: an
    optimizer updates its parameters and state in place (AdamW's two temporaries per
    parameter, a square root and a quotient, are freed before the next parameter's), so
    it is priced as writing into tensors that exist rather than as the eager curve's new
    outputs (``Hardware.expected_bandwidth``).  On a 2-core Xeon, in one collection of
    twelve steps, priced on the eager curve and calibrated, AdamW's elementwise ops of 16 kB
    to 1.6 MB came out from 4% under to 246% over their measured time, those under 16 kB 10%
    to 46% under, and the class over each step's ops from −10% to +38%; at the warm
    buffers' bandwidth, calibrated, those of 16 kB to 1.6 MB from 37% under to 104% over,
    those under 16 kB from 10% under to 27% over, and the class from −9% to +27%.

    >>> updates_in_place("elementwise", "optimizer"), updates_in_place("elementwise", "forward")
    (True, False)
    """
    return category == "elementwise" and phase == "optimizer"


def cost_class(op: str, category: str, phase: str = "", precision: str = "", *,
               split: bool = True, forward_apart: bool = True) -> str:
    """The class a calibration prices an op by: its category, with fused norms, dividing
    and costly elementwise ops apart, and the optimizer's elementwise ops (given ``phase``)
    in a class of their own: an optimizer runs the same few ops on each parameter in turn,
    most of them reading what the op before wrote, still in cache (on a 2-core EPYC, priced
    with the forward and backward elementwise ops, AdamW's ``addcmul_`` and ``addcdiv_``
    came out 3.3 and 2.9 times their measured time, its ``mul_`` 9% over).

    >>> cost_class("aten.gelu.default", "elementwise"), cost_class("aten.add.Tensor", "elementwise")
    ('elementwise-costly', 'elementwise')
    >>> cost_class("aten.addcdiv_.default", "elementwise")
    'elementwise-dividing'
    >>> cost_class("aten.addcdiv_.default", "elementwise", "optimizer")
    'elementwise-optimizer'
    >>> cost_class("aten.native_layer_norm.default", "normalization")
    'normalization-fused'
    >>> cost_class("aten.mul.Tensor", "normalization")  # a part of an RMSNorm written out
    'normalization'
    >>> cost_class("aten.mean.dim", "normalization")  # its reduction over each row
    'normalization-reduction'
    >>> cost_class("aten.rsqrt.default", "normalization")  # and its division
    'normalization-dividing'
    >>> cost_class("aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    ...            "attention")  # an attention's backward kernel
    'attention-backward'

    A norm written out reduces each row (``mean``, ``sum``) and divides once a row beside its
    elementwise parts: on a 2-core EPYC, priced with them as one class and calibrated, tiny
    16 × 32's RMSNorm ``mean`` came out 74–82% under its measured time and the ``div`` of its
    backward 58–77% under in three runs, while its ``mul`` and ``add`` came out over; the
    class as a whole −37% to −49% in a calibrated benchmark run.  An attention's backward
    kernel is a class apart from its forward: the probe times each direction's curves, and
    the step's kernels stray from them apart (on that EPYC, in one collection of rounds,
    fitted as one class, PyTorch's CPU flash attention forward in bf16 came out 18% to 55%
    over its measured time in three of the four held-aside workloads where it weighed, in
    both low-precision recipes (within 4% in the fourth), while its backward came out
    between 9% under and 34% over).  ``split=False`` gives the class a profile fitted
    before they were split off prices them by (``normalization``, ``attention``, and no forward
    class apart); ``forward_apart=False`` the class of a profile fitted before the forward
    ops were split off.

    A forward op of a matmul, a norm, an elementwise op or a copy (``FORWARD_APART``) is a
    class apart from the same op in the backward: a step's forward runs each kernel after
    others of other kinds, its backward runs the gradients' kernels in pairs and chains, and
    the same kernel's time in a step differs between them (on a 2-core EPYC, in one
    collection of rounds, the tiny preset's 128 × 64 fp32 matmuls took 22.8 µs a call in
    the forward and 10.4 µs in the backward).  The same measured rounds fitted both ways
    (eight collections of rounds, each beside the benchmark's five workloads in three
    recipes, judged as ``bench_roofline.py`` judges them; three of the eight are the others
    pooled in pairs): 88 of 120 workload runs had every category above 5% of the step within
    25% with the forward apart, 83 without; 91 with an attention's cost a call also left to
    its probed curves (``calibration_fit.fit``, ``Run.own_calls``).  A ninth, at the
    benchmark's default rounds in a slower spell, gave 6 of 15 either way:

    >>> [cost_class("aten.mm.default", "matmul", phase) for phase in ("forward", "backward")]
    ['matmul-forward', 'matmul']
    >>> cost_class("aten.mean.dim", "normalization", "forward")
    'normalization-reduction-forward'
    >>> cost_class("aten.mean.dim", "normalization", "forward", forward_apart=False)
    'normalization-reduction'

    ``precision``: an op in a low-precision dtype (``kernel_rates.op_precision``: bf16,
    fp16) is a class of its own, so that a calibration on every recipe's steps fits each
    dtype's kernels apart (a view is a view whatever its dtype):

    >>> cost_class("aten.mm.default", "matmul", "backward", "bf16")
    'matmul-bf16'
    >>> cost_class("aten.mm.default", "matmul", "forward", "bf16")
    'matmul-forward-bf16'
    >>> cost_class("aten.t.default", "view", "forward", "bf16")
    'view'
    """
    if precision and category != "view":
        return (f"{cost_class(op, category, phase, split=split, forward_apart=forward_apart)}"
                f"-{precision}")
    if split and forward_apart and phase == "forward" and category in FORWARD_APART:
        return f"{cost_class(op, category)}-forward"
    if updates_in_place(category, phase):
        return "elementwise-optimizer"
    name = packet(op)
    if category == "elementwise" and name in COSTLY_ELEMENTWISE:
        return "elementwise-costly"
    if category == "elementwise" and name in DIVIDING_ELEMENTWISE:
        return "elementwise-dividing"
    if category == "normalization" and any(word in name for word in _FUSED):
        return "normalization-fused"
    if split and category == "attention" and "backward" in name:
        return "attention-backward"
    if split and category == "normalization":
        if name.removeprefix("aten.") in REDUCTION_FLOPS:
            return "normalization-reduction"
        if name in DIVIDING_ELEMENTWISE:
            return "normalization-dividing"
    return category


def pieces(op: Any) -> float:
    """What an op's time in a step grows with beyond its probed rates: the rows a copy writes
    (its output's last dimension is the longest run it moves in one piece, so a rotary
    embedding's copies of 8-float halves cost more a byte than a matrix's), and the blocks an
    attention kernel loops over: batch × heads × query blocks, as PyTorch's CPU flash attention
    splits the queries (blocks of 32 positions; of 64 from 192 positions, of 256 from 768);
    the FLOPs of a costly elementwise op (``COSTLY_ELEMENTWISE``: GELU's 20 an element
    against SiLU's 4, ``costs.elementwise``); the bytes a matmul moves (the probe times a
    matmul whose right operand stays in cache; in a step both operands come from memory, and
    the in-step time less the probed one grows with the bytes: on a 2-core EPYC the forward
    and backward matmuls of seven calibration models came out at 1.15 × the probed time +
    22 µs a call + 0.10 ns a byte, which priced the tiny preset's matmuls 12% over and a
    held-aside model's 12% under, where scale and call cost alone priced them 25% over and
    19% under); 0 for other ops, or where shapes are not known.  An op a profile prices from
    its own kernel's curves counts none (``kernel_rates.own_kernel_curve``, read by the
    roofline and the calibration alike).

    >>> from types import SimpleNamespace as Rec
    >>> pieces(Rec(category="copy", output_shapes=((16, 2, 32, 2, 8),)))  # 16·2·32·2 rows
    2048.0
    >>> pieces(Rec(category="attention", input_shapes=((16, 4, 32, 16), (16, 2, 32, 16))))
    64.0
    >>> pieces(Rec(category="attention", input_shapes=((3, 3, 40, 16),)))  # 3·3 · ⌈40/32⌉
    18.0
    >>> pieces(Rec(category="attention", input_shapes=((4, 8, 256, 32),)))  # 4·8 · ⌈256/64⌉
    128.0
    >>> pieces(Rec(category="attention", input_shapes=((1, 2, 1024, 64),)))  # 1·2 · ⌈1024/256⌉
    8.0
    >>> pieces(Rec(category="elementwise", op="aten.gelu.default", flops=20 * 1024))
    20480.0
    >>> pieces(Rec(category="elementwise", op="aten.add.Tensor", flops=1024))
    0.0
    >>> pieces(Rec(category="matmul", bytes_read=2 * 4096, bytes_written=4096))  # 64×64 @ 64×64
    12288.0
    """
    if op.category == "copy":
        return float(sum(math.prod(shape) // shape[-1] if shape and shape[-1] else
                         (0 if shape else 1) for shape in getattr(op, "output_shapes", ())))
    if op.category == "attention":
        shapes = getattr(op, "input_shapes", ())
        if shapes and len(shapes[0]) == 4:  # (batch, heads, queries, head width)
            batch, heads, queries, _ = shapes[0]
            block = 256 if queries >= 768 else 64 if queries >= 192 else 32
            return float(batch * heads * -(-queries // block))
    if op.category == "elementwise" and packet(getattr(op, "op", "")) in COSTLY_ELEMENTWISE:
        return float(getattr(op, "flops", 0))
    if op.category == "matmul":
        return float(getattr(op, "bytes_read", 0) + getattr(op, "bytes_written", 0))
    return 0.0
