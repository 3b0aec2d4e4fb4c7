"""Expert parallelism in the planner: which ``ep`` a layout may take, what a rank holds of the
routed experts, and the all-to-alls that carry the token-slots to them.

The convention is the traced :class:`~tensorledger.workload.layout.Layout`'s (mesh ``pp, dp,
fsdp, cp, ep, tp``; each ep rank runs its own batch): the ``ep`` ranks are taken from the
planner's ``dp`` data-parallel ranks (torchtitan borrows them the same way), so
count = dp · cp · tp · pp still holds, with ep dividing dp.  The trace's dp · fsdp · ep is the
planner's ``dp``, its fsdp · ep the planner's ``shard`` (ZeRO-2/3).

- A rank holds E/ep of every layer's routed experts, whole on each tensor-parallel rank
  (torchtitan's ETP = 1: each tp rank routes the whole sequence); the rest of the layer
  (attention, router, shared experts, norms) is split over tp as without experts.
- The non-expert parameters are sharded over the ZeRO group (``shard`` ranks) as before; the
  experts over ``shard / ep`` (FSDP2 over fsdp), their gradients reduced over the dp / ep
  ranks holding the same experts (all-reduced by DDP at ZeRO-0; reduce-scattered over
  shard / ep and all-reduced over the dp / shard replicas under FSDP).
- Routing is balanced: every rank sends and receives T · k token-slots a MoE layer and
  micro-batch (T = b · s its tokens), so its FLOPs are the average rank's and each all-to-all
  moves T · k · d · bytes · (ep − 1)/ep a rank (the stream's width for the dispatch, the
  compute dtype's for the combine): the dispatch and the combine in forward, their
  gradients in backward, and the forward's two again when full checkpointing recomputes the
  layer; exposed (the layer waits for its slots).  Before each dispatch one more all-to-all
  sends the slots' counts, E int64s.
- Searched only for a model with routed experts, at ep dividing both E and dp, without context
  or sequence parallelism (the trace refuses ``--ep`` beside ``--cp`` and ``--sp``), and not
  at ZeRO-1.

>>> from tensorledger.napkin.transformer import get_preset
>>> routed_params(get_preset("mixtral-8x7b"))       # 8 · 3 · 4096 · 14336
1409286144
>>> routed_params(get_preset("llama-3-8b"))
0
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from tensorledger.errors import InputError
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.plan.profile import ModelProfile

if TYPE_CHECKING:
    from tensorledger.plan.estimate import LayoutChoice, PlanSetup

__all__ = ["ASSUMPTION", "alltoall_buffer_bytes", "alltoall_calls", "check_ep",
           "counts_buffer_bytes", "counts_calls", "expert_choice", "expert_count",
           "expert_degrees", "expert_matmul", "moe_layer_saved_bytes", "moe_layers",
           "padded_experts", "routed_params", "with_experts"]

ASSUMPTION = (
    "expert parallelism: the ep ranks are taken from the data-parallel ones (ep divides dp and "
    "the routed experts E), each holding E/ep of every layer's experts, whole on each tp rank "
    "(ETP 1); the experts sharded over the ZeRO group / ep and their gradients reduced over "
    "dp / ep ranks; routing balanced: each MoE layer's dispatch and combine all-to-all send "
    "T·k·d·bytes·(ep−1)/ep a rank and micro-batch in forward, again in backward (and in "
    "recomputation), exposed, on the links the ep group (ranks tp apart) crosses; the routed "
    "experts' FLOPs at the matmul efficiency of T·k·ep/E rows an expert (grouped GEMM)")


def expert_count(config: TransformerConfig | ModelProfile) -> int:
    """The routed experts E of a layer; 0 without (a dense model, a measured profile)."""
    if isinstance(config, ModelProfile) or config.moe is None:
        return 0
    return config.moe.n_experts


def routed_params(config: TransformerConfig | ModelProfile) -> int:
    """Parameters of one layer's E routed SwiGLU experts (3 · d · d_expert each); 0 without."""
    if isinstance(config, ModelProfile) or config.moe is None:
        return 0
    return config.moe.n_experts * 3 * config.d_model * config.moe.d_expert


def moe_layers(config: TransformerConfig | ModelProfile, layers: int, first: bool) -> int:
    """The MoE blocks of ``layers`` a rank holds: all, but the model's leading dense ones on the
    rank holding the first stage."""
    if isinstance(config, ModelProfile) or config.moe is None:
        return 0
    return max(0, layers - (config.moe.first_dense_layers if first else 0))


def alltoall_buffer_bytes(setup: PlanSetup, choice: LayoutChoice, width: int) -> float:
    """One all-to-all's buffer on a rank: the T · k token-slots of one micro-batch, d values of
    ``width`` bytes each: the stream's for the dispatch and its gradient (the slots are the
    norm's output, fp32 under autocast), the compute dtype's for the combine and its gradient
    (the experts' output)."""
    config = setup.config
    assert isinstance(config, TransformerConfig) and config.moe is not None
    tokens = choice.micro_batch * setup.seq_len // choice.cp
    return float(tokens * config.moe.top_k * config.d_model * width)


