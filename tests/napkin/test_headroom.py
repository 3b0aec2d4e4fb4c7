"""The reserve a device keeps beside a step (issue 36, item 5), by hand."""

from __future__ import annotations

import pytest

from tensorledger.hardware.catalog import parse_hardware_toml
from tensorledger.ledger.memory import memory_report
from tensorledger.napkin.headroom import device_headroom
from tensorledger.workload import resolve_workload


def test_the_reserve_by_hand() -> None:
    # 723 MiB of CUDA context = 723 · 1,048,576 = 758,120,448 B; NCCL 1.06e9 B on more than
    # one device; 5% of a 60 GB peak = 3e9 B
    many, one = device_headroom(8), device_headroom(1)
    assert many.reserve_bytes(60e9) == pytest.approx(758_120_448 + 1.06e9 + 3e9)
    assert one.reserve_bytes(60e9) == pytest.approx(758_120_448 + 3e9)
    # the largest peak p with p + reserve(p) = 80 GB: (80e9 − 758,120,448 − 1.06e9) / 1.05
    assert many.largest_peak(80e9) == pytest.approx((80e9 - 758_120_448 - 1.06e9) / 1.05)
    assert many.largest_peak(1e8) == 0.0  # a device smaller than its context holds nothing
    assert set(many.sources) == {"cuda_context", "communicator", "fragmentation"}
    assert "NCCL" in many.describe() and "NCCL" not in one.describe()


def _chip(memory: str):  # type: ignore[no-untyped-def]
    return parse_hardware_toml(f'''[small]
name = "a small GPU"
memory = "{memory}"
memory_bandwidth = "1TB/s"
[small.dense]
bf16 = "100TFLOP/s"
fp32 = "10TFLOP/s"
''', "small.toml")


def test_fits_counts_the_reserve_and_a_budget_replaces_it() -> None:
    """A device of exactly the step's peak plus half the CUDA context: the step does not fit
    beside the reserve; with --budget at the device's whole memory it does."""
    work = resolve_workload("tiny", batch=2, seq=16, precision="fp32")
    peak = memory_report(work).peak_bytes
    memory = peak + 758_120_448 // 2
    chip = _chip(f"{memory}B")
    reserved = memory_report(work, chip)
    assert reserved.fit is not None and not reserved.fit.fits_replicated
    assert reserved.fit.reserve_bytes == pytest.approx(758_120_448 + 0.05 * peak)
    given = memory_report(work, chip, budget_bytes=float(memory))
    assert given.fit is not None and given.fit.fits_replicated
    assert given.fit.budget_bytes == memory and given.fit.reserve_bytes == 0
