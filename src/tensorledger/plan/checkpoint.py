"""Activation-checkpointing policies: what each keeps, what it recomputes, and the best under a
memory budget — predicted from one trace of the step *without* checkpointing.

A model is a chain of L blocks (``model.blocks``).  A policy checkpoints *segments* of
consecutive blocks (each segment one ``torch.utils.checkpoint`` call, recomputed whole in
backward: ``early_stop=False``) either fully or *selectively* (torch's selective checkpoint
contexts: the outputs of matmul and attention ops are kept, the cheap ops between them
recomputed); blocks outside every segment keep what autograd saves.  Applying a policy to a
module is :mod:`tensorledger.workload.checkpointing`'s work; tracing it to check the
prediction, :mod:`tensorledger.ledger.checkpointing`'s.

What the trace measures, per block i (:func:`profile_blocks`):

- ``input_bytes`` x_i: the block's input, i.e. the storage the previous block created last
  (its output); ``input_saved`` when autograd saved it (the block's first op does, as a matmul
  or a norm does);
- ``interior_bytes`` a_i: saved-for-backward storages the block created, its output excepted;
- ``must_save_bytes`` m_i: the outputs of its matmul and attention ops (what selective
  checkpointing caches);
- ``forward_flops`` f_i and ``cheap_flops`` c_i (its ops other than matmul and attention), with
  their predicted times (the roofline's, passed in per op);
- ``backward_overhead_bytes`` h_i: the most bytes live while its backward runs, less what the
  blocks before it and the outside keep (its own saved tensors, gradients, temporaries).

Outside the blocks: ``outside_bytes`` O, saved storages the blocks did not create (the model's
input or the embedding output, the loss's log-softmax, ...) plus the last block's output;
``outside_early_bytes`` the part freed before the blocks' backward starts (the loss's), O_late
the rest; ``overhead_bytes`` H the most bytes live before the blocks' backward that are
neither kept by the blocks nor O_late (parameters, optimizer state, the loss's temporaries).

The prediction (:func:`predict_policy`), with K the bytes the blocks keep::

    K = Σ_{kept blocks} (a_i + x_i·[input saved]) + Σ_{segments} (x_start + Σ m_i if selective)
    saved = O + K
    peak  = max(H + O_late + K,                                       the start of backward
                max_{kept block i} h_i + O_late + K_{<i},              its backward
                max_{segment g, i in g} O_late + K_{<g} + x_start      its recomputation
                                        + Σ_{start≤j<i} (a_j + x_j) + h_i)

(``K_{<i}``: what the blocks before i keep; when a block runs backward, everything after it has
been freed.)  Recompute FLOPs are Σ f_i over fully and Σ c_i over selectively checkpointed
blocks, and the recompute time the sum of those ops' times.  Selective segments' peak counts
the cached outputs beside the recomputed insides, an upper bound where they coincide.

>>> profile = synthetic_profile(4, input_bytes=10, interior_bytes=30, forward_flops=100)
>>> [predict_policy(profile, p).saved_bytes for p in (no_checkpointing(4), every_block(4))]
[150, 30]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tensorledger.errors import InputError
from tensorledger.trace.records import Trace

__all__ = ["KEPT_CATEGORIES", "MODES", "BlockProfile", "CheckpointPolicy", "CheckpointPrediction",
           "CheckpointProfile", "Segment", "block_paths", "every_block", "every_kth_block",
           "kept_for_backward_bytes", "no_checkpointing", "optimal_under_budget",
           "predict_policy", "profile_blocks", "selective", "sqrt_segments",
           "standard_policies", "synthetic_profile"]

#: ``full``: the segment keeps its inputs only; ``selective``: also its matmul/attention outputs.
MODES = ("full", "selective")

#: Op categories whose outputs selective checkpointing keeps (the expensive ops).
KEPT_CATEGORIES = ("matmul", "attention")


@dataclass(frozen=True)
class Segment:
    """Blocks ``start`` to ``stop - 1`` recomputed together in backward."""

    start: int
    stop: int
    mode: str = "full"  # one of MODES


@dataclass(frozen=True)
class CheckpointPolicy:
    """Which segments of an ``n_blocks`` chain are checkpointed; other blocks keep their own."""

    name: str
    n_blocks: int
    segments: tuple[Segment, ...]

    def __post_init__(self) -> None:
        previous = 0
        for seg in self.segments:
            if seg.mode not in MODES:
                raise InputError(f"checkpoint mode {seg.mode!r} unknown; known: "
                                 f"{', '.join(MODES)}")
            if not previous <= seg.start < seg.stop <= self.n_blocks:
                raise InputError(f"segment [{seg.start}, {seg.stop}) is not an ordered, "
                                 f"non-empty part of blocks 0..{self.n_blocks - 1}")
            previous = seg.stop

    @property
    def checkpointed_blocks(self) -> tuple[int, ...]:
        return tuple(i for seg in self.segments for i in range(seg.start, seg.stop))


@dataclass(frozen=True)
class BlockProfile:
    """One block as the un-checkpointed trace measured it (see the module docstring)."""

    path: str
    input_bytes: int
    input_saved: bool
    interior_bytes: int
    must_save_bytes: int
    forward_flops: int
    cheap_flops: int
    forward_time_s: float
    cheap_time_s: float
    backward_overhead_bytes: int = 0  # live but not saved while its backward runs (grads, ...)


@dataclass(frozen=True)
class CheckpointProfile:
    """Everything a policy's prediction needs, measured once."""

    blocks: tuple[BlockProfile, ...]
    outside_bytes: int
    outside_early_bytes: int
    overhead_bytes: int
    hardware: str


