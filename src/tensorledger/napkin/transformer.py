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


# --------------------------------------------------------------------------- parameter count

@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a :class:`TransformerConfig`, by part; the parts add up to the total.

    ``embeddings`` is the token table plus a learned position table; ``attention``, ``mlp`` and
    ``norms`` sum over all layers (``norms`` includes the final norm); ``head`` is 0 when tied.
    """

    model: str
    embeddings_params: int
    attention_params: int
    mlp_params: int
    norms_params: int
    head_params: int
    total_params: int
    per_layer_params: int
    non_embedding_params: int

    def parts(self) -> dict[str, int]:
        """Part name → parameters, in the order of the forward pass."""
        return {"embeddings": self.embeddings_params, "attention": self.attention_params,
                "mlp": self.mlp_params, "norms": self.norms_params, "head": self.head_params}

    def shares(self) -> dict[str, float]:
        """Part name → its fraction of the total."""
        return {part: n / self.total_params for part, n in self.parts().items()}


def _norm_params(config: TransformerConfig) -> int:
    # LayerNorm has a scale and, with bias, a shift; RMSNorm only a scale.
    shift = config.d_model if config.norm == "layernorm" and config.bias else 0
    return config.d_model + shift


def parameter_count(config: TransformerConfig) -> ParameterCount:
    """Closed-form parameter count.

    Per layer: attention Q (d·q_dim), K and V (2·d·kv_dim), output (q_dim·d), plus biases
    q_dim + 2·kv_dim + d; MLP 2·d·ff (GELU) or 3·d·ff (SwiGLU), plus biases ff + d (GELU) or
    2·ff + d (SwiGLU); two norms.  Then a final norm, the token table V·d, a position table
    s·d if learned, and a head V·d unless tied.  GPT-2 small: 124,439,808.

    >>> parameter_count(get_preset("llama-2-7b")).total_params
    6738415616
    """
    d, ff, q_dim, kv_dim = config.d_model, config.d_ff, config.q_dim, config.kv_dim
    bias = config.bias
    attention_layer = d * q_dim + 2 * d * kv_dim + q_dim * d
    if bias:
        attention_layer += q_dim + 2 * kv_dim + d
    mlp_matrices = 2 if config.mlp == "gelu" else 3
    mlp_layer = mlp_matrices * d * ff
    if bias:
        mlp_layer += (mlp_matrices - 1) * ff + d
    norm = _norm_params(config)
    norms_layer = 2 * norm
    token_table = config.vocab_size * d
    position_table = config.context_length * d if config.positions == "learned" else 0
    embeddings = token_table + position_table
    attention = config.n_layers * attention_layer
    mlp = config.n_layers * mlp_layer
    norms = config.n_layers * norms_layer + norm
    head = 0 if config.tied_embeddings else config.vocab_size * d
    total = embeddings + attention + mlp + norms + head
    per_layer = attention_layer + mlp_layer + norms_layer
    assert total == embeddings + config.n_layers * per_layer + norm + head
    return ParameterCount(model=config.name, embeddings_params=embeddings,
                          attention_params=attention, mlp_params=mlp, norms_params=norms,
                          head_params=head, total_params=total, per_layer_params=per_layer,
                          non_embedding_params=total - embeddings)


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
    terms per sequence.

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
    projections = layers * (2 * d * (config.q_dim + 2 * config.kv_dim) + 2 * config.q_dim * d)
    mlp_matrices = 2 if config.mlp == "gelu" else 3
    mlp = layers * 2 * mlp_matrices * d * config.d_ff
    scores_full = layers * 2 * s * config.q_dim
    # Halving 2·s·q_dim stays whole: q_dim·s.
    scores = scores_full if convention == "full" else scores_full // 2
    values = scores
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
    return ModelParams(model=config.name, params=parameter_count(config).total_params,
                       source="closed-form total (embeddings and head included)")
