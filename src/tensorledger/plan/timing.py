"""What a rank's step waits on besides its FLOPs at the peak, for the planner's closed forms
(:mod:`tensorledger.plan.estimate`): the share of the peak its matmuls reach, and the time of
its collectives — data-parallel reduction and gathers, the expert all-to-alls, the context
ring's exchange — priced on the links each group crosses (ring formulas,
:func:`tensorledger.roofline.collectives.collective_time`), once per search and size.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tensorledger.napkin.adapters import ADAPTER_BYTES
from tensorledger.plan.experts import (
    alltoall_buffer_bytes,
    alltoall_calls,
    counts_buffer_bytes,
    counts_calls,
    expert_matmul,
    moe_layers,
)
from tensorledger.plan.model import search_model as _model
from tensorledger.plan.profile import ModelProfile
from tensorledger.roofline.collectives import CollectiveKind, collective_time

if TYPE_CHECKING:
    from tensorledger.plan.estimate import LayoutChoice, PlanSetup, RankMemory

__all__ = ["collective_s", "dp_comm_s", "ep_comm_s", "matmul_efficiency", "ring_layer_s"]


def _per_node(setup: PlanSetup, ranks: int, stride: int) -> int:
    """Ranks of a group on one node when its members lie ``stride`` apart in the world."""
    per_node = setup.hardware.devices_per_node or 1
    return math.gcd(ranks, max(1, per_node // stride))


def collective_s(setup: PlanSetup, kind: CollectiveKind, size_bytes: float, ranks: int,
                  stride: int) -> float:
    if ranks == 1:
        return 0.0
    per_node = _per_node(setup, ranks, stride)
    key = (kind, size_bytes, ranks, per_node)
    cache = _model(setup).collectives
    time_s = cache.get(key)
    if time_s is None:
        time_s = collective_time(kind, size_bytes, ranks, setup.hardware,
                                 ranks_per_node=per_node).time_s
        cache[key] = time_s
    return time_s


def dp_comm_s(setup: PlanSetup, choice: LayoutChoice, memory: RankMemory, passes: int,
               *, params: float | None = None) -> float:
    """Data-parallel communication of one rank per step (see the module's docstring) of
    ``params`` parameters (the rank's stage's where not given); of a LoRA step, the adapters'
    gradients and the frozen base's gathers."""
    p = setup.precision
    if _model(setup).adapters is not None:
        grads = float(memory.adapter_params * ADAPTER_BYTES)
        weights = memory.frozen_bytes + grads
    else:
        count = memory.stage_params if params is None else params
        grads = p.grad_bytes * count
        weights = p.param_bytes * count
    m, tp = choice.accumulation, choice.tp
    if choice.zero == 0:
        return collective_s(setup, CollectiveKind.ALL_REDUCE, grads, choice.dp, tp)
    shard = choice.shard_ranks  # the ZeRO group with the context-parallel ranks inside it
    scatter = collective_s(setup, CollectiveKind.REDUCE_SCATTER, grads, shard, tp)
    gather = collective_s(setup, CollectiveKind.ALL_GATHER, weights, shard, tp)
    if choice.zero == 1:
        total = scatter + gather
    elif choice.pp > 1:
        # torch's stages reduce once a step; ZeRO-3's units are gathered m + 1 times (1F1B)
        total = scatter + (gather if choice.zero == 2 else (m + 1) * gather)
    elif choice.zero == 2:
        total = m * scatter + gather
    else:
        total = m * (scatter + passes * gather)
    replicas = collective_s(setup, CollectiveKind.ALL_REDUCE, grads / shard, choice.replicas,
                             tp * shard)
    return total + replicas


def ep_comm_s(setup: PlanSetup, choice: LayoutChoice, layers: int) -> float:
    """Seconds of the all-to-alls of the slowest rank's ``layers`` blocks (its MoE ones: the
    model's leading dense blocks left out without a pipeline) a step, exposed: each MoE layer
    and micro-batch :func:`tensorledger.plan.experts.alltoall_calls` of them, over the ep group
    (its ranks tp apart)."""
    closed, _ = _model(setup).activations(setup, choice.micro_batch, 1, False, False)
    stream = 4 if closed.autocast else closed.dtype_bytes
    one = sum(collective_s(setup, CollectiveKind.ALL_TO_ALL,
                            alltoall_buffer_bytes(setup, choice, width), choice.ep, choice.tp)
              for width in (stream, closed.dtype_bytes))  # a dispatch and a combine
    counts = collective_s(setup, CollectiveKind.ALL_TO_ALL, counts_buffer_bytes(setup),
                           choice.ep, choice.tp)
    blocks = moe_layers(setup.config, layers, choice.pp == 1)
    return blocks * choice.accumulation * (alltoall_calls(choice) * one
                                           + counts_calls(choice) * counts)


def ring_layer_s(setup: PlanSetup, choice: LayoutChoice) -> float:
    """Seconds of one layer's ring exchange for one micro-batch, exposed (torch's
    all-gather rotation waits for the keys and values before the attention runs): the
    forward's all-gather of the rank's keys and values (K bytes each), the backward's again,
    and the cp passes of their fp32 gradients (G bytes) to the ring's next rank, over the
    context-parallel group (its ranks tp apart)."""
    ring = _model(setup).ring(setup, choice.micro_batch, choice.tp, choice.sp,
                              choice.checkpoint == "full", choice.cp)
    cp, tp = choice.cp, choice.tp
    gather = collective_s(setup, CollectiveKind.ALL_GATHER, float(cp * ring.kv_buffer_bytes),
                           cp, tp)
    passes = collective_s(setup, CollectiveKind.SEND_RECV, float(ring.grad_buffer_bytes), cp,
                           tp)
    return 2 * gather + cp * passes


def matmul_efficiency(setup: PlanSetup, choice: LayoutChoice) -> float:
    """The share of the dense peak a rank's matmuls reach: ``setup.efficiency`` when set, else
    the chip's published fraction at the size of the layer's largest matmul on the rank (the
    MLP's up-projection of one micro-batch, 2·b·s·h·d_ff/t FLOPs), else 1 (a chip with no
    published efficiencies: the ideal peak).  A mixture of experts' routed FLOPs take the
    fraction at one expert's up-projection (:func:`tensorledger.plan.experts.expert_matmul`:
    T·k·ep/E rows an expert), blended with the rest by their share of the FLOPs.

    >>> from tensorledger.hardware import get_hardware
    >>> from tensorledger.napkin.transformer import get_preset
    >>> from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
    >>> from tensorledger.plan.estimate import LayoutChoice, PlanSetup
    >>> setup = PlanSetup(get_preset("llama-3-8b"), get_hardware("h100"), 8, 4096, 64,
    ...                   resolve_precision("bf16"), resolve_optimizer("adamw"), 80e9)
    >>> choice = LayoutChoice(dp=8, tp=1, pp=1, zero=3, shard=8, accumulation=8)
    >>> round(matmul_efficiency(setup, choice), 3)  # 2·4096·4096·14336 FLOPs ≥ 4096³·2: 80.3%
    0.803
    """
    if setup.efficiency is not None:
        return setup.efficiency
    published = setup.hardware.efficiency
    if published is None:
        return 1.0
    config = setup.config
    if isinstance(config, ModelProfile):
        flops = (choice.micro_batch * (setup.seq_len // choice.cp)
                 * config.largest_matmul_flops_per_token / choice.tp)
    else:
        flops = (2.0 * choice.micro_batch * (setup.seq_len // choice.cp) * config.d_model
                 * config.d_ff / choice.tp)
    dense = published.matmul_fraction(setup.dtype, flops)
    share, experts = expert_matmul(setup, choice, _model(setup).flops_per_token)
    if not share:
        return dense
    # a mixture of experts: the routed experts' FLOPs at their grouped GEMM's rows an expert,
    # the rest as a dense layer's (the time-weighted blend of the two)
    return 1.0 / ((1.0 - share) / dense
                  + share / published.matmul_fraction(setup.dtype, experts))
