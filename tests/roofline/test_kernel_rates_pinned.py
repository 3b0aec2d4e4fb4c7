"""``kernel_rates.py`` pinned where the mutation run of issue 42 found no test: which dtype an
op works in, which copies are casts, which curve a vector op streams at and the borders of each
rule (a loop as long as the longest probed, a product of exactly as many rows as probed), and
which ops a profile prices from their own kernel.  Every profile is synthetic, its curves flat
(one point) where the figure should not depend on the size, so each rate is read off by hand."""

from __future__ import annotations

from types import SimpleNamespace as Rec

import pytest

from tensorledger.hardware import Hardware
from tensorledger.roofline.kernel_rates import (
    beyond_the_curve,
    cast_of,
    decode_product,
    op_precision,
    own_kernel_curve,
    stream_rate,
)


def _chip(curves: dict[str, tuple[tuple[float, float], ...]]) -> Hardware:
    return Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
                    dense_flop_per_s={"fp32": 1.0}, curves=dict(curves))


def _vector(op: str = "aten.add.Tensor", category: str = "elementwise",
            inputs: tuple[str, ...] = ("bf16", "bf16"), outputs: tuple[str, ...] = ("bf16",),
            **more: object) -> Rec:
    return Rec(op=op, category=category, input_dtypes=inputs, output_dtypes=outputs, **more)


def test_op_precision_reads_inputs_then_outputs() -> None:
    # the first low precision found, inputs before outputs
    assert op_precision(Rec(input_dtypes=("fp32", "fp16"), output_dtypes=("bf16",))) == "fp16"
    assert op_precision(Rec(input_dtypes=("fp32",), output_dtypes=("bf16",))) == "bf16"
    assert op_precision(Rec(output_dtypes=("fp16",))) == "fp16"  # no inputs recorded
    assert op_precision(Rec(input_dtypes=("bf16",))) == "bf16"  # no outputs recorded
    assert op_precision(Rec()) == ""
    assert op_precision(Rec(input_dtypes=("fp64", "int8"), output_dtypes=("fp8",))) == ""


@pytest.mark.parametrize(("op", "category", "inputs", "outputs", "expected"), [
    ("aten.copy_.default", "copy", ("bf16", "fp32"), ("fp16", "fp32"), ("fp32", "fp16")),
    ("aten.copy.default", "copy", ("fp64",), ("fp32",), ("fp64", "fp32")),
    ("aten._to_copy.default", "copy", ("fp32",), ("bf16",), ("fp32", "bf16")),
    ("aten._to_copy.default", "copy", ("int64",), ("fp32",), None),  # no floating input
    ("aten._to_copy.default", "copy", ("fp32",), ("int64",), None),  # no floating output
    ("aten._to_copy.default", "copy", ("fp32",), ("fp32",), None),  # the same dtype
    ("aten._to_copy.default", "elementwise", ("fp32",), ("bf16",), None),  # not a copy
    ("aten.clone.default", "copy", ("fp32",), ("bf16",), None),  # not a cast's name
])
def test_cast_of(op: str, category: str, inputs: tuple[str, ...], outputs: tuple[str, ...],
                 expected: tuple[str, str] | None) -> None:
    assert cast_of(_vector(op, category, inputs, outputs)) == expected


def test_nothing_moved_has_no_stream_rate() -> None:
    chip = _chip({"bandwidth.bf16": ((1.0, 5e9),)})
    assert stream_rate(_vector(), chip, 0.0) is None
    assert stream_rate(_vector(), chip, 1.0) == 5e9  # one byte: the flat curve's 5 GB/s


def test_an_op_timed_by_name_streams_at_its_own_curve() -> None:
    chip = _chip({"op.bf16.aten.gelu": ((1.0, 3e9),), "bandwidth.bf16": ((1.0, 9e9),),
                  "op.fp32.aten.gelu": ((1.0, 1e9),)})
    gelu = _vector("aten.gelu.default")
    assert stream_rate(gelu, chip, 100.0) == 3e9  # its own curve, not bf16's 9 GB/s
    # an fp32 op has no precision: no own curve is read (not op.fp32.*), and fp32 alone
    # streams at no low-precision curve either
    assert stream_rate(_vector("aten.gelu.default", inputs=("fp32",), outputs=("fp32",)),
                       chip, 100.0) is None


