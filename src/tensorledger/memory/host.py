"""What a step holds in host memory, by category, and the work it runs there (pure).

``--offload params`` (FSDP2's ``CPUOffloadPolicy``) keeps a rank's parameter shards, their
gradients and the optimizer state on the host and runs the optimizer step on the CPU; the
trace tags those storages ``host_parameter``, ``host_gradient``, ``host_optimizer_state`` and
``host_temporary`` (:mod:`.timeline` keeps them out of the device's figures).  Here the host's
share is replayed on its own: the most of each category live at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from tensorledger.memory.timeline import HOST_CATEGORIES
from tensorledger.trace.records import Trace

__all__ = ["host_category_peaks", "phase_work"]


def host_category_peaks(trace: Trace, tags: Mapping[int, str]) -> dict[str, int]:
    """The most bytes of each host category live at once over ``trace`` (each category's own
    high point: they need not coincide).

    >>> from tensorledger.trace.records import Trace
    >>> empty = Trace(records=(), uncovered={}, device="fake:cpu",
    ...               storages_preexisting=((1, 64), (2, 8)))
    >>> host_category_peaks(empty, {1: "host_parameter"})["host_parameter"]
    64
    """
    host = set(HOST_CATEGORIES)
    size: dict[int, int] = {}
    live = dict.fromkeys(HOST_CATEGORIES, 0)
    peaks = dict(live)
    alive: set[int] = set()

    def add(storage: int, nbytes: int) -> None:
        category = tags.get(storage)
        size[storage] = nbytes
        alive.add(storage)
        if category in host:
            live[category] += nbytes
            peaks[category] = max(peaks[category], live[category])

    for storage, nbytes in trace.storages_preexisting:
        add(storage, nbytes)
    for record in trace.records:
        for storage in record.storages_freed:
            category = tags.get(storage)
            if storage in alive:
                alive.discard(storage)
                if category in host:
                    live[category] -= size[storage]
        for storage, nbytes in record.storages_created:
            add(storage, nbytes)
    return peaks


def phase_work(trace: Trace, phase: str) -> tuple[int, int, int]:
    """(ops, FLOPs, bytes read and written) of ``trace``'s ops in ``phase``."""
    ops = [r for r in trace.records if r.phase == phase]
    return (len(ops), sum(r.flops for r in ops),
            sum(r.bytes_read + r.bytes_written for r in ops))
