"""Pure functions from a Trace to totals: by module (a tree), by category, by phase, the
backward/forward ratio, and the count set against 6·N·D.

Every total is a plain sum over op records, so the root of the module tree equals the sum of
the records (a test holds it).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tensorledger.costs.registry import CATEGORIES
from tensorledger.summary import show_count, show_flops, summary
from tensorledger.trace.modules import group_repeats
from tensorledger.trace.records import PHASES, ROOT, OpRecord, Trace, is_norm_class

__all__ = [
    "CategoryTotal",
    "ClassTotal",
    "CollectiveTotal",
    "HandAttention",
    "ModuleNode",
    "Norms",
    "PhaseTotal",
    "SixND",
    "TraceSummary",
    "UnhalvedAttention",
    "backward_forward_ratio",
    "by_category",
    "by_module",
    "by_phase",
    "class_total",
    "communication",
    "group_modules",
    "hand_attention",
    "norms",
    "summarize",
    "unhalved_attention",
    "versus_6nd",
]


@dataclass(frozen=True)
class CategoryTotal:
    category: str
    ops: int
    flops: int
    flops_causal_halved: int
    bytes_read: int
    bytes_written: int


@dataclass(frozen=True)
class PhaseTotal:
    phase: str
    ops: int
    flops: int
    flops_causal_halved: int
    bytes_read: int
    bytes_written: int


@dataclass(frozen=True)
class ModuleNode:
    """A module and everything under it; ``name`` is the fully qualified path, ROOT ("")
    for the whole step."""

    name: str
    ops: int
    flops: int
    flops_forward: int
    flops_backward: int
    flops_optimizer: int
    flops_other: int
    bytes_read: int
    bytes_written: int
    children: tuple[ModuleNode, ...]
    count: int = 1  # modules summed here: 12 for ``blocks.{0..11}`` (see group_modules)

    def find(self, name: str) -> ModuleNode | None:
        """The node of a module path under this one, or None."""
        if self.name == name:
            return self
        for child in self.children:
            if name == child.name or name.startswith(child.name + "."):
                return child.find(name)
        return None

    def __repr__(self) -> str:
        return summary("ModuleNode", repr(self.name), show_count(self.ops, "ops"),
                       show_flops(self.flops), show_count(len(self.children), "children"))


@dataclass(frozen=True)
class SixND:
    """The counted total against the 6·N·D rule of thumb."""

    params: int
    tokens: int
    six_n_d_flops: int
    counted_flops: int
    ratio: float  # counted / 6·N·D
    active_params: int | None = None  # a mixture of experts: N of the experts a token runs

    @property
    def active_ratio(self) -> float | None:
        """counted / 6·N_active·D, for a mixture of experts."""
        if self.active_params is None or not self.tokens or not self.active_params:
            return None
        return self.counted_flops / (6 * self.active_params * self.tokens)


@dataclass(frozen=True)
class TraceSummary:
    """What the ``trace`` command shows."""

    device: str
    attention_convention: str
    ops: int
    flops: int
    flops_causal_halved: int
    bytes_read: int
    bytes_written: int
    backward_forward_ratio: float
    by_category: tuple[CategoryTotal, ...]
    by_phase: tuple[PhaseTotal, ...]
    modules: ModuleNode
    uncovered: dict[str, int]
    six_n_d: SixND | None
    hand_attention: HandAttention | None = None  # attention written as bmm + softmax
    norms: Norms | None = None  # norm modules that ran, and their ops
    unhalved_attention: UnhalvedAttention | None = None  # fused, without a causal flag
    communication: tuple[CollectiveTotal, ...] = ()  # the collectives this rank issued
    program: str = ""  # the target whose program was traced, and its optimizer kernel
    attention: tuple[AttentionKernel, ...] = ()  # the kernel each attention module ran
    assumptions: tuple[str, ...] = ()  # what the trace decided that tensor values would have

    def phase_flops(self) -> dict[str, int]:
        """FLOPs by phase (``forward``, ``backward``, ...), the phases that ran."""
        return {p.phase: p.flops for p in self.by_phase}

    def category_flops(self) -> dict[str, int]:
        """FLOPs by op category (``matmul``, ``attention``, ...), largest first."""
        return {c.category: c.flops for c in self.by_category}

    def __repr__(self) -> str:
        ratio = "" if self.six_n_d is None else f"{self.six_n_d.ratio:.3f} × 6·N·D"
        return summary("TraceSummary", show_count(self.ops, "ops"), show_flops(self.flops),
                       ratio, show_count(len(self.uncovered), "uncovered"))

    def __rich__(self) -> object:  # rich: the command's tables, from the presentation layer
        from tensorledger.display import view

        return view("rich", self)

    def _repr_html_(self) -> str:  # Jupyter: the same tables as HTML, from presentation
        from tensorledger.display import view

        return str(view("html", self))


@dataclass(frozen=True)
class Norms:
    """The norm modules a step ran (by class name: ``LayerNorm``, ``LlamaRMSNorm``, ...) and
    the ops inside them, fused (``native_layer_norm``) or written out (pow, mean, rsqrt, mul:
    the recorder files those under ``normalization`` too)."""

    modules: int
    classes: tuple[tuple[str, int], ...]  # (class name, modules), most first
    ops: int  # their normalization ops (not the casts and views beside them)
    flops: int


def norms(trace: Trace) -> Norms | None:
    """The norm modules that ran at least one op, or ``None`` when there are none."""
    ran = {r.module for r in trace.records if r.module != ROOT
           and is_norm_class(trace.module_classes.get(r.module, ""))}
    if not ran:
        return None
    inside = [r for r in trace.records if r.module in ran and r.category == "normalization"]
    classes: dict[str, int] = {}
    for module in ran:
        name = trace.module_classes[module]
        classes[name] = classes.get(name, 0) + 1
    return Norms(modules=len(ran), classes=tuple(sorted(classes.items(),
                                                        key=lambda c: (-c[1], c[0]))),
                 ops=len(inside), flops=sum(r.flops for r in inside))


#: Softmax ops: a module that runs one beside batched matmuls computes attention by hand.
_SOFTMAX = ("aten._softmax.", "aten._safe_softmax.", "aten.softmax.")
_BATCHED = ("aten.bmm.", "aten.baddbmm.")


@dataclass(frozen=True)
class HandAttention:
    """Attention written as ``bmm`` + softmax (eager attention, HF GPT-2 in training): its
    score and value products are plain batched matmuls, so ``flops_causal_halved`` does not
    halve them.  Recognised per module: the batched matmuls (forward and backward) of every
    module whose own forward ops include a softmax."""

    modules: tuple[str, ...]
    ops: int
    flops: int  # counted in full in both conventions


def hand_attention(trace: Trace) -> HandAttention | None:
    """The batched matmuls of attention written by hand, or ``None`` when there are none."""
    modules = {r.module for r in trace.records
               if r.phase == "forward" and r.op.startswith(_SOFTMAX)}
    products = [r for r in trace.records if r.module in modules and r.op.startswith(_BATCHED)]
    if not products:
        return None
    return HandAttention(modules=tuple(sorted(modules)), ops=len(products),
                         flops=sum(r.flops for r in products))


@dataclass(frozen=True)
class UnhalvedAttention:
    """Fused attention ops that ran without a causal flag: no mask, or an explicit mask
    tensor (``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` given ``mask=`` and no
    ``is_causal=True``).  A mask's values are not read, so even a causal one is counted in full
    in both conventions."""

    modules: tuple[str, ...]
    ops: int
    flops: int  # counted in full in both conventions


def unhalved_attention(trace: Trace) -> UnhalvedAttention | None:
    """The attention ops the causal-halved figure does not halve, or ``None``."""
    ops = [r for r in trace.records if r.category == "attention" and r.flops > 0
           and r.flops_causal_halved == r.flops]
    if not ops:
        return None
    return UnhalvedAttention(modules=tuple(sorted({r.module for r in ops})), ops=len(ops),
                             flops=sum(r.flops for r in ops))


def _sums(records: Iterable[OpRecord]) -> tuple[int, int, int, int, int]:
    ops = flops = halved = read = written = 0
    for r in records:
        ops += 1
        flops += r.flops
        halved += r.flops_causal_halved
        read += r.bytes_read
        written += r.bytes_written
    return ops, flops, halved, read, written


def by_category(trace: Trace) -> tuple[CategoryTotal, ...]:
    """Totals per category present in the trace, most FLOPs first."""
    groups: dict[str, list[OpRecord]] = {}
    for r in trace.records:
        groups.setdefault(r.category, []).append(r)
    totals = [CategoryTotal(c, *_sums(groups[c])) for c in CATEGORIES if c in groups]
    return tuple(sorted(totals, key=lambda t: (-t.flops, -t.bytes_read - t.bytes_written)))


def by_phase(trace: Trace) -> tuple[PhaseTotal, ...]:
    """Totals per phase present in the trace, in the order forward, backward, optimizer,
    other."""
    groups: dict[str, list[OpRecord]] = {}
    for r in trace.records:
        groups.setdefault(r.phase, []).append(r)
    return tuple(PhaseTotal(p, *_sums(groups[p])) for p in PHASES if p in groups)


@dataclass(frozen=True)
class ClassTotal:
    """The ops run inside every module of one class (and the modules under them), by phase:
    what a kind of module costs wherever it sits (QLoRA's ``NF4Dequantize``)."""

    module_class: str
    modules: int  # distinct module paths of the class that ran an op
    ops: int
    forward_flops: int
    backward_flops: int
    bytes_read: int
    bytes_written: int

    @property
    def flops(self) -> int:
        return self.forward_flops + self.backward_flops

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


def class_total(trace: Trace, module_class: str) -> ClassTotal | None:
    """The totals of the ops inside modules of class ``module_class``; None if none ran.

    >>> from tensorledger.trace.records import Trace
    >>> class_total(Trace(records=(), uncovered={}, device="meta"), "NF4Dequantize") is None
    True
    """
    paths = [path for path, kind in trace.module_classes.items() if kind == module_class]
    if not paths:
        return None
    inside = tuple(path + "." for path in paths)
    ran = set()
    ops = forward = backward = read = written = 0
    for r in trace.records:
        if r.module not in paths and not r.module.startswith(inside):
            continue
        ran.add(next(p for p in paths if r.module == p or r.module.startswith(p + ".")))
        ops += 1
        forward += r.flops if r.phase == "forward" else 0
        backward += r.flops if r.phase == "backward" else 0
        read += r.bytes_read
        written += r.bytes_written
    if not ops:
        return None
    return ClassTotal(module_class, len(ran), ops, forward, backward, read, written)


def backward_forward_ratio(trace: Trace) -> float:
    """Backward FLOPs over forward FLOPs (nan when nothing ran forward)."""
    forward = sum(r.flops for r in trace.records if r.phase == "forward")
    backward = sum(r.flops for r in trace.records if r.phase == "backward")
    return backward / forward if forward else math.nan


class _Builder:
    __slots__ = ("children", "counts", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.counts = [0] * 8  # ops, flops, fwd, bwd, opt, other, read, written
        self.children: dict[str, _Builder] = {}

    def add(self, r: OpRecord) -> None:
        c = self.counts
        c[0] += 1
        c[1] += r.flops
        c[2 + PHASES.index(r.phase)] += r.flops
        c[6] += r.bytes_read
        c[7] += r.bytes_written

    def freeze(self) -> ModuleNode:
        children = sorted((b.freeze() for b in self.children.values()),
                          key=lambda n: (-n.flops, n.name))
        ops, flops, forward, backward, optimizer, other, read, written = self.counts
        return ModuleNode(self.name, ops, flops, forward, backward, optimizer, other, read,
                          written, tuple(children))


def by_module(trace: Trace, depth: int | None = None) -> ModuleNode:
    """The module tree; each node holds the totals of its subtree, forward and backward apart.
    ``depth`` folds deeper modules into their ancestor at that depth (1: outermost modules)."""
    root = _Builder(ROOT)
    for r in trace.records:
        root.add(r)
        if r.module == ROOT:
            continue
        parts = r.module.split(".")
        if depth is not None:
            parts = parts[:depth]
        node = root
        for i in range(len(parts)):
            path = ".".join(parts[: i + 1])
            child = node.children.get(path)
            if child is None:
                child = node.children[path] = _Builder(path)
            child.add(r)
            node = child
    return root.freeze()


def _signature(node: ModuleNode) -> Hashable:
    """A node's FLOPs by phase and the same of its children, named relative to it.  Op
    counts and bytes may differ between equal blocks (the first block's input is a leaf:
    autograd accumulates into it) and are summed, not compared."""
    prefix = len(node.name) + 1
    return (node.flops_forward, node.flops_backward, node.flops_optimizer, node.flops_other,
            tuple(sorted((c.name[prefix:], _signature(c)) for c in node.children)))


def _merge(label: str, nodes: Sequence[ModuleNode]) -> ModuleNode:
    """One node for ``nodes`` (equal signatures): figures summed, children merged by their
    relative names, then grouped in turn."""
    first = nodes[0]
    children = []
    for child in first.children:
        relative = child.name[len(first.name) + 1:]
        same = [next(c for c in n.children if c.name[len(n.name) + 1:] == relative)
                for n in nodes]
        children.append(_merge(f"{label}.{relative}", same))
    return ModuleNode(
        name=label,
        ops=sum(n.ops for n in nodes),
        flops=sum(n.flops for n in nodes),
        flops_forward=sum(n.flops_forward for n in nodes),
        flops_backward=sum(n.flops_backward for n in nodes),
        flops_optimizer=sum(n.flops_optimizer for n in nodes),
        flops_other=sum(n.flops_other for n in nodes),
        bytes_read=sum(n.bytes_read for n in nodes),
        bytes_written=sum(n.bytes_written for n in nodes),
        children=_grouped_children(children),
        count=sum(n.count for n in nodes),
    )


def _grouped_children(children: Sequence[ModuleNode]) -> tuple[ModuleNode, ...]:
    grouped = group_repeats([c.name for c in children], [_signature(c) for c in children])
    out = [_merge(label, [children[i] for i in members]) if len(members) > 1
           else _regroup(children[members[0]]) for label, members in grouped]
    return tuple(sorted(out, key=lambda n: (-n.flops, n.name)))


def _regroup(node: ModuleNode) -> ModuleNode:
    return ModuleNode(node.name, node.ops, node.flops, node.flops_forward, node.flops_backward,
                      node.flops_optimizer, node.flops_other, node.bytes_read,
                      node.bytes_written, _grouped_children(node.children), node.count)


def group_modules(root: ModuleNode) -> ModuleNode:
    """The module tree with repeated siblings folded: ``blocks.0`` … ``blocks.11`` with equal
    FLOPs (by phase, theirs and their children's) become one node ``blocks.{0..11}``
    (``count`` 12) holding their sums, its children ``blocks.{0..11}.attn``, … merged the
    same way.  Every node still includes the modules
    under it, so the root is unchanged."""
    return _regroup(root)


def versus_6nd(trace: Trace, params: int, tokens: int, active: int | None = None) -> SixND:
    """Counted FLOPs against 6·N·D for N parameters and D tokens (and N_active of a mixture
    of experts beside)."""
    six_n_d = 6 * params * tokens
    counted = trace.flops
    return SixND(params, tokens, six_n_d, counted, counted / six_n_d if six_n_d else math.nan,
                 active)


@dataclass(frozen=True)
class CollectiveTotal:
    """The collectives of one kind, phase and group that a rank issued, summed."""

    phase: str
    kind: str
    group_size: int
    calls: int
    size_bytes: int  # S summed: the buffers (nccl-tests convention)
    bytes_sent: int  # this rank's share, ring convention
    bytes_received: int
    mesh_dim: str = ""  # the device-mesh dimension of the group, where known


def communication(trace: Trace, mesh_dims: Mapping[int | tuple[int, int], str] | None = None
                  ) -> tuple[CollectiveTotal, ...]:
    """The trace's collectives summed by (phase, kind, group size, mesh dimension), in phase
    order; ``mesh_dims`` names a group by how far apart its ranks lie (rank stride → name), or
    by its stride and size together (a flattened group: (1, 8) → 'fsdp·ep').

    >>> communication(Trace(records=(), uncovered={}, device="meta"))
    ()
    """
    names = mesh_dims or {}
    sums: dict[tuple[str, str, int, str], list[int]] = {}
    for record in trace.records:
        c = record.collective
        if c is None:
            continue
        dim = names.get((c.rank_stride, c.group_size), names.get(c.rank_stride, ""))
        key = (record.phase, c.kind, c.group_size, dim)
        row = sums.setdefault(key, [0, 0, 0, 0])
        row[0] += 1
        row[1] += c.size_bytes
        row[2] += c.bytes_sent
        row[3] += c.bytes_received
    order = {phase: i for i, phase in enumerate(PHASES)}
    return tuple(CollectiveTotal(phase, kind, group, calls=row[0], size_bytes=row[1],
                                 bytes_sent=row[2], bytes_received=row[3], mesh_dim=dim)
                 for (phase, kind, group, dim), row
                 in sorted(sums.items(), key=lambda item: (order.get(item[0][0], len(order)),
                                                           item[0][1], item[0][2], item[0][3])))


@dataclass(frozen=True)
class AttentionKernel:
    """The attention kernel some modules ran, and why it was that one (trace.kernels)."""

    kernel: str  # flash, efficient, math, cpu-flash
    reason: str
    modules: str  # their paths, repeated ones as ``blocks.{0..11}.attn``
    count: int  # modules


def attention_kernels(trace: Trace) -> tuple[AttentionKernel, ...]:
    """Each attention kernel the trace's modules ran, with the reason, modules folded.

    >>> t = Trace(records=(), uncovered={}, device="fake", attention_kernels=(
    ...     ("M.blocks.0.attn", "flash", "bf16"), ("M.blocks.1.attn", "flash", "bf16")))
    >>> attention_kernels(t)
    (AttentionKernel(kernel='flash', reason='bf16', modules='M.blocks.{0..1}.attn', count=2),)
    """
    choices = list(dict.fromkeys(trace.attention_kernels))
    return tuple(AttentionKernel(choices[members[0]][1], choices[members[0]][2], label,
                                 len(members))
                 for label, members in group_repeats([m for m, _, _ in choices],
                                                     [(k, r) for _, k, r in choices]))


def summarize(trace: Trace, depth: int | None = None, params: int | None = None,
              tokens: int | None = None,
              mesh_dims: Mapping[int | tuple[int, int], str] | None = None,
              program: str = "", assumptions: tuple[str, ...] = (),
              active_params: int | None = None) -> TraceSummary:
    """Everything the ``trace`` command prints, from one trace; ``program`` names the target
    whose program it is."""
    ops, flops, halved, read, written = _sums(trace.records)
    return TraceSummary(
        device=trace.device,
        attention_convention=trace.attention_convention,
        ops=ops,
        flops=flops,
        flops_causal_halved=halved,
        bytes_read=read,
        bytes_written=written,
        backward_forward_ratio=backward_forward_ratio(trace),
        by_category=by_category(trace),
        by_phase=by_phase(trace),
        modules=group_modules(by_module(trace, depth)),
        uncovered=dict(trace.uncovered),
        six_n_d=versus_6nd(trace, params, tokens, active_params) if params and tokens else None,
        hand_attention=hand_attention(trace),
        norms=norms(trace),
        unhalved_attention=unhalved_attention(trace),
        communication=communication(trace, mesh_dims),
        program=program,
        attention=attention_kernels(trace),
        assumptions=assumptions,
    )
