"""The rates a probed profile measured for an op's own kernel and dtype, beyond the matmul
curve and the fp32 stream (:mod:`tensorledger.hardware.kernels` names the curves): a fused
attention kernel by its dtype, direction and head width; an elementwise op on bf16 tensors;
a cast.  Each returns None where the profile has no such curve, and the roofline then prices
the op as before (catalog chips have none).

>>> from types import SimpleNamespace as Rec
>>> op_precision(Rec(input_dtypes=("bf16", "bf16"), output_dtypes=("bf16",)))
'bf16'
>>> op_precision(Rec(input_dtypes=("fp32", "int64"), output_dtypes=("fp32",)))
''
>>> cast_of(Rec(op="aten._to_copy.default", category="copy", input_dtypes=("fp32",),
...             output_dtypes=("bf16",)))
('fp32', 'bf16')
"""

from __future__ import annotations

import math
from typing import Any

from tensorledger.costs import packet
from tensorledger.dtypes import tensor_bytes
from tensorledger.hardware import Hardware
from tensorledger.hardware.chip import interpolate
from tensorledger.hardware.kernels import (
    attention_call_curve,
    cast_curve,
    matvec_curve,
    matvec_rows,
    nearest_attention_curve,
    norm_curve,
    op_curve,
    stream_curve,
    strided_curve,
)

__all__ = ["LOW_PRECISIONS", "attention_rate", "cast_of", "decode_product", "op_precision",
           "own_call_curve", "own_kernel_curve", "stream_rate"]

#: The floating dtypes an op is priced and calibrated apart in (fp32 is the default).
LOW_PRECISIONS = ("bf16", "fp16")
_FLOATING = ("fp64", "fp32", "bf16", "fp16")
#: The fused norm kernels, by direction: priced from the probe's layer norm where probed.
_FUSED_NORMS = {"aten.native_layer_norm": "forward", "aten.native_layer_norm_backward": "backward",
                "aten._fused_rms_norm": "forward", "aten._fused_rms_norm_backward": "backward"}


def op_precision(op: Any) -> str:
    """The low-precision dtype an op works in (``LOW_PRECISIONS``: the first found among its
    inputs and outputs), else ``""``."""
    dtypes = (*getattr(op, "input_dtypes", ()), *getattr(op, "output_dtypes", ()))
    return next((d for d in dtypes if d in LOW_PRECISIONS), "")


def cast_of(op: Any) -> tuple[str, str] | None:
    """(from, to) where ``op`` converts one floating dtype into another (autocast's
    ``_to_copy``, a ``copy_`` across dtypes), else None."""
    if op.category != "copy" or packet(op.op) not in ("aten._to_copy", "aten.copy_",
                                                      "aten.copy"):
        return None
    inputs = [d for d in op.input_dtypes if d in _FLOATING]
    outputs = [d for d in op.output_dtypes if d in _FLOATING]
    if not inputs or not outputs or inputs[-1] == outputs[0]:
        return None
    return inputs[-1], outputs[0]


def attention_rate(op: Any, hardware: Hardware, key: str) -> float | None:
    """FLOP/s of an attention op in ``key`` from the probed curves of its direction and the
    head width nearest its own, at its FLOPs per sequence and head (counted in full, as the
    probe counted them; the query's leading dimensions are the batch and the heads): its
    heads' time at a head's rate, plus a call's own cost where the profile has its curve
    (``attention-call``); None where the profile has no such curve.

    >>> from types import SimpleNamespace as Rec
    >>> chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
    ...                 dense_flop_per_s={"fp32": 1.0},
    ...                 curves={"attention-head.fp32.forward.d16": ((65536.0, 65536e6),)})
    >>> op = Rec(op="aten._scaled_dot_product_flash_attention_for_cpu.default",
    ...          flops=64 * 65536, input_shapes=((16, 4, 32, 16),))
    >>> round(op.flops / attention_rate(op, chip, "fp32") * 1e6, 6)  # 64 heads of 1 µs
    64.0
    >>> chip.curves["attention-call.fp32.forward.d16"] = ((65536.0, 2e5),)  # 5 µs a call
    >>> round(op.flops / attention_rate(op, chip, "fp32") * 1e6, 6)  # 64 · 1 + 5
    69.0
    """
    direction = _direction(op)
    shapes = getattr(op, "input_shapes", ())
    head_dim = shapes[0][-1] if shapes and shapes[0] else 0
    query: tuple[int, ...] = tuple(shapes[0]) if shapes else ()
    heads = max(math.prod(query[:-2]) if len(query) > 2 else 1, 1)
    per_head = op.flops / heads
    name = nearest_attention_curve(hardware.curves, key, direction, head_dim, per_head)
    if name is None or op.flops <= 0:
        return None
    rate = interpolate(hardware.curves[name], per_head)
    width = int(name.rsplit(".d", 1)[1])  # the head width whose curve was read
    calls = hardware.curves.get(attention_call_curve(key, direction, width))
    if not calls:
        return rate
    return float(op.flops / (op.flops / rate + 1 / interpolate(calls, per_head)))