def test_a_fused_norm_streams_at_the_norm_curve_of_its_dtype_and_direction() -> None:
    chip = _chip({"norm.fp32.forward": ((1.0, 2e9),), "norm.bf16.backward": ((1.0, 4e9),),
                  "norm.bf16.forward": ((1.0, 6e9),), "bandwidth.bf16": ((1.0, 9e9),)})
    fp32 = _vector("aten.native_layer_norm.default", "normalization", ("fp32",), ("fp32",))
    assert stream_rate(fp32, chip, 100.0) == 2e9  # no precision: the fp32 norm's curve
    back = _vector("aten._fused_rms_norm_backward.default", "normalization")
    assert stream_rate(back, chip, 100.0) == 4e9
    # a norm without its curve streams as any bf16 op
    fp16 = _vector("aten.native_layer_norm.default", "normalization", ("fp16",), ("fp16",))
    assert stream_rate(fp16, _chip({"bandwidth.fp16": ((1.0, 7e9),)}), 100.0) == 7e9


def test_a_cast_streams_at_its_cast_curve() -> None:
    chip = _chip({"cast.fp32-bf16": ((1.0, 8e9),), "bandwidth.bf16": ((1.0, 9e9),)})
    cast = _vector("aten._to_copy.default", "copy", ("fp32",), ("bf16",))
    assert stream_rate(cast, chip, 100.0) == 8e9
    # the other direction was not probed: None, not the bf16 curve
    back = _vector("aten._to_copy.default", "copy", ("bf16",), ("fp32",))
    assert stream_rate(back, chip, 100.0) is None


def test_mixed_or_full_precision_ops_have_no_stream_curve() -> None:
    chip = _chip({"bandwidth.bf16": ((1.0, 9e9),), "bandwidth.fp32": ((1.0, 1e9),)})
    mixed = _vector(inputs=("fp32", "bf16"), outputs=("fp32",))
    assert stream_rate(mixed, chip, 100.0) is None  # two floating dtypes
    assert stream_rate(_vector(inputs=("fp32",), outputs=("fp32",)), chip, 100.0) is None
    # an integer beside one floating dtype is one floating dtype
    indexed = _vector(inputs=("bf16", "int64"), outputs=("bf16",))
    assert stream_rate(indexed, chip, 100.0) == 9e9
    assert stream_rate(_vector(), _chip({}), 100.0) is None  # no curve at all


def test_a_short_inner_loop_up_to_the_longest_probed() -> None:
    # bf16 streams at 60 GB/s; its strided curve 5 GB/s at a loop of 8, 40 GB/s at 64
    chip = _chip({"bandwidth.bf16": ((1.0, 60e9),),
                  "strided.bf16": ((8.0, 5e9), (64.0, 40e9))})
    assert stream_rate(_vector(inner_loop=64), chip, 100.0) == pytest.approx(40e9)  # the last
    assert stream_rate(_vector(inner_loop=8), chip, 100.0) == pytest.approx(5e9)
    # a loop of one element, below the first probed loop: the curve's first rate, 5 GB/s
    assert stream_rate(_vector(inner_loop=1), chip, 100.0) == pytest.approx(5e9)
    assert stream_rate(_vector(inner_loop=65), chip, 100.0) == 60e9  # beyond the probed
    assert stream_rate(_vector(), chip, 100.0) == 60e9  # no loop recorded
    # a strided curve faster than the stream does not raise it: min(3, 40) GB/s
    slow = _chip({"bandwidth.bf16": ((1.0, 3e9),), "strided.bf16": ((64.0, 40e9),)})
    assert stream_rate(_vector(inner_loop=64), slow, 100.0) == 3e9
    # a cast reads the strided curve of its low precision
    cast = _vector("aten._to_copy.default", "copy", ("fp32",), ("bf16",), inner_loop=8)
    casts = _chip({"cast.fp32-bf16": ((1.0, 60e9),), "strided.bf16": ((8.0, 5e9),)})
    assert stream_rate(cast, casts, 100.0) == 5e9


def test_beyond_the_curve_without_a_bandwidth_curve_stays_flat() -> None:
    points = ((1e3, 2e9), (1e6, 8e9))
    # 10⁸ bytes, past the last point: no fp32 bandwidth curve to fall with, the last rate
    assert beyond_the_curve(points, 1e8, _chip({})) == 8e9
    # with one that falls from 40 GB/s at 10⁶ to 10 GB/s at 10⁸: 8 · 10/40 = 2 GB/s
    falling = _chip({"bandwidth": ((1e6, 40e9), (1e8, 10e9))})
    assert beyond_the_curve(points, 1e8, falling) == pytest.approx(2e9)
    # at the last point exactly: the curve's own rate
    assert beyond_the_curve(points, 1e6, falling) == pytest.approx(8e9)


# decode products: rows 1 and 4 probed, flat curves of 80 and 20 GB/s
_MATVEC = {"matvec.bf16.m1": ((1.0, 80e9),), "matvec.bf16.m4": ((1.0, 20e9),)}


