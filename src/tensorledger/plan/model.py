"""What a search asks of a model, worked out once per search: parameter counts by part, FLOPs
per token, saved activations and priced collectives, from the reference model's closed form or
a measured :class:`~tensorledger.plan.profile.ModelProfile`.

**A LoRA (QLoRA) fine-tune** (``PlanSetup.lora``, a preset's reference model; what
:mod:`tensorledger.napkin.adapters` derives):

- state: the frozen base in its stored dtype (the recipe's parameter bytes; under QLoRA each
  block matrix of whole NF4 blocks in torchao's NF4, 0.5 byte an element plus its block
  scales, the embedding, norms and head as stored), sharded as the parameters are (ZeRO-3 and
  FSDP2's ZeRO-2); the adapters in fp32 (peft's, over a 16-bit base too) with fp32 gradients
  and optimizer state by :func:`zero_bytes`, sharded by stage like a full fine-tune's.  Under
  TP both are split 1/t, as the linears they sit on (assumed: a column-parallel linear's B
  split by rows, a row-parallel one's A by columns; the r-value all-reduce after a
  row-parallel A is not priced).  FSDP gathers the base as stored (NF4 under QLoRA) and the
  adapters; DDP's buckets and a pipeline's unsharded gradients are the adapters' alone.
- activations: :func:`tensorledger.napkin.adapters.lora_activation_memory` (no frozen
  weight saves its input; each adapter its input and its r-value intermediate); the first
  block saves less (its input needs no gradient), counted with the first stage.
- FLOPs: no frozen weight's gradient: 6·N − 2·N = 4·N a token for the base (attention as a
  full fine-tune's), 6·n for the n adapter parameters (2·n in a recomputed forward); QLoRA
  adds torchao's dequantisation of each NF4 weight at each use (forward, backward, a
  recomputed forward), (2 + 2/64) FLOPs an element per micro-batch, in HFU but not MFU
  (torchao's ops as the trace counts them; the first block's q, k, v, whose input needs no
  gradient, are not dequantised in backward: counted all the same).
- weight traffic: the frozen bytes read twice, the adapters as a full fine-tune's, and under
  QLoRA the dequantised weight written and read in the stored dtype at each use.
- data-parallel communication: the adapters' fp32 gradients reduced; FSDP still gathers the
  frozen base (as stored) and the adapters.  No context parallelism is searched.

Traced LoRA ranks under DDP, FSDP2's ZeRO-2 and 3 and HSDP (``plan --verify``, peft's
adapters on fake ranks) agree with this to the byte in the bytes sent and the saved
activations, and within AdamW's step counters in the state (tests/plan/test_plan_lora.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, cast

from tensorledger.napkin.activations import ActivationMemory, activation_memory
from tensorledger.napkin.adapters import (
    ADAPTER_BYTES,
    NF4_DEQUANTIZE_FLOPS_PER_ELEMENT,
    AdapterCounts,
    adapter_counts,
    lora_activation_memory,
)
from tensorledger.napkin.context import ContextParallelRank, context_parallel_rank
from tensorledger.napkin.parallel import zero_bytes
from tensorledger.napkin.recipes import resolve_precision
from tensorledger.napkin.transformer import (
    forward_flops_per_token,
    parameter_count,
    transformer_training_flops,
)
from tensorledger.plan.experts import moe_layer_saved_bytes
from tensorledger.plan.profile import ModelProfile, profile_activations
from tensorledger.roofline.collectives import CollectiveKind

if TYPE_CHECKING:
    from tensorledger.plan.estimate import LayoutChoice, PlanSetup
    from tensorledger.plan.stages import RankLoad

__all__ = ["SearchModel", "search_model"]

#: The adapters' recipe: fp32 parameters, gradients and optimizer state.
ADAPTER_PRECISION = resolve_precision("fp32")


class SearchModel:
    """Parameter counts and FLOPs of a config at a sequence length, computed once."""

    def __init__(self, setup: PlanSetup) -> None:
        self.states: dict[tuple[int, int, int], tuple[float, float]] = {}
        self.saved: dict[tuple[int, int, bool, bool, int, int],
                         tuple[ActivationMemory, float]] = {}
        self.rings: dict[tuple[int, int, bool, bool, int], ContextParallelRank] = {}
        # pipeline figures and rank loads of a (schedule, p, m, v, stage cut), worked out once
        self.pipelines: dict[tuple[object, ...], object] = {}
        self.collectives: dict[tuple[CollectiveKind, float, int, int], float] = {}
        # a LoRA fine-tune: the adapters' counts, what the first block saves less per
        # micro-batch (by the activations' key), torchao's NF4 dequantisation FLOPs of a use
        self.adapters: AdapterCounts | None = None
        self.first_layer_less: dict[tuple[int, int, bool, bool, int, int], float] = {}
        self.dequantize_flops_per_use = 0.0
        config = setup.config
        self.embedding_whole = 0
        self.dense_layers = 0  # a mixture of experts' leading dense blocks (DeepSeek-V3: 3)
        self.dense_layer_matrices = 0  # the matrices of one of them
        if isinstance(config, ModelProfile):
            self._profiled(config)
            return
        counts = parameter_count(config)
        norm = config.d_model * (2 if config.norm == "layernorm" and config.bias else 1)
        self.layer_norms = 2 * norm
        self.layer_matrices = counts.per_layer_params - self.layer_norms
        self.embeddings = counts.embeddings_params
        self.head = counts.head_params
        self.final_norm = norm
        if config.moe is not None and config.moe.first_dense_layers:
            # what the dense blocks hold: the total less everything else (the multi-token
            # prediction depths are not planned)
            dense = self.dense_layers = config.moe.first_dense_layers
            rest = (counts.total_params - counts.mtp_params - counts.embeddings_params
                    - counts.head_params - norm
                    - (config.n_layers - dense) * counts.per_layer_params)
            self.dense_layer_matrices = rest // dense - self.layer_norms
        flops = transformer_training_flops(config, 1.0, setup.seq_len)
        forward = forward_flops_per_token(config, setup.seq_len)
        self.flops_per_token: float = flops.flops_per_token
        self.forward_per_token: float = forward.total_flops
        self.attention_forward_per_token: float = (forward.attention_scores_flops
                                            + forward.attention_values_flops)
        # the head's training FLOPs a token (tied or not, its matmul runs): 3 × 2·d·V
        self.head_flops_per_token: float = 6.0 * config.d_model * config.vocab_size
        if setup.lora is not None:
            self._adapted(setup, flops.matmul_params)

    def _adapted(self, setup: PlanSetup, matmul_params: int) -> None:
        """A LoRA fine-tune (see :mod:`tensorledger.plan.estimate`): no frozen weight's
        gradient (2·N a token fewer: 4·N for the base), the adapters' 6·n; the forward adds
        their 2·n."""
        assert setup.lora is not None and not isinstance(setup.config, ModelProfile)
        counts = adapter_counts(setup.config, setup.lora, round(setup.precision.param_bytes))
        self.adapters = counts
        d, v = setup.config.d_model, setup.config.vocab_size
        self.flops_per_token += 6.0 * counts.params - 2.0 * matmul_params
        self.forward_per_token += 2.0 * counts.params
        self.head_flops_per_token = 4.0 * d * v + 6.0 * counts.head_params
        # torchao dequantises every NF4 weight at each use: per micro-batch, not per token
        self.dequantize_flops_per_use = float(setup.config.n_layers * counts.layer_quantized
                                         * NF4_DEQUANTIZE_FLOPS_PER_ELEMENT)

    def _profiled(self, profile: ModelProfile) -> None:
        """Counts and FLOPs from a measured profile: the parts tensor parallelism splits
        stand where the closed form's matrices do, the whole ones where its norms do."""
        self.layer_norms = round(profile.block.whole)
        self.layer_matrices = round(profile.block.split)
        self.embeddings = round(profile.embedding.split)
        self.embedding_whole = round(profile.embedding.whole)
        self.head = round(profile.head.split)
        self.final_norm = round(profile.head.whole)
        self.flops_per_token = profile.flops_per_token()
        self.forward_per_token = profile.forward_flops_per_token()
        self.attention_forward_per_token = 0.0  # selective checkpointing is not profiled
        self.head_flops_per_token = 6.0 * profile.head.split

    def states_bytes(self, setup: PlanSetup, params: int, shard: int, zero: int
                     ) -> tuple[float, float]:
        """:func:`zero_bytes` total and its gradients' part, remembered: a search asks for
        few distinct ones."""
        key = (params, shard, zero)
        held = self.states.get(key)
        if held is None:
            z = zero_bytes(params, shard, zero, setup.precision, setup.optimizer)
            held = (float(z.total_bytes), float(z.grads_bytes))
            self.states[key] = held
        return held

    def adapter_states(self, setup: PlanSetup, params: int, shard: int, zero: int
                       ) -> tuple[float, float]:
        """The fp32 adapters' :func:`zero_bytes` total and gradients (peft keeps adapters
        in fp32 over a 16-bit base: fp32 gradients and optimizer state, no master copy)."""
        key = (-params, shard, zero)  # apart from the base recipe's (positive) keys
        held = self.states.get(key)
        if held is None:
            z = zero_bytes(params, shard, zero, ADAPTER_PRECISION, setup.optimizer)
            held = (float(z.total_bytes), float(z.grads_bytes))
            self.states[key] = held
        return held

    def lora_stage(self, setup: PlanSetup, choice: LayoutChoice, load: RankLoad, zero: int
                   ) -> tuple[int, float, float, float, float]:
        """A LoRA rank's (adapters, frozen bytes before sharding, state, its gradients,
        FSDP's gathered bytes): the frozen base in its stored dtype (NF4 under QLoRA) sharded
        with the parameters (``zero`` 3: ZeRO-3, and FSDP2's ZeRO-2), the fp32 adapters'
        recipe by :func:`zero_bytes`, both split over ``tp`` as their linears are."""
        counts = self.adapters
        assert counts is not None
        tp, width = choice.tp, setup.precision.param_bytes
        layer_frozen = counts.layer_frozen_bytes(width) / tp + self.layer_norms * width
        trained = -(-(load.layers * counts.layer_params
                      + (counts.head_params if load.last else 0)) // tp)
        frozen = (load.layers * layer_frozen
                  + (-(-self.embeddings // tp) * width if load.first else 0.0)
                  + ((-(-self.head // tp) + self.final_norm) * width if load.last else 0.0))
        shard = choice.shard_ranks
        states, grads = (self.adapter_states(setup, trained, shard, zero) if trained
                         else (0.0, 0.0))
        states += frozen / shard if zero >= 3 else frozen
        whole = frozen + trained * ADAPTER_BYTES
        two_layers = 2.0 * (layer_frozen + counts.layer_params / tp * ADAPTER_BYTES)
        gathered = (whole if choice.zero == 2 else min(two_layers, whole)
                    if choice.zero == 3 else 0.0) if shard > 1 else 0.0
        return trained, frozen, states, grads, gathered

    def activations(self, setup: PlanSetup, micro_batch: int, tp: int, sp: bool,
                    checkpointed: bool, cp: int = 1, ep: int = 1
                    ) -> tuple[ActivationMemory, float]:
        """The closed form at one micro-batch and split, and the loss end's bytes (final
        norm and loss), remembered: a search asks for few distinct ones.  With ``cp``
        context-parallel ranks, at s/cp tokens (:func:`context_parallel_rank`), the loss end
        keeping the targets' whole storage.  A mixture of experts' layers save its MLP part
        (:func:`tensorledger.plan.experts.moe_layer_saved_bytes`, ``ep`` expert-parallel
        ranks) in place of the dense MLP's."""
        key = (micro_batch, tp, sp, checkpointed, cp, ep)
        held = self.saved.get(key)
        if held is None and cp > 1:
            ring = self.ring(setup, micro_batch, tp, sp, checkpointed, cp)
            closed = _with_experts(setup, ring.activations, micro_batch, tp, checkpointed, cp,
                                   ep)
            held = (closed, float(closed.final_norm_bytes + closed.loss_bytes
                                  + ring.targets_kept_bytes))
            self.saved[key] = held
        if held is None:
            p = setup.precision
            autocast = p.autocast
            width = 4 if p.param_bytes == 4 and not autocast else 2
            if setup.lora is not None:  # a profile is refused with adapters (plan_setup)
                assert not isinstance(setup.config, ModelProfile)
                lora = lora_activation_memory(setup.config, setup.lora, micro_batch,
                                              setup.seq_len, width, checkpointed, tp=tp,
                                              sequence_parallel=sp, autocast=autocast)
                closed = lora.activations
                self.first_layer_less[key] = float(lora.first_layer_less_bytes)
            elif isinstance(setup.config, ModelProfile):
                closed = profile_activations(setup.config, micro_batch, setup.seq_len, tp, sp,
                                             checkpointed, width, autocast)
            else:
                closed = activation_memory(setup.config, micro_batch, setup.seq_len, width,
                                           checkpointed, tp=tp, sequence_parallel=sp,
                                           autocast=autocast)
                closed = _with_experts(setup, closed, micro_batch, tp, checkpointed, 1, ep)
            held = (closed, float(closed.final_norm_bytes + closed.loss_bytes))
            self.saved[key] = held
        return held

    def ring(self, setup: PlanSetup, micro_batch: int, tp: int, sp: bool, checkpointed: bool,
             cp: int) -> ContextParallelRank:
        """napkin's context-parallel rank (ring attention, flash kernel: keys and values
        exchanged by their own heads) of one micro-batch, remembered."""
        key = (micro_batch, tp, sp, checkpointed, cp)
        held = self.rings.get(key)
        if held is None:
            config = setup.config
            assert not isinstance(config, ModelProfile)  # the search keeps profiles at cp 1
            p = setup.precision
            width = 4 if p.param_bytes == 4 and not p.autocast else 2
            held = context_parallel_rank(config, micro_batch, setup.seq_len, cp,
                                         dtype_bytes=width, tp=tp, autocast=p.autocast,
                                         checkpointed=checkpointed, sequence_parallel=sp)
            self.rings[key] = held
        return held


def _with_experts(setup: PlanSetup, closed: ActivationMemory, micro_batch: int, tp: int,
                  checkpointed: bool, cp: int, ep: int) -> ActivationMemory:
    """The closed form with each layer's dense MLP (its saved bytes and, under autocast, its
    matrices' bf16 copies) replaced by the mixture of experts' (a dense model: as it is).  A
    checkpointed layer keeps its input alone, as without experts."""
    config = setup.config
    if isinstance(config, ModelProfile) or config.moe is None or checkpointed:
        return closed
    a = closed.dtype_bytes
    tokens = micro_batch * setup.seq_len // cp
    dense_copies = a * 3 * config.d_model * config.d_ff // tp if closed.autocast else 0
    moe, copies = moe_layer_saved_bytes(config, tokens, a, closed.autocast, tp, ep)
    delta = moe - closed.mlp_bytes_per_layer - dense_copies
    layers = config.n_layers
    return dataclasses.replace(
        closed, mlp_bytes_per_layer=moe - copies, per_layer_bytes=closed.per_layer_bytes + delta,
        layers_bytes=closed.layers_bytes + layers * delta,
        total_bytes=closed.total_bytes + layers * delta,
        weight_copies_bytes=closed.weight_copies_bytes + layers * (copies - dense_copies))


def search_model(setup: PlanSetup) -> SearchModel:
    return cast(SearchModel, setup.__dict__["_model"])

