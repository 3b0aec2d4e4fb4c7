"""Parameters of a :class:`~tensorledger.napkin.transformer.TransformerConfig`, by part: dense
blocks, mixture-of-experts blocks (total and active) and latent attention, embeddings, head and
norms; :mod:`tensorledger.napkin.transformer` re-exports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorledger.napkin.moe import mla_attention_params, mla_norm_params, moe_layer_params

if TYPE_CHECKING:
    from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["ParameterCount", "parameter_count"]


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a :class:`TransformerConfig`, by part; the parts add up to the total.

    ``embeddings`` is the token table plus a learned position table; ``attention``, ``mlp`` and
    ``norms`` sum over all layers (``norms`` includes the final norm); ``head`` is 0 when tied.
    A mixture of experts' router, routed and shared experts are ``mlp``; ``mtp`` the multi-token
    prediction depths (their blocks, projections and norms; they share embeddings and head).
    ``active_params`` is what one token runs (k of E routed experts; None for a dense model);
    ``per_layer_params`` is the last layer's (a mixture of experts' when there is one).
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
    mtp_params: int = 0
    active_params: int | None = None

    def parts(self) -> dict[str, int]:
        """Part name → parameters, in the order of the forward pass."""
        parts = {"embeddings": self.embeddings_params, "attention": self.attention_params,
                 "mlp": self.mlp_params, "norms": self.norms_params, "head": self.head_params}
        if self.mtp_params:
            parts["mtp"] = self.mtp_params
        return parts

    def shares(self) -> dict[str, float]:
        """Part name → its fraction of the total."""
        return {part: n / self.total_params for part, n in self.parts().items()}

    @property
    def active_share(self) -> float | None:
        """The active parameters' fraction of the total (None: not a mixture of experts)."""
        return None if self.active_params is None else self.active_params / self.total_params


def _norm_params(config: TransformerConfig) -> int:
    # LayerNorm has a scale and, with bias, a shift; RMSNorm only a scale.
    shift = config.d_model if config.norm == "layernorm" and config.bias else 0
    return config.d_model + shift


@dataclass(frozen=True)
class _Layer:
    """One block's parameters by part, and what a token runs of its MLP part."""

    attention: int
    mlp: int
    norms: int
    mlp_active: int

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.norms


def _layer(config: TransformerConfig, sparse: bool) -> _Layer:
    d, ff, q_dim, kv_dim = config.d_model, config.d_ff, config.q_dim, config.kv_dim
    bias = config.bias
    norms = 2 * _norm_params(config)
    if config.mla is not None:
        attention = mla_attention_params(config)
        norms += mla_norm_params(config)
    else:
        attention = d * q_dim + 2 * d * kv_dim + q_dim * d
        if bias:
            attention += q_dim + 2 * kv_dim + d
        if config.qk_norm:
            norms += 2 * config.head_dim
    if sparse:
        experts = moe_layer_params(config)
        return _Layer(attention, experts.total_params, norms, experts.active_params)
    mlp_matrices = 2 if config.mlp == "gelu" else 3
    mlp = mlp_matrices * d * ff
    if bias:
        mlp += (mlp_matrices - 1) * ff + d
    return _Layer(attention, mlp, norms, mlp)


def _sparse_layers(config: TransformerConfig) -> int:
    """Layers whose MLP is a mixture of experts."""
    return 0 if config.moe is None else config.n_layers - config.moe.first_dense_layers


def parameter_count(config: TransformerConfig) -> ParameterCount:
    """Closed-form parameter count.

    Per layer: attention Q (d·q_dim), K and V (2·d·kv_dim), output (q_dim·d), plus biases
    q_dim + 2·kv_dim + d; MLP 2·d·ff (GELU) or 3·d·ff (SwiGLU), plus biases ff + d (GELU) or
    2·ff + d (SwiGLU); two norms.  Then a final norm, the token table V·d, a position table
    s·d if learned, and a head V·d unless tied.  GPT-2 small: 124,439,808.  A mixture of
    experts' layers and latent attention take :mod:`tensorledger.napkin.moe`'s counts; each
    multi-token prediction depth adds a block, a 2d × d projection and three norms.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> parameter_count(get_preset("llama-2-7b")).total_params
    6738415616
    >>> m = parameter_count(get_preset("mixtral-8x7b"))
    >>> m.total_params, m.active_params
    (46702792704, 12879925248)
    """
    d = config.d_model
    norm = _norm_params(config)
    sparse = _sparse_layers(config)
    dense_layer = _layer(config, sparse=False)
    sparse_layer = _layer(config, sparse=True) if sparse else dense_layer
    dense = config.n_layers - sparse
    token_table = config.vocab_size * d
    position_table = config.context_length * d if config.positions == "learned" else 0
    embeddings = token_table + position_table
    attention = dense * dense_layer.attention + sparse * sparse_layer.attention
    mlp = dense * dense_layer.mlp + sparse * sparse_layer.mlp
    norms = dense * dense_layer.norms + sparse * sparse_layer.norms + norm
    head = 0 if config.tied_embeddings else config.vocab_size * d
    # a prediction depth: its block (the last layer's kind), the 2d → d projection of the
    # hidden state beside the next token's embedding, and norms of both and of its output
    last = sparse_layer if sparse else dense_layer
    mtp = config.mtp_depth * (last.total + 2 * d * d + 3 * norm)
    total = embeddings + attention + mlp + norms + head + mtp
    assert total == (embeddings + dense * dense_layer.total + sparse * sparse_layer.total
                     + norm + head + mtp)
    active = None
    if config.moe is not None:
        skipped = sparse_layer.mlp - sparse_layer.mlp_active
        active = total - (sparse + config.mtp_depth) * skipped
    return ParameterCount(model=config.name, embeddings_params=embeddings,
                          attention_params=attention, mlp_params=mlp, norms_params=norms,
                          head_params=head, total_params=total, per_layer_params=last.total,
                          non_embedding_params=total - embeddings, mtp_params=mtp,
                          active_params=active)
