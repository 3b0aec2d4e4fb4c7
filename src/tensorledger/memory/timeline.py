"""The live-memory timeline of a traced training step: every storage, tagged, op by op.

A :class:`~tensorledger.trace.Trace` lists the storages each op created and those freed since
the op before.  :func:`build_timeline` replays them: storages alive before the step are live
from the start, and after op *i* the live set is the set after op *i−1*, less what was freed,
plus what op *i* created.  Each storage carries a category — ``parameter``, ``gradient``,
``optimizer_state`` (the master copy of ``bf16-master`` included), ``saved_activation`` (kept
by autograd for backward), ``kv_cache`` (the keys and values a prefill or decode step caches)
or ``temporary`` (everything else: outputs not saved, workspace of
decomposed ops, the loss) — so the peak comes with what is live at that moment and who made it.
Host memory is kept apart: a storage tagged ``host_activation`` (an activation offloaded by
``--offload activations``), or ``host_parameter``, ``host_gradient``, ``host_optimizer_state``
and ``host_temporary`` (``--offload params``: FSDP2's shards on the host, their gradients, the
optimizer state and what its step on the CPU makes) is counted in
:attr:`TimelinePoint.host_bytes`, never in the device's total or peak.

The tags come with the trace (see :func:`tensorledger.workload.trace_workload`): parameters,
gradients and optimizer state from the model and optimizer, saved activations from
``saved_tensors_hooks``.  Nothing in this module runs a step or depends on the device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.summary import show_bytes, show_count, summary
from tensorledger.trace.records import Trace

__all__ = ["CUDA_BLOCK_BYTES", "HOST_CATEGORIES", "MEMORY_CATEGORIES", "LiveStorage",
           "MemoryTimeline",
           "PhaseSpan", "TimelinePoint", "build_timeline", "phase_spans"]

MEMORY_CATEGORIES = ("parameter", "gradient", "optimizer_state", "saved_activation",
                     "kv_cache", "temporary")
#: Categories of storages in host memory: not the device's.
HOST_CATEGORIES = ("host_activation", "host_parameter", "host_gradient", "host_optimizer_state",
                   "host_temporary")

#: PyTorch's CUDA caching allocator hands out blocks in multiples of 512 bytes, and
#: ``torch.cuda.max_memory_allocated`` counts those blocks, not the bytes asked for.
CUDA_BLOCK_BYTES = 512


@dataclass(frozen=True)
class TimelinePoint:
    """Live bytes by category right after one op."""

    index: int
    op: str
    phase: str
    module: str
    parameter_bytes: int
    gradient_bytes: int
    optimizer_state_bytes: int
    saved_activation_bytes: int
    temporary_bytes: int
    total_bytes: int  # on the device
    host_bytes: int = 0  # in host memory (offloaded activations), apart from the device's
    kv_cache_bytes: int = 0  # a prefill or decode step's KV cache

    def by_category(self) -> dict[str, int]:
        return {c: int(getattr(self, f"{c}_bytes")) for c in MEMORY_CATEGORIES}


@dataclass(frozen=True)
class LiveStorage:
    """One storage live at the peak: its size, its category and the op that made it."""

    storage_id: int
    nbytes: int
    category: str
    op: str  # "" when it existed before the step
    module: str
    phase: str


@dataclass(frozen=True)
class MemoryTimeline:
    """Every op's live memory, and the peak with what is live then (largest first)."""

    points: tuple[TimelinePoint, ...]
    start: TimelinePoint  # before the first op: the storages that existed already
    peak: TimelinePoint
    live_at_peak: tuple[LiveStorage, ...]
    storages: int
    # the peak with every storage rounded up to the CUDA allocator's 512-byte blocks: what
    # torch.cuda.max_memory_allocated would count for the same storages
    allocator_peak_bytes: int = 0
    # torch.cuda.max_memory_allocated over the same step, when it ran on CUDA
    measured_peak_bytes: int | None = None
    host_peak_bytes: int = 0  # the most host memory live at once (offloaded activations)

    @property
    def peak_bytes(self) -> int:
        return self.peak.total_bytes

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        return summary("MemoryTimeline", show_count(len(self.points), "points"),
                       f"peak {show_bytes(self.peak.total_bytes)} after #{self.peak.index} "
                       f"{self.peak.op}", show_count(self.storages, "storages"))


@dataclass(frozen=True)
class PhaseSpan:
    """A run of consecutive ops of one phase: op indices ``first_index`` to ``last_index``."""

    phase: str
    first_index: int
    last_index: int
    ops: int


