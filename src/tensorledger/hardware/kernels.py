"""The probed curves of the kernels a precision recipe runs beyond the matmul, by name, and
how a rate is read from them.  ``tensorledger probe`` writes them
(:mod:`tensorledger.bench.probe_kernels`); the roofline reads them
(:mod:`tensorledger.roofline.model`).  Nothing here imports torch.

- ``attention-head.<dtype>.<direction>.d<head width>``: a fused causal attention kernel
  (torch's ``scaled_dot_product_attention``), its forward or its backward alone, as (the
  op's FLOPs counted by the trace's rules, in full, per sequence and head: the size that
  sets the sequence length, FLOP/s) by sequence length.  A CPU's attention kernel runs at a
  rate that depends on its dtype, direction and head width far more than a matmul of the
  same FLOPs does: pricing bf16 attention from the bf16 matmul curve put the tiny preset's
  attention at 837 µs against 18.8 ms measured (issue 43).  And on its sequence length more
  than on its FLOPs: read at the whole op's FLOPs, a probe's curve of 8 heads priced tiny's
  32 heads of 256 tokens as 8 heads of 512, its backward 2.4 times too fast.  The rate is a
  head's, the time a call takes beyond its own cost (the slope between two head counts).
- ``attention-call.<dtype>.<direction>.d<head width>``: the cost of such a call apart from
  its heads, as (FLOPs per sequence and head, calls a second): an op of h heads takes
  ``h · head FLOPs / head rate + 1 / calls a second``.  Where the probe found no such cost the
  curve is absent, and the op is priced at its heads' time alone.
- ``op.<dtype>.<aten op>``: one op's own kernel (GELU, log-softmax, the embedding's
  backward and their backwards: ``op.bf16.aten.gelu_backward``), replayed alone, as (bytes
  moved by the trace's rules, bytes/s): the rate of an op the probe timed by name.
- ``bandwidth.<dtype>``: elementwise ops on tensors of ``dtype`` (copy and triad writing new
  tensors, as the fp32 ``bandwidth`` curve), (bytes moved, bytes/s).
- ``linear.<dtype>``: a linear layer's product, tokens × width against a 4·width × width
  weight, both operands cold (last touched a working set beyond the caches ago, as in a
  training step), as (FLOPs, FLOP/s) by width: the rate of a training step's matrix
  products, where the ``matmul.<dtype>`` curve (square, a warm right operand) sets the peak.
- ``norm.<dtype>.<direction>``: a fused layer norm (with weight and bias) over (tokens,
  width), its forward or its backward, as (the op's bytes moved by the trace's rules,
  bytes/s) by tokens: the rate of a fused norm kernel (``native_layer_norm``,
  ``_fused_rms_norm`` and their backwards) in ``dtype``.
- ``strided.<dtype>``: elementwise ops on tensors of ``dtype`` whose operands' layouts cut
  the kernel into short inner loops (:mod:`tensorledger.trace.layout`), as (the loop's
  elements, bytes/s).
- ``cast.<from>-<to>``: a conversion, autocast's casts of weights and gradients, (bytes
  moved: read in one dtype, written in the other, bytes/s).
- ``matvec.<dtype>.m<rows>``: a decode step's product of ``rows`` tokens with a weight,
  (the bytes of the weights the calls rotate through, the weight's bytes/s): the first point
  warm (one weight), the last cold (a working set beyond the caches).

>>> attention_curve("bf16", "backward", 64), stream_curve("bf16"), cast_curve("fp32", "bf16")
('attention-head.bf16.backward.d64', 'bandwidth.bf16', 'cast.fp32-bf16')
>>> strided_curve("bf16"), linear_curve("fp32"), norm_curve("bf16", "backward")
('strided.bf16', 'linear.fp32', 'norm.bf16.backward')
>>> matvec_curve("fp32", 4), matvec_rows({"matvec.fp32.m4": (), "matvec.fp32.m1": ()}, "fp32")
('matvec.fp32.m4', (1, 4))
>>> curves = {"attention-head.bf16.forward.d16": ((1e6, 1e9),),
...           "attention-head.bf16.forward.d64": ((1e6, 4e9),)}
>>> nearest_attention_curve(curves, "bf16", "forward", 24)  # 24 lies nearer 16 in logs
'attention-head.bf16.forward.d16'
>>> nearest_attention_curve(curves, "bf16", "backward", 24) is None
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["DIRECTIONS", "attention_call_curve", "attention_curve", "cast_curve",
           "linear_curve", "matvec_curve", "matvec_rows", "nearest_attention_curve",
           "norm_curve", "op_curve", "stream_curve", "strided_curve"]

#: The directions of an attention kernel the probe times apart.
DIRECTIONS = ("forward", "backward")


def attention_curve(key: str, direction: str, head_dim: int) -> str:
    """The name of the curve of attention in ``key`` (``bf16``), ``direction``, head width."""
    return f"attention-head.{key}.{direction}.d{head_dim}"


def op_curve(key: str, op: str, variant: str = "") -> str:
    """The name of the curve of one op's own kernel in ``key``; ``op`` its packet,
    ``variant`` the kernel a non-tensor argument chose (``OpRecord.variant``), if any.

    >>> op_curve("bf16", "aten.gelu_backward"), op_curve("bf16", "aten.gelu", "tanh")
    ('op.bf16.aten.gelu_backward', 'op.bf16.aten.gelu.tanh')
    """
    return f"op.{key}.{op}.{variant}" if variant else f"op.{key}.{op}"


def attention_call_curve(key: str, direction: str, head_dim: int) -> str:
    """The name of the curve of an attention call's own cost (``attention_curve``'s kernel).

    >>> attention_call_curve("fp32", "forward", 16)
    'attention-call.fp32.forward.d16'
    """
    return f"attention-call.{key}.{direction}.d{head_dim}"


def stream_curve(key: str) -> str:
    """The name of the curve of elementwise ops on ``key`` tensors."""
    return f"bandwidth.{key}"


def linear_curve(key: str) -> str:
    """The name of the curve of a linear layer's products in ``key``, operands cold."""
    return f"linear.{key}"


