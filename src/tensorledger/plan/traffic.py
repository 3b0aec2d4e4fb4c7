"""What a traced check of a layout compares: the bytes one rank sends in a step, in closed form
(:func:`sent_bytes`), and the closed form's figures beside the traced rank's (:class:`Verified`,
which :func:`tensorledger.ledger.plan.verify_choice` fills).

>>> from tensorledger.hardware import get_hardware
>>> from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
>>> from tensorledger.napkin.transformer import get_preset
>>> setup = PlanSetup(get_preset("tiny"), get_hardware("h100"), 2, 32, 2,
...                   resolve_precision("fp32"), resolve_optimizer("adamw"), 80e9)
>>> ddp = sent_bytes(setup, LayoutChoice(dp=2, tp=1, pp=1))
>>> ddp.tensor_parallel_bytes, ddp.data_parallel_bytes == ddp.total_bytes  # one all-reduce
(0.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorledger.napkin.adapters import ADAPTER_BYTES
from tensorledger.plan.estimate import LayoutChoice, PlanSetup, rank_memory
from tensorledger.plan.experts import (
    alltoall_buffer_bytes,
    alltoall_calls,
    counts_buffer_bytes,
    counts_calls,
    expert_choice,
    moe_layers,
    padded_experts,
)
from tensorledger.plan.model import search_model as _model
from tensorledger.plan.profile import ModelProfile

__all__ = ["SentBytes", "Verified", "sent_bytes"]


@dataclass(frozen=True)
class Verified:
    """One layout's closed-form figures beside its traced rank's, for one micro-batch step
    (:func:`tensorledger.ledger.plan.verify_choice` traces it)."""

    layout: str
    traced_layout: str
    closed_state_bytes: float
    traced_state_bytes: int
    closed_activation_bytes: float
    traced_activation_bytes: int
    closed_total_bytes: float
    traced_peak_bytes: int
    closed_sent_bytes: float
    traced_sent_bytes: int
    traced_peak_by_category: dict[str, int] = field(default_factory=dict)  # what the peak holds
    traced_peak_op: str = ""  # the op at the traced peak, and its phase

    def errors(self) -> dict[str, float]:
        """(closed − traced) / traced for each figure."""
        pairs = {"state": (self.closed_state_bytes, self.traced_state_bytes),
                 "activations": (self.closed_activation_bytes, self.traced_activation_bytes),
                 "peak": (self.closed_total_bytes, self.traced_peak_bytes),
                 "sent": (self.closed_sent_bytes, self.traced_sent_bytes)}
        return {name: (closed - traced) / traced if traced else 0.0
                for name, (closed, traced) in pairs.items()}


@dataclass(frozen=True)
class SentBytes:
    """Bytes one rank sends in one step (forward and backward of its micro-batches, the
    optimizer step), by the group they cross, in the ring convention of
    :mod:`tensorledger.napkin.parallel`."""

    data_parallel_bytes: float
    tensor_parallel_bytes: float
    total_bytes: float
    pipeline_bytes: float = 0.0  # the stream and its gradient between stages
    context_parallel_bytes: float = 0.0  # the ring's keys, values and their gradients
    expert_parallel_bytes: float = 0.0  # the token-slots' all-to-alls (tensorledger.plan.experts)


def sent_bytes(setup: PlanSetup, choice: LayoutChoice) -> SentBytes:
    """What one rank of ``choice`` sends in a step of its ``accumulation`` micro-batches
    (one, without a pipeline), as torch.distributed's layouts issue it (the traced ranks'
    collectives, item by item); under a pipeline, the rank of the busiest stage
    (:func:`rank_memory`), with that stage's parameters and layers:

    data parallel, G and W the rank's gradient and parameter bytes (its tensor-parallel part),
    s the shard group, r = dp/s its replicas:

    - ZeRO-0 (DDP): all-reduce G, 2(N−1)/N·G;
    - ZeRO-1 (DDP + ``ZeroRedundancyOptimizer``): the same, then every parameter broadcast from
      its owner: W in all;
    - ZeRO-2: all-gather W once, reduce-scatter G: (s−1)/s·(W + G);
    - ZeRO-3: all-gather W in forward and again in backward but for the root unit (the
      embedding, head and final norm, which FSDP2 keeps gathered): (s−1)/s·(2W − root + G);
    - replicas (HSDP) all-reduce the gradient shard: 2(r−1)/r·G/s;
    - under a pipeline all of it once a step, but ZeRO-3's gathers under 1F1B: every unit
      but the root m + 1 times, (s−1)/s·((m+1)(W − root) + root + G).

    tensor parallel, n = b·s tokens, d the width, L layers, per block half (attention, MLP)
    and the embedding and head:

    - without SP: an all-reduce of the half's output in forward and of its input gradient in
      backward (4·L), the embedding's output and the head's input gradient (2), each
      2(t−1)/t·n·d; the logits gathered, (t−1)/t·n·V;
    - with SP: each of those 2·L + 1 all-reduces in each direction is a reduce-scatter and
      an all-gather, (t−1)/t·n·d each; the norms' weight gradients are partial sums that AdamW
      all-reduces 3 times each (once, before FSDP reduce-scatters them, under ZeRO-2/3):
      3·(2·L + 1) × 2(t−1)/t·d·bytes;
    - with full recomputation each block's recompute stops once its saved tensors are back:
      it redoes the attention output's all-reduce (with SP, both input gathers and the
      attention output's reduce-scatter), not the MLP's.

    The tensor-parallel bytes are per micro-batch (× m), the first stage's with the
    embedding's, the last's with the head's and the logits; the norms' once a step.

    context parallel: napkin's ring (:func:`tensorledger.napkin.context.context_parallel_rank`:
    the keys and values all-gathered in forward and backward, their fp32 gradients passed
    round the ring) for each micro-batch, of the rank's share of the layers; the tokens of
    every term above are the rank's s/cp.

    pipeline: each micro-batch's stream (b·s·d, ÷ t under SP) sent forward by every stage
    but the model's last and its gradient backward by every stage but the first.

    expert parallel (:mod:`tensorledger.plan.experts`): each MoE layer's dispatch and combine
    all-to-alls of the T·k token-slots (d values each, the stream's width in the dispatch, the
    compute dtype's in the combine) in forward, their gradients in
    backward, the forward's again under full recomputation (and before each dispatch the E
    int64 counts), (ep−1)/ep of each leaving the rank
    (balanced routing), per micro-batch; the experts' own parameters are reduced over the dp/ep
    ranks holding them (ZeRO over shard/ep), the rest as above.

    Widths: the parameter dtype; under autocast the block outputs and logits are bf16 (and
    their gradients, where SP gathers them back), the stream fp32 (the embedding's output, the
    norms' outputs, their gradients).
    """
    model = _model(setup)
    p = setup.precision
    tp, pp, m, v = choice.tp, choice.pp, choice.accumulation, choice.chunks
    memory = rank_memory(setup, choice)
    params = memory.stage_params  # the rank's TP part of its stage
    # the stages the rank holds: the first (the embedding) and the last (the head and the
    # final norm) of the whole model, or neither
    first = memory.stage in ("only", "first", "first and last")
    last = memory.stage in ("only", "last", "first and last")
    layers = memory.layers
    root = ((-(-model.embeddings // tp) if first else 0)
            + (-(-model.head // tp) + model.final_norm if last else 0))

    def ring(n: int) -> float:
        return (n - 1) / n

    def data_parallel(choice: LayoutChoice, grads: float, weights: float,
                      root_bytes: float) -> float:
        s, r = choice.shard_ranks, choice.replicas
        if choice.zero == 0:
            dp = 2 * ring(choice.dp) * grads
        elif choice.zero == 1:
            dp = 2 * ring(s) * grads + weights
        elif choice.zero == 2:
            dp = ring(s) * (weights + grads)
        elif pp == 1:
            dp = ring(s) * (2 * weights - root_bytes + grads)
        else:  # torch's 1F1B: the units but the root gathered m + 1 times, reduced once
            dp = ring(s) * ((m + 1) * (weights - root_bytes) + root_bytes + grads)
        if choice.zero >= 2:
            dp += 2 * ring(r) * grads / s
        return dp

    # the experts' gradients go round the dp / ep ranks holding the same experts (ZeRO over
    # shard / ep), the other parameters' round the data-parallel group as without experts
    experts = memory.expert_params
    grads, weights = p.grad_bytes * (params - experts), p.param_bytes * (params - experts)
    root_bytes = p.param_bytes * root  # the root unit's (its parameters gathered once)
    if model.adapters is not None:  # a LoRA step: the adapters' fp32 gradients alone
        grads = float(ADAPTER_BYTES * memory.adapter_params)
        weights = memory.frozen_bytes + grads
        if last:  # the head's adapter, in the root unit
            root_bytes += ADAPTER_BYTES * -(-model.adapters.head_params // tp)
    dp = data_parallel(choice, grads, weights, root_bytes)
    if experts:
        group = expert_choice(choice)
        count = padded_experts(experts, group.shard_ranks, choice.ep, setup.config)
        dp += data_parallel(group, p.grad_bytes * count, p.param_bytes * count, 0.0)
    closed, _ = model.activations(setup, choice.micro_batch, 1, False, False)
    compute = closed.dtype_bytes
    stream = 4 if closed.autocast else compute
    n, d = choice.micro_batch * setup.seq_len // choice.cp, setup.config.d_model
    tp_bytes = 0.0
    if tp > 1:
        embedding, head = (1 if first else 0), (1 if last else 0)
        logits = head * ring(tp) * n * setup.config.vocab_size * compute
        if choice.sp:
            halves = 2 * layers + head
            # forward gathers the stream into each half and the head, and scatters each
            # half's output and the embedding's; backward mirrors it, dtype for dtype
            forward = ring(tp) * n * d * (halves * stream + 2 * layers * compute
                                          + embedding * stream)
            backward = forward
            if choice.checkpoint == "full":  # each block's two gathers and one scatter again
                backward += ring(tp) * n * d * layers * (2 * stream + compute)
            # the norms' partial gradients, once a step: reduced once before FSDP takes
            # them, else AdamW all-reduces each three times
            # (AdamW's on the fp32 masters where the recipe keeps them)
            uses, width = ((1, p.param_bytes) if choice.zero >= 2 and choice.shard_ranks > 1
                           else (3, p.master_bytes or p.param_bytes))
            norms = uses * halves * 2 * ring(tp) * d * width
            tp_bytes = m * (forward + backward + logits) + norms
        else:
            forward = 2 * ring(tp) * n * d * (2 * layers * compute + embedding * stream)
            backward = 2 * ring(tp) * n * d * (2 * layers + head) * stream
            if choice.checkpoint == "full":  # each block's attention all-reduce again
                backward += 2 * ring(tp) * n * d * layers * compute
            tp_bytes = m * (forward + backward + logits)
    if tp > 1 and isinstance(setup.config, ModelProfile):  # as measured at two ranks
        tp_bytes = _profiled_tp_bytes(setup.config, choice, layers, last)
    pp_bytes = 0.0
    if pp > 1:
        # each micro-batch's stream forward out of every stage but the model's last, its
        # gradient backward out of every stage but the first (the rank's sequence shard
        # under SP); of the rank's v stages the first rank's first and the last rank's
        # last each send one way only
        boundary = n // (tp if choice.sp else 1) * d * stream
        sends = 2 * v - (1 if first else 0) - (1 if last else 0)
        pp_bytes = m * sends * boundary
    cp_bytes = 0.0
    if choice.cp > 1:  # napkin's ring (all layers, one micro-batch), for the rank's layers
        exchange = model.ring(setup, choice.micro_batch, tp, choice.sp,
                              choice.checkpoint == "full", choice.cp)
        cp_bytes = m * exchange.sent_bytes * layers / setup.config.n_layers
    ep_bytes = 0.0
    if choice.ep > 1:  # balanced: (ep − 1)/ep of each all-to-all's T·k slots leave the rank
        ep_bytes = (m * moe_layers(setup.config, layers, first) * ring(choice.ep)
                    * (alltoall_calls(choice) * alltoall_buffer_bytes(setup, choice, stream)
                       + alltoall_calls(choice) * alltoall_buffer_bytes(setup, choice, compute)
                       + counts_calls(choice) * counts_buffer_bytes(setup)))
    return SentBytes(data_parallel_bytes=dp, tensor_parallel_bytes=tp_bytes,
                     total_bytes=dp + tp_bytes + pp_bytes + cp_bytes + ep_bytes,
                     pipeline_bytes=pp_bytes, context_parallel_bytes=cp_bytes,
                     expert_parallel_bytes=ep_bytes)


def _profiled_tp_bytes(profile: ModelProfile, choice: LayoutChoice, layers: int,
                       last: bool) -> float:
    """A profile's tensor-parallel bytes: what a rank of two sent per token, per block and
    outside them (the embedding, the head and its gathered logits, counted on the last stage),
    scaled to t ranks by the ring's 2·(t−1)/t (an all-reduce sends 2·(t−1)/t of its payload,
    an all-gather or reduce-scatter (t−1)/t of the whole: each twice its share at two)."""
    key = (choice.sp, choice.checkpoint == "full")
    tokens = choice.micro_batch * profile.seq_len
    per_token = layers * profile.tp_sent_per_token.get(key, 0.0) + (
        profile.other_tp_sent_per_token.get(choice.sp, 0.0) if last else 0.0)
    scale = 2.0 * (choice.tp - 1) / choice.tp
    return choice.accumulation * tokens * per_token * scale