def own_kernel_curve(op: Any, hardware: Hardware, key: str) -> bool:
    """Whether the profile prices ``op`` from curves of its own kernel that already hold
    what a calibration's pieces count (``cost_classes.pieces``): an attention op's from a
    head's rate and a call's own cost (``attention-call.<key>.<direction>.*``), which grow
    with its heads as the query blocks do; a low-precision op the probe timed by name
    (``op.<dtype>.<op>``, GELU's tanh kernel apart), its own rate by its bytes.  A
    calibration then fits no cost a piece on them, which would count their time twice.

    >>> from types import SimpleNamespace as Rec
    >>> chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
    ...                 dense_flop_per_s={"fp32": 1.0},
    ...                 curves={"attention-call.bf16.backward.d64": ((1e6, 1e4),),
    ...                         "op.bf16.aten.gelu.tanh": ((1e6, 1e9),)})
    >>> attention = Rec(op="aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    ...                 category="attention")
    >>> own_kernel_curve(attention, chip, "bf16"), own_kernel_curve(attention, chip, "fp32")
    (True, False)
    >>> gelu = Rec(op="aten.gelu.default", category="elementwise", input_dtypes=("bf16",),
    ...            output_dtypes=("bf16",), variant="tanh")
    >>> own_kernel_curve(gelu, chip, "fp32"), own_kernel_curve(Rec(**{**vars(gelu),
    ...                                                              "variant": ""}), chip, "fp32")
    (True, False)
    """
    if op.category == "attention":
        prefix = attention_call_curve(key, _direction(op), 0)[:-1]  # "attention-call.<key>.<dir>.d"
        return any(name.startswith(prefix) for name in hardware.curves)
    return _own_curve(op, hardware) is not None


def own_call_curve(op: Any, hardware: Hardware, key: str) -> bool:
    """Whether the profile prices ``op``'s cost a call from its own kernel's curve: an
    attention op whose direction has ``attention-call`` curves in ``key``
    (:func:`attention_rate` adds a call's own cost).  A calibration then fits no cost a call
    on its class, which would count it twice: on a 2-core EPYC one collection of rounds
    fitted 37 µs a call on the fp32 attention forward beside the 10 to 17 µs of its probed
    call curve (head width 32), and priced the held-aside model's attention forward 24% and
    its backward 30% over their measured times.

    >>> from types import SimpleNamespace as Rec
    >>> curves = {"attention-call.fp32.forward.d64": ((1e6, 1e4),),  # 100 µs a call
    ...           "op.bf16.aten.gelu.tanh": ((1e6, 1e9),)}  # a rate by bytes, no call's cost
    >>> chip = Hardware("x", "x", 1, 1.0, {"fp32": 1.0}, curves=curves)
    >>> sdpa = Rec(op="aten._scaled_dot_product_flash_attention_for_cpu.default",
    ...            category="attention")
    >>> gelu = Rec(op="aten.gelu.default", category="elementwise", input_dtypes=("bf16",),
    ...            output_dtypes=("bf16",), variant="tanh")
    >>> [own_call_curve(sdpa, chip, key) for key in ("fp32", "bf16")], own_call_curve(
    ...     gelu, chip, "fp32")
    ([True, False], False)
    """
    return op.category == "attention" and own_kernel_curve(op, hardware, key)


def _direction(op: Any) -> str:
    """An attention op's direction, by its name: ``"backward"`` or ``"forward"``."""
    return "backward" if "backward" in op.op else "forward"


