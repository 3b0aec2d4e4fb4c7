"""One training layout on a napkin: memory per rank and time per step, in closed form.

Torch-free, fast (a search prices tens of thousands of layouts), and every term named.  The
layout (:class:`LayoutChoice`) spreads ``count`` = dp · tp · pp devices: tensor parallelism
innermost (inside a node), then data parallelism, then pipeline stages outermost (Megatron's
order).  Of the ``dp`` data-parallel ranks, groups of ``shard`` hold one ZeRO-sharded copy
(stage ``zero``; ``dp / shard`` replicas all-reduce the shards, as HSDP does).

**Memory per rank** (the heaviest of the ranks holding the first stage, the last stage, and
the most saved blocks: :mod:`tensorledger.plan.stages`):

- per-parameter state: :func:`tensorledger.napkin.zero_bytes` of the stage's parameters,
  ZeRO stage ``zero`` over ``shard`` ranks (× ``cp``: the context-parallel ranks shard the
  parameters with the group).  A rank holds its stages' blocks (``stage_layers``), each with its
  matrices split over ``tp`` and its two norm scales whole; the first stage also holds the
  token embedding / tp, the last the head / tp and the final norm (``pp`` = 1: all of them).
- ZeRO-3 gathers a layer's parameters before use: two layers' worth (one in use, one
  prefetched) of unsharded parameters in the recipe's parameter dtype.  ZeRO-2 as FSDP2 runs
  it (``reshard_after_forward=False``) keeps each tensor's shard at rest, as ZeRO-3 does, and
  holds the whole gathered stage from forward to backward
  (:func:`tensorledger.napkin.parallel.torch_zero_bytes`).  DDP (ZeRO-0 and 1) keeps a copy
  of the gradients in its buckets.  Under a pipeline torch's stages switch FSDP's gradient
  sync off until the step's last backward: ZeRO-2 and 3 alike hold the stage's gradients
  unsharded (a copy, like DDP's buckets), reduce-scattered once at the end; a TP first
  stage also holds the whole vocabulary's embedding gradient (its share is a view of it).
- activations per layer and micro-batch: :func:`tensorledger.napkin.activations.activation_memory`,
  the reference model's closed form, which follows a tensor-parallel rank (heads and MLP
  columns split, norms and the gathered logits whole; with sequence parallelism the norms on
  1/t of the tokens) and the recipe (the parameter dtype; under ``mixed-bf16`` autocast's bf16
  casts of each linear's input and weight, and the fp32 stream).  Traced ranks of the same
  layouts agree with it to the byte in fp32 and under autocast (tests/workload/
  test_tp_activations.py).  Attention is the fused kernel (no s² scores); with ``eager``
  attention Korthikanti et al.'s 5·a·s²·b/t bytes of scores, softmax and dropout are added,
  and checkpoint ``selective`` recomputes the attention core and drops them (so it is searched
  with eager attention only).  ``full`` keeps each layer's input (the residual stream, ÷ t with
  sequence parallelism) and holds one layer's full activations while it is recomputed.
- the peak is the larger of two points: at the loss (no gradients yet without a pipeline,
  whose later forwards run beside the gradients of earlier backwards; the logits in flight
  and, under autocast with checkpointing, the bf16 weight casts autocast's cache keeps until
  the forward ends) and in backward (the gradients and a recomputed layer beside everything
  saved).  Traced ranks of llama-3-70b peak at the loss (benchmarks/verify_plan.py).
- micro-batches in flight: 1 without a pipeline; under one, each stage's from the schedule's
  own figures (:mod:`tensorledger.plan.pipeline`: torch's action lists replayed, or GPipe's m
  and 1F1B's min(p − s, m) in closed form), times the stage's blocks.  The last stage adds
  the final norm's and the loss's saved tensors of one (the log-softmax over the whole
  vocabulary: the head's output is gathered).
- context parallelism (ring attention): :func:`tensorledger.napkin.context.
  context_parallel_rank`'s rank, activations at s/cp tokens, the merged output's copy per
  layer and the targets' whole storage.

**Time per step**, every rank doing 1/count of the work:

- FLOPs: training FLOPs per token from
  :func:`tensorledger.napkin.transformer.transformer_training_flops` (6·N plus attention,
  causal halved) × tokens per step; ``full`` adds one forward (a third), ``selective`` the
  forward of the attention scores and values again.  Each rank does 1/count of them.
- compute = m × max(F / (peak · efficiency), W / memory bandwidth) per micro-batch, the
  roofline of one micro-batch on one rank: F its FLOPs, W its weight traffic, the stage's
  parameters × 2 × (parameter bytes + gradient bytes) (weights read in forward and again in
  backward, the accumulated gradient read and written).  More, smaller micro-batches lower
  F / W: below the chip's ridge point a step is memory-bound.  The peak is the catalog's ideal
  dense figure and the efficiency the share of it the matmuls reach: by default the chip's
  published fraction at the size of the layer's largest matmul on this rank (the MLP's
  up-projection of one micro-batch, 2·b·s·h·d_ff/t FLOPs), as ``roofline`` prices every
  matmul of a traced step; ``efficiency`` set, that share instead (1: the ideal bound).
- pace: the slowest rank (its blocks; on the last, the head's 6·d·V FLOPs a token) over the
  average one, ``imbalance`` (1 for an even cut with no head).
- pipeline bubble: compute × f/(1 − f) on top, f the schedule's idle share (its action
  lists'; (p−1)/(v·m) for 1F1B and interleaved 1F1B).
- context parallelism: each layer's ring exchange per micro-batch (two all-gathers of the
  keys and values, cp passes of their gradients) on the cp group's links, exposed.
- tensor-parallel communication is exposed: per micro-batch and layer two all-reduces of the
  b·s·h block output in forward and two in backward (with full recomputation one more, the
  attention output's: torch's checkpoint stops recomputing once the saved tensors are back),
  each an all-gather plus a reduce-scatter with sequence parallelism, priced by
  :func:`tensorledger.roofline.collectives.collective_time` on the node's links.
- data-parallel communication overlaps with compute except the last layer's bucket:
  exposed = max(0, comm − compute) + comm / layers per stage.  Stage 0 all-reduces the
  gradients once per step; stage 1 reduce-scatters them and all-gathers the updated
  parameters once; stage 2 reduce-scatters after every micro-batch (the sharded gradient is
  where they accumulate); stage 3 also all-gathers the parameters twice per micro-batch (a
  recomputed unit reuses its backward gather).  Replicas all-reduce their gradient shard once
  per step.
  Under a pipeline torch's stages reduce once a step (ZeRO-2: one gather, one
  reduce-scatter; ZeRO-3 under 1F1B gathers each unit but the root m + 1 times).
- pipeline send/receive (b·s·h per micro-batch and stage boundary) is not priced: 1F1B
  overlaps it with compute.  :func:`sent_bytes` counts it.

- expert parallelism (:mod:`tensorledger.plan.experts`): a rank holds E/ep of the routed
  experts (whole on each tp rank), sharded over shard / ep ranks and reduced over dp / ep;
  each MoE layer's token all-to-alls per micro-batch over the ep group, exposed.

step = compute · imbalance · (1 + bubble) + tensor-parallel comm + ring exchange + expert
all-to-alls + exposed data-parallel comm;
MFU = model FLOPs (without recomputation) / (step · count · ideal peak).

A LoRA (QLoRA) fine-tune is priced as :mod:`tensorledger.plan.model` says (its state, FLOPs
and traffic); the matmul efficiency and the collectives' times are
:mod:`tensorledger.plan.timing`'s.

"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.napkin.activations import ActivationMemory
from tensorledger.napkin.adapters import (
    ADAPTER_BYTES,
    NF4_DEQUANTIZE_FLOPS_PER_ELEMENT,
    LoraShape,
)
from tensorledger.napkin.recipes import Optimizer, Precision
from tensorledger.napkin.transformer import (
    TransformerConfig,
)
from tensorledger.plan.experts import (
    expert_choice,
    padded_experts,
    routed_params,
)
from tensorledger.plan.model import SearchModel
from tensorledger.plan.model import search_model as _model
from tensorledger.plan.pipeline import SCHEDULES, SchedulePricer, describe_stages
from tensorledger.plan.profile import ModelProfile, tp_collectives
from tensorledger.plan.stages import RankLoad, pipeline_ranks
from tensorledger.plan.timing import (
    collective_s,
    dp_comm_s,
    ep_comm_s,
    matmul_efficiency,
    ring_layer_s,
)
from tensorledger.roofline.collectives import CollectiveKind

__all__ = ["ATTENTIONS", "CHECKPOINTS", "SCHEDULES", "LayoutChoice", "LayoutEstimate",
           "PlanSetup", "RankMemory", "StepTime", "estimate", "layer_activation_bytes",
           "matmul_efficiency", "rank_memory", "step_time"]

#: Checkpoint policies in closed form: keep everything, recompute attention, recompute blocks.
CHECKPOINTS = ("none", "selective", "full")
#: Attention kernels: flash stores no s² scores; eager stores scores, softmax and dropout.
ATTENTIONS = ("flash", "eager")


@dataclass(frozen=True)
class PlanSetup:
    """What every layout of one search shares: the model, the cluster, the batch, the recipe.

    ``config`` is a reference model's config (priced by its closed form) or any model's
    measured :class:`~tensorledger.plan.profile.ModelProfile`."""

    config: TransformerConfig | ModelProfile
    hardware: Hardware
    count: int
    seq_len: int
    global_batch_seqs: int  # sequences per optimizer step, over all data-parallel ranks
    precision: Precision
    optimizer: Optimizer
    budget_bytes: float  # memory one rank may use
    efficiency: float | None = None  # share of the ideal peak; None: the chip's expected one
    attention: str = "flash"
    dtype: str = "bf16"
    max_pp: int | None = None  # the most pipeline stages searched (1: no pipeline)
    # prices the pipeline schedules: GPipe and 1F1B in closed form, unless the caller gives
    # one that replays torch's action lists (tensorledger.ledger.schedules)
    schedules: SchedulePricer = field(default_factory=SchedulePricer, compare=False)
    # a LoRA (QLoRA) fine-tune: adapters trained beside a frozen base (see the module's doc)
    lora: LoraShape | None = None

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise InputError(f"unknown attention {self.attention!r}; known: "
                             f"{', '.join(ATTENTIONS)}")
        if isinstance(self.config, ModelProfile) and self.attention != "flash":
            raise InputError(f"{self.config.name} is planned from its traced profile, whose "
                             "attention is the kernel it ran; drop --attention")
        if self.efficiency is not None and not 0.0 < self.efficiency <= 1.0:
            raise InputError(f"efficiency must be in (0, 1], got {self.efficiency!r}")
        if self.lora is not None and self.precision.float8:  # as account refuses it
            raise InputError(f"--lora trains adapters beside frozen weights; --precision "
                             f"{self.precision.name} converts the linears they adapt: use one "
                             "of them")
        if self.lora is not None and isinstance(self.config, ModelProfile):
            raise InputError(f"--lora is priced on a preset's closed form; {self.config.name} "
                             "is planned from its traced profile, which has no adapters yet: "
                             "plan a preset, or drop --lora")
        # counts and FLOPs of the model, and the priced collectives, worked out once per search
        object.__setattr__(self, "_model", SearchModel(self))

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_seqs * self.seq_len


@dataclass(frozen=True)
class LayoutChoice:
    """One point of the search: degrees, sharding, batch split, schedule, checkpointing."""

    dp: int  # data-parallel ranks (replicas × shard)
    tp: int  # tensor-parallel ranks, inside a node
    pp: int  # pipeline stages
    zero: int = 0  # ZeRO stage over the shard group; 0 is plain data parallelism
    shard: int = 1  # ranks one ZeRO-sharded copy spans (divides dp); 1 with zero 0
    sp: bool = False  # sequence parallelism beside tp
    micro_batch: int = 1  # sequences per micro-batch on one data-parallel rank
    accumulation: int = 1  # micro-batches per step; the pipeline's micro-batches when pp > 1
    schedule: str = "none"  # "none" (pp = 1) or one of torch's SCHEDULES
    checkpoint: str = "none"  # "none", "selective" or "full"
    chunks: int = 1  # stages a pipeline rank holds (the multi-stage schedules), else 1
    # context-parallel ranks splitting each sequence (ring attention); they shard the
    # parameters with the ZeRO group (FSDP over shard · cp ranks, torchtitan's dp_shard_cp)
    cp: int = 1
    # blocks of each of the pp · chunks stages; () is the even cut (stage_counts)
    stage_layers: tuple[int, ...] = ()
    # expert-parallel ranks, taken from the dp ones: each holds E/ep of the routed experts
    # (tensorledger.plan.experts)
    ep: int = 1

    @property
    def count(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def replicas(self) -> int:
        return self.dp // self.shard

    @property
    def shard_ranks(self) -> int:
        """The ranks one sharded copy spans: the ZeRO group and the context-parallel ranks."""
        return self.shard * self.cp

    def describe(self) -> str:
        """``DP 8 (ZeRO-3 × 8) · TP 8 + SP · PP 4 1f1b``.

        >>> LayoutChoice(dp=8, tp=4, pp=2, zero=3, shard=8, sp=True,
        ...              schedule="interleaved-1f1b", chunks=2).describe()
        'DP 8 (ZeRO-3 × 8) · TP 4 + SP · PP 2 interleaved-1f1b × 2'
        >>> LayoutChoice(dp=8, cp=16, tp=8, pp=16, zero=3, schedule="1f1b",
        ...              stage_layers=(7,) + (8,) * 14 + (7,)).describe()
        'DP 8 (ZeRO-3 × 1·CP) · CP 16 · TP 8 · PP 16 1f1b, stages 7,8×14,7'
        """
        data = f"DP {self.dp}"
        if self.zero:
            data += f" (ZeRO-{self.zero} × {self.shard}{'·CP' if self.cp > 1 else ''})"
        parts = [data]
        if self.ep > 1:
            parts.append(f"EP {self.ep}")
        if self.cp > 1:
            parts.append(f"CP {self.cp}")
        if self.tp > 1:
            parts.append(f"TP {self.tp}{' + SP' if self.sp else ''}")
        if self.pp > 1:
            pipe = f"PP {self.pp} {self.schedule}" + (
                f" × {self.chunks}" if self.chunks > 1 and self.schedule != "zbv" else "")
            if len(set(self.stage_layers)) > 1:
                pipe += f", stages {describe_stages(self.stage_layers)}"
            parts.append(pipe)
        return " · ".join(parts)


@dataclass(frozen=True)
class RankMemory:
    """Bytes the busiest rank holds, by kind (the heavier of the first and last stage)."""

    stage: str  # "first", "last" or "only"
    stage_params: int  # parameters that stage's rank holds before ZeRO sharding
    states_bytes: float  # parameters, gradients, master copy, optimizer state (ZeRO)
    gathered_bytes: float  # FSDP's gathered parameters (ZeRO-3 two layers, ZeRO-2 the stage)
    # DDP's gradient buckets, or FSDP's unsharded gradients under a pipeline (a gradient copy)
    buffers_bytes: float
    activations_bytes: float  # saved activations of the layers, all micro-batches in flight
    logits_bytes: float  # the final norm's and the loss's saved bytes (last stage)
    total_bytes: float  # the larger of the two points below
    forward_peak_bytes: float = 0.0  # at the loss: no gradients yet, the loss's temporaries
    backward_peak_bytes: float = 0.0  # gradients and a recomputed layer beside everything saved
    temporary_bytes: float = 0.0  # of the forward point: logits in flight, autocast's casts
    layers: int = 0  # blocks the rank holds
    rank: int = 0  # its pipeline rank
    # a LoRA fine-tune: the adapters' parameters and the frozen base's bytes on the rank
    # (before ZeRO sharding; stage_params counts both)
    adapter_params: int = 0
    frozen_bytes: float = 0.0
    expert_params: int = 0  # of stage_params, the routed experts' (E/ep a layer, whole on tp)


@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step, term by term."""

    model_flops: float  # training FLOPs of the step, without recomputation
    recompute_flops: float
    intensity_flop_per_byte: float  # one micro-batch on one rank: FLOPs / weight traffic
    memory_bound: bool  # the intensity is below the chip's ridge point
    compute_s: float  # m × max(FLOPs, weight traffic / bandwidth) of one micro-batch
    imbalance: float  # ⌈L/p⌉·p / L: the slowest stage's share over the average
    bubble_to_compute: float  # (p−1)/(v·m)
    tp_comm_s: float  # exposed
    dp_comm_s: float  # all of it
    dp_exposed_s: float  # what overlap leaves
    step_s: float
    tokens_per_s: float
    mfu: float  # model FLOPs / (step · count · ideal peak)
    efficiency: float = 1.0  # the share of the peak the matmuls were taken to reach
    hfu: float = 0.0  # the FLOPs that ran (recomputation included) / (step · count · peak)
    cp_comm_s: float = 0.0  # the context-parallel ring's exchanges, exposed
    dequantize_flops: float = 0.0  # QLoRA: torchao's NF4 dequantisation, every rank's (in hfu)
    ep_comm_s: float = 0.0  # the expert-parallel all-to-alls, exposed


