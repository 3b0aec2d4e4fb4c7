"""A mixture of experts and DeepSeek's latent attention on a napkin: their configs and the
closed forms of their parameters and FLOPs.  No torch.

A :class:`~tensorledger.napkin.transformer.TransformerConfig` with ``moe`` set replaces the MLP
of its layers (after ``first_dense_layers`` dense ones) by E routed experts of which a token
runs ``top_k``, S shared experts that every token runs, and a router (a d × E matrix); with
``mla`` set its attention projects queries and keys/values through low-rank latents and
carries RoPE on a separate key shared by the heads (DeepSeek-V2/V3).

>>> moe = MoEConfig(n_experts=8, top_k=2, d_expert=14336)
>>> moe.routed_slots(tokens=4096)          # dropless: every token's 2 choices run
8192
>>> MoEConfig(n_experts=8, top_k=2, d_expert=64, capacity_factor=1.25).capacity(tokens=100)
32

Sources: Shazeer et al. 2017 and Fedus et al. 2021 (Switch: top-k routing, the capacity
factor ⌈cf · tokens · k / E⌉ and the load-balancing loss E · Σ_e f_e · P_e); Mixtral
(Jiang et al. 2024: 8 experts, top-2, softmax over the chosen logits); Qwen3 (128 experts,
top-8, normalised top-k); DeepSeek-V3 (Liu et al. 2024: sigmoid affinities, an expert bias
used only to choose — auxiliary-loss-free balancing —, one shared expert, MLA, multi-token
prediction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from tensorledger.errors import InputError, ModelError

if TYPE_CHECKING:
    from tensorledger.napkin.transformer import TransformerConfig

__all__ = [
    "ExpertsImpl",
    "MLAConfig",
    "MoEConfig",
    "MoELayerFlops",
    "MoELayerParams",
    "RouterKind",
    "mla_attention_params",
    "mla_norm_params",
    "moe_layer_flops",
    "moe_layer_params",
]

RouterKind = Literal["softmax", "sigmoid"]
ExpertsImpl = Literal["grouped", "loop"]


def _whole(what: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ModelError(f"{what} must be a whole number >= {low}, got {value!r}")


@dataclass(frozen=True)
class MoEConfig:
    """The routed and shared experts that replace a layer's MLP (SwiGLU experts).

    >>> MoEConfig(n_experts=4, top_k=5, d_expert=8)
    Traceback (most recent call last):
    ...
    tensorledger.errors.ModelError: mixture of experts: top_k (5) must be between 1 and n_experts (4)
    """  # noqa: E501

    # E: routed experts per layer; the router scores each token against all of them.
    n_experts: int
    # k: routed experts each token runs; active parameters and FLOPs scale with it.
    top_k: int
    # Hidden width of one routed expert (SwiGLU: gate, up and down matrices).
    d_expert: int
    # S: shared experts every token runs (DeepSeek 1, Qwen2-MoE 1, Mixtral 0).
    n_shared: int = 0
    # Hidden width of one shared expert; 0 takes d_expert. The S of them run as one SwiGLU
    # of S · d_shared, as DeepSeek's code does (the same parameters and FLOPs).
    d_shared: int = 0
    # Router scores: softmax over the E logits (Mixtral, Qwen) or a sigmoid each (DeepSeek-V3).
    router: RouterKind = "softmax"
    # Renormalise the k chosen scores to sum to 1 (Mixtral, Qwen3, DeepSeek-V3 do).
    norm_topk: bool = True
    # Scale of the routed experts' combined output (DeepSeek-V3 2.5); changes no count.
    routed_scale: float = 1.0
    # A per-expert bias added to the scores to choose experts, not to weigh them (DeepSeek-V3's
    # auxiliary-loss-free balancing); a buffer, not a parameter: no gradient, no optimizer.
    expert_bias: bool = False
    # γ of the bias update after each step: bias += γ · sign(mean load − load); 0 keeps it.
    bias_update_rate: float = 0.0
    # α of the load-balancing loss α · E · Σ_e f_e · P_e added to the step's (0: none).
    aux_loss_coef: float = 0.0
    # Capacity factor: each expert takes at most ⌈cf · tokens · k / E⌉ token-slots and drops
    # the rest (their residual passes through); 0 is dropless, every choice runs.
    capacity_factor: float = 0.0
    # The first layers keep a dense MLP of the config's d_ff (DeepSeek-V3: 3).
    first_dense_layers: int = 0
    # How the routed experts run: one grouped GEMM per matrix (torch._grouped_mm dropless, a
    # batched matmul over the stacked weights with a capacity) or a loop, one matmul each.
    experts_impl: ExpertsImpl = "grouped"

    def __post_init__(self) -> None:
        _whole("mixture of experts: n_experts", self.n_experts, 2)
        _whole("mixture of experts: d_expert", self.d_expert, 1)
        for key in ("n_shared", "d_shared", "first_dense_layers"):
            _whole(f"mixture of experts: {key}", getattr(self, key), 0)
        if (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)
                or not 1 <= self.top_k <= self.n_experts):
            raise ModelError(f"mixture of experts: top_k ({self.top_k!r}) must be between 1 "
                             f"and n_experts ({self.n_experts})")
        if self.router not in get_args(RouterKind):
            raise ModelError(f"mixture of experts: unknown router {self.router!r}; known: "
                             "softmax, sigmoid")
        if self.experts_impl not in get_args(ExpertsImpl):
            raise ModelError(f"mixture of experts: unknown experts_impl "
                             f"{self.experts_impl!r}; known: grouped, loop")
        for key in ("routed_scale", "bias_update_rate", "aux_loss_coef", "capacity_factor"):
            value = getattr(self, key)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ModelError(f"mixture of experts: {key} must be a finite number >= 0, "
                                 f"got {value!r}")
        if self.bias_update_rate and not self.expert_bias:
            raise ModelError("mixture of experts: bias_update_rate updates the expert bias; "
                             "set expert_bias=True")
        if self.d_shared == 0:
            object.__setattr__(self, "d_shared", self.d_expert)

    @property
    def dropless(self) -> bool:
        return self.capacity_factor == 0

    def capacity(self, tokens: int) -> int:
        """Token-slots one expert takes: ⌈cf · tokens · k / E⌉, at most ``tokens`` (a token
        chooses an expert once); ``tokens`` when dropless."""
        if tokens < 1:
            raise InputError(f"a router sees 1 token or more, got {tokens}")
        if self.dropless:
            return tokens
        # the product is formed in integers first where cf is a short decimal, so 1.25 · 100 ·
        # 2 / 8 is 31.25 → 32 and not 31.250000000000004 → 32 by luck
        wanted = math.ceil(round(self.capacity_factor * tokens * self.top_k, 9)
                           / self.n_experts)
        return max(1, min(tokens, wanted))

    def routed_slots(self, tokens: int) -> int:
        """Rows the routed experts multiply in a step of ``tokens`` tokens: tokens · k dropless;
        E · capacity with a capacity factor (the buffer is padded to it, dropped or not)."""
        if self.dropless:
            return tokens * self.top_k
        return self.n_experts * self.capacity(tokens)

    def describe(self) -> str:
        shared = f" + {self.n_shared} shared" if self.n_shared else ""
        drop = ("dropless" if self.dropless
                else f"capacity factor {self.capacity_factor:g} (tokens past it dropped)")
        return (f"top-{self.top_k} of {self.n_experts} routed experts{shared}, {self.router} "
                f"router{', expert bias' if self.expert_bias else ''}, {drop}")


@dataclass(frozen=True)
class MLAConfig:
    """DeepSeek's multi-head latent attention: the shapes of its low-rank projections.

    Queries: d → q_lora_rank (RMSNorm) → heads · (qk_nope_dim + qk_rope_dim), or d → heads ·
    (...) directly when ``q_lora_rank`` is 0.  Keys and values: d → kv_lora_rank + qk_rope_dim;
    the latent (RMSNorm) → heads · (qk_nope_dim + v_head_dim); the rope part is one key of
    qk_rope_dim shared by every head.  Output: heads · v_head_dim → d.
    """

    kv_lora_rank: int
    qk_nope_dim: int
    qk_rope_dim: int
    v_head_dim: int
    q_lora_rank: int = 0

    def __post_init__(self) -> None:
        for key in ("kv_lora_rank", "qk_nope_dim", "v_head_dim"):
            _whole(f"latent attention: {key}", getattr(self, key), 1)
        _whole("latent attention: q_lora_rank", self.q_lora_rank, 0)
        _whole("latent attention: qk_rope_dim", self.qk_rope_dim, 2)
        if self.qk_rope_dim % 2:
            raise ModelError(f"latent attention: qk_rope_dim must be even (rotary pairs), got "
                             f"{self.qk_rope_dim}")

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query and key: the part without positions and the rope part."""
        return self.qk_nope_dim + self.qk_rope_dim


