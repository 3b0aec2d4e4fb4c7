"""What a chip is once loaded, pinned by hand: the log-log curve reading, the published
efficiencies, a calibration's costs by footprint and phase, and each of a chip's expected
rates, on chips built here (the catalog's own are cached: see ``test_catalog_pinned``)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware.chip import Calibration, Efficiency, Hardware, interpolate
from tensorledger.summary import show_bytes


def chip(**fields: object) -> Hardware:
    """A chip of 1 GB, 100 GB/s and an fp32 peak of 1 TFLOP/s, with ``fields`` on top."""
    base: dict[str, object] = {"id": "x", "name": "X", "memory_bytes": 1e9,
                               "memory_bandwidth_bytes_per_s": 100e9,
                               "dense_flop_per_s": {"fp32": 1e12}}
    return Hardware(**{**base, **fields})  # type: ignore[arg-type]


# ---- interpolate ----

def test_interpolate_is_flat_beyond_the_ends() -> None:
    points = ((2.0, 3.0), (4.0, 5.0))
    # at or below the first size: the first value itself (exp(log 3) would be 3.0000000000000004)
    assert interpolate(points, 2.0) == 3.0
    assert interpolate(points, 1.0) == 3.0
    assert interpolate(points, 9.0) == 5.0  # beyond the last: the last


def test_interpolate_is_a_straight_line_in_logs() -> None:
    # from (10, 1) to (10⁴, 8): 1000 lies 2/3 of the way in logs (log 100 / log 1000), so the
    # value is 8^(2/3) = 4
    assert interpolate(((10.0, 1.0), (1e4, 8.0)), 1e3) == pytest.approx(4.0, rel=1e-12)
    # the second of three segments: 400 lies halfway from 100 to 1600 in logs (4 = √16), the
    # value halfway from 2 to 32 in logs: 8
    points = ((1.0, 1.0), (100.0, 2.0), (1600.0, 32.0), (1e5, 64.0))
    assert interpolate(points, 400.0) == pytest.approx(8.0, rel=1e-12)
    assert interpolate(points, 10.0) == pytest.approx(math.sqrt(2), rel=1e-12)  # half of 1→100
    assert type(interpolate(points, 400.0)) is float


# ---- Efficiency ----

def test_a_matmul_fraction_by_key_then_default() -> None:
    efficiency = Efficiency(matmul={"bf16": ((1e6, 0.25), (1e10, 1.0)), "fp8": (),
                                    "default": ((1e6, 0.5),)},
                            attention=None, memory_bandwidth=0.8, op_overhead_s=1e-6)
    # 10⁸ lies halfway from 10⁶ to 10¹⁰ in logs: √(0.25 · 1) = 0.5 of the bf16 peak
    assert efficiency.matmul_fraction("bf16", 1e8) == pytest.approx(0.5, rel=1e-12)
    assert efficiency.matmul_fraction("fp32", 1e8) == 0.5  # no fp32 curve: the default
    assert efficiency.matmul_fraction("fp8", 1e8) == 0.5  # an empty curve: the default too
    # a matmul of no FLOPs reads the first point
    assert efficiency.matmul_fraction("bf16", 0.0) == 0.25
    assert efficiency.matmul_fraction("bf16", -1.0) == 0.25
    # neither its key nor a default: the whole peak
    assert Efficiency(matmul={}, attention=None, memory_bandwidth=1.0,
                      op_overhead_s=0.0).matmul_fraction("bf16", 1e8) == 1.0


def test_a_matmul_of_one_flop_is_read_on_the_curve() -> None:
    # a curve from half a FLOP: a matmul of 1 FLOP lies halfway in logs to 2, so it attains
    # √(0.1 · 0.4) = 0.2, not the first point's 0.1
    efficiency = Efficiency(matmul={"bf16": ((0.5, 0.1), (2.0, 0.4))}, attention=None,
                            memory_bandwidth=1.0, op_overhead_s=0.0)
    assert efficiency.matmul_fraction("bf16", 1.0) == pytest.approx(0.2, rel=1e-12)


def test_an_efficiency_source_by_figure_then_the_whole() -> None:
    efficiency = Efficiency(matmul={}, attention=None, memory_bandwidth=1.0, op_overhead_s=0.0,
                            sources={"matmul": "a paper", "attention": "", "*": "a lab"})
    assert efficiency.source("matmul") == "a paper"
    assert efficiency.source("attention") == "a lab"  # named but empty: the whole's
    assert efficiency.source("memory_bandwidth") == "a lab"
    bare = Efficiency(matmul={}, attention=None, memory_bandwidth=1.0, op_overhead_s=0.0)
    assert bare.source("matmul") == ""


# ---- Calibration ----

CAL = Calibration(scale={"matmul": 2.0, "elementwise-costly": 3.0}, op_cost_s=4e-6,
                  between_ops_s={"forward-backward": 20e-6, "optimizer": 8e-6},
                  op_cost_by_footprint=((1.0, 2e-6), (100.0, 8e-6)),
                  view_weights={"aten.t": 2.5})


def test_a_calibration_factor_by_class_then_category() -> None:
    assert CAL.factor("matmul", "elementwise") == 2.0  # its class first
    assert CAL.factor("elementwise-costly", "elementwise") == 3.0
    assert CAL.factor("elementwise-dividing", "matmul") == 2.0  # no class: its category's
    assert CAL.factor("copy", "copy") == 1.0  # neither: 1


def test_entering_an_op_by_footprint() -> None:
    # 10 bytes lies halfway from 1 to 100 in logs: √(2 · 8) = 4 µs
    assert CAL.entry(10.0) == pytest.approx(4e-6, rel=1e-12)
    assert CAL.entry(1.0) == 2e-6  # the first point (a footprint of 1 byte is known)
    assert CAL.entry(0.5) == 2e-6  # below it: flat
    for unknown in (None, 0.0, -5.0):  # not known: op_cost_s
        assert CAL.entry(unknown) == 4e-6
    flat = dataclasses.replace(CAL, op_cost_by_footprint=())
    assert flat.entry(10.0) == 4e-6  # no curve: op_cost_s
    # a view: its op's weight times entering any op; a view not named weighs 1
    assert CAL.view_entry("aten.t", 10.0) == pytest.approx(2.5 * 4e-6, rel=1e-12)
    # at 100 bytes entering costs 8 µs (the last point), not op_cost_s: 2.5 × 8 µs
    assert CAL.view_entry("aten.t", 100.0) == pytest.approx(2.5 * 8e-6, rel=1e-12)
    assert CAL.view_entry("aten.view", None) == 4e-6


@pytest.mark.parametrize(("phase", "group"), [
    ("optimizer", "optimizer"), ("forward", "forward-backward"),
    ("backward", "forward-backward"), ("", "forward-backward"),
])
def test_the_phase_group_of_a_phase(phase: str, group: str) -> None:
    assert Calibration.group(phase) == group


def test_the_time_between_ops_grows_with_entering_an_op() -> None:
    # at 10 bytes entering costs 4 µs, as op_cost_s: the ratio is 1
    assert CAL.footprint_ratio(10.0) == pytest.approx(1.0, rel=1e-12)
    assert CAL.between("forward", 10.0) == pytest.approx(20e-6, rel=1e-12)
    # at 100 bytes 8 µs, twice op_cost_s: twice the time between ops
    assert CAL.footprint_ratio(100.0) == pytest.approx(2.0, rel=1e-12)
    assert CAL.between("backward", 100.0) == pytest.approx(40e-6, rel=1e-12)
    assert CAL.between("optimizer", 1.0) == pytest.approx(8e-6 * 0.5, rel=1e-12)  # 2 / 4 µs
    assert CAL.between("optimizer") == 8e-6  # footprint not known: ratio 1
    # a group without a figure spends nothing between ops
    bare = dataclasses.replace(CAL, between_ops_s={"optimizer": 8e-6})
    assert bare.between("forward", 100.0) == 0.0
    # no op_cost_s to compare with: the ratio is 1
    free = dataclasses.replace(CAL, op_cost_s=0.0)
    assert free.footprint_ratio(100.0) == 1.0
    assert free.between("optimizer", 100.0) == 8e-6
    # an op_cost_s of a second: the ratio is entering's (8 µs at 100 bytes) over it
    slow = dataclasses.replace(CAL, op_cost_s=1.0)
    assert slow.footprint_ratio(100.0) == pytest.approx(8e-6, rel=1e-12)


# ---- Hardware ----

def test_the_basis_of_expected_times() -> None:
    efficiency = Efficiency(matmul={}, attention=None, memory_bandwidth=0.5,
                            op_overhead_s=3e-6)
    assert chip().expected_basis == "datasheet"
    assert chip(efficiency=efficiency).expected_basis == "efficiencies"
    assert chip(efficiency=efficiency,
                curves={"bandwidth": ((1.0, 1.0),)}).expected_basis == "probed"


def test_the_ideal_bandwidth_is_the_fastest_known() -> None:
    assert chip().ideal_bandwidth_bytes_per_s == 100e9
    # a cache-resident rate above DRAM's counts; one below it does not
    assert chip(curves={"bandwidth": ((1e3, 50e9), (1e6, 400e9), (1e9, 90e9))}
                ).ideal_bandwidth_bytes_per_s == 400e9
    assert chip(curves={"bandwidth": ((1e3, 50e9),),
                        "matmul.fp32": ((1.0, 1e15),)}).ideal_bandwidth_bytes_per_s == 100e9


def test_an_expected_flop_rate_probed_published_or_peak() -> None:
    efficiency = Efficiency(matmul={"default": ((1.0, 0.25),)}, attention=None,
                            memory_bandwidth=0.5, op_overhead_s=0.0)
    curves = {"attention.fp32": ((1.0, 3e11),), "matmul.fp32": ((1.0, 2e11),)}
    probed = chip(curves=curves, efficiency=efficiency)
    assert probed.expected_flop_rate("attention.fp32", "fp32", 1e6) == 3e11  # its own curve
    assert probed.expected_flop_rate("linear.fp32", "fp32", 1e6) == 2e11  # else the matmul's
    # a curve of its own without a matmul curve is read too
    alone = chip(curves={"attention.fp32": ((1.0, 3e11),)}, efficiency=efficiency)
    assert alone.expected_flop_rate("attention.fp32", "fp32", 1e6) == 3e11
    # no curve: the peak times the published fraction (1 TFLOP/s × 0.25), else the peak
    assert alone.expected_flop_rate("linear.fp32", "fp32", 1e6) == 0.25e12
    # the fraction of the key's own curve where it has one (bf16: 4 TFLOP/s × 0.5)
    by_key = chip(dense_flop_per_s={"fp32": 1e12, "bf16": 4e12}, efficiency=Efficiency(
        matmul={"bf16": ((1.0, 0.5),), "default": ((1.0, 0.25),)}, attention=None,
        memory_bandwidth=0.5, op_overhead_s=0.0))
    assert by_key.expected_flop_rate("matmul.bf16", "bf16", 1e6) == 2e12
    assert by_key.expected_flop_rate("matmul.fp32", "fp32", 1e6) == 0.25e12
    assert chip().expected_flop_rate("matmul.fp32", "fp32", 1e6) == 1e12
    # a size of no FLOPs on a curve: the peak (attainable's ceiling)
    assert probed.expected_flop_rate("attention.fp32", "fp32", 0.0) == 1e12


def test_an_expected_bandwidth_probed_published_or_datasheet() -> None:
    curve = {"bandwidth": ((1e3, 400e9), (1e9, 50e9))}
    efficiency = Efficiency(matmul={}, attention=None, memory_bandwidth=0.5, op_overhead_s=0.0)
    probed = chip(curves=curve, efficiency=efficiency)
    assert probed.expected_bandwidth(1e3) == 400e9  # the curve at its size
    assert probed.expected_bandwidth(1e3, in_place=True) == 100e9  # warm buffers: the DRAM's
    assert probed.expected_bandwidth(0.0) == 100e9  # no bytes: the ceiling
    assert chip(efficiency=efficiency).expected_bandwidth(1e3) == 50e9  # 100 GB/s × 0.5
    assert chip(efficiency=efficiency).expected_bandwidth(1e3, in_place=True) == 50e9
    assert chip().expected_bandwidth(1e3) == 100e9


def test_the_overhead_of_an_op_stated_or_published() -> None:
    efficiency = Efficiency(matmul={}, attention=None, memory_bandwidth=1.0,
                            op_overhead_s=3e-6)
    assert chip().expected_op_overhead_s == 0.0
    assert chip(op_overhead_s=2e-6).expected_op_overhead_s == 2e-6
    assert chip(efficiency=efficiency).expected_op_overhead_s == 3e-6
    assert chip(efficiency=efficiency, op_overhead_s=2e-6).expected_op_overhead_s == 2e-6
    # inference: its own figure where probed, else the training step's
    both = chip(efficiency=efficiency, inference_op_overhead_s=1e-6)
    assert both.op_overhead_for(inference=True) == 1e-6
    assert both.op_overhead_for(inference=False) == 3e-6
    assert chip(efficiency=efficiency).op_overhead_for(inference=True) == 3e-6


def test_fresh_pages_from_the_threshold_on() -> None:
    pages = chip(fresh_pages_from_bytes=32e6, fresh_page_bytes_per_s=4e9)
    # 32 MB counts (the threshold itself), 31,999,999 bytes do not: 32 MB / 4 GB/s = 8 ms
    assert pages.fresh_pages_s([32_000_000, 31_999_999]) == 32e6 / 4e9
    assert pages.fresh_pages_s([]) == 0.0
    assert chip(fresh_pages_from_bytes=32e6).fresh_pages_s([64_000_000]) == 0.0  # no rate
    # the slowest rate a file may state, 1 byte/s: 20 bytes take 20 s
    assert chip(fresh_pages_from_bytes=10.0, fresh_page_bytes_per_s=1.0).fresh_pages_s(
        [20, 5]) == 20.0


def test_a_chip_shown() -> None:
    shown = repr(chip(dense_flop_per_s={"fp32": 1e12, "bf16": 2e12}, origin="lab.toml"))
    assert shown == (f"Hardware('x', X, {show_bytes(1e9)}, {show_bytes(100e9)}/s, "
                     "2 dense peaks, lab.toml)")


def test_peaks_by_dtype_name() -> None:
    h = chip(dense_flop_per_s={"fp32": 1e12, "bf16": 4e12, "fp8": 8e12})
    assert h.compute_key(" BF16 ") == "bf16"
    assert h.compute_key("bfloat16") == "bf16"
    assert h.compute_key("e4m3") == "fp8"
    # a peak-table key that names no dtype is a key all the same
    assert h.compute_key(" FP6 ") == "fp6"
    assert h.peak_flop_per_s("float32") == 1e12
    assert h.intensity_flop_per_byte("bf16") == 4e12 / 100e9  # 40 FLOPs a byte
    with pytest.raises(InputError) as error:
        h.peak_flop_per_s("float16")
    assert str(error.value) == ("x lists no dense fp16 peak for dtype 'float16'; it lists: "
                                "fp32, bf16, fp8")


def test_attainable_reads_a_curve_or_the_ceiling() -> None:
    h = chip(curves={"matmul.fp32": ((1e6, 1e11), (1e8, 1e12))})
    assert h.attainable("matmul.fp32", 1e7, 5.0) == pytest.approx(10**11.5, rel=1e-12)
    assert h.attainable("matmul.fp32", 0.0, 5.0) == 5.0  # no size: the ceiling
    assert h.attainable("matmul.fp32", 1.0, 5.0) == 1e11  # a size of 1: below the curve
    assert h.attainable("matmul.bf16", 1e7, 5.0) == 5.0
    assert chip(curves={"matmul.fp32": ()}).attainable("matmul.fp32", 1e7, 5.0) == 5.0


def test_sources_by_number_then_the_chips() -> None:
    h = chip(sources={"*": "the datasheet", "memory": "the box", "bf16": ""})
    assert h.source("memory") == "the box"
    assert h.source("bf16") == "the datasheet"  # named but empty
    assert h.source("fp32") == "the datasheet"
    assert chip().source("fp32") == ""
    assert h.specific_source("memory") == "the box"
    assert h.specific_source("fp32") == ""
    assert h.specific_source("*") == ""  # the chip's own source is no number's own