def _own_curve(op: Any, hardware: Hardware) -> tuple[tuple[float, float], ...] | None:
    """The curve of ``op``'s own kernel, timed by name in its low precision
    (``op.<dtype>.<op>``; GELU's tanh approximation is its own kernel, ``.tanh``), else None."""
    precision = op_precision(op)
    if not precision:
        return None
    return hardware.curves.get(op_curve(precision, packet(op.op), getattr(op, "variant", "")))


def stream_rate(op: Any, hardware: Hardware, moved: float) -> float | None:
    """Bytes/s of a vector op (not a matrix op, not a view) from the curve of its dtype: a
    cast's (``cast.<from>-<to>``), or a low-precision op's (``bandwidth.<dtype>``, its every
    floating input and output in that dtype); None where the profile has no such curve or
    the op mixes dtypes (an fp32 residual plus a bf16 branch streams as fp32).  An op whose
    kernel runs in short inner loops (``OpRecord.inner_loop``, no longer than the longest
    the profile probed) streams no faster than ``strided.<dtype>`` at its loop.  A fused
    norm (layer norm, RMS norm) streams at the probed layer norm's rate of its dtype and
    direction (``norm.<dtype>.<direction>``), where probed.  An op the probe timed by name
    in its low precision (``op.<dtype>.<op>``: GELU, log-softmax, the embedding's backward;
    GELU's tanh approximation apart, ``op.<dtype>.<op>.tanh``) streams at that curve's rate.

    >>> from types import SimpleNamespace as Rec
    >>> chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
    ...                 dense_flop_per_s={"fp32": 1.0},
    ...                 curves={"bandwidth.bf16": ((1e6, 60e9),),
    ...                         "strided.bf16": ((8.0, 5e9), (64.0, 40e9))})
    >>> add = Rec(op="aten.add.Tensor", category="elementwise",
    ...           input_dtypes=("bf16", "bf16"), output_dtypes=("bf16",), inner_loop=16)
    >>> round(stream_rate(add, chip, 1e6) / 1e9, 6)  # 16 lies a third of the way, in logs
    10.0
    >>> [stream_rate(Rec(**{**vars(add), "inner_loop": n}), chip, 1e6) / 1e9 for n in (0, 128)]
    [60.0, 60.0]
    >>> norm = Rec(op="aten.native_layer_norm_backward.default", category="normalization",
    ...            input_dtypes=("bf16",) * 5, output_dtypes=("bf16",) * 3)
    >>> chip.curves["norm.bf16.backward"] = ((1e5, 4e9), (1e7, 1e10))
    >>> round(stream_rate(norm, chip, 1e6) / 1e9, 6)  # 10⁶ halfway in logs: √(4·10) GB/s
    6.324555
    >>> gelu = Rec(op="aten.gelu_backward.default", category="elementwise",
    ...            input_dtypes=("bf16", "bf16"), output_dtypes=("bf16",), inner_loop=0)
    >>> chip.curves["op.bf16.aten.gelu_backward"] = ((1e5, 1e9), (1e7, 4e9))
    >>> round(stream_rate(gelu, chip, 1e6) / 1e9, 6)  # halfway in logs: √(1·4) GB/s
    2.0
    >>> tanh = Rec(**{**vars(gelu), "variant": "tanh"})
    >>> chip.curves["op.bf16.aten.gelu_backward.tanh"] = ((1e5, 5e8), (1e7, 2e9))
    >>> round(stream_rate(tanh, chip, 1e6) / 1e9, 6)  # its own curve: √(0.5·2) GB/s
    1.0
    """
    if moved <= 0:
        return None
    precision = op_precision(op)
    own = _own_curve(op, hardware)
    if own:  # the op's own kernel, probed by name
        return beyond_the_curve(own, moved, hardware)
    direction = _FUSED_NORMS.get(packet(op.op))
    if direction is not None:
        fused = hardware.curves.get(norm_curve(precision or "fp32", direction))
        if fused:
            return beyond_the_curve(fused, moved, hardware)
    cast = cast_of(op)
    if cast is not None:
        name = cast_curve(*cast)
    else:
        floating = {d for d in (*op.input_dtypes, *op.output_dtypes) if d in _FLOATING}
        if len(floating) != 1 or not floating <= set(LOW_PRECISIONS):
            return None
        name = stream_curve(floating.pop())
    points = hardware.curves.get(name)
    if not points:
        return None
    rate = beyond_the_curve(points, moved, hardware)
    loop = getattr(op, "inner_loop", 0)
    strided = hardware.curves.get(strided_curve(op_precision(op)))
    if loop > 0 and strided and loop <= strided[-1][0]:
        rate = min(rate, interpolate(strided, loop))
    return rate