@dataclass(frozen=True)
class CheckpointPrediction:
    """What a policy keeps, its peak, and what it recomputes (FLOPs, roofline seconds)."""

    policy: CheckpointPolicy
    saved_bytes: int  # kept for backward at the end of the forward
    peak_bytes: int
    recompute_flops: int
    recompute_time_s: float


# ---- policies ---------------------------------------------------------------------------------
def _blocks(n_blocks: int) -> int:
    if isinstance(n_blocks, bool) or not isinstance(n_blocks, int) or n_blocks < 1:
        raise InputError(f"a policy needs a whole number of blocks >= 1, got {n_blocks!r}")
    return n_blocks


def no_checkpointing(n_blocks: int) -> CheckpointPolicy:
    """Every block keeps what autograd saves; nothing is recomputed."""
    return CheckpointPolicy("none", _blocks(n_blocks), ())


def every_block(n_blocks: int) -> CheckpointPolicy:
    """Each block its own segment: only block inputs are kept.

    >>> [s.start for s in every_block(3).segments]
    [0, 1, 2]
    """
    n = _blocks(n_blocks)
    return CheckpointPolicy("every block", n, tuple(Segment(i, i + 1) for i in range(n)))


def every_kth_block(n_blocks: int, k: int) -> CheckpointPolicy:
    """Blocks k−1, 2k−1, … checkpointed alone, as torchtitan's ``selective_ac_option = "k"``
    (it counts layers from 1 and wraps those whose count is a multiple of k).

    >>> [s.start for s in every_kth_block(7, 3).segments]
    [2, 5]
    """
    n = _blocks(n_blocks)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"every k-th block needs k >= 1, got {k!r}")
    return CheckpointPolicy(f"every {_ordinal(k)} block", n,
                            tuple(Segment(i, i + 1) for i in range(k - 1, n, k)))


def _ordinal(k: int) -> str:
    """2nd, 3rd, 4th, 11th, 21st.

    >>> [_ordinal(k) for k in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)]
    ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '22nd', '101st']
    """
    if 10 <= k % 100 <= 20:
        return f"{k}th"
    return f"{k}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def sqrt_segments(n_blocks: int) -> CheckpointPolicy:
    """Segments of ⌈√L⌉ blocks, the last one not checkpointed, as
    ``torch.utils.checkpoint.checkpoint_sequential`` does (recomputing the last segment cannot
    lower the peak: its backward starts as soon as its forward ends).

    >>> [(s.start, s.stop) for s in sqrt_segments(10).segments]      # ⌈√10⌉ = 4
    [(0, 4), (4, 8)]
    """
    n = _blocks(n_blocks)
    size = math.isqrt(n - 1) + 1 if n > 1 else 1  # ⌈√n⌉
    starts = range(0, n, size)
    return CheckpointPolicy("sqrt(L) segments", n,
                            tuple(Segment(s, min(s + size, n)) for s in starts
                                  if s + size < n))


def selective(n_blocks: int) -> CheckpointPolicy:
    """Each block selectively checkpointed: matmul and attention outputs kept, the rest
    recomputed (``create_selective_checkpoint_contexts``, as torchtitan's ``op`` option)."""
    n = _blocks(n_blocks)
    return CheckpointPolicy("selective", n,
                            tuple(Segment(i, i + 1, "selective") for i in range(n)))