# ------------------------------------------------------------------------------ parameters

@dataclass(frozen=True)
class MoELayerParams:
    """Parameters of one mixture-of-experts layer's MLP part, and those one token runs."""

    router_params: int
    routed_params: int  # all E routed experts
    shared_params: int
    total_params: int
    active_params: int  # router, k routed experts, the shared ones


def _swiglu(d_model: int, width: int) -> int:
    return 3 * d_model * width


def moe_layer_params(config: TransformerConfig) -> MoELayerParams:
    """The router (d · E), E routed SwiGLU experts (3 · d · d_expert each) and the shared ones
    (3 · d · S · d_shared), no biases.  Mixtral-8x7B: 4096 · 8 + 8 · 3 · 4096 · 14336.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> moe_layer_params(get_preset("mixtral-8x7b")).active_params   # 32,768 + 2 · 176,160,768
    352354304
    """
    moe = _moe(config)
    d = config.d_model
    router = d * moe.n_experts
    one = _swiglu(d, moe.d_expert)
    routed = moe.n_experts * one
    shared = _swiglu(d, moe.n_shared * moe.d_shared)
    total = router + routed + shared
    active = router + moe.top_k * one + shared
    return MoELayerParams(router_params=router, routed_params=routed, shared_params=shared,
                          total_params=total, active_params=active)


