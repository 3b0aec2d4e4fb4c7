"""Whether a step fits, field by field (mutation, issue 42): the state sharded over the
devices, the edges of a budget, and the reserve of a job of two."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from tensorledger.hardware import get_hardware
from tensorledger.memory.ledger import Fit, _fit
from tensorledger.napkin.headroom import Headroom, device_headroom

H100 = get_hardware("h100")
# parameters 1,000, gradients 300, optimizer state 2,000 of a 5,000-byte peak
TIMELINE: Any = SimpleNamespace(peak=SimpleNamespace(
    parameter_bytes=1000, gradient_bytes=300, optimizer_state_bytes=2000, total_bytes=5000))


def test_a_budget_fits_at_its_edge() -> None:
    # sharded over 4: 5000 − 3300 + ⌈3300 / 4⌉ = 1700 + 825
    assert _fit(TIMELINE, H100, 4, 1, 2525.0) == Fit(
        hardware=H100.name, count=4, device_memory_bytes=H100.memory_bytes,
        replica_peak_bytes=5000, fits_replicated=False, sharded_peak_bytes=2525,
        fits_sharded=True, budget_bytes=2525.0)
    assert _fit(TIMELINE, H100, 4, 1, 5000.0).fits_replicated  # equal is enough
    # over 7: 1700 + ⌈3300 / 7⌉ = 1700 + 472 (a float split would give 2171.4…)
    assert _fit(TIMELINE, H100, 7, 1, 1e9).sharded_peak_bytes == 2172


def test_without_a_budget_the_reserve_of_the_larger_job_counts() -> None:
    two = device_headroom(2)  # the CUDA context and NCCL's buffers, two ranks
    assert two.communicator_bytes == 1.06e9
    assert two.describe() == ("CUDA context 0.76 GB, NCCL buffers 1.06 GB, allocator "
                              "fragmentation 5% of the peak (assumed)")
    got = _fit(TIMELINE, H100, 1, 2, None)
    assert got == Fit(hardware=H100.name, count=1, device_memory_bytes=H100.memory_bytes,
                      replica_peak_bytes=5000, fits_replicated=True, sharded_peak_bytes=5000,
                      fits_sharded=True, reserve_bytes=two.reserve_bytes(5000),
                      reserve=two.describe())
    # 723 MiB + 1.06e9 + 5% of 5,000
    assert got.reserve_bytes == 723 * 2**20 + 1.06e9 + 250
    # the figures in GB to two places, by 1e9: 0.025 GB shows as 0.03
    assert Headroom(2.5e7, 2.5e7, 0.05).describe().startswith(
        "CUDA context 0.03 GB, NCCL buffers 0.03 GB, ")


def test_a_peak_equal_to_the_usable_bytes_fits() -> None:
    # a chip of 723 MiB + 5,250 bytes: one device keeps its CUDA context and 5% of the peak,
    # so a 5,000-byte peak is the most that fits (5,250 / 1.05), and it does
    chip = dataclasses.replace(H100, memory_bytes=723 * 2**20 + 5250)
    got = _fit(TIMELINE, chip, 1, 1, None)
    assert (got.replica_peak_bytes, got.fits_replicated) == (5000, True)
    assert (got.sharded_peak_bytes, got.fits_sharded) == (5000, True)  # one device: unsharded