def standard_policies(n_blocks: int, k: int = 2) -> tuple[CheckpointPolicy, ...]:
    """none, every block, every k-th block, √L segments and selective, for ``n_blocks``."""
    return (no_checkpointing(n_blocks), every_block(n_blocks), every_kth_block(n_blocks, k),
            sqrt_segments(n_blocks), selective(n_blocks))


# ---- measurement ----------------------------------------------------------------------------
def block_paths(trace: Trace, container: str = "blocks") -> tuple[str, ...]:
    """The module paths of the entries of ``<root>.<container>``, in block order.

    >>> from tensorledger.trace.records import Trace
    >>> t = Trace((), {}, "meta", module_classes={"M": "M", "M.blocks.1": "B",
    ...           "M.blocks.0": "B", "M.blocks.0.linear": "Linear"})
    >>> block_paths(t)
    ('M.blocks.0', 'M.blocks.1')
    """
    found: dict[int, str] = {}
    for path in trace.module_classes:
        parts = path.split(".")
        if len(parts) >= 3 and parts[-2] == container and parts[-1].isdigit():
            found.setdefault(int(parts[-1]), path)
    if not found or sorted(found) != list(range(len(found))):
        raise InputError(f"the trace has no module list '.{container}.0', '.{container}.1', ... "
                         "to checkpoint")
    return tuple(found[i] for i in range(len(found)))


def _block_of(module: str, paths: Sequence[str]) -> int | None:
    for i, path in enumerate(paths):
        if module == path or module.startswith(path + "."):
            return i
    return None


def _frees(trace: Trace) -> dict[int, int]:
    """Storage id → the index of the record before which it was freed (end: len(records))."""
    freed = {s: r.index for r in trace.records for s in r.storages_freed}
    for s in trace.storages_freed_at_end:
        freed.setdefault(s, len(trace.records))
    return freed


def kept_for_backward_bytes(trace: Trace, tags: Mapping[int, str]) -> int:
    """Bytes live as backward starts that the step made for it: every storage live just
    before the first backward op, less those alive before the step that autograd did not save
    (parameters, buffers, optimizer state) and gradients.  With checkpointing this is what
    autograd and the checkpoints keep — selective checkpointing's cached outputs included,
    which autograd's saved-tensor hooks never see."""
    first = next((r.index for r in trace.records if r.phase == "backward"), None)
    if first is None:
        raise InputError("the trace has no backward phase: nothing is kept for backward")
    sizes = dict(trace.storages_preexisting)
    live = {s for s, _ in trace.storages_preexisting if tags.get(s) == "saved_activation"}
    for record in trace.records[:first + 1]:
        live.difference_update(record.storages_freed)
        if record.index == first:
            break
        for s, nbytes in record.storages_created:
            sizes[s] = nbytes
            if tags.get(s) not in ("parameter", "gradient", "optimizer_state"):
                live.add(s)
    return sum(sizes[s] for s in live)


