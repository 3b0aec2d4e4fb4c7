"""``roofline/model.py`` pinned where the mutation run of issue 42 found no test: the summaries,
the model FLOPs' share of MFU, which peak an op or a step computes at on chips that lack one,
the mean footprint, the overlapped time of several phases, a step's totals, and where a send's
two ends lie.  Each expectation is worked out beside it; the chips are synthetic or the H100
entry's datasheet (bf16 989.5e12, fp32 66.9e12 FLOP/s, 3.35e12 bytes/s)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from types import SimpleNamespace as Rec

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware, get_hardware
from tensorledger.roofline.model import (
    OpPrediction,
    RooflinePrediction,
    _pair_per_node,
    ceiling,
    compute_key_for,
    compute_key_for_default,
    overlapped,
    predict,
    predict_op,
    ranks_per_node,
    step_footprint,
)
from tensorledger.trace.records import CollectiveInfo
from tests.roofline.test_model import Op  # the op record the time model reads

H100 = dataclasses.replace(get_hardware("h100"), efficiency=None)  # the datasheet alone


def _chip(peaks: dict[str, float]) -> Hardware:
    return Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=2.0,
                    dense_flop_per_s=peaks)


def _prediction_op(phase: str, time: float, link: float) -> OpPrediction:
    return OpPrediction(0, "op", "", phase, "matmul", "fp32", 1, 1, 1.0, 1.0, 0.0, 0.0, 0.0,
                        time, 1.0, "compute", time, "compute", link_time_s=link)


def test_summaries() -> None:
    op = OpPrediction(index=3, op="aten.mm.default", module="", phase="forward",
                      category="matmul", compute_key="bf16", flops=1000, bytes=5_000_000,
                      intensity_flop_per_byte=0.0002, ridge_flop_per_byte=1.0,
                      compute_time_s=0.0, memory_time_s=0.002, overhead_s=0.0, time_s=0.002,
                      attained_flop_per_s=5e5, bound="memory", ideal_time_s=0.001,
                      ideal_bound="memory")
    assert repr(op) == ("OpPrediction(#3 aten.mm.default, memory-bound, 2 ms expected, "
                        "bound 1 ms, 1000 FLOPs, 5 MB)")
    step = RooflinePrediction(hardware="chip", ops=(op, op), flops=1000, bytes=0, time_s=3.0,
                              by_category=(), by_module=(), by_phase=(), tokens=None,
                              tokens_per_s=None, mfu_peak_key="bf16", mfu=0.125,
                              ideal_time_s=1.0, ideal_mfu=0.375, ideal_tokens_per_s=None,
                              basis="probed")
    assert repr(step) == ("RooflinePrediction(2 ops on chip, 3 s per step expected, bound 1 s, "
                          "1000 FLOPs, MFU 0.125 (bf16))")


def test_model_mfu_leaves_the_recomputed_forward_out() -> None:
    base = dict(hardware="chip", ops=(), bytes=0, time_s=1.0, by_category=(), by_module=(),
                by_phase=(), tokens=None, tokens_per_s=None, mfu_peak_key="bf16",
                ideal_time_s=1.0, ideal_tokens_per_s=None, basis="probed")
    step = RooflinePrediction(**base, flops=1000, mfu=0.4, ideal_mfu=0.8,  # type: ignore[arg-type]
                              recomputed_flops=250)
    assert step.model_flops == 750
    assert step.model_mfu == pytest.approx(0.3)  # 0.4 · 750/1000
    assert step.ideal_model_mfu == pytest.approx(0.6)  # 0.8 · 750/1000
    none = RooflinePrediction(**base, flops=0, mfu=0.4, ideal_mfu=0.8)  # type: ignore[arg-type]
    assert (none.model_mfu, none.ideal_model_mfu) == (0.0, 0.0)


def test_compute_key_on_chips_without_an_fp32_peak() -> None:
    relu = Op("aten.relu.default", "elementwise", 10, 4, 4)
    # matrix peaks only: the slowest floating one stands in (fp16 at 1, not bf16 at 2;
    # int8 is not floating)
    assert compute_key_for(relu, _chip({"bf16": 2.0, "fp16": 1.0, "int8": 0.5})) == "fp16"
    with pytest.raises(InputError, match="lists no floating-point peak"):
        compute_key_for(relu, _chip({"int8": 1.0}))
    # a matmul whose first dtype the chip lacks takes the next one it lists: int64 indices
    # are no peak, fp8 not listed here, bf16 is
    mm = Op("aten.mm.default", "matmul", 10, 4, 4, ("int64", "fp8"), ("bf16",))
    assert compute_key_for(mm, _chip({"bf16": 2.0, "fp32": 1.0})) == "bf16"
    # a dtype name no table knows is skipped, not an error
    odd = Op("aten.mm.default", "matmul", 10, 4, 4, ("complex-ish",), ("fp16",))
    assert compute_key_for(odd, _chip({"fp16": 3.0, "fp32": 1.0})) == "fp16"
    # a matmul with no listed matrix dtype computes at fp32
    assert compute_key_for(Op("aten.mm.default", "matmul", 10, 4, 4, ("fp8",), ("fp8",)),
                           _chip({"bf16": 2.0, "fp32": 1.0})) == "fp32"


def test_compute_key_for_default() -> None:
    assert compute_key_for_default(_chip({"fp32": 1.0, "bf16": 2.0})) == "bf16"
    assert compute_key_for_default(_chip({"int8": 3.0, "fp32": 1.0})) == "fp32"
    assert compute_key_for_default(_chip({"int8": 3.0, "fp16": 1.0})) == "int8"  # the first


def test_ceiling_is_the_lower_of_peak_and_bandwidth() -> None:
    # peak 10 FLOP/s, bandwidth 2 bytes/s: 1 FLOP/byte → 2, 5 → 10 (the ridge), 8 → 10
    assert ceiling(_chip({"fp32": 10.0}), "fp32", [1.0, 5.0, 8.0]) == (2.0, 10.0, 10.0)


def test_step_footprint_leaves_ops_that_move_nothing_out() -> None:
    assert step_footprint([0.0, 100.0]) == 100.0  # not 50: the op moving 0 is left out
    assert step_footprint([0.0]) is None
    assert step_footprint([]) is None
    assert step_footprint([30.0, 10.0]) == 20.0
    assert step_footprint([1.0, 3.0]) == 2.0  # an op moving one byte moves: the mean is 2


def test_overlapped_time_of_two_phases() -> None:
    # forward: compute 5 − 2 = 3, link 2 → 3; backward: compute 6 − 5 = 1, link 5 → 5; 8 in all
    ops = [_prediction_op("forward", 5.0, 2.0), _prediction_op("backward", 6.0, 5.0)]
    assert overlapped(ops) == pytest.approx(8.0)
    # a phase of links alone counts its links: 4
    assert overlapped([_prediction_op("optimizer", 4.0, 4.0)]) == pytest.approx(4.0)
    # two collectives in one phase add up: links 2 + 3 = 5 against 1 of compute → 5
    ops = [_prediction_op("forward", 1.0, 0.0), _prediction_op("forward", 2.0, 2.0),
           _prediction_op("forward", 3.0, 3.0)]
    assert overlapped(ops) == pytest.approx(5.0)


def test_a_step_by_hand_with_its_totals() -> None:
    n = 1024
    mm = Op("aten.mm.default", "matmul", 2 * n**3, 4 * n * n, 2 * n * n, module="a")
    relu = Op("aten.relu.default", "elementwise", n * n, 2 * n * n, 2 * n * n, module="b",
              phase="backward", recomputed=True)
    p = predict([mm, relu], H100, tokens=64)
    t_mm = 2 * n**3 / 989.5e12  # compute-bound: 2.17 µs (6 MiB at 3.35 TB/s is 1.88 µs)
    t_relu = 4 * n * n / 3.35e12  # memory-bound: 1.25 µs
    overhead = H100.op_overhead_s
    assert p.time_s == pytest.approx(t_mm + t_relu + 2 * overhead)
    assert p.ideal_time_s == pytest.approx(t_mm + t_relu)
    assert p.tokens == 64 and p.tokens_per_s == pytest.approx(64 / p.time_s)
    assert p.ideal_tokens_per_s == pytest.approx(64 / p.ideal_time_s)
    # MFU at the bf16 peak (the matmul's FLOPs are bf16's): all FLOPs over time over peak
    flops = 2 * n**3 + n * n
    assert p.mfu_peak_key == "bf16" and p.flops == flops
    assert p.mfu == pytest.approx(flops / p.time_s / 989.5e12)
    assert p.ideal_mfu == pytest.approx(flops / p.ideal_time_s / 989.5e12)
    assert p.bytes == 6 * n * n + 4 * n * n
    assert p.recomputed_flops == n * n  # the relu, marked recomputed
    assert p.basis.startswith("the datasheet alone") and p.bound_bandwidth == (
        "datasheet bandwidth")
    # totals by category, module and phase: one op each, slowest first, shares of the step
    by_category = {t.name: t for t in p.by_category}
    assert [t.name for t in p.by_category] == ["matmul", "elementwise"]
    mm_total = by_category["matmul"]
    assert (mm_total.ops, mm_total.flops, mm_total.bytes) == (1, 2 * n**3, 6 * n * n)
    assert mm_total.share_of_step == pytest.approx((t_mm + overhead) / p.time_s)
    assert (mm_total.compute_bound_ops, mm_total.memory_bound_ops,
            mm_total.overhead_bound_ops) == (1, 0, 0)
    assert mm_total.ideal_time_s == pytest.approx(t_mm)
    relu_total = by_category["elementwise"]
    assert (relu_total.compute_bound_ops, relu_total.memory_bound_ops) == (0, 1)
    assert [t.name for t in p.by_module] == ["a", "b"]
    assert [t.name for t in p.by_phase] == ["forward", "backward"]
    # with mfu_dtype named, MFU is taken against that dtype's peak
    fp32 = predict([mm], H100, mfu_dtype="fp32")
    assert fp32.mfu_peak_key == "fp32"
    assert fp32.mfu == pytest.approx(2 * n**3 / fp32.time_s / 66.9e12)
    assert fp32.tokens is None and fp32.tokens_per_s is None and fp32.ideal_tokens_per_s is None


def test_a_step_without_matrix_ops_takes_mfu_at_the_default_key() -> None:
    relu = Op("aten.relu.default", "elementwise", 10, 40, 40)
    assert predict([relu], H100).mfu_peak_key == "bf16"
    # the most FLOPs decide between two matrix keys: 300 in fp32 against 200 in bf16
    mm16 = Op("aten.mm.default", "matmul", 200, 4, 4)
    mm32 = Op("aten.mm.default", "matmul", 300, 4, 4, ("fp32",), ("fp32",))
    assert predict([mm16, mm32], H100).mfu_peak_key == "fp32"


def test_an_empty_step() -> None:
    p = predict([], H100, tokens=8)
    assert (p.time_s, p.mfu, p.ideal_mfu) == (0.0, 0.0, 0.0)
    assert p.tokens_per_s is None and p.ideal_tokens_per_s is None


def test_a_profiles_bound_streams_at_its_fastest_bandwidth() -> None:
    probed = dataclasses.replace(H100, curves={"bandwidth": ((1e6, 1e11),)})
    p = predict([Op("aten.relu.default", "elementwise", 10, 40, 40)], probed)
    assert p.bound_bandwidth.startswith("the fastest bandwidth measured")


@pytest.mark.parametrize(("collective", "expected"), [
    (Rec(ends=(3, 5), rank_stride=8), 2),  # ranks 3 and 5 both on node 0 of 8 devices
    (Rec(ends=(7, 8), rank_stride=1), 1),  # 7 on node 0, 8 on node 1
    (Rec(ends=(8, 15), rank_stride=8), 2),  # both on node 1
    (Rec(rank_stride=1), 2),  # no ends: two consecutive ranks share a node
    (Rec(rank_stride=8), 1),  # ranks 8 apart: one a node
    (Rec(ends=(0, 1, 2), rank_stride=8), 1),  # not two ends: by the stride
])
def test_where_a_sends_two_ends_lie(collective: Rec, expected: int) -> None:
    assert _pair_per_node(collective, H100) == expected


def test_a_chip_without_nodes_places_no_send() -> None:
    assert _pair_per_node(Rec(ends=(0, 1), rank_stride=1), _chip({"fp32": 1.0})) is None


# ------------------------------------------------------------ collectives priced on the links

def _collective_op(kind: str, size: int, ranks: int, sent: int, received: int,
                   stride: int = 1, ends: tuple[int, ...] = ()) -> Rec:
    info = CollectiveInfo(kind=kind, group_size=ranks, size_bytes=size, bytes_sent=sent,
                          bytes_received=received, rank_stride=stride, ends=ends)
    return Rec(op="c10d.x", module="m", phase="backward", category="communication",
               collective=info, flops=0, bytes_read=0, bytes_written=0,
               input_dtypes=(), output_dtypes=())


def test_an_all_reduce_on_the_links_in_every_field() -> None:
    # 8 ranks a node apart by 1: one node, 2·7/8·10⁹ bytes at 450 GB/s + 14 hops of 0.6 µs
    p = predict_op(5, _collective_op("all-reduce", 10**9, 8, 0, 0), H100)
    t = 1.75e9 / 450e9 + 14 * 0.6e-6
    assert p == OpPrediction(index=5, op="c10d.x", module="m", phase="backward",
                             category="communication", compute_key="", flops=0, bytes=0,
                             intensity_flop_per_byte=math.inf, ridge_flop_per_byte=0.0,
                             compute_time_s=0.0, memory_time_s=0.0, overhead_s=0.0,
                             time_s=pytest.approx(t), attained_flop_per_s=0.0, bound="link",
                             ideal_time_s=pytest.approx(t), ideal_bound="link",
                             link_time_s=pytest.approx(t))


def test_a_group_placed_by_its_stride() -> None:
    # 4 ranks 8 apart: one a node, a ring over 4 NICs of 50 GB/s: 3 hops of 2.7 µs and
    # 3/4 · 4·10⁸ bytes
    p = predict_op(0, _collective_op("all-gather", 4 * 10**8, 4, 0, 0, stride=8), H100)
    assert p.time_s == pytest.approx(3 * 2.7e-6 + 0.75 * 4e8 / 50e9)


def test_a_group_of_one_is_free() -> None:
    p = predict_op(0, _collective_op("send-recv", 100, 1, 100, 0), H100)
    assert (p.time_s, p.bound, p.ideal_bound, p.link_time_s) == (0.0, "free", "free", 0.0)


def test_a_send_across_nodes_takes_one_nic() -> None:
    # a pipeline's send from world rank 7 to 8 in a group of 4: two ranks on two nodes, one
    # step crossing the network: 2.7 µs + 10⁶ bytes / 50 GB/s
    p = predict_op(0, _collective_op("send-recv", 10**6, 4, 10**6, 0, ends=(7, 8)), H100)
    assert p.time_s == pytest.approx(2.7e-6 + 1e6 / 50e9)
    # from 6 to 7: one node, NVLink: 0.6 µs + 10⁶ / 450 GB/s
    q = predict_op(0, _collective_op("send-recv", 10**6, 4, 10**6, 0, ends=(6, 7)), H100)
    assert q.time_s == pytest.approx(0.6e-6 + 1e6 / 450e9)


@pytest.mark.parametrize(("sent", "received", "priced_size"), [
    (6, 6, 8.0),  # an even split: each rank sends 3/4 of its 8 bytes, 6 · 4 = 8 · 3
    (8, 0, 8 * 4 / 3),  # the whole buffer to one rank: priced as sending 8 of 4/3 · 8
    (0, 8, 8 * 4 / 3),  # receiving it: the busier direction, the same
    (7, 0, 7 * 4 / 3),  # |7 · 4 − 8 · 3| = 4 = ranks: past an even split's rounding
    (6.5, 0, 8.0),  # |26 − 24| = 2 < 4: an even split rounded
])
def test_an_uneven_all_to_all_is_priced_by_its_busier_direction(
        sent: float, received: float, priced_size: float) -> None:
    # 4 ranks on one node: 3 hops of 0.6 µs + 3/4 of the priced size at 450 GB/s
    op = _collective_op("all-to-all", 8, 4, 0, 0)
    op.collective = Rec(kind="all-to-all", group_size=4, size_bytes=8, bytes_sent=sent,
                        bytes_received=received, rank_stride=1)
    p = predict_op(0, op, H100)
    bandwidth = p.time_s - 3 * 0.6e-6
    assert bandwidth == pytest.approx(0.75 * priced_size / 450e9, rel=1e-6)


def test_a_kind_the_links_do_not_price_is_an_op() -> None:
    op = _collective_op("all-reduce", 8, 4, 0, 0)
    op.collective = Rec(kind="barrier", group_size=4, size_bytes=8, bytes_sent=0,
                        bytes_received=0, rank_stride=1)
    p = predict_op(0, op, H100)
    assert p.compute_key == "fp32" and p.link_time_s == 0.0  # priced as any other op


def test_ranks_per_node_steps_down_to_a_divisor() -> None:
    # 12 consecutive ranks on nodes of 8: 8 does not divide 12, nor 7; 6 does
    assert ranks_per_node(12, 1, 8) == 6


def test_a_send_in_a_group_of_two_is_placed_by_its_ends() -> None:
    # a group of 2 consecutive ranks would share a node by its stride; its recorded ends,
    # world ranks 7 and 8, lie on two: one NIC, 2.7 µs + 10⁶ / 50 GB/s
    p = predict_op(0, _collective_op("send-recv", 10**6, 2, 10**6, 0, ends=(7, 8)), H100)
    assert p.time_s == pytest.approx(2.7e-6 + 1e6 / 50e9)


def test_an_uneven_all_to_all_of_two_ranks() -> None:
    # 2 ranks on a node, 8 bytes each; this rank sends all 8 to the other: |8·2 − 8·1| = 8
    # ≥ 2, priced as the even all-to-all of 8·2/1 = 16 bytes: one hop of 0.6 µs and 1/2 · 16
    # bytes at 450 GB/s
    op = _collective_op("all-to-all", 8, 2, 8, 0)
    p = predict_op(0, op, H100)
    assert p.time_s - 0.6e-6 == pytest.approx(0.5 * 16 / 450e9, rel=1e-6)


def test_an_all_to_all_of_one_rank_is_free_whatever_it_records() -> None:
    # a group of one moves nothing, even where its record says it sent 8 bytes
    p = predict_op(0, _collective_op("all-to-all", 8, 1, 8, 8), H100)
    assert (p.time_s, p.bound) == (0.0, "free")


def test_the_step_names_its_chip_and_numbers_its_ops() -> None:
    relu = Op("aten.relu.default", "elementwise", 10, 40, 40)
    p = predict([relu, relu], get_hardware("h100"))  # with its efficiencies: 2.5 µs an op
    assert p.hardware == "h100-sxm"
    assert [o.index for o in p.ops] == [0, 1]
    # a relu of 80 bytes takes some 80 / 3.35e12 = 24 ps, far under the 2.5 µs per-op cost
    (total,) = p.by_category
    assert (total.overhead_bound_ops, total.memory_bound_ops, total.compute_bound_ops) == (
        2, 0, 0)


def test_mfu_is_taken_at_the_key_of_the_most_matrix_flops_summed() -> None:
    # bf16: 200 + 200 = 400 FLOPs against fp32's 300: bf16, though one fp32 product is larger
    mm16 = Op("aten.mm.default", "matmul", 200, 4, 4)
    mm32 = Op("aten.mm.default", "matmul", 300, 4, 4, ("fp32",), ("fp32",))
    assert predict([mm16, mm32, mm16], H100).mfu_peak_key == "bf16"
    # bf16 300 against fp32 200: bf16 by FLOPs (its name sorts before fp32's)
    big16 = Op("aten.mm.default", "matmul", 300, 4, 4)
    small32 = Op("aten.mm.default", "matmul", 200, 4, 4, ("fp32",), ("fp32",))
    assert predict([small32, big16], H100).mfu_peak_key == "bf16"


def test_a_step_of_no_time_gives_each_group_no_share() -> None:
    # on a catalog chip with efficiencies a view launches no kernel and moves nothing: 0 s
    view = Op("aten.view.default", "view", 0, 0, 0)
    p = predict([view], get_hardware("h100"))
    assert p.time_s == 0.0
    assert [(t.name, t.share_of_step) for t in p.by_category] == [("view", 0.0)]


def test_an_uncalibrated_op_has_no_time_between_ops() -> None:
    assert predict_op(0, Op("aten.relu.default", "elementwise", 10, 40, 40), H100
                      ).between_ops_s == 0.0


def test_a_low_precision_op_falls_back_to_its_full_precision_class_with_its_phase() -> None:
    from tensorledger.hardware import Calibration

    # the fit has the optimizer's class (scale 2) and plain elementwise (3), no bf16 class:
    # a bf16 add_ of the optimizer takes "elementwise-optimizer", its phase kept: 2
    calibration = Calibration(scale={"elementwise-optimizer": 2.0, "elementwise": 3.0},
                              op_cost_s=1e-6, between_ops_s={"forward-backward": 0.0,
                                                             "optimizer": 0.0},
                              view_weights={"aten.add_": 5.0})
    chip = dataclasses.replace(H100, calibration=calibration)
    add = Op("aten.add_.Tensor", "elementwise", 1000, 8000, 4000, phase="optimizer")
    plain = predict_op(0, add, H100)  # the same op uncalibrated: memory-bound
    calibrated = predict_op(0, add, chip)
    assert calibrated.memory_time_s == pytest.approx(2 * plain.memory_time_s)
    # entering it costs the op cost, 1 µs: a view's weight (5 for aten.add_) is a view's only
    assert calibrated.overhead_s == pytest.approx(1e-6)


# --------------------------------------------------------- one op's bounds on a chip by hand

def _small(overhead: float = 0.0, **more: object) -> Hardware:
    # fp32 at 10 FLOP/s, 2 bytes/s, a per-op cost of ``overhead`` s
    return Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=2.0,
                    dense_flop_per_s={"fp32": 10.0}, op_overhead_s=overhead,
                    **more)  # type: ignore[arg-type]


def _fp32(flops: int, read: int, written: int = 0, **more: object) -> Op:
    return Op("aten.relu.default", "elementwise", flops, read, written, ("fp32",), ("fp32",),
              **more)  # type: ignore[arg-type]


@pytest.mark.parametrize(("flops", "moved", "bound", "ideal_bound"), [
    (0, 0, "free", "free"),  # nothing to do, no per-op cost
    (0, 4, "memory", "memory"),  # 4 bytes at 2 bytes/s: 2 s
    (30, 0, "compute", "compute"),  # 30 FLOPs at 10 a second: 3 s
    (20, 4, "compute", "compute"),  # 2 s each: a tie is compute-bound, at the bound too
    (10, 4, "memory", "memory"),  # 1 s against 2 s
])
def test_the_bounds_of_one_op(flops: int, moved: int, bound: str, ideal_bound: str) -> None:
    p = predict_op(0, _fp32(flops, moved), _small())
    assert (p.bound, p.ideal_bound) == (bound, ideal_bound)
    # attained: FLOPs over the time, 0 without FLOPs
    assert p.attained_flop_per_s == (pytest.approx(flops / p.time_s) if flops else 0.0)


def test_an_op_whose_cost_equals_its_work_is_not_overhead_bound() -> None:
    # 4 bytes at 2 bytes/s = 2 s of memory against a per-op cost of 2 s: memory-bound (the
    # cost must exceed the work), 4 s in all
    p = predict_op(0, _fp32(0, 4), _small(overhead=2.0))
    assert (p.bound, p.time_s) == ("memory", pytest.approx(4.0))
    q = predict_op(0, _fp32(0, 4), _small(overhead=2.5))
    assert q.bound == "overhead"


def test_a_calibration_factor_below_one_stops_at_the_compute_bound() -> None:
    from tensorledger.hardware import Calibration

    # 100 FLOPs at 10 a second: 10 s; halved by the fit, 5 s, below the roofline's 10 s, so
    # the op takes 10 s (memory: 2 bytes, 1 s, halved 0.5 s; its bound 1 s)
    half = Calibration(scale={"elementwise": 0.5}, op_cost_s=0.0,
                       between_ops_s={"forward-backward": 0.0, "optimizer": 0.0})
    p = predict_op(0, _fp32(100, 2), _small(calibration=half))
    assert p.compute_time_s == pytest.approx(5.0)
    assert p.time_s == pytest.approx(10.0)


def test_new_tensors_pay_for_their_fresh_pages() -> None:
    # tensors of 8 and 40 bytes made, pages fresh from 32 bytes at 4 bytes/s: the 40-byte
    # one costs 10 s beside the op's 2 s of memory
    chip = _small(fresh_pages_from_bytes=32.0, fresh_page_bytes_per_s=4.0)
    op = Rec(op="aten.relu.default", category="elementwise", flops=0, bytes_read=4,
             bytes_written=0, input_dtypes=("fp32",), output_dtypes=("fp32",), module="",
             phase="backward", flops_causal_halved=0,
             storages_created=(("a", 8), ("b", 40)))
    p = predict_op(0, op, chip)
    assert p.overhead_s == pytest.approx(10.0)
    assert p.time_s == pytest.approx(12.0)


def test_a_record_without_a_recomputed_mark_was_not_recomputed() -> None:
    @dataclass(frozen=True)
    class Bare:  # an op record without the ``recomputed`` field
        op: str = "aten.relu.default"
        category: str = "elementwise"
        flops: int = 10
        bytes_read: int = 4
        bytes_written: int = 4
        input_dtypes: tuple[str, ...] = ("fp32",)
        output_dtypes: tuple[str, ...] = ("fp32",)
        module: str = ""
        phase: str = "backward"
        flops_causal_halved: int = 10

    assert predict([Bare()], H100).recomputed_flops == 0
