"""What a trace is made of: one frozen record per aten op, and the trace that holds them.

Storage bookkeeping (for memory timelines): every untyped storage the trace meets gets a
small integer id, stable for the life of the storage (the address of a freed storage can be
reused; the id is not).  A record lists the storages its outputs created and the storages
freed since the previous record (freed before the end of this op); storages alive before the
trace started are listed in :attr:`Trace.storages_preexisting` when first seen.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tensorledger.summary import show_bytes, show_count, show_flops, summary

__all__ = ["ATTENTION_CONVENTIONS", "PHASES", "ROOT", "CollectiveInfo", "OpRecord", "Shape",
           "Trace", "is_norm_class"]

#: The module path of ops that ran outside every module (loss, optimizer, glue code).
ROOT = ""

PHASES = ("forward", "backward", "optimizer", "other")

#: ``full`` counts every (query, key) pair of causal attention; ``causal-halved`` counts half.
ATTENTION_CONVENTIONS = ("full", "causal-halved")

Shape = tuple[int, ...]


def is_norm_class(name: str) -> bool:
    """A module class that normalises: ``LayerNorm``, ``RMSNorm``, ``LlamaRMSNorm``,
    ``GroupNorm``, ``BatchNorm1d``, ...

    >>> is_norm_class("LlamaRMSNorm"), is_norm_class("Linear")
    (True, False)
    """
    return _NORM_CLASS.search(name) is not None


_NORM_CLASS = re.compile(r"Norm(\d+d)?$")  # not "PreNormBlock": a block is no norm


@dataclass(frozen=True, slots=True)
class CollectiveInfo:
    """What one collective moved between ranks, as this rank saw it.

    ``size_bytes`` is S in the nccl-tests convention (the all-reduced buffer, the whole gathered
    or reduce-scattered array, one rank's all-to-all send buffer); ``bytes_sent`` and
    ``bytes_received`` are this rank's share in the ring convention of
    :mod:`tensorledger.costs.collectives` (all-gather: S·(N−1)/N; all-reduce: 2·S·(N−1)/N).
    """

    kind: str  # "all-reduce", "all-gather", ...: tensorledger.costs.collectives.COLLECTIVE_KINDS
    group_size: int  # N, ranks in the process group
    size_bytes: int  # S
    bytes_sent: int
    bytes_received: int
    rank_stride: int = 1  # spacing of the group's ranks in the world: where it lies on nodes
    # a send's or receive's two ends in the world (this rank, the other): the link between
    # them; () for a collective of the whole group, or a peer that cannot be told
    ends: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One aten op as it ran: where, on what, and at what cost."""

    index: int
    op: str  # "aten.mm.default"
    module: str  # fully qualified: "Transformer.layers.0.attn"; ROOT ("") outside modules
    phase: str  # one of PHASES
    category: str  # one of tensorledger.costs.CATEGORIES
    input_shapes: tuple[Shape, ...]
    input_dtypes: tuple[str, ...]
    output_shapes: tuple[Shape, ...]
    output_dtypes: tuple[str, ...]
    flops: int  # causal attention counted in full
    bytes_read: int
    bytes_written: int
    covered: bool  # False: no cost rule, flops is 0 and the op is listed in Trace.uncovered
    flops_causal_halved: int  # equal to flops except for causal attention (half)
    storages_created: tuple[tuple[int, int], ...]  # (storage id, nbytes)
    storages_freed: tuple[int, ...]  # storage ids freed since the previous record
    collective: CollectiveInfo | None = None  # set for collectives, None for every other op
    # run again in backward by activation checkpointing: a forward op inside a backward (its
    # FLOPs count in the hardware FLOPs utilisation, not in the model's)
    recomputed: bool = False
    # the elements of its kernel's inner loop where its operands' layouts cut the output into
    # many (``trace.layout.inner_loop``); 0: one loop over the whole output
    inner_loop: int = 0
    # the kernel a non-tensor argument chose, where it changes the rate: "tanh" for GELU's
    # tanh approximation (4 times slower than the exact one in bf16 on a CPU); "" for the rest
    variant: str = ""

    @property
    def bytes(self) -> int:
        """Bytes moved: read plus written."""
        return self.bytes_read + self.bytes_written

    def __repr__(self) -> str:
        where = f" in {self.module}" if self.module else ""
        return summary("OpRecord", f"#{self.index} {self.op} ({self.phase}{where})",
                       self.category, show_flops(self.flops), show_bytes(self.bytes),
                       "" if self.covered else "uncovered")


@dataclass(frozen=True)
class Trace:
    """Every op of a step, in order, with what was not covered and how it was counted."""

    records: tuple[OpRecord, ...]
    uncovered: Mapping[str, int]  # op → calls, for ops with no cost rule
    device: str  # "meta", "cpu", "cuda", "fake:cpu", ...
    attention_convention: str = "full"  # what OpRecord.flops uses; see ATTENTION_CONVENTIONS
    storages_preexisting: tuple[tuple[int, int], ...] = ()  # (id, nbytes) alive before
    storages_freed_at_end: tuple[int, ...] = ()  # freed after the last op, before the end
    module_classes: Mapping[str, str] = field(default_factory=dict)  # module path → class
    # (module, kernel, why) of each attention call's kernel (trace.kernels), once each
    attention_kernels: tuple[tuple[str, str, str], ...] = ()

    @property
    def flops(self) -> int:
        """Total FLOPs, causal attention counted in full."""
        return sum(r.flops for r in self.records)

    @property
    def flops_causal_halved(self) -> int:
        """Total FLOPs with causal attention halved (the Megatron-LM convention)."""
        return sum(r.flops_causal_halved for r in self.records)

    @property
    def bytes(self) -> int:
        """Total bytes read and written."""
        return sum(r.bytes_read + r.bytes_written for r in self.records)

    def __repr__(self) -> str:
        return summary("Trace", show_count(len(self.records), "ops"), show_flops(self.flops),
                       show_bytes(self.bytes) + " moved",
                       show_count(len(self.uncovered), "uncovered"), f"on {self.device}")

    def _repr_html_(self) -> str:  # Jupyter: its totals as a table, from presentation
        from tensorledger.display import view

        return str(view("html", self))
