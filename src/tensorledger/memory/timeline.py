"""The live-memory timeline of a traced training step: every storage, tagged, op by op.

A :class:`~tensorledger.trace.Trace` lists the storages each op created and those freed since
the op before.  :func:`build_timeline` replays them: storages alive before the step are live
from the start, and after op *i* the live set is the set after op *i−1*, less what was freed,
plus what op *i* created.  Each storage carries a category — ``parameter``, ``gradient``,
``optimizer_state`` (the master copy of ``bf16-master`` included), ``saved_activation`` (kept
by autograd for backward) or ``temporary`` (everything else: outputs not saved, workspace of
decomposed ops, the loss) — so the peak comes with what is live at that moment and who made it.

:func:`trace_step_memory` runs one full step under a recorder that also tags the storages:
parameters, gradients and optimizer state from the model and optimizer, saved activations from
``saved_tensors_hooks``.  Nothing in this module depends on the device: meta and fake tensors
have storages with sizes, and that is all it reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from tensorledger.errors import InputError
from tensorledger.memory.step import check_step, lm_loss, prepare_step, step_device
from tensorledger.memory.storage import storage_key
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.trace.recorder import Recorder
from tensorledger.trace.records import Trace

__all__ = ["CATEGORIES", "CUDA_BLOCK_BYTES", "LiveStorage", "MemoryTimeline", "TimelinePoint",
           "build_timeline", "trace_step_memory"]

CATEGORIES = ("parameter", "gradient", "optimizer_state", "saved_activation", "temporary")

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
    total_bytes: int

    def by_category(self) -> dict[str, int]:
        return {c: int(getattr(self, f"{c}_bytes")) for c in CATEGORIES}


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

    @property
    def peak_bytes(self) -> int:
        return self.peak.total_bytes


def _point(index: int, op: str, phase: str, module: str, totals: Mapping[str, int]
           ) -> TimelinePoint:
    return TimelinePoint(index=index, op=op, phase=phase, module=module,
                         parameter_bytes=totals["parameter"], gradient_bytes=totals["gradient"],
                         optimizer_state_bytes=totals["optimizer_state"],
                         saved_activation_bytes=totals["saved_activation"],
                         temporary_bytes=totals["temporary"], total_bytes=sum(totals.values()))


def build_timeline(trace: Trace, tags: Mapping[int, str], top: int = 12) -> MemoryTimeline:
    """Replay the storages of ``trace``; ``tags`` maps storage id → category (else temporary).

    A pure function of the trace and the tags: no tensor is touched.
    """
    unknown = set(tags.values()) - set(CATEGORIES)
    if unknown:
        raise InputError(f"unknown memory categories {sorted(unknown)}; known: "
                         f"{', '.join(CATEGORIES)}")
    size: dict[int, int] = {}
    origin: dict[int, tuple[str, str, str]] = {}
    totals = dict.fromkeys(CATEGORIES, 0)
    live: set[int] = set()
    for storage, nbytes in trace.storages_preexisting:
        size[storage] = nbytes
        origin[storage] = ("", "", "")
        live.add(storage)
        totals[tags.get(storage, "temporary")] += nbytes
    start = _point(-1, "", "", "", totals)
    rounded = sum(_blocks(size[s]) for s in live)
    allocator_peak = rounded
    points: list[TimelinePoint] = []
    peak, peak_live = start, set(live)
    for record in trace.records:
        for storage in record.storages_freed:
            if storage in live:
                live.discard(storage)
                totals[tags.get(storage, "temporary")] -= size[storage]
                rounded -= _blocks(size[storage])
        for storage, nbytes in record.storages_created:
            size[storage] = nbytes
            origin[storage] = (record.op, record.module, record.phase)
            live.add(storage)
            totals[tags.get(storage, "temporary")] += nbytes
            rounded += _blocks(nbytes)
        point = _point(record.index, record.op, record.phase, record.module, totals)
        points.append(point)
        allocator_peak = max(allocator_peak, rounded)
        if point.total_bytes > peak.total_bytes:
            peak, peak_live = point, set(live)
    largest = sorted(peak_live, key=lambda s: (-size[s], s))[:top]
    return MemoryTimeline(
        points=tuple(points), start=start, peak=peak,
        live_at_peak=tuple(LiveStorage(storage_id=s, nbytes=size[s],
                                       category=tags.get(s, "temporary"), op=origin[s][0],
                                       module=origin[s][1], phase=origin[s][2])
                           for s in largest),
        storages=len(size), allocator_peak_bytes=allocator_peak)


def _blocks(nbytes: int) -> int:
    """Bytes the CUDA caching allocator reserves for a request: whole 512-byte blocks."""
    return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES


class _TaggingRecorder(Recorder):
    """A trace recorder that also remembers which storages are which kind of memory."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[int, str] = {}

    def tag(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        for tensor in tensors:
            known = self._live.get(storage_key(tensor))
            if known is not None:
                self.tags.setdefault(known[0], category)


def trace_step_memory(config: TransformerConfig, batch: int, seq_len: int,
                      optimizer: str = "adamw", precision: str = "fp32", device: str = "fake",
                      checkpointed: bool = False) -> tuple[Trace, MemoryTimeline]:
    """Trace one full training step (forward, loss, backward, optimizer step) and its memory.

    >>> from tensorledger.napkin.transformer import get_preset, parameter_count
    >>> _, timeline = trace_step_memory(get_preset("tiny"), 1, 8, "sgd", "fp32", "meta")
    >>> timeline.peak.parameter_bytes == 4 * parameter_count(get_preset("tiny")).total_params
    True
    """
    optimizer, precision = check_step(batch, seq_len, optimizer, precision)
    with step_device(device) as target:
        model, recipe, tokens, targets = prepare_step(config, batch, seq_len, optimizer,
                                                      precision, target, checkpointed)
        params = list(recipe.params)
        param_keys = {storage_key(p) for p in params}
        recorder = _TaggingRecorder()

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            if storage_key(tensor) not in param_keys:
                recorder.tag([tensor], "saved_activation")
            return tensor

        on_cuda = torch.device(target).type == "cuda"
        if on_cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with recorder:
            recorder.tag(params, "parameter")
            with recipe.autocast(torch.device(target).type), \
                    torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = lm_loss(model, tokens, targets)
            loss.backward()  # type: ignore[no-untyped-call]
            recorder.tag(params, "parameter")
            recorder.tag((p.grad for p in params if p.grad is not None), "gradient")
            recipe.step()
            recorder.tag(params, "parameter")
            recorder.tag(recipe.master_tensors(), "optimizer_state")
            recorder.tag(recipe.state_tensors(), "optimizer_state")
        measured = None
        if on_cuda:
            torch.cuda.synchronize()
            measured = int(torch.cuda.max_memory_allocated())
    trace = recorder.trace
    timeline = build_timeline(trace, recorder.tags)
    return trace, dataclasses.replace(timeline, measured_peak_bytes=measured)