def counts_buffer_bytes(setup: PlanSetup) -> float:
    """The all-to-all that precedes each dispatch: the slots bound for each of the E experts,
    one int64 each (the splits of the token all-to-alls)."""
    return float(8 * expert_count(setup.config))


def counts_calls(choice: LayoutChoice) -> int:
    """Count all-to-alls of one MoE layer and micro-batch: the forward's, again when the layer
    is recomputed (backward sends none: the splits are known)."""
    return 1 + (1 if choice.checkpoint == "full" else 0)


def alltoall_calls(choice: LayoutChoice) -> int:
    """Dispatches (and as many combines) of one MoE layer and micro-batch: the forward's and
    its gradient in backward, and the forward's again when the layer is recomputed."""
    return 2 + (1 if choice.checkpoint == "full" else 0)


def expert_choice(choice: LayoutChoice) -> LayoutChoice:
    """The layout the experts' gradients are reduced over, in the terms of the data-parallel
    pricer: dp / ep ranks, a ZeRO group of shard / ep, ranks tp · ep apart (given as ``tp``:
    the pricer reads it as the group's stride alone)."""
    ep = choice.ep
    shard = choice.shard // ep if choice.zero >= 2 else 1
    return dataclasses.replace(choice, dp=choice.dp // ep, shard=shard, tp=choice.tp * ep,
                               ep=1)


def expert_degrees(setup: PlanSetup, dp: int, cp: int, sp: bool, zero: int, shard: int,
                   fixed_ep: int | None) -> tuple[int, ...]:
    """The ep a layout of these degrees may take: 1, and for a model with routed experts each
    divisor above 1 of both E and dp, with cp 1, no SP, ZeRO 0, 2 or 3 (2 and 3: dividing the
    shard group too); the fixed one alone when given."""
    experts = expert_count(setup.config)
    searched: tuple[int, ...] = (1,)
    if experts and cp == 1 and not sp and zero != 1:
        group = math.gcd(experts, dp if zero == 0 else shard)
        searched += tuple(e for e in range(2, group + 1) if group % e == 0)
    return searched if fixed_ep is None else tuple(e for e in searched if e == fixed_ep)


def with_experts(setup: PlanSetup, shardings: Iterable[tuple[int, int]], dp: int, cp: int,
                 sp: bool, fixed_ep: int | None) -> Iterator[tuple[int, int, int]]:
    """(zero, shard, ep) of each sharding the search takes, with each ep it may have."""
    for zero, shard in shardings:
        for ep in expert_degrees(setup, dp, cp, sp, zero, shard, fixed_ep):
            yield zero, shard, ep


def check_ep(setup: PlanSetup, ep: int | None, cp: int | None, sp: bool | None,
             zero: int | None) -> None:
    """Refuse, in one line, a fixed ep no layout of ``setup`` can have."""
    if ep is None or ep == 1:
        return
    config = setup.config
    experts = expert_count(config)
    if not experts:
        raise InputError(f"EP {ep} shards routed experts; {config.name} has none: drop --ep")
    if experts % ep:
        raise InputError(f"EP {ep} does not divide {config.name}'s {experts} routed experts; "
                         f"use an --ep that divides {experts}")
    if setup.count % ep:
        raise InputError(f"EP {ep} does not divide the {setup.count:,} devices")
    if cp is not None and cp > 1:
        raise InputError(f"EP {ep} beside CP {cp} is not laid out (the trace refuses it): "
                         "drop one")
    if sp:
        raise InputError(f"EP {ep} beside SP: the experts are whole on each tp rank, which "
                         "routes the whole sequence; use --no-sp")
    if zero == 1:
        raise InputError(f"EP {ep} beside ZeRO-1 is not laid out; use ZeRO 0, 2 or 3")


def expert_matmul(setup: PlanSetup, choice: LayoutChoice, flops_per_token: float
                  ) -> tuple[float, float]:
    """(the routed experts' share of a token's training FLOPs, the FLOPs of one expert's
    up-projection on a rank for one micro-batch); (0, 0) without routed experts.

    Balanced, a rank's E/ep experts each take T·k·ep/E of the slots (T its tokens): the grouped
    GEMM multiplies that many rows per expert, so EP makes each expert's matmul ep times
    taller (without EP, tensor parallelism splits its columns).  A token's routed FLOPs are
    3 × 2 · 3 · k · d · f a MoE block (forward, and backward twice it).

    >>> from tensorledger.hardware import get_hardware
    >>> from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
    >>> from tensorledger.napkin.transformer import get_preset
    >>> from tensorledger.plan.estimate import LayoutChoice, PlanSetup
    >>> setup = PlanSetup(get_preset("mixtral-8x7b"), get_hardware("h100"), 8, 4096, 8,
    ...                   resolve_precision("bf16"), resolve_optimizer("adamw"), 80e9)
    >>> _, flops = expert_matmul(setup, LayoutChoice(dp=8, tp=1, pp=1, ep=8), 1.0)
    >>> flops == 2 * (4096 * 2 * 8 // 8) * 4096 * 14336      # 8,192 rows an expert
    True
    """
    config = setup.config
    if isinstance(config, ModelProfile) or config.moe is None:
        return 0.0, 0.0
    moe = config.moe
    blocks = config.n_layers - moe.first_dense_layers
    routed = 3.0 * blocks * 2 * 3 * moe.top_k * config.d_model * moe.d_expert
    tokens = choice.micro_batch * setup.seq_len // choice.cp
    rows = tokens * moe.top_k * choice.ep / moe.n_experts
    split = choice.tp if choice.ep == 1 else 1
    return routed / flops_per_token, 2.0 * rows * config.d_model * moe.d_expert / split