def phase_spans(points: Sequence[TimelinePoint]) -> tuple[PhaseSpan, ...]:
    """The step cut where the phase changes from one op to the next, in op order.

    >>> from tensorledger.memory.timeline import TimelinePoint as P
    >>> p = [P(i, "op", ph, "", 0, 0, 0, 0, 0, 0) for i, ph in enumerate("ffbbbo")]
    >>> [(s.phase, s.first_index, s.last_index) for s in phase_spans(p)]
    [('f', 0, 1), ('b', 2, 4), ('o', 5, 5)]
    """
    spans: list[PhaseSpan] = []
    for point in points:
        if spans and spans[-1].phase == point.phase:
            last = spans[-1]
            spans[-1] = PhaseSpan(last.phase, last.first_index, point.index, last.ops + 1)
        else:
            spans.append(PhaseSpan(point.phase, point.index, point.index, 1))
    return tuple(spans)


def _point(index: int, op: str, phase: str, module: str, totals: Mapping[str, int]
           ) -> TimelinePoint:
    device = sum(totals[c] for c in MEMORY_CATEGORIES)
    return TimelinePoint(index=index, op=op, phase=phase, module=module,
                         parameter_bytes=totals["parameter"], gradient_bytes=totals["gradient"],
                         optimizer_state_bytes=totals["optimizer_state"],
                         saved_activation_bytes=totals["saved_activation"],
                         temporary_bytes=totals["temporary"], total_bytes=device,
                         host_bytes=sum(totals[c] for c in HOST_CATEGORIES),
                         kv_cache_bytes=totals["kv_cache"])


def build_timeline(trace: Trace, tags: Mapping[int, str], top: int = 12) -> MemoryTimeline:
    """Replay the storages of ``trace``; ``tags`` maps storage id → category (else temporary).

    A pure function of the trace and the tags: no tensor is touched.
    """
    unknown = set(tags.values()) - set(MEMORY_CATEGORIES) - set(HOST_CATEGORIES)
    if unknown:
        raise InputError(f"unknown memory categories {sorted(unknown)}; known: "
                         f"{', '.join(MEMORY_CATEGORIES + HOST_CATEGORIES)}")
    size: dict[int, int] = {}
    origin: dict[int, tuple[str, str, str]] = {}
    totals = dict.fromkeys(MEMORY_CATEGORIES + HOST_CATEGORIES, 0)
    host = set(HOST_CATEGORIES)
    live: set[int] = set()
    for storage, nbytes in trace.storages_preexisting:
        size[storage] = nbytes
        origin[storage] = ("", "", "")
        live.add(storage)
        totals[tags.get(storage, "temporary")] += nbytes
    start = _point(-1, "", "", "", totals)
    rounded = sum(_blocks(size[s]) for s in live if tags.get(s) not in host)
    allocator_peak = rounded
    host_peak = start.host_bytes
    points: list[TimelinePoint] = []
    peak, peak_live = start, set(live)
    for record in trace.records:
        for storage in record.storages_freed:
            if storage in live:
                live.discard(storage)
                totals[tags.get(storage, "temporary")] -= size[storage]
                if tags.get(storage) not in host:
                    rounded -= _blocks(size[storage])
        for storage, nbytes in record.storages_created:
            size[storage] = nbytes
            origin[storage] = (record.op, record.module, record.phase)
            live.add(storage)
            totals[tags.get(storage, "temporary")] += nbytes
            if tags.get(storage) not in host:
                rounded += _blocks(nbytes)
        point = _point(record.index, record.op, record.phase, record.module, totals)
        points.append(point)
        allocator_peak = max(allocator_peak, rounded)
        host_peak = max(host_peak, point.host_bytes)
        if point.total_bytes > peak.total_bytes:
            peak, peak_live = point, set(live)
    peak_live = {s for s in peak_live if tags.get(s) not in host}
    largest = sorted(peak_live, key=lambda s: (-size[s], s))[:top]
    return MemoryTimeline(
        points=tuple(points), start=start, peak=peak,
        live_at_peak=tuple(LiveStorage(storage_id=s, nbytes=size[s],
                                       category=tags.get(s, "temporary"), op=origin[s][0],
                                       module=origin[s][1], phase=origin[s][2])
                           for s in largest),
        storages=len(size), allocator_peak_bytes=allocator_peak, host_peak_bytes=host_peak)


def _blocks(nbytes: int) -> int:
    """Bytes the CUDA caching allocator reserves for a request: whole 512-byte blocks."""
    return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