def profile_blocks(trace: Trace, tags: Mapping[int, str],
                   op_time_s: Sequence[float] | None = None,
                   paths: Sequence[str] | None = None, hardware: str = "") -> CheckpointProfile:
    """Measure every block of an un-checkpointed training step (see the module docstring).

    ``tags`` are the storage categories of the traced step (``StepTrace.tags``);
    ``op_time_s`` the predicted seconds of each record, by index (the roofline's, on the chip
    named ``hardware``: :func:`tensorledger.ledger.checkpointing.checkpoint_profile` passes
    them; without them times are 0 and policies are compared by FLOPs); ``paths`` the blocks'
    module paths in order (default: :func:`block_paths`).
    """
    if op_time_s is not None and len(op_time_s) != len(trace.records):
        raise InputError(f"{len(op_time_s)} op times for {len(trace.records)} records")
    blocks = tuple(paths) if paths is not None else block_paths(trace)
    if not any(r.phase == "backward" for r in trace.records):
        raise InputError("profiling checkpointing needs a step with a backward pass")
    n = len(blocks)
    saved = {s for s, c in tags.items() if c == "saved_activation"}
    sizes = dict(trace.storages_preexisting)
    created_in: dict[int, int | None] = {}
    last_created: list[int | None] = [None] * n
    must_save = [0] * n
    flops = [0] * n
    cheap = [0] * n
    time_s = [0.0] * n
    cheap_s = [0.0] * n
    first_block_backward = None
    for record in trace.records:
        block = _block_of(record.module, blocks)
        if record.phase == "backward" and block is not None and first_block_backward is None:
            first_block_backward = record.index
        for s, nbytes in record.storages_created:
            sizes[s] = nbytes
            created_in[s] = block if record.phase == "forward" else None
        if record.phase != "forward" or block is None:
            continue
        if record.storages_created:
            last_created[block] = record.storages_created[-1][0]
        op_time = op_time_s[record.index] if op_time_s is not None else 0.0
        flops[block] += record.flops
        time_s[block] += op_time
        if record.category in KEPT_CATEGORIES:
            must_save[block] += sum(nbytes for _, nbytes in record.storages_created)
        else:
            cheap[block] += record.flops
            cheap_s[block] += op_time
    if None in last_created:
        missing = blocks[last_created.index(None)]
        raise InputError(f"block {missing} created no tensor in the forward pass")
    outputs = [s for s in last_created if s is not None]
    interior = [0] * n
    outside = early = 0
    freed = _frees(trace)
    early_storages: set[int] = set()
    for s in saved:
        block = created_in.get(s)
        if block is not None and s != outputs[block]:
            interior[block] += sizes[s]
        elif block is None or s == outputs[-1]:
            outside += sizes[s]
            if first_block_backward is not None and freed.get(s, math.inf) <= (
                    first_block_backward):
                early += sizes[s]
                early_storages.add(s)
    profiles = tuple(BlockProfile(
        path=blocks[i],
        input_bytes=sizes[outputs[i - 1]] if i else 0,
        input_saved=i > 0 and outputs[i - 1] in saved,
        interior_bytes=interior[i], must_save_bytes=must_save[i], forward_flops=flops[i],
        cheap_flops=cheap[i], forward_time_s=time_s[i], cheap_time_s=cheap_s[i])
        for i in range(n))
    owner: dict[int, int | None] = {}  # which block's backward frees a saved storage
    for s in saved:
        block = created_in.get(s)
        if block is not None and s != outputs[block]:
            owner[s] = block
    for i in range(1, n):
        if outputs[i - 1] in saved:
            owner[outputs[i - 1]] = i  # a block's input belongs to the block that saves it
    start, during = _overheads(trace, saved - early_storages, owner, blocks,
                               first_block_backward)
    profiles = tuple(replace(p, backward_overhead_bytes=during[i])
                     for i, p in enumerate(profiles))
    return CheckpointProfile(blocks=profiles, outside_bytes=outside, outside_early_bytes=early,
                             overhead_bytes=start, hardware=hardware)


def _overheads(trace: Trace, saved: set[int], owner: Mapping[int, int | None],
               blocks: Sequence[str], first_block_backward: int | None
               ) -> tuple[int, list[int]]:
    """The most bytes live that are not ``saved`` (parameters, gradients, temporaries and
    what the loss keeps) before the blocks' backward starts; and for each block, the most bytes live
    while its backward runs less what the blocks before it and the outside keep."""
    live = dict(trace.storages_preexisting)
    total = sum(live.values())
    kept = sum(nbytes for s, nbytes in live.items() if s in saved)
    own = [0] * len(blocks)
    start = total - kept
    during = [0] * len(blocks)

    def count(storage: int, nbytes: int) -> None:
        nonlocal kept
        if storage in saved:
            kept += nbytes
            block = owner.get(storage)
            if block is not None:
                own[block] += nbytes

    for record in trace.records:
        for s in record.storages_freed:
            if s in live:
                nbytes = live.pop(s)
                total -= nbytes
                count(s, -nbytes)
        for s, nbytes in record.storages_created:
            live[s] = nbytes
            total += nbytes
            count(s, nbytes)
        if first_block_backward is None or record.index < first_block_backward:
            start = max(start, total - kept)
        elif record.phase == "backward":
            block = _block_of(record.module, blocks)
            if block is not None:
                during[block] = max(during[block], total - kept + own[block])
    return start, during