@dataclass(frozen=True)
class LayoutEstimate:
    """A feasible layout with its closed-form memory and time (``plan --verify`` sets a traced
    rank beside it: :class:`Verified`, in :attr:`LayoutPlan.verified`)."""

    choice: LayoutChoice
    layout: str
    memory: RankMemory
    time: StepTime
    train_days: float | None = None  # for the --tokens asked, at this layout's tokens/s


# ------------------------------------------------------------------------------- memory


def layer_activation_bytes(setup: PlanSetup, micro_batch: int, tp: int, sp: bool,
                           checkpoint: str, cp: int = 1, ep: int = 1) -> tuple[float, float]:
    """(kept per layer, transient) activation bytes of one micro-batch on one rank.

    ``none``: :func:`activation_memory`'s layer (+ 5·a·s²·b/t with eager attention);
    ``selective``: the same without the s² term; ``full``: the layer's input kept, and one
    layer's ``none`` bytes held while it is recomputed (the transient).  With ``cp``
    context-parallel ranks the layer is at s/cp tokens and, not checkpointed, keeps the ring's
    copy of its merged attention output (:mod:`tensorledger.napkin.context`).

    >>> from tensorledger.napkin.transformer import get_preset
    >>> from tensorledger.hardware import get_hardware
    >>> from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
    >>> s = PlanSetup(get_preset("tiny"), get_hardware("h100"), 2, 16, 4,
    ...               resolve_precision("fp32"), resolve_optimizer("adamw"), 80e9)
    >>> layer_activation_bytes(s, 2, 2, False, "none")    # 49,408 + 14,592 + 32,768
    (96768.0, 0.0)
    """
    model = _model(setup)
    plain, _ = model.activations(setup, micro_batch, tp, sp, False, cp, ep)
    s, a = setup.seq_len, setup.config.n_heads
    scores = 5.0 * a * s * s * micro_batch / tp if setup.attention == "eager" else 0.0
    copy = 0.0
    if cp > 1:  # the merged output's copy, per layer (napkin's ring_copy_bytes / L)
        ring = model.ring(setup, micro_batch, tp, sp, False, cp)
        copy = ring.ring_copy_bytes / setup.config.n_layers
    full_layer = plain.per_layer_bytes + scores + copy
    if checkpoint == "none":
        return full_layer, 0.0
    if checkpoint == "selective":
        return full_layer - scores, 0.0
    kept, _ = model.activations(setup, micro_batch, tp, sp, True, cp, ep)
    return float(kept.per_layer_bytes), full_layer