def _product(x: tuple[int, ...], weight: tuple[int, ...], op: str = "aten.mm.default",
             dtype: str = "bf16") -> Rec:
    return Rec(op=op, input_shapes=(x, weight), input_dtypes=(dtype, dtype))


def test_a_decode_product_of_as_many_rows_as_probed() -> None:
    chip = _chip(_MATVEC)
    # 4 rows (the most probed) against a 64 × 128 bf16 weight: 64·128·2 = 16384 bytes at the
    # m4 curve's 20 GB/s
    assert decode_product(_product((4, 64), (64, 128)), chip, "bf16", 0.0) == (
        16384, pytest.approx(20e9))
    # 1 row: the m1 curve's 80 GB/s
    assert decode_product(_product((1, 64), (64, 128)), chip, "bf16", 0.0) == (
        16384, pytest.approx(80e9))
    # an addmm's bias comes first; its weight is the last input, fp32 here: 4 bytes each
    addmm = Rec(op="aten.addmm.default", input_shapes=((128,), (2, 64), (64, 128)),
                input_dtypes=("fp32", "fp32", "fp32"))
    size, _ = decode_product(addmm, chip, "bf16", 0.0)  # type: ignore[misc]
    assert size == 64 * 128 * 4


@pytest.mark.parametrize("product", [
    _product((5, 64), (64, 128)),  # more rows than probed (4)
    _product((0, 64), (64, 128)),  # no rows
    _product((4, 64, 1), (64, 128)),  # x not a matrix
    _product((4, 64), (64, 128, 1)),  # weight not a matrix
    _product((4, 32), (8, 16)),  # x (128 elements) as large as the weight (128): no product
    _product((4, 64), (64, 128), op="aten.bmm.default"),  # not mm or addmm
    Rec(op="aten.mm.default", input_shapes=((4, 64),), input_dtypes=("bf16",)),  # one input
])
def test_not_a_decode_product(product: Rec) -> None:
    assert decode_product(product, _chip(_MATVEC), "bf16", 0.0) is None


def test_a_decode_product_needs_the_profiles_curves() -> None:
    assert decode_product(_product((1, 64), (64, 128)), _chip({}), "bf16", 0.0) is None
    # the curves of another dtype do not count
    assert decode_product(_product((1, 64), (64, 128)), _chip(_MATVEC), "fp32", 0.0) is None


def test_a_decode_products_working_set_is_the_larger_of_weight_and_reread() -> None:
    # m1 falls from 80 GB/s at 10⁴ bytes to 20 GB/s at 10⁶: read at the working set
    chip = _chip({"matvec.bf16.m1": ((1e4, 80e9), (1e6, 20e9))})
    product = _product((1, 50), (50, 100))  # 50·100·2 = 10⁴ bytes
    assert decode_product(product, chip, "bf16", 0.0) == (10_000, pytest.approx(80e9))
    # reread 10⁶ bytes between two uses: the cold end, 20 GB/s
    assert decode_product(product, chip, "bf16", 1e6) == (10_000, pytest.approx(20e9))


def test_own_kernel_curve() -> None:
    chip = _chip({"attention-call.bf16.forward.d64": ((1.0, 1e4),),
                  "op.bf16.aten.gelu": ((1.0, 1e9),)})
    forward = Rec(op="aten._scaled_dot_product_flash_attention.default", category="attention")
    backward = Rec(op="aten._scaled_dot_product_flash_attention_backward.default",
                   category="attention")
    assert own_kernel_curve(forward, chip, "bf16")
    assert not own_kernel_curve(backward, chip, "bf16")  # its direction's call curve missing
    assert not own_kernel_curve(forward, chip, "fp16")
    # a head curve alone is not a call's own cost
    heads = _chip({"attention-head.bf16.forward.d64": ((1.0, 1e9),)})
    assert not own_kernel_curve(forward, heads, "bf16")
    gelu = _vector("aten.gelu.default")
    assert own_kernel_curve(gelu, chip, "fp32")  # its precision is its own, bf16
    assert not own_kernel_curve(_vector("aten.gelu.default", inputs=("fp32",),
                                        outputs=("fp32",)), chip, "fp32")  # no precision
    assert not own_kernel_curve(_vector("aten.add.Tensor"), chip, "bf16")  # not timed by name


def test_only_a_call_curve_of_a_head_width_is_a_calls_own_cost() -> None:
    # "attention-call.bf16.forward.d<width>" names a call's cost at a head width; a curve of
    # another name under the same direction (here a whole-call total) is not one
    chip = _chip({"attention-call.bf16.forward.total": ((1.0, 1e4),)})
    forward = Rec(op="aten._scaled_dot_product_flash_attention.default", category="attention")
    assert not own_kernel_curve(forward, chip, "bf16")