def beyond_the_curve(points: tuple[tuple[float, float], ...], moved: float,
                     hardware: Hardware) -> float:
    """Bytes/s of a stream curve at ``moved``; beyond its largest point the rate falls as the
    profile's fp32 bandwidth curve falls from that size to ``moved`` (the buffer outgrows the
    caches, and its fresh pages cost), never rises: a probe times casts and bf16 ops up to a
    few MB, and a model's tables run to hundreds (GPT-2's 154 MB token embedding, cast to bf16
    in every step of mixed-bf16, priced from the 16 MB rate came out 73% under its time).

    >>> chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
    ...                 dense_flop_per_s={"fp32": 1.0},
    ...                 curves={"bandwidth": ((1e6, 40e9), (1e8, 10e9))})
    >>> cast = ((1e4, 2e9), (1e6, 8e9))
    >>> [round(beyond_the_curve(cast, size, chip) / 1e9, 9) for size in (1e6, 1e8)]  # 8·10/40
    [8.0, 2.0]
    """
    rate = interpolate(points, moved)
    largest = points[-1][0]
    bandwidth = hardware.curves.get("bandwidth")
    if moved <= largest or not bandwidth:
        return rate
    return rate * min(1.0, interpolate(bandwidth, moved) / interpolate(bandwidth, largest))


def decode_product(op: Any, hardware: Hardware, key: str, reread_bytes: float
                   ) -> tuple[int, float] | None:
    """(the weight's bytes, the bytes/s it streams at) of a decode step's product: ``mm`` or
    ``addmm`` of a few rows (no more than the profile's ``matvec.<key>.m<rows>`` curves were
    probed at) against a larger weight, from the curves at the weight's reuse distance:
    ``reread_bytes``, the bytes read between two uses of it (an inference step reads each
    weight once: the step's bytes read), or the weight's own where larger.  Rows between two
    probed counts are interpolated; None where the op is no such product or the profile has
    no such curves (catalog chips).

    >>> from types import SimpleNamespace as Rec
    >>> chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
    ...                 dense_flop_per_s={"fp32": 1.0}, curves={
    ...                     "matvec.fp32.m1": ((4e6, 80e9), (128e6, 20e9)),
    ...                     "matvec.fp32.m4": ((4e6, 20e9), (128e6, 10e9))})
    >>> mm = Rec(op="aten.addmm.default", input_shapes=((768,), (2, 768), (768, 3072)),
    ...          input_dtypes=("fp32",) * 3)
    >>> weight, rate = decode_product(mm, chip, "fp32", 512e6)  # cold: 20 and 10 GB/s
    >>> weight, round(rate / 1e9, 6)  # 768·3072·4 bytes; 2 rows: √(20·10), log-log
    (9437184, 14.142136)
    >>> small = Rec(op="aten.mm.default", input_shapes=((2, 512), (512, 1024)),
    ...             input_dtypes=("fp32",) * 2)
    >>> weight, rate = decode_product(small, chip, "fp32", 1e6)  # warm: 2 MB; √(80·20) GB/s
    >>> weight, round(rate / 1e9, 9)
    (2097152, 40.0)
    >>> decode_product(Rec(op="aten.mm.default", input_shapes=((64, 512), (512, 1024)),
    ...                    input_dtypes=("fp32",) * 2), chip, "fp32", 0.0) is None  # 64 rows
    True
    """
    if packet(op.op) not in ("aten.mm", "aten.addmm") or len(op.input_shapes) < 2:
        return None
    rows = matvec_rows(hardware.curves, key)
    x, weight = op.input_shapes[-2], op.input_shapes[-1]
    if (not rows or len(x) != 2 or len(weight) != 2 or not 0 < x[0] <= rows[-1]
            or x[0] * x[1] >= weight[0] * weight[1]):
        return None
    size = tensor_bytes(tuple(weight), op.input_dtypes[-1])
    working_set = max(float(size), reread_bytes)
    by_rows = tuple((float(m), interpolate(hardware.curves[matvec_curve(key, m)], working_set))
                    for m in rows)
    return size, interpolate(by_rows, x[0])