def rank_memory(setup: PlanSetup, choice: LayoutChoice, floor: bool = False) -> RankMemory:
    """Bytes of the busiest rank: the largest of the ranks holding the first stage, the last
    stage, and the most saved blocks (:func:`tensorledger.plan.stages.rank_loads`); with
    ``floor``, a lower bound: one micro-batch in flight on every stage."""
    model = _model(setup)
    tp, pp, cp = choice.tp, choice.pp, choice.cp
    loads, _, _, _ = pipeline_ranks(setup, choice, floor)
    layer_rank = -(-model.layer_matrices // tp) + model.layer_norms
    dense_rank = -(-model.dense_layer_matrices // tp) + model.layer_norms
    layer_experts = 0
    if choice.ep > 1:  # the routed experts whole on each tp rank, E/ep of them
        routed = routed_params(setup.config)
        layer_experts = routed // choice.ep
        layer_rank = -(-(model.layer_matrices - routed) // tp) + model.layer_norms \
            + layer_experts
    embedding_params = -(-model.embeddings // tp) + model.embedding_whole
    head_params = -(-model.head // tp) + model.final_norm
    kept, transient = layer_activation_bytes(setup, choice.micro_batch, tp, choice.sp,
                                             choice.checkpoint, cp, choice.ep)
    closed, logits = model.activations(setup, choice.micro_batch, tp, choice.sp,
                                       choice.checkpoint == "full", cp, choice.ep)
    embedding = float(closed.embeddings_bytes)  # the token ids (and positions), first stage
    # a LoRA step's first block saves less: its input needs no gradient (napkin.adapters)
    embedding -= model.first_layer_less.get(
        (choice.micro_batch, tp, choice.sp, choice.checkpoint == "full", cp, choice.ep), 0.0)
    shard = choice.shard_ranks
    sharded = shard > 1
    # FSDP2's ZeRO-2 keeps every tensor's shard at rest (ZeRO-3's states) and holds the whole
    # gathered stage from forward to backward; ZeRO-3 holds two layers (one prefetched)
    zero = 3 if choice.zero == 2 and sharded else choice.zero
    two_layers = 2.0 * layer_rank * setup.precision.param_bytes
    # under a pipeline torch's stages turn FSDP's gradient sync off until the step's last
    # backward: the gradients add up unsharded, reduce-scattered once at the end
    piped_fsdp = pp > 1 and sharded and choice.zero >= 2

    adapted: dict[int, tuple[int, float]] = {}  # per pipeline rank: adapters, frozen bytes

    def stage(load: RankLoad) -> tuple[int, tuple[float, float, float, float, float]]:
        # the first stage's leading dense blocks of a mixture of experts (as many as it holds)
        dense = min(model.dense_layers, load.layers) if load.first else 0
        params = (load.layers * layer_rank + (embedding_params if load.first else 0)
                  + (head_params if load.last else 0) - dense * (layer_rank - dense_rank))
        experts = (load.layers - dense) * layer_experts
        if model.adapters is not None:  # a LoRA fine-tune (of no mixture of experts: refused)
            trained, frozen, states, grads, gathered = model.lora_stage(setup, choice, load,
                                                                        zero)
            adapted[load.rank] = (trained, frozen)
            params += trained
        else:
            states, grads = model.states_bytes(setup, params - experts, shard, zero)
            if experts:  # sharded over the ZeRO group / ep (FSDP over fsdp), replicated at ZeRO-0
                group = expert_choice(choice).shard_ranks
                more = model.states_bytes(setup, padded_experts(experts, group, choice.ep,
                                                                setup.config), group, zero)
                states, grads = states + more[0], grads + more[1]
            whole = float(params * setup.precision.param_bytes)
            gathered = (whole if choice.zero == 2 else min(two_layers, whole)
                        if choice.zero == 3 else 0.0) if sharded else 0.0
        activations = (load.held_layers * kept + embedding * load.first_in_flight
                       + transient)
        loss = logits if load.last else 0.0
        return params, (states, grads, gathered, activations, loss)

    priced = [(load, *stage(load)) for load in loads]
    load, params, parts = max(priced, key=lambda item: sum(item[2]) - item[2][1])
    name = ("only" if pp == 1 else "first" if load.first and not load.last
            else "last" if load.last and not load.first
            else "first and last" if load.first else "middle")
    states, grads, gathered, activations, loss = parts
    # DDP (and ZeRO-1 under it) reduces the gradients through buckets of its own, as big as
    # the gradients (gradient_as_bucket_view is off by default); FSDP under a pipeline holds
    # them unsharded, and its sharded ones only once the step's activations are gone
    trained, frozen = adapted.get(load.rank, (0, 0.0))
    grad_bytes = (float(trained * ADAPTER_BYTES) if model.adapters is not None
                  else float(params * setup.precision.grad_bytes))
    buckets = grad_bytes if (choice.zero <= 1 and choice.dp > 1) or piped_fsdp else 0.0
    dense = min(model.dense_layers, load.layers) if load.first else 0
    expert_params = (load.layers - dense) * layer_experts
    if choice.ep > 1 and choice.dp == choice.ep and not piped_fsdp:
        # DDP leaves the experts out of its buckets when no other rank holds them
        buckets -= float(expert_params * setup.precision.grad_bytes)
    # a tensor-parallel rank's share of the embedding's gradient is a view of the gradient of
    # the whole vocabulary (DTensor works it out replicated), which lives as long as it does.
    # Without a pipeline it appears at the end of backward, once the activations are gone;
    # under one the first stage's later forwards run beside it
    if tp > 1 and pp > 1 and load.first and model.adapters is None:  # a frozen one has none
        whole = float((model.embeddings - -(-model.embeddings // tp))
                      * setup.precision.grad_bytes)
        if piped_fsdp:
            buckets += whole
        else:
            states += whole
            grads += whole
    temporary = _forward_temporaries(setup, choice, closed, load.layers, load.last)
    held = states + gathered + buckets - (grads if piped_fsdp else 0.0)
    # a pipeline's later forwards run after its first backward (1F1B): gradients are there
    # a model profiled whole is one FSDP unit: resharded once its forward ends (ZeRO-3), its
    # sharded gradients there only once its backward has freed the saved tensors
    whole_unit = isinstance(setup.config, ModelProfile) and setup.config.whole and sharded
    resharded = gathered if whole_unit and choice.zero == 3 else 0.0
    forward = (held - (grads if pp == 1 else 0.0) + activations - transient + loss
               + temporary - resharded)
    backward = held - (grads if whole_unit else 0.0) + activations + loss
    total = max(forward, backward)
    return RankMemory(stage=name, stage_params=params, states_bytes=states,
                      gathered_bytes=gathered, buffers_bytes=buckets,
                      activations_bytes=activations, logits_bytes=loss, total_bytes=total,
                      forward_peak_bytes=forward, backward_peak_bytes=backward,
                      temporary_bytes=temporary, layers=load.layers, rank=load.rank,
                      adapter_params=trained, frozen_bytes=frozen,
                      expert_params=expert_params)


def _forward_temporaries(setup: PlanSetup, choice: LayoutChoice, closed: ActivationMemory,
                         layers: int, last: bool) -> float:
    """What the forward pass holds at the loss besides the saved tensors: the logits (the
    rank's 1/t, the gathered whole, and under autocast their fp32 copy for the log-softmax),
    and under autocast with checkpointing the bf16 casts of every checkpointed layer's
    weights, which autocast's cache keeps until the forward ends (without checkpointing they
    are saved, and counted with the activations)."""
    config, c = setup.config, closed.dtype_bytes
    n = choice.micro_batch * setup.seq_len // choice.cp
    logits = 0.0
    if last and isinstance(config, ModelProfile) and config.loss_temporaries:  # a factory's
        logits = n * config.loss_temporaries[choice.sp].at(choice.tp)
    elif last:
        logits = float(n * config.vocab_size * c)  # gathered
        if choice.tp > 1:
            logits += n * config.vocab_size * c / choice.tp  # the rank's own columns
        if closed.autocast:
            logits += n * config.vocab_size * 4.0  # upcast for the log-softmax
    cache = 0.0
    # autocast caches the casts of weights that need a gradient alone: none of a frozen base
    if closed.autocast and choice.checkpoint == "full" and _model(setup).adapters is None:
        cache = float(layers * (-(-_model(setup).layer_matrices // choice.tp)) * c)
    return logits + cache


# --------------------------------------------------------------------------------- time


def step_time(setup: PlanSetup, choice: LayoutChoice, memory: RankMemory) -> StepTime:
    """Seconds per step of ``choice`` (see the module's docstring for every term)."""
    model = _model(setup)
    tokens = setup.tokens_per_step
    model_flops = float(model.flops_per_token) * tokens
    if choice.checkpoint == "full":
        recompute = float(model.forward_per_token) * tokens
    elif choice.checkpoint == "selective":
        recompute = float(model.attention_forward_per_token) * tokens
    else:
        recompute = 0.0
    peak = setup.hardware.peak_flop_per_s(setup.dtype)
    m = choice.accumulation
    p = setup.precision
    bytes_micro = memory.stage_params * 2 * (p.param_bytes + p.grad_bytes)
    dequantize = 0.0
    counts = model.adapters
    if counts is not None:
        # the frozen base read in forward and backward, the fp32 adapters and their
        # gradients as a full fine-tune's; QLoRA dequantises each NF4 weight at each use
        # (forward, backward, and a recomputed forward), writing and reading it in the
        # stored dtype
        uses = 3 if choice.checkpoint == "full" else 2
        quantized = memory.layers * counts.layer_quantized / choice.tp
        bytes_micro = (2 * memory.frozen_bytes
                       + memory.adapter_params * 2 * (ADAPTER_BYTES + ADAPTER_BYTES)
                       + uses * 2 * p.param_bytes * quantized)
        dequantize = (uses * quantized * NF4_DEQUANTIZE_FLOPS_PER_ELEMENT * m * setup.count)
    flops_micro = (model_flops + recompute + dequantize) / (setup.count * m)
    intensity = flops_micro / bytes_micro
    efficiency = matmul_efficiency(setup, choice)
    micro_s = max(flops_micro / (peak * efficiency),
                  bytes_micro / setup.hardware.memory_bandwidth_bytes_per_s)
    compute_s = m * micro_s
    _, imbalance, layers, bubble = pipeline_ranks(setup, choice)
    tokens_micro = choice.micro_batch * setup.seq_len // choice.cp
    tp_comm = 0.0
    if choice.tp > 1:
        closed, _ = model.activations(setup, choice.micro_batch, 1, False, False)
        size = float(closed.dtype_bytes * tokens_micro * setup.config.d_model)
        # recomputing a checkpointed block stops once its saved tensors are back (torch's
        # non-reentrant checkpoint): the attention output's all-reduce is redone, the MLP's
        # not; with SP the two input gathers and the one reduce-scatter (1.5 pairs)
        per_layer = 4.0 + ((1.5 if choice.sp else 1.0) if choice.checkpoint == "full" else 0.0)
        if isinstance(setup.config, ModelProfile):  # as measured: its collectives, its bytes
            per_layer, size = tp_collectives(setup.config, choice.sp,
                                             choice.checkpoint == "full", tokens_micro)
        if choice.sp:
            one = (collective_s(setup, CollectiveKind.ALL_GATHER, size, choice.tp, 1)
                   + collective_s(setup, CollectiveKind.REDUCE_SCATTER, size, choice.tp, 1))
        else:
            one = collective_s(setup, CollectiveKind.ALL_REDUCE, size, choice.tp, 1)
        tp_comm = layers * per_layer * m * one
    # FSDP2 recomputes a checkpointed unit inside its backward, on the parameters that
    # backward gathered: two gathers per micro-batch either way
    dp_comm = dp_comm_s(setup, choice, memory, 2,
                         params=memory.stage_params - memory.expert_params)
    ep_comm = 0.0
    if choice.ep > 1:  # the experts' gradients over dp / ep ranks, and the all-to-alls
        group = expert_choice(choice)
        dp_comm += dp_comm_s(setup, group, memory, 2, params=padded_experts(
            memory.expert_params, group.shard_ranks, choice.ep, setup.config))
        ep_comm = ep_comm_s(setup, choice, layers)
    dp_exposed = max(0.0, dp_comm - compute_s) + dp_comm / layers
    cp_comm = layers * m * ring_layer_s(setup, choice) if choice.cp > 1 else 0.0
    step_s = compute_s * imbalance * (1 + bubble) + tp_comm + cp_comm + ep_comm + dp_exposed
    return StepTime(model_flops=model_flops, recompute_flops=recompute,
                    intensity_flop_per_byte=intensity,
                    memory_bound=intensity < peak * efficiency
                    / setup.hardware.memory_bandwidth_bytes_per_s, compute_s=compute_s,
                    imbalance=imbalance, bubble_to_compute=bubble, tp_comm_s=tp_comm,
                    dp_comm_s=dp_comm, dp_exposed_s=dp_exposed, step_s=step_s,
                    tokens_per_s=tokens / step_s,
                    mfu=model_flops / (step_s * setup.count * peak), efficiency=efficiency,
                    hfu=(model_flops + recompute + dequantize) / (step_s * setup.count * peak),
                    cp_comm_s=cp_comm, dequantize_flops=dequantize, ep_comm_s=ep_comm)


def estimate(setup: PlanSetup, choice: LayoutChoice, tokens: float | None = None
             ) -> LayoutEstimate:
    """Memory and time of one layout; ``tokens`` adds the days to train on them."""
    memory = rank_memory(setup, choice)
    time = step_time(setup, choice, memory)
    days = None if tokens is None else tokens / time.tokens_per_s / 86400.0
    return LayoutEstimate(choice=choice, layout=choice.describe(), memory=memory, time=time,
                          train_days=days)