def synthetic_profile(n_blocks: int, *, input_bytes: int | Sequence[int],
                      interior_bytes: int | Sequence[int], forward_flops: int | Sequence[int],
                      must_save_bytes: int | Sequence[int] = 0,
                      cheap_flops: int | Sequence[int] = 0, outside_bytes: int = 0,
                      outside_early_bytes: int = 0, overhead_bytes: int = 0,
                      backward_extra_bytes: int = 0, flop_per_s: float = 1e12
                      ) -> CheckpointProfile:
    """A profile written by hand (every input saved; times are FLOPs / ``flop_per_s``; while
    a block's backward runs, what it keeps is live beside ``backward_extra_bytes``): for tests
    and for what-if questions about a chain no trace has measured."""
    n = _blocks(n_blocks)

    def each(value: int | Sequence[int]) -> list[int]:
        values = [value] * n if isinstance(value, int) else list(value)
        if len(values) != n:
            raise InputError(f"{len(values)} values given for {n} blocks")
        return values

    x, a, f = each(input_bytes), each(interior_bytes), each(forward_flops)
    m, c = each(must_save_bytes), each(cheap_flops)
    return CheckpointProfile(
        blocks=tuple(BlockProfile(f"blocks.{i}", x[i] if i else 0, i > 0, a[i], m[i], f[i],
                                  c[i], f[i] / flop_per_s, c[i] / flop_per_s,
                                  backward_extra_bytes + a[i] + (x[i] if i else 0))
                     for i in range(n)),
        outside_bytes=outside_bytes, outside_early_bytes=outside_early_bytes,
        overhead_bytes=overhead_bytes, hardware="synthetic")


# ---- prediction ---------------------------------------------------------------------------------
def _plain(block: BlockProfile) -> int:
    """Bytes a block outside every segment keeps: its insides, and its input when saved."""
    return block.interior_bytes + (block.input_bytes if block.input_saved else 0)


def _segment_costs(blocks: Sequence[BlockProfile], seg: Segment
                   ) -> tuple[int, int, int, float]:
    """(bytes kept, the most bytes live in its backward beyond what the blocks before it and
    the outside keep, FLOPs, seconds).  The backward of its block i has back the insides of
    blocks start..i−1 as well as its own (which its ``backward_overhead_bytes`` measured, with
    its gradients and temporaries)."""
    inside = blocks[seg.start:seg.stop]
    first = inside[0]
    kept = first.input_bytes
    flops = sum(b.forward_flops for b in inside)
    time_s = sum(b.forward_time_s for b in inside)
    if seg.mode == "selective":
        kept += sum(b.must_save_bytes for b in inside)
        flops = sum(b.cheap_flops for b in inside)
        time_s = sum(b.cheap_time_s for b in inside)
    # while block i of the segment runs backward, the insides of blocks start..i−1 are back
    # (their inputs too, as the blocks save them) beside its own figure, which counts its own
    # input; the first block's input is what the segment keeps already
    stage = kept - (first.input_bytes if first.input_saved else 0) + first.backward_overhead_bytes
    back = kept + first.interior_bytes
    for block in inside[1:]:
        stage = max(stage, back + block.backward_overhead_bytes)
        back += block.interior_bytes + (block.input_bytes if block.input_saved else 0)
    return kept, stage, flops, time_s


def predict_policy(profile: CheckpointProfile, policy: CheckpointPolicy
                   ) -> CheckpointPrediction:
    """Saved bytes, peak, recompute FLOPs and time of ``policy`` (formula: module docstring).

    >>> p = synthetic_profile(9, input_bytes=10, interior_bytes=30, forward_flops=100)
    >>> r = predict_policy(p, sqrt_segments(9))      # segments [0, 3), [3, 6); 6, 7, 8 kept
    >>> r.saved_bytes, r.recompute_flops           # 0 + 10 + 3·(10 + 30)  and  6·100
    (130, 600)
    """
    blocks = profile.blocks
    if policy.n_blocks != len(blocks):
        raise InputError(f"the policy is for {policy.n_blocks} blocks; the model has "
                         f"{len(blocks)}")
    late_outside = profile.outside_bytes - profile.outside_early_bytes
    kept = stage = flops = 0
    time_s = 0.0
    by_start = {seg.start: seg for seg in policy.segments}
    i = 0
    while i < len(blocks):
        seg = by_start.get(i)
        if seg is None:
            stage = max(stage, blocks[i].backward_overhead_bytes + late_outside + kept)
            kept += _plain(blocks[i])
            i += 1
            continue
        seg_kept, seg_stage, seg_flops, seg_time = _segment_costs(blocks, seg)
        stage = max(stage, late_outside + kept + seg_stage)
        kept += seg_kept
        flops += seg_flops
        time_s += seg_time
        i = seg.stop
    saved = profile.outside_bytes + kept
    return CheckpointPrediction(policy=policy, saved_bytes=saved,
                                peak_bytes=max(profile.overhead_bytes + late_outside + kept,
                                               stage),
                                recompute_flops=flops, recompute_time_s=time_s)


