"""A workload's predicted step in the tools people already use: a Chrome/Perfetto trace of the
roofline's per-op times, and the step's allocations in the snapshot format of
``torch.cuda.memory._dump_snapshot`` for PyTorch's memory visualiser.  Formats; the times and
sizes are the analyses' own."""

from __future__ import annotations

import pickle
from typing import Any

from tensorledger.roofline.model import RooflinePrediction
from tensorledger.trace.records import PHASES, Trace

__all__ = ["chrome_trace", "chrome_trace_json", "memory_snapshot", "memory_snapshot_pickle"]

#: The CUDA caching allocator's granularity: addresses in the snapshot are 512-byte aligned.
_BLOCK = 512


def chrome_trace(prediction: RooflinePrediction, title: str) -> dict[str, Any]:
    """One complete event per op, back to back in the order they ran, one track per phase
    (times in microseconds, as the Trace Event Format has them)."""
    tracks = {phase: i + 1 for i, phase in enumerate(PHASES)}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": title}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": phase}}
               for phase, tid in tracks.items()]
    start_us = 0.0
    for op in prediction.ops:
        duration_us = op.time_s * 1e6
        events.append({
            "name": op.op, "cat": op.category, "ph": "X", "pid": 1,
            "tid": tracks.get(op.phase, len(tracks)), "ts": start_us, "dur": duration_us,
            "args": {"module": op.module or "(root)", "phase": op.phase, "flops": op.flops,
                     "bytes": op.bytes, "bound": op.bound}})
        start_us += duration_us
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"hardware": prediction.hardware, "step_time_s": prediction.time_s}}


def chrome_trace_json(prediction: RooflinePrediction, title: str) -> str:
    import json

    return json.dumps(chrome_trace(prediction, title))


def _aligned(nbytes: int) -> int:
    return -(-max(nbytes, 1) // _BLOCK) * _BLOCK


def memory_snapshot(trace: Trace, tags: dict[int, str], step_time_us: float = 0.0
                    ) -> dict[str, Any]:
    """The step's storages as allocator events (device 0): storages alive before the step are
    allocated first, then each op frees what was freed and allocates what it created; every
    storage gets its own address (nothing is reused), so the visualiser shows each one."""
    address: dict[int, int] = {}
    size: dict[int, int] = {}
    events: list[dict[str, Any]] = []
    next_address = 0
    count = max(len(trace.records), 1)

    def frames(op: str, module: str, phase: str) -> list[dict[str, Any]]:
        return [{"filename": module or "(root)", "line": 0, "name": f"{op} ({phase})"}]

    def alloc(storage: int, nbytes: int, where: list[dict[str, Any]], time_us: float) -> None:
        nonlocal next_address
        address[storage], size[storage] = next_address, nbytes
        next_address += _aligned(nbytes)
        events.append({"action": "alloc", "addr": address[storage], "size": nbytes,
                       "stream": 0, "time_us": time_us, "frames": where,
                       "category": tags.get(storage, "temporary")})

    def free(storage: int, time_us: float) -> None:
        for action in ("free_requested", "free_completed"):
            events.append({"action": action, "addr": address[storage], "size": size[storage],
                           "stream": 0, "time_us": time_us, "frames": []})

    live: set[int] = set()
    for storage, nbytes in trace.storages_preexisting:
        alloc(storage, nbytes, frames("before the step", "", ""), 0.0)
        live.add(storage)
    for record in trace.records:
        time_us = step_time_us * record.index / count
        for storage in record.storages_freed:
            if storage in live:
                free(storage, time_us)
                live.discard(storage)
        for storage, nbytes in record.storages_created:
            alloc(storage, nbytes, frames(record.op, record.module, record.phase), time_us)
            live.add(storage)
    for storage in trace.storages_freed_at_end:
        if storage in live:
            free(storage, step_time_us)
            live.discard(storage)
    blocks: list[dict[str, Any]] = []
    cursor = 0
    for storage in sorted(live, key=lambda s: address[s]):
        if address[storage] > cursor:
            blocks.append({"size": address[storage] - cursor, "state": "inactive"})
        blocks.append({"size": _aligned(size[storage]), "requested_size": size[storage],
                       "state": "active_allocated", "frames": []})
        cursor = address[storage] + _aligned(size[storage])
    total = max(next_address, cursor, _BLOCK)
    if cursor < total:
        blocks.append({"size": total - cursor, "state": "inactive"})
    active = sum(_aligned(size[s]) for s in live)
    segment = {"device": 0, "address": 0, "total_size": total, "allocated_size": active,
               "active_size": active, "requested_size": sum(size[s] for s in live),
               "stream": 0, "segment_type": "large", "blocks": blocks}
    return {"segments": [segment], "device_traces": [events]}


def memory_snapshot_pickle(trace: Trace, tags: dict[int, str], step_time_us: float = 0.0
                           ) -> bytes:
    return pickle.dumps(memory_snapshot(trace, tags, step_time_us))
