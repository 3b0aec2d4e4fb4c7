"""Host memory and the KV cache in the timeline, pinned on one hand-made step: a storage in host
memory counts in each point's host bytes and the host's peak, never in the device's total,
its allocator blocks or the storages live at its peak.

The step (bytes; storage 0, 1000 B of parameters, and storage 7, 3000 B of host parameter
shards, exist before it):

====  ==========================================  ======  =====  ==========  ===============
 op    storages                                    device  host   kv cache    blocks of 512
====  ==========================================  ======  =====  ==========  ===============
 −     0 (1000), host 7 (3000)                      1000    3000   0           1024
 0     +1 (600, saved), +host 5 (2000, activation)  1600    5000   0           1024 + 1024
 1     −host 5; +2 (10, temporary)                  1610    3000   0           2048 + 512
 2     −1, −2; +3 (100, kv cache)                   1100    3000   100         1024 + 512
====  ==========================================  ======  =====  ==========  ===============
"""

from __future__ import annotations

from tensorledger.memory.timeline import LiveStorage, build_timeline
from tests.memory.test_timeline_pinned import record, trace_of

STEP = trace_of(
    record(0, ((1, 600), (5, 2000)), module="m"),
    record(1, ((2, 10),), (5,), module="m"),
    record(2, ((3, 100),), (1, 2), module="m"),
    before=((0, 1000), (7, 3000)))
TAGS = {0: "parameter", 7: "host_parameter", 1: "saved_activation", 5: "host_activation",
        3: "kv_cache"}


def test_host_storages_count_apart_from_the_device() -> None:
    timeline = build_timeline(STEP, TAGS)
    assert [p.total_bytes for p in timeline.points] == [1600, 1610, 1100]
    assert [p.host_bytes for p in timeline.points] == [5000, 3000, 3000]
    assert timeline.start.host_bytes == 3000
    # the host's most at once is op 0's: 3000 + 2000
    assert timeline.host_peak_bytes == 5000


def test_the_kv_cache_counts_in_its_own_column() -> None:
    timeline = build_timeline(STEP, TAGS)
    assert [p.kv_cache_bytes for p in timeline.points] == [0, 0, 100]
    assert timeline.points[-1].by_category()["kv_cache"] == 100


def test_host_storages_take_no_allocator_blocks() -> None:
    # the device's blocks only: 1024 before, 2048 after op 0, 2560 after op 1 (the host's
    # 2000 B freed there never held a block), 1536 after op 2
    assert build_timeline(STEP, TAGS).allocator_peak_bytes == 2560


def test_host_storages_are_not_live_at_the_device_peak() -> None:
    # the device peaks at op 1 (1610 B) with 0, 1 and 2 live on it; host 7 is live too,
    # and the largest, but not the device's
    timeline = build_timeline(STEP, TAGS)
    assert timeline.peak.index == 1 and timeline.peak.host_bytes == 3000
    assert timeline.live_at_peak == (
        LiveStorage(0, 1000, "parameter", "", "", ""),
        LiveStorage(1, 600, "saved_activation", "aten.op0", "m", "forward"),
        LiveStorage(2, 10, "temporary", "aten.op1", "m", "forward"))
