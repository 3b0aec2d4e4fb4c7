"""The decoder-only Transformer on a napkin: its config, the presets, and closed-form counts.

This module imports no torch: ``tensorledger time --model llama-3-70b`` and ``tensorledger
models`` answer from here.  The torch modules in :mod:`tensorledger.models` are built from the
same :class:`TransformerConfig`, and a test holds every closed form here equal to
``sum(p.numel())`` of the built model, part by part.

>>> gpt2 = get_preset("gpt2")
>>> count = parameter_count(gpt2)
>>> count.total_params                      # tied embeddings, position table included
124439808
>>> count.embeddings_params                 # 50257·768 + 1024·768
39383808
>>> forward_flops_per_token(gpt2).convention
'causal-halved'

Sources of the formulas (see /work/shared/FACTS.md):

- Kaplan et al. 2020, Table 1: forward ≈ 2N + 2·n_layer·n_ctx·d_attn FLOPs per token, where
  ``2·n_layer·n_ctx·d_attn`` is the attention scores plus attention·V term counted over the
  full context; training ≈ 3 × forward (C ≈ 6N per token).
- Chinchilla (Hoffmann et al. 2022), Appendix F: per layer QKV 2·3·s·d·kH, logits 2·s²·kH,
  softmax@V 2·s²·kH, output 2·s·kH·d, MLP 2·s·2·d·ffw; final logits 2·s·d·V; backward = 2×
  forward.  Chinchilla also counts the embedding lookup as a matmul (2·s·V·d) and the softmax
  (3·H·s²); here a lookup is a gather (0 FLOPs) and only matmul FLOPs are counted.
- Causal masking: the ``full`` convention counts every (query, key) pair as Kaplan, Chinchilla
  and nanoGPT do; ``causal-halved`` counts half of them, as Megatron-LM does since 2025.  Tools
  disagree, so every result names its convention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from tensorledger.errors import InputError, ModelError, UnknownNameError
from tensorledger.napkin.moe import MLAConfig, MoEConfig
from tensorledger.napkin.params import (  # re-exported: the count lives beside the config
    ParameterCount,
    _layer,
    _sparse_layers,
    parameter_count,
)

__all__ = [
    "ATTENTION_CONVENTIONS",
    "PRESETS",
    "AttentionConvention",
    "ForwardFlops",
    "MlpKind",
    "ModelParams",
    "NormKind",
    "ParameterCount",
    "PositionKind",
    "PresetSummary",
    "TrainingFlops",
    "TransformerConfig",
    "forward_flops_per_token",
    "get_preset",
    "parameter_count",
    "preset_params",
    "preset_summaries",
    "transformer_training_flops",
]

MlpKind = Literal["gelu", "swiglu"]
NormKind = Literal["layernorm", "rmsnorm"]
PositionKind = Literal["learned", "rope"]
AttentionConvention = Literal["full", "causal-halved"]
ATTENTION_CONVENTIONS: tuple[str, ...] = get_args(AttentionConvention)


@dataclass(frozen=True)
class TransformerConfig:
    """The shape of a pre-norm decoder-only Transformer LM.

    Three sizes may be left at 0 and are derived on construction: ``n_kv_heads`` → ``n_heads``
    (multi-head attention), ``head_dim`` → ``d_model // n_heads``, ``d_ff`` → ``4·d_model``
    for GELU or the Llama rule (⌈8·d/3⌉ rounded up to a multiple of 256) for SwiGLU.

    >>> TransformerConfig(vocab_size=100, context_length=16, d_model=64, n_layers=2,
    ...                   n_heads=4).head_dim
    16
    >>> TransformerConfig(vocab_size=100, context_length=16, d_model=64, n_layers=2,
    ...                   n_heads=4, n_kv_heads=3)
    Traceback (most recent call last):
    ...
    tensorledger.errors.ModelError: model 'custom': n_heads (4) must be a multiple of n_kv_heads (3)
    """

    # Rows of the token embedding and columns of the output head: the tokenizer's size.
    vocab_size: int
    # Longest sequence: rows of a learned position table, and the s of attention FLOPs.
    context_length: int
    # Width of the residual stream; every block reads and writes this many features.
    d_model: int
    # Number of Transformer blocks; parameters and FLOPs of the body scale with it.
    n_layers: int
    # Query heads; attention FLOPs scale with n_heads · head_dim.
    n_heads: int
    # Key/value heads: = n_heads is MHA, 1 is MQA, in between is GQA (smaller K/V and cache).
    n_kv_heads: int = 0
    # Width of one head; usually d_model / n_heads but free (Q/O project to n_heads·head_dim).
    head_dim: int = 0
    # Hidden width of the MLP; SwiGLU models pick their own because it has three matrices.
    d_ff: int = 0
    # GELU 4× (two matrices, GPT-2/3) or SwiGLU (gate, up, down; Llama).
    mlp: MlpKind = "gelu"
    # LayerNorm (scale and, with bias, shift; GPT) or RMSNorm (scale only; Llama); pre-norm.
    norm: NormKind = "layernorm"
    # Learned absolute position table (GPT, adds parameters) or rotary embeddings (Llama, none).
    positions: PositionKind = "learned"
    # Output head shares the token embedding matrix (GPT-2) or has its own (Llama).
    tied_embeddings: bool = True
    # Biases on every Linear except the head and on LayerNorm (GPT-2) or none (Llama).
    bias: bool = True
    # Dropout probability; 0 by default because accounting runs must be deterministic.
    dropout: float = 0.0
    # Norm epsilon; changes no count, kept so a loaded config.json round-trips.
    norm_eps: float = 1e-5
    # RoPE base frequency (10000 Llama 2, 500000 Llama 3); changes no count.
    rope_theta: float = 10000.0
    # A label for tables and error messages.
    name: str = "custom"
    # A mixture of experts in place of the MLP (after its first_dense_layers); None is dense.
    moe: MoEConfig | None = None
    # DeepSeek's multi-head latent attention in place of Q/K/V projections; None is MHA/GQA.
    mla: MLAConfig | None = None
    # RMSNorm over each query and key head before RoPE (Qwen3); adds 2 · head_dim a layer.
    qk_norm: bool = False
    # Multi-token prediction depths (DeepSeek-V3: 1): each predicts one token further ahead
    # with its own block and projection, sharing the embeddings and the head.
    mtp_depth: int = 0
    # Weight λ of the multi-token prediction loss beside the next-token loss (DeepSeek-V3 0.3).
    mtp_loss_weight: float = 0.3

    def __post_init__(self) -> None:
        for key in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads"):
            _check_size(self.name, key, getattr(self, key), allow_zero=False)
        for key in ("n_kv_heads", "head_dim", "d_ff"):
            _check_size(self.name, key, getattr(self, key), allow_zero=True)
        if self.n_kv_heads == 0:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.head_dim == 0:
            if self.d_model % self.n_heads:
                raise ModelError(f"model {self.name!r}: d_model ({self.d_model}) is not a "
                                 f"multiple of n_heads ({self.n_heads}); give head_dim")
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        if self.mlp not in get_args(MlpKind):
            raise ModelError(f"model {self.name!r}: unknown mlp {self.mlp!r}; known: gelu, "
                             "swiglu")
        if self.norm not in get_args(NormKind):
            raise ModelError(f"model {self.name!r}: unknown norm {self.norm!r}; known: "
                             "layernorm, rmsnorm")
        if self.positions not in get_args(PositionKind):
            raise ModelError(f"model {self.name!r}: unknown positions {self.positions!r}; "
                             "known: learned, rope")
        if self.d_ff == 0:
            object.__setattr__(self, "d_ff", _default_d_ff(self.d_model, self.mlp))
        if self.n_heads % self.n_kv_heads:
            raise ModelError(f"model {self.name!r}: n_heads ({self.n_heads}) must be a "
                             f"multiple of n_kv_heads ({self.n_kv_heads})")
        if self.positions == "rope" and self.head_dim % 2:
            raise ModelError(f"model {self.name!r}: rotary positions need an even head_dim, "
                             f"got {self.head_dim}")
        if self.norm == "rmsnorm" and self.bias:
            raise ModelError(f"model {self.name!r}: RMSNorm has no bias; use bias=False or "
                             "norm='layernorm'")
        if not 0.0 <= self.dropout < 1.0:
            raise ModelError(f"model {self.name!r}: dropout must be in [0, 1), got "
                             f"{self.dropout!r}")
        if not self.norm_eps > 0 or not self.rope_theta > 0:
            raise ModelError(f"model {self.name!r}: norm_eps and rope_theta must be positive")
        self._check_variants()

    def _check_variants(self) -> None:
        """The mixture of experts, latent attention and multi-token prediction options."""
        if self.moe is not None and not isinstance(self.moe, MoEConfig):
            raise ModelError(f"model {self.name!r}: moe must be a MoEConfig, got "
                             f"{type(self.moe).__name__}")
        if self.mla is not None and not isinstance(self.mla, MLAConfig):
            raise ModelError(f"model {self.name!r}: mla must be an MLAConfig, got "
                             f"{type(self.mla).__name__}")
        if self.moe is not None and self.moe.first_dense_layers > self.n_layers:
            raise ModelError(f"model {self.name!r}: {self.moe.first_dense_layers} dense layers "
                             f"first, but only {self.n_layers} layers")
        if (self.moe is not None or self.mla is not None) and (
                self.mlp != "swiglu" or self.norm != "rmsnorm" or self.positions != "rope"):
            raise ModelError(f"model {self.name!r}: experts and latent attention are written "
                             "for SwiGLU, RMSNorm and rotary positions (mlp='swiglu', "
                             "norm='rmsnorm', positions='rope')")
        if self.mla is not None and self.qk_norm:
            raise ModelError(f"model {self.name!r}: qk_norm is for Q/K/V attention; latent "
                             "attention normalises its latents instead")
        _check_size(self.name, "mtp_depth", self.mtp_depth, allow_zero=True)
        weight = self.mtp_loss_weight
        if not isinstance(weight, int | float) or not 0 <= weight < float("inf"):
            raise ModelError(f"model {self.name!r}: mtp_loss_weight must be a finite number "
                             f">= 0, got {weight!r}")

    @property
    def q_dim(self) -> int:
        """Output width of the query projection: n_heads · head_dim."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Output width of each of the key and value projections: n_kv_heads · head_dim."""
        return self.n_kv_heads * self.head_dim


