"""Memory of a training step, from its trace: the live-memory timeline by category, the peak,
the ledger of state and activations set beside napkin's closed forms, and whether it fits.

A pure analysis: it runs no step (the workload layer traces the step and tags its storages).
"""

from __future__ import annotations

from tensorledger.memory.ledger import Fit, MemoryLedger, StepFacts, memory_ledger
from tensorledger.memory.timeline import (
    CUDA_BLOCK_BYTES,
    MEMORY_CATEGORIES,
    LiveStorage,
    MemoryTimeline,
    PhaseSpan,
    TimelinePoint,
    build_timeline,
    phase_spans,
)

__all__ = [
    "CUDA_BLOCK_BYTES",
    "MEMORY_CATEGORIES",
    "Fit",
    "LiveStorage",
    "MemoryLedger",
    "MemoryTimeline",
    "PhaseSpan",
    "StepFacts",
    "TimelinePoint",
    "build_timeline",
    "memory_ledger",
    "phase_spans",
]
