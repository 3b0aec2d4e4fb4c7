"""Parallel training on a napkin: ZeRO bytes per rank, communication per step, TP/SP
activations and the pipeline bubble.  No torch; the traced layouts are held equal to these.

**ZeRO** (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", §5 and Figure 1): mixed-precision Adam keeps 2 + 2 + K bytes per parameter
(fp16 weights, fp16 gradients, K = 12 of fp32 master weights, momentum and variance).  Stage 1
(P_os) shards the optimizer state across the N data-parallel ranks, stage 2 (P_os+g) the
gradients too, stage 3 (P_os+g+p) the parameters too.  Here every precision recipe of
:mod:`tensorledger.napkin.recipes` gives its own four terms, and the master copy counts as
optimizer state (the paper's K includes it).  Stage 0 is plain data parallelism.

>>> z = zero_bytes(7_500_000_000, 64, 3, "bf16-master", "adam")   # the paper's Ψ = 7.5B, N = 64
>>> z.total_bytes                                                  # 16 · 7.5e9 / 64
1875000000

**Communication** (ZeRO §7; Megatron-LM, Shoeybi et al. 2019, §3): the volumes below are what
each rank *sends* per step, in the nccl-tests convention (see
:mod:`tensorledger.roofline.collectives`): an all-reduce of S bytes sends 2(N−1)/N·S, an
all-gather or a reduce-scatter of S bytes (the whole gathered array) (N−1)/N·S.

**Activations with tensor and sequence parallelism** (Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", §4, 16-bit activations, dropout kept,
no recomputation), bytes per layer: s·b·h·(34 + 5·a·s/h) on one device; with tensor
parallelism of size t s·b·h·(10 + 24/t + 5·a·s/(h·t)) (layer norms, dropout masks and the
inputs of the two blocks stay replicated: the 10); with sequence parallelism as well
s·b·h/t·(34 + 5·a·s/h).  The paper's model is GPT-3-like (two-matrix GELU MLP of 4h, with
dropout and the s² scores); :mod:`tensorledger.napkin.activations` rederives this house's
reference model.

**Pipeline bubble** (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", §2.2): with p stages and m micro-batches a GPipe or 1F1B
schedule idles (p−1) micro-batch slots of the m + p − 1 the step takes, a fraction
(p−1)/(m+p−1) of the step; the paper quotes the same idle time against the ideal compute,
(p−1)/m.  The interleaved schedule with v chunks per stage divides the idle time by v.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.napkin.arithmetic import Step, check_count
from tensorledger.napkin.recipes import (
    BytesPerParam,
    Optimizer,
    Precision,
    bytes_per_param,
    resolve_precision,
)
from tensorledger.napkin.transformer import TransformerConfig

__all__ = [
    "ZERO_STAGES",
    "CollectiveVolume",
    "CommVolume",
    "PipelineBubble",
    "TpActivations",
    "ZeroBytes",
    "ZeroSummary",
    "ddp_comm_volume",
    "fsdp_comm_volume",
    "pipeline_bubble",
    "torch_zero_bytes",
    "tp_activation_bytes",
    "tp_comm_volume",
    "tp_indivisible",
    "zero_bytes",
    "zero_comm_volume",
    "zero_summary",
    "zero_table",
]

#: ZeRO stages: 0 (plain data parallelism), 1 (optimizer state), 2 (+ gradients), 3 (+ params).
ZERO_STAGES = (0, 1, 2, 3)

_STAGE_WORDS = {0: "nothing sharded (DDP)", 1: "optimizer state and master sharded",
                2: "optimizer state, master and gradients sharded",
                3: "optimizer state, master, gradients and parameters sharded"}


def _stage(stage: int) -> int:
    if isinstance(stage, bool) or stage not in ZERO_STAGES:
        raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}")
    return stage


def _whole(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{name} must be a whole number >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class ZeroBytes:
    """Bytes one of ``ranks`` data-parallel ranks holds for parameters, gradients, master copy
    and optimizer state under ZeRO ``stage`` (activations and buffers not included).

    A sharded term holds ⌈params / ranks⌉ parameters' worth (the even partition of the ZeRO
    paper; FSDP pads each tensor, which the trace counts exactly).  Optimizer step counters
    (4 bytes per tensor) are per tensor, not per parameter, and left to the trace.
    """

    stage: int
    ranks: int
    params: int
    precision: str
    optimizer: str
    breakdown: BytesPerParam
    shard_params: int  # ⌈params / ranks⌉
    params_bytes: int
    grads_bytes: int
    master_bytes: int
    optimizer_bytes: int
    total_bytes: int
    unsharded_bytes: int  # the same four terms on one rank with nothing sharded
    steps: tuple[Step, ...]
    #: "paper" (the even partition) or "torch" (what torch.distributed puts on rank 0)
    partition: str = "paper"
    #: tensors whose optimizer state the rank holds (its step counters); torch form only
    state_tensors: int | None = None


def zero_bytes(params: int, ranks: int, stage: int, precision: str | Precision,
               optimizer: str | Optimizer) -> ZeroBytes:
    """Per-rank bytes of the per-parameter tensors under ZeRO ``stage`` on ``ranks`` ranks.

    >>> z = zero_bytes(1000, 8, 2, "mixed-bf16", "adamw")    # 4 + 4 + 8 bytes per parameter
    >>> z.params_bytes, z.grads_bytes, z.optimizer_bytes       # 4·1000, 4·125, 8·125
    (4000, 500, 1000)
    """
    _whole("params", params)
    check_count("ranks", ranks)
    _stage(stage)
    b = bytes_per_param(precision, optimizer)
    shard = -(-params // ranks)

    def held(bytes_per: float, sharded: bool) -> int:
        return round(bytes_per * (shard if sharded else params))

    params_b = held(b.params_bytes_per_param, stage >= 3)
    grads_b = held(b.grads_bytes_per_param, stage >= 2)
    master_b = held(b.master_bytes_per_param, stage >= 1)
    optimizer_b = held(b.optimizer_bytes_per_param, stage >= 1)
    total = params_b + grads_b + master_b + optimizer_b
    unsharded = (round(b.params_bytes_per_param * params) + round(b.grads_bytes_per_param * params)
                 + round(b.master_bytes_per_param * params)
                 + round(b.optimizer_bytes_per_param * params))
    steps = (
        Step("parameters", "given", params, "params"),
        Step("parameters per shard", "ceil(params / ranks)", shard, "params"),
        *_part_steps(b, (params_b, grads_b, master_b, optimizer_b),
                     ("shard" if stage >= 3 else "params", "shard" if stage >= 2 else "params",
                      "shard" if stage >= 1 else "params", "shard" if stage >= 1 else "params")),
        Step(f"per rank, ZeRO-{stage} ({_STAGE_WORDS[stage]})", "sum", total, "bytes"),
    )
    return ZeroBytes(stage=stage, ranks=ranks, params=params, precision=b.precision,
                     optimizer=b.optimizer, breakdown=b, shard_params=shard,
                     params_bytes=params_b, grads_bytes=grads_b, master_bytes=master_b,
                     optimizer_bytes=optimizer_b, total_bytes=total, unsharded_bytes=unsharded,
                     steps=steps)


def _chunk_rows(rows: int, ranks: int) -> int:
    """Rows of dimension 0 that FSDP2 gives rank 0: ``torch.chunk``'s ⌈rows / ranks⌉ (the
    other ranks' shards are padded to the same size)."""
    return -(-rows // ranks)


def _greedy_rank0(numels: Sequence[int], ranks: int) -> list[int]:
    """The tensors (their sizes) that ``ZeroRedundancyOptimizer`` gives rank 0: whole tensors,
    largest first, each to the rank holding the fewest elements so far (the lowest rank on a
    tie)."""
    held = [0] * ranks
    mine: list[int] = []
    for n in sorted(numels, reverse=True):
        rank = held.index(min(held))
        held[rank] += n
        if rank == 0:
            mine.append(n)
    return mine


def torch_zero_bytes(shapes: Sequence[Sequence[int]], ranks: int, stage: int,
                     precision: str | Precision, optimizer: str | Optimizer) -> ZeroBytes:
    """Rank 0's bytes under ZeRO ``stage`` as torch.distributed implements it, from the
    parameter tensors' ``shapes`` (where :func:`zero_bytes` takes the paper's even split):

    - stage 0, DDP: nothing sharded (the same as the paper);
    - stage 1, DDP with ``ZeroRedundancyOptimizer``: optimizer state (and master) for *whole
      tensors*, given out largest first to the least-loaded rank, so a rank can hold more than
      1/N (llama-3-8b on 64 ranks: rank 0 holds the 525M-parameter embedding, 4.2× the mean);
    - stage 2, FSDP2 keeping the gathered parameters from forward to backward
      (``reshard_after_forward=False``): every tensor's dimension-0 chunk at rest, like stage
      3, *and* the whole gathered model held through the step (the paper's stage 2 keeps only
      the whole copy; FSDP2 keeps its shard beside it);
    - stage 3, FSDP2: each tensor's dimension-0 chunk, ⌈rows / N⌉ rows (``torch.chunk``).

    >>> z = torch_zero_bytes([(8, 4), (3,)], 2, 3, "fp32", "sgd")   # chunks (4, 4) and (2,)
    >>> z.shard_params, z.params_bytes, z.grads_bytes                # 18 params, 4 B each
    (18, 72, 72)
    >>> torch_zero_bytes([(8, 4), (3,)], 2, 2, "fp32", "sgd").params_bytes  # 4·(35 + 18)
    212
    >>> torch_zero_bytes([(8, 4), (3,), (2,)], 2, 1, "fp32", "adam").optimizer_bytes  # 8·32
    256
    """
    check_count("ranks", ranks)
    _stage(stage)
    if not shapes:
        raise InputError("torch_zero_bytes needs the parameter tensors' shapes, got none")
    dims = [tuple(_whole("a dimension", d) for d in shape) for shape in shapes]
    numels = [_numel(d) for d in dims]
    params = sum(numels)
    b = bytes_per_param(precision, optimizer)
    if stage == 1:
        mine = _greedy_rank0(numels, ranks)
        shard, tensors = sum(mine), len(mine)
        rule = "whole tensors, largest first to the least-loaded rank"
    else:
        shard = sum(_chunk_rows(d[0], ranks) * _numel(d[1:]) if d else 1
                    for d in dims) if stage >= 2 else params
        tensors = len(dims)
        rule = "each tensor's ⌈rows / N⌉ rows" if stage >= 2 else "nothing sharded"
    if stage == 0:
        shard = -(-params // ranks)
    gathered = params if stage == 2 else 0
    params_b = round(b.params_bytes_per_param * ((shard if stage >= 2 else params) + gathered))
    grads_b = round(b.grads_bytes_per_param * (shard if stage >= 2 else params))
    master_b = round(b.master_bytes_per_param * (shard if stage >= 1 else params))
    optimizer_b = round(b.optimizer_bytes_per_param * (shard if stage >= 1 else params))
    total = params_b + grads_b + master_b + optimizer_b
    unsharded = zero_bytes(params, 1, 0, b.precision, b.optimizer).total_bytes
    steps = (
        Step("parameters", "sum of the tensors' sizes", params, "params"),
        Step("rank 0's share", rule, shard, "params"),
        *_part_steps(b, (params_b, grads_b, master_b, optimizer_b),
                     ({0: "params", 1: "params", 2: "(share + gathered params)", 3: "share"}[stage],
                      "share" if stage >= 2 else "params", "share" if stage >= 1 else "params",
                      "share" if stage >= 1 else "params")),
        Step(f"rank 0, ZeRO-{stage} as torch implements it", "sum", total, "bytes"),
    )
    return ZeroBytes(stage=stage, ranks=ranks, params=params, precision=b.precision,
                     optimizer=b.optimizer, breakdown=b, shard_params=shard,
                     params_bytes=params_b, grads_bytes=grads_b, master_bytes=master_b,
                     optimizer_bytes=optimizer_b, total_bytes=total, unsharded_bytes=unsharded,
                     steps=steps, partition="torch", state_tensors=tensors)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _part_steps(b: BytesPerParam, held: tuple[int, int, int, int],
                of: tuple[str, str, str, str]) -> tuple[Step, ...]:
    """The working of the four per-parameter terms: bytes per parameter × what is held."""
    widths = (b.params_bytes_per_param, b.grads_bytes_per_param, b.master_bytes_per_param,
              b.optimizer_bytes_per_param)
    names = ("parameters", "gradients", "master copy", "optimizer state")
    return tuple(Step(name, f"{width:g} B × {what}", value, "bytes")
                 for name, width, what, value in zip(names, widths, of, held, strict=True))


def zero_table(params: int, ranks: int, precision: str | Precision,
               optimizer: str | Optimizer) -> tuple[ZeroBytes, ...]:
    """:func:`zero_bytes` for every stage, 0 to 3."""
    return tuple(zero_bytes(params, ranks, s, precision, optimizer) for s in ZERO_STAGES)


# ----------------------------------------------------------------------------- communication

@dataclass(frozen=True)
class CollectiveVolume:
    """``count`` collectives of one kind, each over ``size_bytes`` in the nccl-tests sense (the
    all-reduced buffer; the whole gathered or scattered array), in a group of ``ranks``."""

    kind: str  # all-reduce, all-gather, reduce-scatter
    phase: str  # forward, backward, optimizer
    what: str
    ranks: int
    count: int
    size_bytes: int
    sent_bytes_per_rank: float  # all of them: count × bus factor × size


@dataclass(frozen=True)
class CommVolume:
    """What one rank sends per training step in a layout, collective by collective."""

    layout: str
    ranks: int
    collectives: tuple[CollectiveVolume, ...]
    sent_bytes_per_rank: float
    steps: tuple[Step, ...]


_FACTOR_WORDS = {"all-reduce": "2(N−1)/N", "all-gather": "(N−1)/N", "reduce-scatter": "(N−1)/N"}


def _volume(kind: str, phase: str, what: str, ranks: int, size: int, count: int = 1
            ) -> CollectiveVolume:
    factor = (2 if kind == "all-reduce" else 1) * (ranks - 1) / ranks
    return CollectiveVolume(kind=kind, phase=phase, what=what, ranks=ranks, count=count,
                            size_bytes=size, sent_bytes_per_rank=count * factor * size)


def _comm(layout: str, ranks: int, parts: list[CollectiveVolume]) -> CommVolume:
    steps = tuple(Step(f"{p.phase}: {p.what}",
                       f"{p.count} × {_FACTOR_WORDS[p.kind]} × {p.size_bytes:,} B "
                       f"({p.kind}, N = {p.ranks})", p.sent_bytes_per_rank, "bytes")
                  for p in parts)
    total = sum(p.sent_bytes_per_rank for p in parts)
    return CommVolume(layout=layout, ranks=ranks, collectives=tuple(parts),
                      sent_bytes_per_rank=total,
                      steps=(*steps, Step("sent per rank per step", "sum", total, "bytes")))


def _bytes_of(precision: str | Precision) -> Precision:
    return resolve_precision(precision) if isinstance(precision, str) else precision


def ddp_comm_volume(params: int, ranks: int, precision: str | Precision) -> CommVolume:
    """DDP: one all-reduce of every gradient per step, 2(N−1)/N × gradient bytes per rank.

    >>> ddp_comm_volume(1000, 4, "fp32").sent_bytes_per_rank   # 2 · 3/4 · 4000
    6000.0
    """
    _whole("params", params)
    check_count("ranks", ranks)
    grads = round(_bytes_of(precision).grad_bytes * params)
    return _comm("ddp", ranks, [_volume("all-reduce", "backward", "gradients", ranks, grads)])


def zero_comm_volume(params: int, ranks: int, stage: int, precision: str | Precision
                     ) -> CommVolume:
    """ZeRO §7: stage 0 all-reduces the gradients; stages 1 and 2 reduce-scatter them and
    all-gather the updated parameters (the same 2(N−1)/N); stage 3 all-gathers the parameters
    in forward and again in backward and reduce-scatters the gradients: 3(N−1)/N of them."""
    _stage(stage)
    if stage == 0:
        return ddp_comm_volume(params, ranks, precision)
    if stage == 3:
        return fsdp_comm_volume(params, ranks, precision)
    _whole("params", params)
    check_count("ranks", ranks)
    p = _bytes_of(precision)
    grads, weights = round(p.grad_bytes * params), round(p.param_bytes * params)
    return _comm(f"zero-{stage}", ranks, [
        _volume("reduce-scatter", "backward", "gradients", ranks, grads),
        _volume("all-gather", "optimizer", "updated parameters", ranks, weights)])


def fsdp_comm_volume(params: int, ranks: int, precision: str | Precision) -> CommVolume:
    """FSDP / ZeRO-3: all-gather the parameters in forward, again in backward, reduce-scatter
    the gradients; each (N−1)/N of its bytes per rank (parameters in the recipe's parameter
    dtype: FSDP gathers what it stores unless a mixed-precision policy casts first).

    >>> fsdp_comm_volume(1000, 4, "bf16").sent_bytes_per_rank   # 3 · 3/4 · 2000
    4500.0
    """
    _whole("params", params)
    check_count("ranks", ranks)
    p = _bytes_of(precision)
    grads, weights = round(p.grad_bytes * params), round(p.param_bytes * params)
    return _comm("fsdp", ranks, [
        _volume("all-gather", "forward", "parameters", ranks, weights),
        _volume("all-gather", "backward", "parameters", ranks, weights),
        _volume("reduce-scatter", "backward", "gradients", ranks, grads)])


def tp_comm_volume(batch: int, seq_len: int, d_model: int, n_layers: int, tp: int,
                   activation_bytes: int = 2, sequence_parallel: bool = False) -> CommVolume:
    """Megatron tensor parallelism: per layer two all-reduces of the b·s·h block output in
    forward (after attention and after the MLP) and two in backward (of the input gradients of
    the column-parallel projections).  With sequence parallelism each all-reduce becomes an
    all-gather and a reduce-scatter of the same b·s·h array: the same bytes (Korthikanti §4.2.2).
    Embedding and loss collectives are not counted.

    >>> tp_comm_volume(1, 8, 16, 2, 4).sent_bytes_per_rank   # 2 layers · 4 · 2·3/4 · 8·16·2
    3072.0
    """
    for name, value in (("batch", batch), ("seq_len", seq_len), ("d_model", d_model),
                        ("n_layers", n_layers), ("activation_bytes", activation_bytes)):
        check_count(name, value)
    check_count("tp", tp)
    size = batch * seq_len * d_model * activation_bytes
    if not sequence_parallel:
        parts = [_volume("all-reduce", phase, f"block outputs, {n_layers} layers × 2", tp, size,
                         2 * n_layers) for phase in ("forward", "backward")]
        return _comm("tp", tp, parts)
    parts = [_volume(kind, phase, f"b·s·h, {n_layers} layers × 2", tp, size, 2 * n_layers)
             for phase in ("forward", "backward") for kind in ("all-gather", "reduce-scatter")]
    return _comm("tp+sp", tp, parts)


@dataclass(frozen=True)
class ZeroSummary:
    """Every ZeRO stage for one model on ``ranks`` ranks: bytes held and bytes sent per rank."""

    params: int
    ranks: int
    precision: str
    optimizer: str
    stages: tuple[ZeroBytes, ...]  # stage 0 (DDP) to 3 (FSDP)
    comm: tuple[CommVolume, ...]  # what each stage sends per rank per step, in the same order


def zero_summary(params: int, ranks: int, precision: str | Precision,
                 optimizer: str | Optimizer) -> ZeroSummary:
    """:func:`zero_table` beside :func:`zero_comm_volume` for every stage."""
    stages = zero_table(params, ranks, precision, optimizer)
    comm = tuple(zero_comm_volume(params, ranks, s, precision) for s in ZERO_STAGES)
    return ZeroSummary(params=params, ranks=ranks, precision=stages[0].precision,
                       optimizer=stages[0].optimizer, stages=stages, comm=comm)


# ------------------------------------------------------------------------------ divisibility

def tp_indivisible(config: TransformerConfig, tp: int) -> tuple[str, int] | None:
    """The first dimension of ``config`` that ``tp`` tensor-parallel ranks do not divide, as
    (what, size), or None when every one divides.

    Megatron tensor parallelism splits the query heads and the key/value heads (column-parallel
    Q, K, V), the MLP's hidden width (column-parallel up/gate, row-parallel down) and the
    vocabulary (embedding rows, head outputs) over ``tp``; each must be a multiple of it.  The
    one rule shared by the traced layouts (:mod:`tensorledger.workload.layout`) and the planner.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> tp_indivisible(get_preset("llama-3-70b"), 16)     # 8 key/value heads
    ('key/value heads', 8)
    >>> tp_indivisible(get_preset("llama-3-70b"), 8) is None
    True
    """
    check_count("tp", tp)
    for what, size in (("attention heads", config.n_heads),
                       ("key/value heads", config.n_kv_heads or config.n_heads),
                       ("MLP hidden width", config.d_ff or 4 * config.d_model),
                       ("vocabulary", config.vocab_size)):
        if size % tp:
            return what, size
    return None


# ------------------------------------------------------------------------------- activations

@dataclass(frozen=True)
class TpActivations:
    """Korthikanti et al.'s activation bytes per layer (16-bit, no recomputation)."""

    seq_len: int
    batch: int
    d_model: int
    n_heads: int
    tp: int
    sequence_parallel: bool
    replicated_bytes: float  # the s·b·h·10 that TP alone leaves on every rank (0 with SP)
    split_bytes: float  # what tensor parallelism divides by t
    bytes_per_layer: float
    formula: str


def tp_activation_bytes(seq_len: int, batch: int, d_model: int, n_heads: int, tp: int = 1,
                        sequence_parallel: bool = False) -> TpActivations:
    """Activation bytes per layer per rank: s·b·h·(10 + 24/t + 5·a·s/(h·t)) with tensor
    parallelism, s·b·h/t·(34 + 5·a·s/h) with sequence parallelism as well.

    >>> tp_activation_bytes(2048, 1, 12288, 96).bytes_per_layer / (2048 * 12288)  # 34 + 80
    114.0
    """
    for name, value in (("seq_len", seq_len), ("batch", batch), ("d_model", d_model),
                        ("n_heads", n_heads), ("tp", tp)):
        check_count(name, value)
    sbh = seq_len * batch * d_model
    scores = 5 * n_heads * seq_len * seq_len * batch  # s·b·h · 5·a·s/h, the softmax and dropout
    if sequence_parallel:
        replicated, split = 0.0, (34 * sbh + scores) / tp
        formula = "s·b·h/t · (34 + 5·a·s/h)"
    else:
        replicated, split = 10.0 * sbh, (24 * sbh + scores) / tp
        formula = "s·b·h · (10 + 24/t + 5·a·s/(h·t))"
    return TpActivations(seq_len=seq_len, batch=batch, d_model=d_model, n_heads=n_heads, tp=tp,
                         sequence_parallel=sequence_parallel, replicated_bytes=replicated,
                         split_bytes=split, bytes_per_layer=replicated + split, formula=formula)


# ---------------------------------------------------------------------------------- pipeline

@dataclass(frozen=True)
class PipelineBubble:
    """Idle time of a pipeline schedule with ``stages`` stages and ``microbatches``."""

    stages: int
    microbatches: int
    chunks: int  # model chunks per stage: 1 for GPipe and 1F1B, v for interleaved 1F1B
    bubble_fraction: float  # idle share of the step: (p−1)/(v·m + p − 1)
    bubble_to_compute: float  # idle over ideal compute: (p−1)/(v·m), Narayanan et al.'s figure


def pipeline_bubble(stages: int, microbatches: int, chunks: int = 1) -> PipelineBubble:
    """The bubble: (p−1)/(m+p−1) of the step, (p−1)/(v·m+p−1) with v interleaved chunks.

    >>> pipeline_bubble(4, 8).bubble_fraction         # 3 / 11
    0.2727272727272727
    """
    check_count("stages", stages)
    check_count("microbatches", microbatches)
    check_count("chunks", chunks)
    if chunks > 1 and microbatches % stages:
        raise InputError(f"the interleaved schedule needs microbatches ({microbatches}) to be "
                         f"a multiple of stages ({stages})")
    idle = stages - 1
    return PipelineBubble(stages=stages, microbatches=microbatches, chunks=chunks,
                          bubble_fraction=idle / (chunks * microbatches + idle),
                          bubble_to_compute=idle / (chunks * microbatches))