def _check_size(model: str, key: str, value: object, *, allow_zero: bool) -> None:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        wanted = "a whole number >= 0 (0 derives it)" if allow_zero else "a whole number >= 1"
        raise ModelError(f"model {model!r}: {key} must be {wanted}, got {value!r}")


def _default_d_ff(d_model: int, mlp: str) -> int:
    if mlp == "gelu":
        return 4 * d_model
    # Llama: two thirds of 4·d keeps SwiGLU's three matrices at the cost of GELU's two.
    multiple = 256
    hidden = -(-8 * d_model // 3)
    return -(-hidden // multiple) * multiple


# ----------------------------------------------------------------------------------- presets

def _gpt2(name: str, d_model: int, n_layers: int, n_heads: int) -> TransformerConfig:
    return TransformerConfig(name=name, vocab_size=50257, context_length=1024, d_model=d_model,
                             n_layers=n_layers, n_heads=n_heads)


def _llama(name: str, vocab_size: int, context_length: int, d_model: int, n_layers: int,
           n_heads: int, n_kv_heads: int, d_ff: int, rope_theta: float) -> TransformerConfig:
    return TransformerConfig(name=name, vocab_size=vocab_size, context_length=context_length,
                             d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                             n_kv_heads=n_kv_heads, d_ff=d_ff, mlp="swiglu", norm="rmsnorm",
                             positions="rope", tied_embeddings=False, bias=False,
                             norm_eps=1e-5, rope_theta=rope_theta)


def _sparse(name: str, vocab_size: int, context_length: int, d_model: int, n_layers: int,
            n_heads: int, n_kv_heads: int, head_dim: int, d_ff: int, norm_eps: float,
            rope_theta: float, moe: MoEConfig, mla: MLAConfig | None = None,
            qk_norm: bool = False, mtp_depth: int = 0) -> TransformerConfig:
    """A Llama-style body (SwiGLU, RMSNorm, RoPE, untied head, no biases) with experts."""
    return TransformerConfig(name=name, vocab_size=vocab_size, context_length=context_length,
                             d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                             n_kv_heads=n_kv_heads, head_dim=head_dim, d_ff=d_ff, mlp="swiglu",
                             norm="rmsnorm", positions="rope", tied_embeddings=False,
                             bias=False, norm_eps=norm_eps, rope_theta=rope_theta, moe=moe,
                             mla=mla, qk_norm=qk_norm, mtp_depth=mtp_depth)


def _deepseek_v3(name: str, mtp_depth: int) -> TransformerConfig:
    # routed_scaling_factor 2.5, the bias update speed γ 0.001 and the balance loss α 0.0001
    # of the paper (§4.2); its balance loss is per sequence, the reference's per batch
    return _sparse(name, 129280, 163840, 7168, 61, 128, 128, 128, 18432, 1e-6, 10000.0,
                   MoEConfig(n_experts=256, top_k=8, d_expert=2048, n_shared=1,
                             router="sigmoid", expert_bias=True, bias_update_rate=0.001,
                             aux_loss_coef=0.0001, routed_scale=2.5, first_dense_layers=3),
                   mla=MLAConfig(q_lora_rank=1536, kv_lora_rank=512, qk_nope_dim=128,
                                 qk_rope_dim=64, v_head_dim=128),
                   mtp_depth=mtp_depth)


def _moe_presets() -> tuple[TransformerConfig, ...]:
    """Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V3 (with and without its multi-token
    prediction depth) from their config.json files on the Hugging Face hub
    (mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B, deepseek-ai/DeepSeek-V3), and a tiny
    mixture of experts for tests (every size different: E 6, k 2, d_expert 32, one shared
    expert of 48, d_model 64)."""
    return (
        _sparse("mixtral-8x7b", 32000, 32768, 4096, 32, 32, 8, 128, 14336, 1e-5, 1e6,
                MoEConfig(n_experts=8, top_k=2, d_expert=14336, aux_loss_coef=0.02)),
        _sparse("qwen3-30b-a3b", 151936, 40960, 2048, 48, 32, 4, 128, 6144, 1e-6, 1e6,
                MoEConfig(n_experts=128, top_k=8, d_expert=768, aux_loss_coef=0.001),
                qk_norm=True),
        _deepseek_v3("deepseek-v3", 0),
        _deepseek_v3("deepseek-v3-mtp", 1),
        _sparse("tiny-moe", 128, 32, 64, 2, 4, 2, 16, 128, 1e-5, 10000.0,
                MoEConfig(n_experts=6, top_k=2, d_expert=32, n_shared=1, d_shared=48,
                          aux_loss_coef=0.01)),
    )


#: Published shapes (GPT-2 and GPT-3 papers, the Llama 2 and Llama 3 model cards / configs).
PRESETS: dict[str, TransformerConfig] = {c.name: c for c in (
    _gpt2("gpt2", 768, 12, 12),
    _gpt2("gpt2-medium", 1024, 24, 16),
    _gpt2("gpt2-large", 1280, 36, 20),
    _gpt2("gpt2-xl", 1600, 48, 25),
    TransformerConfig(name="gpt3-175b", vocab_size=50257, context_length=2048, d_model=12288,
                      n_layers=96, n_heads=96),
    _llama("llama-2-7b", 32000, 4096, 4096, 32, 32, 32, 11008, 10000.0),
    _llama("llama-3-8b", 128256, 8192, 4096, 32, 32, 8, 14336, 500000.0),
    _llama("llama-3-70b", 128256, 8192, 8192, 80, 64, 8, 28672, 500000.0),
    _llama("llama-3-405b", 128256, 131072, 16384, 126, 128, 8, 53248, 500000.0),
    # For tests: Llama-style with GQA so the small model exercises the interesting paths.
    TransformerConfig(name="tiny", vocab_size=128, context_length=32, d_model=64, n_layers=2,
                      n_heads=4, n_kv_heads=2, d_ff=128, mlp="swiglu", norm="rmsnorm",
                      positions="rope", tied_embeddings=False, bias=False),
    *_moe_presets(),
)}


def get_preset(name: str) -> TransformerConfig:
    """The preset called ``name`` (case-insensitive).

    >>> get_preset("Llama-3-8B").n_kv_heads
    8
    """
    key = name.strip().lower()
    if key not in PRESETS:
        raise UnknownNameError("model", name, PRESETS)
    return PRESETS[key]


# ------------------------------------------------------------------------------------- FLOPs

@dataclass(frozen=True)
class ForwardFlops:
    """Matmul FLOPs of one forward pass, per token, by part.

    ``attention_projections_flops`` are the Q, K, V and output matmuls; ``attention_scores_flops``
    is Q·Kᵀ and ``attention_values_flops`` is softmax·V, counted at ``seq_len`` under the named
    ``convention``.  ``embeddings_flops`` is 0 (a lookup is a gather) and ``norms_flops`` is 0
    (norms, softmax, activations, residual adds and biases are not matmuls and are not counted
    here; the trace counts them).
    """

    model: str
    seq_len: int
    convention: str
    embeddings_flops: int
    attention_projections_flops: int
    attention_scores_flops: int
    attention_values_flops: int
    mlp_flops: int
    norms_flops: int
    head_flops: int
    total_flops: int

    @property
    def attention_flops(self) -> int:
        return (self.attention_projections_flops + self.attention_scores_flops
                + self.attention_values_flops)


def _check_convention(convention: str) -> str:
    if convention not in ATTENTION_CONVENTIONS:
        raise InputError(f"unknown attention convention {convention!r}; known: "
                         f"{', '.join(ATTENTION_CONVENTIONS)}")
    return convention


def forward_flops_per_token(config: TransformerConfig, seq_len: int | None = None,
                            convention: str = "causal-halved") -> ForwardFlops:
    """Forward matmul FLOPs per token at ``seq_len`` (default: the context length).

    A matmul (M×K)·(K×N) costs 2·M·N·K, so a Linear of in×out costs 2·in·out per token:
    Q/K/V/O 2·d·(q_dim + 2·kv_dim) + 2·q_dim·d, MLP 2·(2 or 3)·d·ff, head 2·d·V (also when the
    head is tied: the matmul is still done).  Under ``full`` each query meets ``seq_len`` keys,
    in Q·Kᵀ and again in softmax·V: 2·seq_len·q_dim FLOPs per token and layer for each, so
    4·L·s·q_dim for both (nanoGPT's 12·L·H·Q·T over 3).  ``causal-halved`` counts half of that,
    2·L·s·q_dim, which is Kaplan's 2·n_layer·n_ctx·d_attn.  Chinchilla App. F gives the same
    terms per sequence.  A mixture of experts counts its router, k routed experts (dropless;
    :func:`~tensorledger.napkin.moe.moe_layer_flops` pads to a capacity) and shared ones;
    latent attention its low-rank projections.  Multi-token prediction depths are left out.

    >>> f = forward_flops_per_token(get_preset("gpt2"), 1024, "full")
    >>> f.attention_scores_flops                # 12 layers · 2 · 1024 · 768
    18874368
    >>> forward_flops_per_token(get_preset("gpt2"), 1024).attention_scores_flops
    9437184
    """
    _check_convention(convention)
    s = config.context_length if seq_len is None else seq_len
    if isinstance(s, bool) or not isinstance(s, int) or s < 1:
        raise InputError(f"seq_len must be a whole number >= 1, got {s!r}")
    d, layers = config.d_model, config.n_layers
    sparse = _sparse_layers(config)
    dense_layer = _layer(config, sparse=False)
    # every matrix of a layer is a Linear: 2 FLOPs per parameter per token; biases are not
    # matmuls, and a mixture of experts runs the active part (dropless: k of E experts)
    projections = layers * 2 * (dense_layer.attention - (
        config.q_dim + 2 * config.kv_dim + d if config.bias and config.mla is None else 0))
    mlp_matrices = 2 if config.mlp == "gelu" else 3
    mlp = (layers - sparse) * 2 * mlp_matrices * d * config.d_ff
    if sparse:
        mlp += sparse * 2 * _layer(config, sparse=True).mlp_active
    # latent attention: Q·Kᵀ over (nope + rope) per head, softmax·V over v_head_dim
    qk_width = config.q_dim if config.mla is None else config.n_heads * config.mla.qk_head_dim
    v_width = config.q_dim if config.mla is None else config.n_heads * config.mla.v_head_dim
    scores_full = layers * 2 * s * qk_width
    values_full = layers * 2 * s * v_width
    # Halving 2·s·width stays whole: width·s.
    scores = scores_full if convention == "full" else scores_full // 2
    values = values_full if convention == "full" else values_full // 2
    head = 2 * d * config.vocab_size
    total = projections + scores + values + mlp + head
    return ForwardFlops(model=config.name, seq_len=s, convention=convention, embeddings_flops=0,
                        attention_projections_flops=projections, attention_scores_flops=scores,
                        attention_values_flops=values, mlp_flops=mlp, norms_flops=0,
                        head_flops=head, total_flops=total)


@dataclass(frozen=True)
class TrainingFlops:
    """Training FLOPs: 6·N per token for the parameters plus 3× the attention score terms.

    ``params_flops_per_token`` is 6 × the matmul parameters (every weight that takes part in a
    matmul, the head included even when tied; biases, norms and position tables excluded), equal
    to 3 × the forward matmul FLOPs outside attention scores; ``attention_flops_per_token`` is 3
    × (scores + values) under ``convention``.  Backward = 2 × forward (Chinchilla App. F).
    """

    model: str
    seq_len: int
    convention: str
    tokens: float
    matmul_params: int
    params_flops_per_token: int
    attention_flops_per_token: int
    flops_per_token: int
    flops: float


def transformer_training_flops(config: TransformerConfig, tokens: float,
                               seq_len: int | None = None,
                               convention: str = "causal-halved") -> TrainingFlops:
    """Training FLOPs for ``tokens`` tokens: (6·N_matmul + 3·attention) per token.

    >>> t = transformer_training_flops(get_preset("gpt2"), 1.0, 1024, "full")
    >>> t.attention_flops_per_token             # 3 · 2 · 12 · 2 · 1024 · 768
    113246208
    """
    if not tokens > 0:
        raise InputError(f"tokens must be a positive number, got {tokens!r}")
    forward = forward_flops_per_token(config, seq_len, convention)
    matmul_flops = forward.attention_projections_flops + forward.mlp_flops + forward.head_flops
    matmul_params = matmul_flops // 2
    params_term = 6 * matmul_params
    attention_term = 3 * (forward.attention_scores_flops + forward.attention_values_flops)
    per_token = params_term + attention_term
    assert per_token == 3 * forward.total_flops
    return TrainingFlops(model=config.name, seq_len=forward.seq_len, convention=convention,
                         tokens=tokens, matmul_params=matmul_params,
                         params_flops_per_token=params_term,
                         attention_flops_per_token=attention_term, flops_per_token=per_token,
                         flops=per_token * tokens)


# ------------------------------------------------------------------------- listing, lookups

@dataclass(frozen=True)
class PresetSummary:
    """One row of ``tensorledger models``: a preset, its shape and its parameter count."""

    name: str
    config: TransformerConfig
    params: ParameterCount


def preset_summaries() -> tuple[PresetSummary, ...]:
    """Every preset with its closed-form parameter count, in table order."""
    return tuple(PresetSummary(name=name, config=config, params=parameter_count(config))
                 for name, config in PRESETS.items())


@dataclass(frozen=True)
class ModelParams:
    """A parameter count for a named model, and where the count came from."""

    model: str
    params: int
    source: str = field(default="closed form")
    # a mixture of experts: the parameters one token runs through (k of E routed experts,
    # every shared one), and the routing that gives it; None for a dense model
    active_params: int | None = None
    routing: str = ""


def preset_params(name: str) -> ModelParams:
    """Total parameters of a preset from the closed form (embeddings and head included).

    >>> preset_params("llama-3-70b").params
    70553706496
    """
    config = get_preset(name)
    count = parameter_count(config)
    moe = config.moe
    return ModelParams(model=config.name, params=count.total_params,
                       source="closed-form total (embeddings and head included)",
                       active_params=count.active_params,
                       routing="" if moe is None else
                       f"{moe.top_k} of {moe.n_experts} routed experts per token, shared ones "
                       "always")
