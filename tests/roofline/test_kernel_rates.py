"""A probed profile's own curves for what a recipe runs: attention by dtype, direction and
head width, bf16 elementwise ops and casts at their bandwidth, and a calibration by dtype.
Every profile here is synthetic: no clock is read."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest

from tensorledger.hardware import Calibration, Hardware, get_hardware
from tensorledger.hardware.kernels import matvec_rows, nearest_attention_curve
from tensorledger.roofline import predict, predict_op
from tensorledger.roofline.cost_classes import cost_class
from tensorledger.roofline.kernel_rates import attention_rate, cast_of, decode_product, op_precision
from tests.roofline.test_model import Op  # the op record the time model reads

SDPA = "aten._scaled_dot_product_flash_attention_for_cpu.default"
SDPA_BACKWARD = "aten._scaled_dot_product_flash_attention_for_cpu_backward.default"


def _chip(**curves: tuple[tuple[float, float], ...]) -> Hardware:
    """A probed CPU: fp32 and bf16 peaks, DRAM at 10 GB/s, no per-op cost; ``curves`` by
    name (a double underscore stands for a dot)."""
    return Hardware(id="local", name="cpu (probed)", memory_bytes=8e9,
                    memory_bandwidth_bytes_per_s=1e10,
                    dense_flop_per_s={"fp32": 1e11, "bf16": 4e11}, origin="probed",
                    curves={name.replace("__", "."): points for name, points in curves.items()})


# (batch 3, heads 5, seq 40, head width 24): 24 lies nearest 16 in logs
SHAPES = ((3, 5, 40, 24), (3, 5, 40, 24), (3, 5, 40, 24))
# the curves by FLOPs per sequence and head: an op of 3 · 5 = 15 heads reads them at a 15th
ATTENTION = {"attention-head__bf16__forward__d16": ((1e6 / 15, 1e9), (1e8 / 15, 1e10)),
             "attention-head__bf16__forward__d64": ((1e6 / 15, 5e9), (1e8 / 15, 5e10)),
             "attention-head__bf16__backward__d16": ((1e6 / 15, 2e8), (1e8 / 15, 2e9)),
             "matmul__bf16": ((1e6, 1e11), (1e9, 4e11))}


def test_attention_is_priced_from_its_own_curve_by_hand() -> None:
    chip = _chip(**ATTENTION)
    forward = Op(SDPA, "attention", 10**7, 1000, 1000, input_shapes=SHAPES,
                 causal_halved=5 * 10**6)
    p = predict_op(0, forward, chip)
    # the d16 forward curve at 10⁷ / 15 FLOPs a head, halfway from 10⁶ / 15 to 10⁸ / 15 in
    # logs: √(10⁹ · 10¹⁰) = 3.162e9 FLOP/s, over the full count (the probe measured on it)
    assert p.compute_time_s == pytest.approx(1e7 / math.sqrt(1e9 * 1e10))  # 3.162 ms
    # its backward: the d16 backward curve at 2.5·10⁷ / 15: 10⁶ → 2·10⁸ at slope ½ in logs:
    # 2e8 · (25)^½ = 1e9 FLOP/s
    backward = Op(SDPA_BACKWARD, "attention", 25 * 10**6, 1000, 1000, phase="backward",
                  input_shapes=SHAPES, causal_halved=125 * 10**5)
    assert predict_op(1, backward, chip).compute_time_s == pytest.approx(25e6 / 1e9)  # 25 ms
    # the roofline bound still prices the causal-halved count at the peak: 5·10⁶ / 4·10¹¹
    assert p.ideal_time_s == pytest.approx(max(5e6 / 4e11, 2000 / 1e10))


def test_attention_without_its_curve_falls_back_as_before() -> None:
    # no attention curve of bf16: the matmul curve at the causal-halved count, as before
    chip = _chip(matmul__bf16=ATTENTION["matmul__bf16"],
                 **{"attention-head__fp32__forward__d16": ((1e6, 1e9),)})  # another dtype's
    op = Op(SDPA, "attention", 2 * 10**7, 1000, 1000, input_shapes=SHAPES,
            causal_halved=10**7)
    # 10⁷ on 10⁶ → 10⁹ from 10¹¹ to 4·10¹¹: a third of the way in logs, 10¹¹ · 4^⅓
    assert predict_op(0, op, chip).compute_time_s == pytest.approx(1e7 / (1e11 * 4 ** (1 / 3)))
    # an old profile's combined curve ("attention.bf16", forward and backward on the full
    # count) is still read where no direction's curve is
    old = _chip(attention__bf16=((1e6, 2e9),))
    assert predict_op(0, op, old).compute_time_s == pytest.approx(2e7 / 2e9)
    # a catalog chip: the published attention fraction of the peak, on the halved count
    h100 = get_hardware("h100")
    efficiency = h100.efficiency
    assert efficiency is not None and efficiency.attention is not None
    assert predict_op(0, op, h100).compute_time_s == pytest.approx(
        1e7 / (h100.dense_flop_per_s["bf16"] * efficiency.attention))


def test_the_nearest_head_width_is_taken_in_logs() -> None:
    curves = dict.fromkeys(("attention-head.bf16.forward.d16", "attention-head.bf16.forward.d64",
                            "attention-head.bf16.forward.dx", "attention.bf16.forward.d32"), ())
    # an old profile's curve by the whole op's FLOPs (attention.…) is not read
    assert nearest_attention_curve(curves, "bf16", "forward", 31) == (
        "attention-head.bf16.forward.d16")
    assert nearest_attention_curve(curves, "bf16", "forward", 33) == (
        "attention-head.bf16.forward.d64")
    assert nearest_attention_curve(curves, "fp16", "forward", 33) is None
    # a width of 0 is no curve (its log is none); 1 is one; a head of no width is read as 1:
    # 1 lies at 0 from d1 and ln 3 from d3 in logs (read as 2, it would lie nearer 3)
    narrow = dict.fromkeys(("attention-head.bf16.forward.d3", "attention-head.bf16.forward.d0",
                            "attention-head.bf16.forward.d1"), ())
    assert nearest_attention_curve(narrow, "bf16", "forward", 1) == (
        "attention-head.bf16.forward.d1")
    assert nearest_attention_curve(narrow, "bf16", "forward", 0) == (
        "attention-head.bf16.forward.d1")
    # 32 lies ln 2 from both 64 and 16: the narrower is taken, whatever the profile's order
    tie = dict.fromkeys(("attention-head.bf16.forward.d64", "attention-head.bf16.forward.d16"),
                        ())
    assert nearest_attention_curve(tie, "bf16", "forward", 32) == (
        "attention-head.bf16.forward.d16")


def test_a_width_whose_curve_reaches_down_to_the_heads_flops_comes_first() -> None:
    # own_model.py's bf16 backward: 4 sequences × 4 heads of width 24 at 64 tokens,
    # 15,728,640 FLOPs = 16 heads of 983,040.  24 lies nearer 32 than 16 in logs
    # (ln 4/3 < ln 3/2), but the probe kept d32's sizes from 2·10⁷ a head only
    flops = 4 * 4 * 4 * 64 * 64 * 24 * 10 // 4  # the backward: 2.5 × the forward's 4·b·h·s²·d
    assert flops == 15_728_640
    op = SimpleNamespace(op="aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
                         flops=flops, input_shapes=((4, 4, 64, 24),) * 3)
    chip = _chip(**{"attention-head__bf16__backward__d16": ((1e5, 8e9), (1e8, 8e9)),
                    "attention-head__bf16__backward__d32": ((2e7, 6e10), (3e8, 6e10))})
    assert nearest_attention_curve(chip.curves, "bf16", "backward", 24) == (
        "attention-head.bf16.backward.d32")
    assert nearest_attention_curve(chip.curves, "bf16", "backward", 24, flops / 16) == (
        "attention-head.bf16.backward.d16")
    # 16 heads of 983,040 FLOPs at d16's 8 GFLOP/s: 1.96608 ms (d32's 60 would say 262 µs)
    assert flops / attention_rate(op, chip, "bf16") == pytest.approx(16 * 983_040 / 8e9)
    # at 2·10⁷ a head (a long sequence) both curves reach down: the nearer width, d32
    assert nearest_attention_curve(chip.curves, "bf16", "backward", 24, 2e7) == (
        "attention-head.bf16.backward.d32")
    # a curve of no points reaches nowhere; where none reaches, the nearest width is read
    empty = {"attention-head.bf16.backward.d16": (),
             "attention-head.bf16.backward.d32": ((2e7, 6e10),)}
    assert nearest_attention_curve(empty, "bf16", "backward", 16, 1e6) == (
        "attention-head.bf16.backward.d16")
    assert nearest_attention_curve(empty, "bf16", "backward", 16, 3e7) == (
        "attention-head.bf16.backward.d32")


def test_the_attention_rate_is_read_at_the_flops_of_one_sequence_and_head() -> None:
    # slope 1 in logs from 10³ to 10⁵ FLOPs a head: d16 at 10⁶ × FLOPs, d64 at 2·10⁶ × FLOPs
    chip = _chip(**{"attention-head__bf16__forward__d16": ((1e3, 1e9), (1e5, 1e11)),
                    "attention-head__bf16__forward__d64": ((1e3, 2e9), (1e5, 2e11))})
    # grouped queries (batch 2, 6 query heads, 2 key heads, 20 tokens, width 64): the query's
    # 2 · 6 = 12 heads, 1.2·10⁵ / 12 = 10⁴ FLOPs each on d64: 2·10⁶ · 10⁴ = 2·10¹⁰ FLOP/s
    # (not the keys' 2 · 2 heads, nor the width of a token count or a head count: 20 or 6
    # lie nearer 16)
    gqa = Op(SDPA, "attention", 120_000, 1000, 1000,
             input_shapes=((2, 6, 20, 64), (2, 2, 20, 64), (2, 2, 20, 64)))
    assert attention_rate(gqa, chip, "bf16") == pytest.approx(2e10)
    # the query alone recorded: the same
    one = dataclasses.replace(gqa, input_shapes=((2, 6, 20, 64),))
    assert attention_rate(one, chip, "bf16") == pytest.approx(2e10)
    # no batch (6 heads, 20 tokens, width 64): 6·10⁴ / 6 = 10⁴ a head, 2·10¹⁰ again
    unbatched = dataclasses.replace(gqa, flops=60_000, input_shapes=((6, 20, 64),))
    assert attention_rate(unbatched, chip, "bf16") == pytest.approx(2e10)
    # one sequence of one head (20 tokens, width 64): the whole 10⁴ FLOPs, 2·10¹⁰
    single = dataclasses.replace(gqa, flops=10_000, input_shapes=((20, 64),))
    assert attention_rate(single, chip, "bf16") == pytest.approx(2e10)
    # no shapes recorded (or no such field): width 1, nearest 16; one head: 10⁶ · 10⁴ = 10¹⁰
    bare = dataclasses.replace(single, input_shapes=())
    assert attention_rate(bare, chip, "bf16") == pytest.approx(1e10)
    fieldless = SimpleNamespace(op=SDPA, flops=10_000)
    assert attention_rate(fieldless, chip, "bf16") == pytest.approx(1e10)
    # 1 FLOP lies below the curve's first point: its rate, 2·10⁹; no FLOPs: no rate
    assert attention_rate(dataclasses.replace(single, flops=1), chip, "bf16") == 2e9
    assert attention_rate(dataclasses.replace(single, flops=0), chip, "bf16") is None


def test_each_category_streams_at_its_dtypes_bandwidth_by_hand() -> None:
    chip = _chip(bandwidth=((1e3, 4e10), (1e7, 1e10)),
                 bandwidth__bf16=((1e3, 1e10), (1e7, 1e9)),
                 **{"cast.fp32-bf16": ((1e3, 2e9), (1e7, 2e8))})
    # 10⁵ bytes lie halfway from 10³ to 10⁷ in logs
    bf16 = Op("aten.mul.Tensor", "elementwise", 0, 60_000, 40_000)
    assert predict_op(0, bf16, chip).memory_time_s == pytest.approx(1e5 / math.sqrt(1e10 * 1e9))
    fp32 = Op("aten.mul.Tensor", "elementwise", 0, 60_000, 40_000, ("fp32",), ("fp32",))
    assert predict_op(0, fp32, chip).memory_time_s == pytest.approx(1e5 / 2e10)  # √(4e10·1e10)
    # autocast's cast of a weight: read in fp32, written in bf16
    cast = Op("aten._to_copy.default", "copy", 0, 66_666, 33_334, ("fp32",), ("bf16",))
    assert predict_op(0, cast, chip).memory_time_s == pytest.approx(1e5 / math.sqrt(2e9 * 2e8))
    # the cast back has no curve: the fp32 stream, as before
    back = Op("aten._to_copy.default", "copy", 0, 33_334, 66_666, ("bf16",), ("fp32",))
    assert predict_op(0, back, chip).memory_time_s == pytest.approx(1e5 / 2e10)
    # an fp32 residual plus a bf16 branch mixes dtypes: the fp32 stream
    mixed = Op("aten.add.Tensor", "elementwise", 0, 60_000, 40_000, ("fp32", "bf16"),
               ("fp32",))
    assert predict_op(0, mixed, chip).memory_time_s == pytest.approx(1e5 / 2e10)
    # an optimizer's update in place streams at the warm buffers' bandwidth whatever its dtype
    update = Op("aten.add_.Tensor", "elementwise", 0, 60_000, 40_000, phase="optimizer")
    assert predict_op(0, update, chip).memory_time_s == pytest.approx(1e5 / 1e10)
    # a catalog chip has no such curves: bandwidth × the published fraction, as before
    h100 = get_hardware("h100")
    assert h100.efficiency is not None
    assert predict_op(0, bf16, h100).memory_time_s == pytest.approx(
        1e5 / (h100.memory_bandwidth_bytes_per_s * h100.efficiency.memory_bandwidth))


def test_an_op_in_short_inner_loops_streams_at_the_strided_rate_by_hand() -> None:
    """A bf16 add whose operands' layouts cut its kernel into loops of 16 elements streams
    at the probed strided rate there, where slower than its bandwidth; a loop past the
    longest probed, or none, streams at the bandwidth; an fp32 op has no strided curve."""
    chip = _chip(bandwidth=((1e3, 4e10), (1e7, 1e10)), bandwidth__bf16=((1e5, 6e10),),
                 strided__bf16=((4.0, 2e9), (64.0, 3.2e10), (256.0, 8e10)))
    add = Op("aten.add.Tensor", "elementwise", 0, 60_000, 40_000, inner_loop=16)
    # 16 lies halfway from 4 to 64 in logs: √(2e9 · 3.2e10) = 8 GB/s, under 60
    assert predict_op(0, add, chip).memory_time_s == pytest.approx(1e5 / 8e9)
    # loop 200: 7.4e10 by the curve, above the bandwidth's 6e10, which holds
    wide = dataclasses.replace(add, inner_loop=200)
    assert predict_op(0, wide, chip).memory_time_s == pytest.approx(1e5 / 6e10)
    for loop in (0, 512):  # one loop over the whole output; longer than any probed
        assert predict_op(0, dataclasses.replace(add, inner_loop=loop), chip
                          ).memory_time_s == pytest.approx(1e5 / 6e10)
    fp32 = dataclasses.replace(add, input_dtypes=("fp32",), output_dtypes=("fp32",))
    assert predict_op(0, fp32, chip).memory_time_s == pytest.approx(1e5 / 2e10)  # √(4e10·1e10)


def test_a_matrix_product_is_priced_from_the_cold_linear_curve_where_probed() -> None:
    """A profile with a linear layer's products (operands cold) prices a matmul from them;
    without, from the square matmul curve, as before."""
    mm = Op("aten.mm.default", "matmul", 10**7, 1, 1)
    square = {"matmul__bf16": ((1e6, 1e11), (1e8, 4e11))}
    # 10⁷ FLOPs halfway from 10⁶ to 10⁸ in logs: √(1e11 · 4e11) = 2e11 FLOP/s
    assert predict_op(0, mm, _chip(**square)).compute_time_s == pytest.approx(1e7 / 2e11)
    cold = _chip(**square, linear__bf16=((1e6, 5e10), (1e8, 2e11)))
    assert predict_op(0, mm, cold).compute_time_s == pytest.approx(1e7 / 1e11)  # √(5e10·2e11)
    fp32 = dataclasses.replace(mm, input_dtypes=("fp32",), output_dtypes=("fp32",))
    assert predict_op(0, fp32, cold).compute_time_s == pytest.approx(1e7 / 1e11)  # the peak


def test_a_fused_norm_streams_at_the_probed_layer_norms_rate_by_hand() -> None:
    """A bf16 layer norm's forward and backward (and a fused RMS norm's) stream at the
    probed layer norm's rate of their direction; an fp32 one, which the probe did not time,
    and a norm written out (its mul) at the bandwidth curves, as before."""
    chip = _chip(bandwidth=((1e3, 4e10), (1e7, 1e10)), bandwidth__bf16=((1e5, 6e10),),
                 norm__bf16__forward=((1e3, 1e9), (1e7, 1e11)),
                 norm__bf16__backward=((1e3, 5e8), (1e7, 5e10)))
    forward = Op("aten.native_layer_norm.default", "normalization", 0, 60_000, 40_000)
    backward = Op("aten.native_layer_norm_backward.default", "normalization", 0, 60_000,
                  40_000)
    rms = Op("aten._fused_rms_norm.default", "normalization", 0, 60_000, 40_000)
    # 10⁵ bytes halfway from 10³ to 10⁷ in logs: √(1e9 · 1e11) = 1e10, √(5e8 · 5e10) = 5e9
    assert predict_op(0, forward, chip).memory_time_s == pytest.approx(1e5 / 1e10)
    assert predict_op(0, backward, chip).memory_time_s == pytest.approx(1e5 / 5e9)
    assert predict_op(0, rms, chip).memory_time_s == pytest.approx(1e5 / 1e10)
    fp32 = dataclasses.replace(forward, input_dtypes=("fp32",), output_dtypes=("fp32",))
    assert predict_op(0, fp32, chip).memory_time_s == pytest.approx(1e5 / 2e10)  # √(4e10·1e10)
    written_out = Op("aten.mul.Tensor", "normalization", 0, 60_000, 40_000)
    assert predict_op(0, written_out, chip).memory_time_s == pytest.approx(1e5 / 6e10)


def test_dtypes_and_casts_are_read_from_the_record() -> None:
    assert op_precision(Op("aten.mm.default", "matmul", 1, 1, 1)) == "bf16"
    assert op_precision(Op("aten.mm.default", "matmul", 1, 1, 1, ("fp32",), ("fp32",))) == ""
    assert op_precision(Op("aten.mm.default", "matmul", 1, 1, 1, ("fp16",), ("fp16",))) == "fp16"
    assert cast_of(Op("aten._to_copy.default", "copy", 0, 2, 4, ("bf16",), ("fp32",))) == (
        "bf16", "fp32")
    assert cast_of(Op("aten.clone.default", "copy", 0, 2, 2)) is None  # no change of dtype
    assert cast_of(Op("aten._to_copy.default", "copy", 0, 2, 2)) is None  # bf16 to bf16


def test_a_calibration_prices_each_dtype_by_its_own_class_by_hand() -> None:
    chip = _chip()
    both = Calibration(scale={"matmul": 2.0, "matmul-bf16": 3.0}, op_cost_s=0.0,
                       between_ops_s={}, call_cost_s={"matmul-bf16": 1e-6})
    fp32_only = Calibration(scale={"matmul": 2.0}, op_cost_s=0.0, between_ops_s={})
    mm = Op("aten.mm.default", "matmul", 4 * 10**8, 1000, 1000)  # bf16: 1 ms at 4·10¹¹
    fp32 = Op("aten.mm.default", "matmul", 10**8, 1000, 1000, ("fp32",), ("fp32",))  # 1 ms
    calibrated = dataclasses.replace(chip, calibration=both)
    p = predict_op(0, mm, calibrated)
    assert p.compute_time_s == pytest.approx(3.0 * 1e-3)  # the bf16 class's scale
    assert p.overhead_s == pytest.approx(1e-6)  # and its cost a call
    assert predict_op(0, fp32, calibrated).compute_time_s == pytest.approx(2.0 * 1e-3)
    # fitted on fp32 steps alone: a bf16 op takes the fp32 class's figures, as before
    old = dataclasses.replace(chip, calibration=fp32_only)
    assert predict_op(0, mm, old).compute_time_s == pytest.approx(2.0 * 1e-3)
    assert cost_class("aten.gelu.default", "elementwise", "backward", "bf16") == (
        "elementwise-costly-bf16")
    assert cost_class("aten.gelu.default", "elementwise", "forward", "bf16") == (
        "elementwise-costly-forward-bf16")  # a forward op, a class apart
    assert cost_class("aten.add_.Tensor", "elementwise", "optimizer", "bf16") == (
        "elementwise-optimizer-bf16")


def test_a_forward_op_is_priced_by_its_forward_class_or_as_before_by_hand() -> None:
    chip = _chip()
    # bf16 matmuls of 1 ms at 4·10¹¹ FLOP/s: the forward's class 5 × + 2 µs, the backward's
    # 3 × + 1 µs
    cal = Calibration(scale={"matmul-bf16": 3.0, "matmul-forward-bf16": 5.0}, op_cost_s=0.0,
                      between_ops_s={}, call_cost_s={"matmul-bf16": 1e-6,
                                                     "matmul-forward-bf16": 2e-6})
    forward = Op("aten.mm.default", "matmul", 4 * 10**8, 1000, 1000)  # phase "forward"
    backward = dataclasses.replace(forward, phase="backward")
    calibrated = dataclasses.replace(chip, calibration=cal)
    ahead, behind = predict_op(0, forward, calibrated), predict_op(0, backward, calibrated)
    assert (ahead.compute_time_s, ahead.overhead_s) == (pytest.approx(5e-3), pytest.approx(2e-6))
    assert (behind.compute_time_s, behind.overhead_s) == (pytest.approx(3e-3),
                                                          pytest.approx(1e-6))
    # a profile fitted before the forward was split off: the forward at the backward's class
    old = dataclasses.replace(chip, calibration=dataclasses.replace(cal, scale={
        "matmul-bf16": 3.0}))
    assert predict_op(0, forward, old).compute_time_s == pytest.approx(3e-3)


def test_a_decode_product_streams_its_weight_at_the_probed_rate_of_its_reuse() -> None:
    """GPT-2's MLP up-projection in a decode step of 1 token: 768 × 3072 fp32 weights,
    9,437,184 bytes, read once a step.  The profile's decode curve of 1 row: 80 GB/s warm (a
    4 MB working set), 16 GB/s cold (128 MB).  In a step that reads 512 MB (GPT-2's weights)
    the weight is cold: 9,437,184 / 16e9 s; the same op in a training step keeps the
    bandwidth curve's price."""
    chip = _chip(matvec__fp32__m1=((4e6, 80e9), (128e6, 16e9)),
                 matvec__fp32__m4=((4e6, 20e9), (128e6, 12e9)))
    weight = 768 * 3072 * 4
    up = Op("aten.addmm.default", "matmul", 2 * 768 * 3072, weight + 768 * 4 + 3072 * 4,
            3072 * 4, input_dtypes=("fp32",) * 3, output_dtypes=("fp32",),
            input_shapes=((3072,), (1, 768), (768, 3072)))
    step = [up, Op("aten.view.default", "view", 0, 512_000_000 - up.bytes_read, 0,
                   input_dtypes=("fp32",), output_dtypes=("fp32",))]
    decode = predict(step, chip)
    assert decode.ops[0].memory_time_s == pytest.approx(weight / 16e9)
    assert decode.ops[0].bound == "memory"
    # the op alone is a step reading 9.45 MB (the weight, the token, the bias): between the
    # warm 4 MB and the cold 128 MB, log-log: 80 · (16/80)^(ln(9.45/4) / ln 32) GB/s
    alone = predict([up], chip)
    t = math.log(up.bytes_read / 4e6) / math.log(128e6 / 4e6)
    assert alone.ops[0].memory_time_s == pytest.approx(weight / (80e9 * (16 / 80) ** t))
    # four rows: their own curve; 2 rows between 1 and 4: log-log, √(16 · 12) GB/s cold
    two = dataclasses.replace(up, input_shapes=((3072,), (2, 768), (768, 3072)))
    assert predict([two, step[1]], chip).ops[0].memory_time_s == pytest.approx(
        weight / math.sqrt(16e9 * 12e9))
    # a training step (one backward op) prices the product as any matmul
    train = predict([up, dataclasses.replace(step[1], phase="backward")], chip)
    assert train.ops[0].memory_time_s == pytest.approx(
        predict_op(0, up, chip).memory_time_s)
    assert train.ops[0].memory_time_s == pytest.approx(
        (up.bytes_read + up.bytes_written) / 1e10)  # every byte at the chip's 10 GB/s
    # 64 rows, beyond the probed 4: priced as any matmul
    wide = dataclasses.replace(up, input_shapes=((3072,), (64, 768), (768, 3072)))
    assert predict([wide, step[1]], chip).ops[0].memory_time_s == pytest.approx(
        predict_op(0, wide, chip).memory_time_s)


def test_a_calibration_leaves_a_decode_products_probed_rate_alone() -> None:
    """A calibration fitted on training steps (matmul scale 2, 1 µs a call, 1 ns a byte moved)
    scales a training matmul and adds its bytes' cost; a decode product keeps its probed
    stream (GPT-2's 768 × 3072 weight cold at 16 GB/s) and its call cost, without the
    bytes' cost (its 9.45 MB would add 9.45 ms to a 0.59 ms product)."""
    chip = _chip(matvec__fp32__m1=((4e6, 80e9), (128e6, 16e9)))
    fit = Calibration(scale={"matmul": 2.0}, op_cost_s=0.0, between_ops_s={},
                      call_cost_s={"matmul": 1e-6}, piece_cost_s={"matmul": 1e-9})
    calibrated = dataclasses.replace(chip, calibration=fit)
    weight = 768 * 3072 * 4
    up = Op("aten.addmm.default", "matmul", 2 * 768 * 3072, weight + 768 * 4 + 3072 * 4,
            3072 * 4, input_dtypes=("fp32",) * 3, output_dtypes=("fp32",),
            input_shapes=((3072,), (1, 768), (768, 3072)))
    p = predict_op(0, up, calibrated, inference=True, reread_bytes=512e6)
    assert p.memory_time_s == pytest.approx(weight / 16e9)  # unscaled
    assert p.overhead_s == pytest.approx(1e-6)  # the call, no piece cost
    trained = predict_op(0, up, calibrated)  # the same op in a training step
    assert trained.memory_time_s == pytest.approx(
        2.0 * (up.bytes_read + up.bytes_written) / 1e10)  # scaled, at the chip's 10 GB/s
    assert trained.overhead_s == pytest.approx(1e-6 + 1e-9 * (up.bytes_read + up.bytes_written))


def test_which_products_are_decode_products() -> None:
    """The rows probed (1, 4, 8 here), the weight's dtype, and the products that are not a
    decode step's: each from curves flat in size, so the rate is the row count's own."""
    chip = _chip(matvec__fp32__m1=((4e6, 80e9),), matvec__fp32__m4=((4e6, 20e9),),
                 matvec__fp32__m8=((4e6, 10e9),), matvec__bf16__m16=((4e6, 5e9),),
                 bandwidth__bf16=((1e3, 1e9),))
    # the profile's rows of fp32, sorted: not bf16's 16 nor "bandwidth.bf16", whose 14th
    # character on is a digit too
    assert matvec_rows(chip.curves, "fp32") == (1, 4, 8)

    def mm(x: tuple[int, ...], weight: tuple[int, ...], op: str = "aten.mm.default") -> Op:
        return Op(op, "matmul", 0, 0, 0, input_dtypes=("fp32", "fp32"), input_shapes=(x, weight))

    # 4 rows, the last of their curves but one: 20 GB/s; 8, the last: 10 GB/s; 768 × 3072
    # fp32 = 9,437,184 bytes
    assert decode_product(mm((4, 768), (768, 3072)), chip, "fp32", 0.0) == (
        768 * 3072 * 4, pytest.approx(20e9))
    assert decode_product(mm((8, 768), (768, 3072)), chip, "fp32", 0.0) == (
        768 * 3072 * 4, pytest.approx(10e9))
    # the weight's own dtype sets its bytes (not the bias's nor the rows'): 768 × 3072 bf16
    # = 4,718,592
    addmm = Op("aten.addmm.default", "matmul", 0, 0, 0, input_dtypes=("fp32", "fp32", "bf16"),
               input_shapes=((3072,), (8, 768), (768, 3072)))
    assert decode_product(addmm, chip, "fp32", 0.0) == (768 * 3072 * 2, pytest.approx(10e9))
    nothing = [
        mm((0, 768), (768, 3072)),  # no rows
        mm((9, 768), (768, 3072)),  # beyond the 8 probed
        mm((4, 2), (2, 4)),  # 4 · 2 = 8 of the "rows" against 2 · 4 = 8 of the weight
        mm((1, 2, 768), (768, 3072)),  # not a matrix
        mm((2, 768), (768, 3072), op="aten._int_mm.default"),  # another kernel
        Op("aten.mm.default", "matmul", 0, 0, 0, input_dtypes=("fp32",),
           input_shapes=((768, 3072),)),  # one operand recorded
    ]
    assert [decode_product(op, chip, "fp32", 0.0) for op in nothing] == [None] * len(nothing)


def test_a_decode_products_working_set_is_its_weight_where_the_step_reads_less() -> None:
    # 1 row from 80 GB/s at 1 MB to 8 GB/s at 100 MB, slope -½ in logs: 10 MB at 80 / √10
    chip = _chip(matvec__fp32__m1=((1e6, 80e9), (1e8, 8e9)))
    mm = Op("aten.mm.default", "matmul", 0, 0, 0, input_dtypes=("fp32", "fp32"),
            input_shapes=((1, 1250), (1250, 2000)))  # 1250 · 2000 · 4 = 10⁷ bytes
    for reread in (0.0, 1e6, 1e7):  # the weight's own 10 MB is the larger, or as large
        assert decode_product(mm, chip, "fp32", reread) == (10**7, pytest.approx(80e9 / 10**0.5))
    # read again after 100 MB: 8 GB/s
    assert decode_product(mm, chip, "fp32", 1e8) == (10**7, pytest.approx(8e9))


def test_a_calibration_counts_no_pieces_of_an_op_priced_from_its_own_kernel() -> None:
    # a bf16 attention forward of 4 × 4 heads at 64 tokens: 4 · 4 · ⌈64 / 32⌉ = 32 query
    # blocks, at 1 µs a piece: 32 µs beside its kernel where only the head curve prices it;
    # with a call's own cost probed (attention-call), the heads and the call already hold
    # what the blocks cost, and no piece is added
    op = Op(op="aten._scaled_dot_product_flash_attention_for_cpu.default", category="attention",
            flops=6_291_456, bytes_read=0, bytes_written=0, input_dtypes=("bf16",) * 3,
            output_dtypes=("bf16",), input_shapes=((4, 4, 64, 24),) * 3)
    fit = Calibration(scale={"attention-bf16": 1.0}, op_cost_s=0.0, between_ops_s={},
                      piece_cost_s={"attention-bf16": 1e-6})
    heads = {"attention-head__bf16__forward__d16": ((1e5, 1e10), (1e7, 1e10))}
    alone = dataclasses.replace(_chip(**heads), calibration=fit)
    called = dataclasses.replace(
        _chip(**heads, **{"attention-call__bf16__forward__d16": ((1e5, 1e5), (1e7, 1e5))}),
        calibration=fit)
    assert predict_op(0, op, alone).overhead_s == pytest.approx(32e-6)
    assert predict_op(0, op, called).overhead_s == pytest.approx(0.0)
    # its kernel: 16 heads of 393,216 FLOPs at 10 GFLOP/s = 629 µs, + 10 µs a call
    assert predict_op(0, op, called).compute_time_s == pytest.approx(16 * 393_216 / 1e10 + 1e-5)