# ---- the best policy under a budget ------------------------------------------------------------
@dataclass(frozen=True)
class _State:
    kept: int
    time_s: float
    flops: int
    segments: tuple[Segment, ...]


def _prune(states: list[_State]) -> list[_State]:
    """The states no other beats on both bytes kept and (time, FLOPs): a staircase."""
    front: list[_State] = []
    for state in sorted(states, key=lambda s: (s.kept, s.time_s, s.flops)):
        if not front or (state.time_s, state.flops) < (front[-1].time_s, front[-1].flops):
            front.append(state)
    return front


def optimal_under_budget(profile: CheckpointProfile, budget_bytes: int,
                         modes: Sequence[str] = MODES) -> CheckpointPrediction:
    """The policy of least recompute time whose predicted peak fits ``budget_bytes``.

    Exact: a dynamic programme over the chain, over every partition of the blocks into kept
    blocks and segments (of any length, in each of ``modes``).  Whether the rest of the chain
    fits depends only on where it starts and on the bytes kept before it (each later stage
    grows with them), so each position holds the states that no other beats on both bytes
    kept and (recompute time, FLOPs); a move whose stage or kept bytes pass the budget is
    dropped.  So it is never slower than none, every block, every k-th block, √L segments or
    selective wherever those fit.  Ties in time go to fewer FLOPs, then to fewer bytes kept.

    >>> p = synthetic_profile(4, input_bytes=10, interior_bytes=30, forward_flops=100)
    >>> best = optimal_under_budget(p, 100, modes=("full",))  # none keeps 150, one block 120
    >>> best.peak_bytes, best.recompute_flops, [(s.start, s.stop) for s in best.policy.segments]
    (80, 200, [(0, 2)])
    """
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0:
        raise InputError(f"a memory budget is a whole number of bytes, got {budget_bytes!r}")
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise InputError(f"checkpoint modes {unknown or '(none)'}; known: {', '.join(MODES)}")
    blocks = profile.blocks
    n = len(blocks)
    late_outside = profile.outside_bytes - profile.outside_early_bytes
    room = budget_bytes - profile.overhead_bytes - late_outside  # for what the blocks keep
    fronts: list[list[_State]] = [[] for _ in range(n + 1)]
    fronts[0] = [_State(0, 0.0, 0, ())] if room >= 0 else []
    for i in range(n):
        fronts[i] = _prune(fronts[i])
        for state in fronts[i]:
            own = _plain(blocks[i])
            stage = blocks[i].backward_overhead_bytes + late_outside + state.kept
            if state.kept + own <= room and stage <= budget_bytes:
                fronts[i + 1].append(_State(state.kept + own, state.time_s, state.flops,
                                            state.segments))
            for stop in range(i + 1, n + 1):
                for mode in modes:
                    seg = Segment(i, stop, mode)
                    seg_kept, seg_stage, seg_flops, seg_time = _segment_costs(blocks, seg)
                    kept = state.kept + seg_kept
                    if kept > room or late_outside + state.kept + seg_stage > budget_bytes:
                        continue
                    fronts[stop].append(_State(kept, state.time_s + seg_time,
                                               state.flops + seg_flops, (*state.segments, seg)))
    fronts[n] = _prune(fronts[n])
    if not fronts[n]:
        least = min((predict_policy(profile, p) for p in standard_policies(n)),
                    key=lambda r: r.peak_bytes)
        raise InputError(f"no checkpointing policy keeps the predicted peak within "
                         f"{budget_bytes:,} bytes; the least of the standard ones is "
                         f"{least.peak_bytes:,} bytes ({least.policy.name}), and at least "
                         f"{profile.overhead_bytes + late_outside:,} bytes are needed "
                         "whatever is checkpointed")
    fastest = min((s.time_s, s.flops) for s in fronts[n])
    candidates = [predict_policy(profile, CheckpointPolicy(
        f"optimal within {budget_bytes:,} bytes", n, s.segments))
        for s in fronts[n] if (s.time_s, s.flops) == fastest]
    return min(candidates, key=lambda r: r.peak_bytes)
