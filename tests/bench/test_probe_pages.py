"""The probe's fresh pages: the size from which a CPU's new tensors are mapped anew, and what
their pages cost beyond the bytes written, derived by hand from timings the test sets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import tensorledger.bench.probe_pages as pages
from tensorledger.bench import profile_toml
from tensorledger.bench.probe import _Timer
from tensorledger.bench.probe_pages import FreshPages, PagePoint, fresh_pages
from tensorledger.hardware import load_hardware_file
from tensorledger.roofline import predict_op
from tests.bench.test_probe_noise import SMALL, FakeClock
from tests.roofline.test_model import H100, Op

MIB = 2**20


def _timer() -> _Timer:
    return _Timer(torch.device("cpu"), FakeClock([1e-3]), 0.10, 0)


def _timed(extra: dict[int, float]) -> object:
    """A stand-in for ``_point``: a warm write at 40 GB/s, a new tensor that much slower
    plus ``extra[size]`` seconds."""
    def point(timer: _Timer, size: int, budget_s: float) -> PagePoint:
        warm = size / 40e9
        return PagePoint(size, warm, warm + extra.get(size, 0.0))
    return point


def test_the_threshold_and_the_rate_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # 8 and 16 MiB cost nothing beyond their bytes; 32 MiB 32 MiB / 5 GB/s more, 64 MiB
    # 64 MiB / 4 GB/s more: mapped from 32 MiB, at (32 + 64) MiB over the extra seconds
    extra = {32 * MIB: 32 * MIB / 5e9, 64 * MIB: 64 * MIB / 4e9}
    monkeypatch.setattr(pages, "_point", _timed(extra))
    said: list[str] = []
    found = fresh_pages(_timer(), budget_s=0.01, say=said.append)
    assert found is not None
    assert found.from_bytes == 32 * MIB
    assert found.bytes_per_s == pytest.approx(96 / (32 / 5 + 64 / 4) * 1e9)  # 4.286 GB/s
    assert [p.size_bytes for p in found.points] == [8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB,
                                                    128 * MIB]
    assert said[0] == "fresh pages, 8 MiB tensors"


def test_no_fresh_pages_where_none_cost_twice_or_a_figure_is_noisy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a new 64 MiB tensor 1.9× a warm write: below twice, no threshold
    monkeypatch.setattr(pages, "_point", _timed({64 * MIB: 0.9 * 64 * MIB / 40e9}))
    assert fresh_pages(_timer(), budget_s=0.01, say=lambda _: None) is None
    # every size's figures set aside (still noisy after their retries): nothing at all
    monkeypatch.setattr(pages, "_point", _timed({64 * MIB: 1.0}))
    timer = _timer()
    for size in pages.PAGE_SIZES:
        timer.why[f"fresh pages: fresh write {size} B"] = "spread 40%"
    assert fresh_pages(timer, budget_s=0.01, say=lambda _: None) is None
    # another device than a CPU: none measured
    cuda = _Timer(torch.device("meta"), FakeClock([1e-3]), 0.10, 0)
    assert fresh_pages(cuda, budget_s=0.01, say=lambda _: None) is None


def test_a_noisy_size_is_left_out_and_the_others_decide(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    # mapped from 32 MiB: 32 MiB 32 MiB / 5 GB/s beyond its bytes, 64 MiB 64 MiB / 4 GB/s,
    # 128 MiB 128 MiB / 2 GB/s; 64 MiB's warm write set aside as noisy: the rate is
    # (32 + 128) MiB over (32 / 5 + 128 / 2) MiB·s/GB = 160 / 70.4 GB/s
    extra = {32 * MIB: 32 * MIB / 5e9, 64 * MIB: 64 * MIB / 4e9, 128 * MIB: 128 * MIB / 2e9}
    monkeypatch.setattr(pages, "_point", _timed(extra))
    timer = _timer()
    timer.why["fresh pages: warm write 67108864 B"] = "spread 12%"
    found = fresh_pages(timer, budget_s=0.01, say=lambda _: None)
    assert found is not None
    assert found.from_bytes == 32 * MIB
    assert found.bytes_per_s == pytest.approx(160 / (32 / 5 + 128 / 2) * 1e9)  # 2.273 GB/s
    assert [p.size_bytes for p in found.points] == [8 * MIB, 16 * MIB, 32 * MIB, 128 * MIB]
    # the threshold's own size set aside: the next mapped size kept is the threshold
    timer.why["fresh pages: fresh write 33554432 B"] = "spread 11%"
    found = fresh_pages(timer, budget_s=0.01, say=lambda _: None)
    assert found is not None and found.from_bytes == 128 * MIB
    assert found.bytes_per_s == pytest.approx(2e9)  # 128 MiB alone, at its 2 GB/s


def test_a_real_write_is_timed_warm_and_fresh() -> None:
    # the fake clock reads 1 ms a call: both writes of a 1 MiB tensor take 1 ms, so no size
    # is mapped anew
    point = pages._point(_timer(), MIB, 0.01)
    assert point.size_bytes == MIB
    assert (point.warm_s, point.fresh_s) == pytest.approx((1e-3, 1e-3))


def test_the_profile_carries_the_fresh_pages_and_the_roofline_adds_them(
        tmp_path: Path) -> None:
    from tensorledger.bench import probe

    result = dataclasses.replace(
        probe("cpu", clock=FakeClock([1e-3]), **SMALL),
        fresh_pages=FreshPages(32 * MIB, 4e9, ()))
    path = tmp_path / "local.toml"
    path.write_text(profile_toml(result))
    chip = load_hardware_file(path)
    assert (chip.fresh_pages_from_bytes, chip.fresh_page_bytes_per_s) == (32 * MIB, 4e9)
    # an op making a 40 MB tensor and an 8 MB one pays 40 MB / 4 GB/s = 10 ms more than the
    # same op making none; the 8 MB one, below 32 MiB, costs nothing beyond its bytes
    plain = Op("aten.sqrt.default", "elementwise", 10**7, 40_000_000, 40_000_000,
               input_dtypes=("fp32",), output_dtypes=("fp32",))
    made = Created(**dataclasses.asdict(plain),
                   storages_created=((1, 40_000_000), (2, 8_000_000)))
    for hardware in (chip, dataclasses.replace(H100, fresh_pages_from_bytes=32 * MIB,
                                               fresh_page_bytes_per_s=4e9)):
        base = predict_op(0, plain, hardware)
        priced = predict_op(0, made, hardware)
        assert priced.time_s - base.time_s == pytest.approx(40e6 / 4e9)
        assert priced.overhead_s - base.overhead_s == pytest.approx(40e6 / 4e9)


@dataclasses.dataclass(frozen=True)
class Created(Op):
    storages_created: tuple[tuple[int, int], ...] = ()


def test_fresh_pages_from_the_threshold_on_at_any_rate() -> None:
    # a tensor of the threshold's own 32 MiB is mapped anew, one a byte short is not; at
    # 0.5 B/s its 2²⁵ bytes take 2²⁶ s.  No rate, nothing: whatever the threshold
    slow = dataclasses.replace(H100, fresh_pages_from_bytes=32 * MIB, fresh_page_bytes_per_s=0.5)
    assert slow.fresh_pages_s([32 * MIB, 32 * MIB - 1]) == 2.0**26
    assert slow.fresh_pages_s([]) == 0.0
    assert dataclasses.replace(slow, fresh_page_bytes_per_s=0.0).fresh_pages_s([64 * MIB]) == 0.0