def norm_curve(key: str, direction: str) -> str:
    """The name of the curve of a fused norm's ``direction`` in ``key``."""
    return f"norm.{key}.{direction}"


def strided_curve(key: str) -> str:
    """The name of the curve of elementwise ops on ``key`` tensors by inner loop."""
    return f"strided.{key}"


def cast_curve(source: str, target: str) -> str:
    """The name of the curve of casts from ``source`` to ``target``."""
    return f"cast.{source}-{target}"


def matvec_curve(key: str, rows: int) -> str:
    """The name of the curve of decode products of ``rows`` tokens in ``key``."""
    return f"matvec.{key}.m{rows}"


def matvec_rows(curves: Mapping[str, object], key: str) -> tuple[int, ...]:
    """The rows the profile's decode products in ``key`` were probed at, increasing."""
    prefix = f"matvec.{key}.m"
    return tuple(sorted(int(name[len(prefix):]) for name in curves
                        if name.startswith(prefix) and name[len(prefix):].isdigit()))


def nearest_attention_curve(curves: Mapping[str, object], key: str, direction: str,
                            head_dim: int, head_flops: float | None = None) -> str | None:
    """The probed attention curve of ``key`` and ``direction`` whose head width lies nearest
    ``head_dim`` (in logs: 24 is nearer 32 than 16, 16 nearer than 64); None where none was
    probed.  Given ``head_flops`` (an op's FLOPs per sequence and head), the widths whose
    curve reaches down to it (its smallest point no larger) come first: read below its
    smallest point a curve keeps that point's rate, far above a small head's where the probe
    set its small sizes aside as noisy (``examples/own_model.py``'s bf16 backward, width 24
    at 64 tokens, read from d32's smallest kept point, 21 times its FLOPs a head: 482 µs
    against 1.4 to 2.0 ms measured).

    >>> curves = {"attention-head.bf16.backward.d16": ((1e5, 6e9), (1e8, 1e11)),
    ...           "attention-head.bf16.backward.d32": ((2e7, 6e10), (3e8, 2e11))}
    >>> nearest_attention_curve(curves, "bf16", "backward", 24)  # ln(32/24) < ln(24/16)
    'attention-head.bf16.backward.d32'
    >>> nearest_attention_curve(curves, "bf16", "backward", 24, 1e6)  # below d32's 2·10⁷
    'attention-head.bf16.backward.d16'
    >>> nearest_attention_curve(curves, "bf16", "backward", 24, 1e4)  # below both: nearest
    'attention-head.bf16.backward.d32'
    """
    prefix = attention_curve(key, direction, 0)[:-1]  # "attention-head.bf16.forward.d"
    widths = [int(name[len(prefix):]) for name in curves
              if name.startswith(prefix) and name[len(prefix):].isdigit()
              and int(name[len(prefix):]) > 0]
    if not widths:
        return None
    if head_flops is not None:
        widths = [w for w in widths
                  if _reaches_down(curves[attention_curve(key, direction, w)], head_flops)
                  ] or widths
    wanted = max(head_dim, 1)
    best = min(widths, key=lambda w: (abs(math.log(w / wanted)), w))
    return attention_curve(key, direction, best)


def _reaches_down(points: object, size: float) -> bool:
    """Whether a curve's smallest probed size is no larger than ``size`` (a curve of no
    points reaches nowhere)."""
    if not isinstance(points, (tuple, list)) or not points:
        return False
    return bool(points[0][0] <= size)