def mla_attention_params(config: TransformerConfig) -> int:
    """Matrices of one latent-attention layer (its two latent norms are counted with the
    norms): q down d · r_q and up r_q · h · (nope + rope) (or d · h · (nope + rope)), kv down
    d · (r_kv + rope), kv up r_kv · h · (nope + v), out h · v · d.  DeepSeek-V3: 187,105,280.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> mla_attention_params(get_preset("deepseek-v3"))
    187105280
    """
    mla = _mla(config)
    d, h = config.d_model, config.n_heads
    q_width = h * mla.qk_head_dim
    query = d * q_width if not mla.q_lora_rank else (d * mla.q_lora_rank
                                                       + mla.q_lora_rank * q_width)
    kv_down = d * (mla.kv_lora_rank + mla.qk_rope_dim)
    kv_up = mla.kv_lora_rank * h * (mla.qk_nope_dim + mla.v_head_dim)
    output = h * mla.v_head_dim * d
    return query + kv_down + kv_up + output


def mla_norm_params(config: TransformerConfig) -> int:
    """The latent norms of one layer (RMSNorm scales): r_q (when the query is low-rank) + r_kv."""
    mla = _mla(config)
    return mla.q_lora_rank + mla.kv_lora_rank


# ----------------------------------------------------------------------------------- FLOPs

@dataclass(frozen=True)
class MoELayerFlops:
    """Forward matmul FLOPs of one mixture-of-experts layer's MLP part at ``tokens`` tokens.

    ``router_flops`` 2 · T · d · E; ``experts_flops`` 3 · 2 · slots · d · d_expert, slots the
    rows the experts multiply (:meth:`MoEConfig.routed_slots`: T · k dropless, E · capacity
    padded with a capacity factor); ``shared_flops`` 3 · 2 · T · d · S · d_shared.  Routing
    itself (softmax or sigmoid, top-k, sorting, gathering and the weighted sum) is not a matmul
    and is not counted here; the trace counts it.  Backward is twice each.
    """

    tokens: int
    routed_slots: int
    router_flops: int
    experts_flops: int
    shared_flops: int
    total_flops: int


def moe_layer_flops(config: TransformerConfig, tokens: int) -> MoELayerFlops:
    """Forward matmul FLOPs of one MoE layer for ``tokens`` tokens (batch · seq of a step).

    >>> from tensorledger.napkin.transformer import get_preset
    >>> f = moe_layer_flops(get_preset("tiny-moe"), tokens=24)
    >>> f.router_flops, f.experts_flops       # 2·24·64·6; 3·2·(24·2)·64·32
    (18432, 589824)
    """
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise InputError(f"tokens must be a whole number >= 1, got {tokens!r}")
    moe = _moe(config)
    d = config.d_model
    slots = moe.routed_slots(tokens)
    router = 2 * tokens * d * moe.n_experts
    experts = 3 * 2 * slots * d * moe.d_expert
    shared = 3 * 2 * tokens * d * moe.n_shared * moe.d_shared
    return MoELayerFlops(tokens=tokens, routed_slots=slots, router_flops=router,
                         experts_flops=experts, shared_flops=shared,
                         total_flops=router + experts + shared)


def _moe(config: TransformerConfig) -> MoEConfig:
    if config.moe is None:
        raise InputError(f"model {config.name!r} has no mixture of experts")
    return config.moe


def _mla(config: TransformerConfig) -> MLAConfig:
    if config.mla is None:
        raise InputError(f"model {config.name!r} has no latent attention")
    return config.mla