def padded_experts(params: int, group: int, ep: int,
                   config: TransformerConfig | ModelProfile) -> int:
    """A rank's ``params`` of routed experts as FSDP2 shards them over ``group`` ranks: each
    stacked (E/ep, d, f) tensor cut on its first dimension, padded to a multiple of the group,
    so the first rank holds ⌈(E/ep) / group⌉ experts (tiny-moe's 3 over 2: two).  Fewer local
    experts than the group are cut on their second dimension instead, evenly, as torchtitan
    places them (FSDP2's default first dimension would leave them all on one rank).

    >>> from tensorledger.napkin.transformer import get_preset
    >>> padded_experts(3 * 6144, 2, 2, get_preset("tiny-moe")) // 2   # 2 of 3 experts
    12288
    """
    local = expert_count(config) // ep
    if group <= 1 or local < group or local % group == 0:
        return params
    return params // local * group * -(-local // group)


def moe_layer_saved_bytes(config: TransformerConfig, tokens: int, width: int, autocast: bool,
                          tp: int = 1, ep: int = 1) -> tuple[int, int]:
    """(saved bytes of one MoE layer's MLP part, of them the weight casts) for ``tokens``
    tokens on a rank, the reference model's (:class:`tensorledger.models.moe.MoE`, dropless,
    the grouped experts), what torch saves for backward past the norm before it; ``width``
    the compute dtype's bytes.  T tokens, K = T·k slots, d, f the expert's width, h the shared
    experts' (S · d_shared), a the width:

    - router: the fp32 scores T·E·4, the top-k indices T·k·8 and weights T·k·4 (and their
      sum T·4 when renormalised);
    - the slots' order and token (2 · K·8), under EP the received slots' regrouping by
      local expert (K·8 more), and the rank's experts' offsets (E/ep · 4, int32);
    - routed experts: the gathered slots K·d·a, the gate's and up's outputs, the SiLU's and
      the product K·f·a each, the slots' weights K·a, the experts' output and its weighted
      copy 2 · K·d·a;
    - shared experts: 4 · T·h·a, as a dense SwiGLU's;
    - the balance loss's per-expert load, E · 4;
    - under autocast: the router's and the shared experts' gate and up inputs cast, T·d·2
      each, and every matrix's bf16 copy (the grouped experts' cast whole: E/ep of them).

    Tensor parallelism splits the shared experts, and the routed ones too without EP; with
    EP (ETP 1) a rank's routed experts are whole and route the whole sequence; balanced, it
    receives as many slots as it sends (where T·k/E is whole).  Checked against traced
    tiny-moe ranks in fp32 and under autocast, and EP 2 × FSDP 2 (tests/plan/test_plan_ep.py).

    >>> from tensorledger.napkin.transformer import get_preset
    >>> moe_layer_saved_bytes(get_preset("tiny-moe"), 16, 4, False)  # 16 tokens, fp32
    (54768, 0)
    """
    moe = config.moe
    assert moe is not None
    d, f, e, k = config.d_model, moe.d_expert, moe.n_experts, moe.top_k
    shared = moe.n_shared * moe.d_shared
    routed_split = tp if ep == 1 else 1
    slots = tokens * k
    router = (tokens * e * 4 + slots * 8 + slots * 4
              + (tokens * 4 if moe.norm_topk and k > 1 else 0))
    # the slots' order and token; under EP the received slots' regrouping by local expert too
    order = (2 + (1 if ep > 1 else 0)) * slots * 8 + e // ep * 4
    routed = (slots * d * width + 4 * slots * f * width + slots * width
              + 2 * slots * d * width) // routed_split
    hidden = 4 * tokens * shared * width // tp
    balance = e * 4 if moe.aux_loss_coef else 0
    copies = 0
    casts = 0
    if autocast:
        casts = tokens * d * 2 * (1 + (2 if shared else 0))
        copies = 2 * (d * e + 3 * (e // ep) * d * f // routed_split + 3 * d * shared // tp)
    return router + order + routed + hidden + balance + casts + copies, copies
