"""A pre-norm decoder-only Transformer LM, built from a :class:`TransformerConfig`.

Written with named dimensions: ``b`` batch, ``s`` sequence, ``h`` query heads, ``k`` key/value
heads, ``d`` head dim, ``v`` vocabulary.  Attention goes through
``scaled_dot_product_attention`` with ``is_causal=True`` (grouped-query when ``k < h``).

Parameter names map onto the parts of :func:`tensorledger.napkin.transformer.parameter_count`:
``token_embedding``/``position_embedding`` → embeddings, ``blocks.*.attention`` → attention,
``blocks.*.mlp`` → MLP, ``*norm*`` → norms, ``head`` → head (absent from ``parameters()`` when
tied, because it shares the token table).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn

from tensorledger.errors import InputError
from tensorledger.models.cache import KVCache, LayerCache
from tensorledger.napkin.transformer import TransformerConfig

# scaled_dot_product_attention shares key/value heads itself from torch 2.5 (enable_gqa); on
# torch 2.4 the heads are repeated explicitly, which computes the same attention.
_SDPA_SHARES_KV_HEADS = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)

__all__ = ["MLP", "Attention", "Block", "TransformerLM", "apply_rope", "rope_angles"]


def _norm(config: TransformerConfig, dtype: torch.dtype | None) -> nn.Module:
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=config.norm_eps, dtype=dtype)
    return nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.bias, dtype=dtype)


def rope_angles(seq_len: int, head_dim: int, theta: float,
                device: torch.device, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, each (s, head_dim): position × theta^(-2i/head_dim),
    for the positions ``start .. start + seq_len`` (after a KV cache's tokens).

    Computed on the fly (no buffer), so nothing extra is saved and meta/fake builds stay empty.
    """
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32)
                         / head_dim)
    positions = torch.arange(start, start + seq_len, device=device, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the two halves of each head's features (the Hugging Face Llama layout)."""
    first, second = rearrange(x, "... (half d) -> half ... d", half=2)
    rotated = torch.cat([-second, first], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Attention(nn.Module):
    """Causal self-attention with ``n_kv_heads`` key/value heads (MHA, GQA or MQA)."""

    def __init__(self, config: TransformerConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.config = config
        bias = config.bias
        self.query = nn.Linear(config.d_model, config.q_dim, bias=bias, dtype=dtype)
        self.key = nn.Linear(config.d_model, config.kv_dim, bias=bias, dtype=dtype)
        self.value = nn.Linear(config.d_model, config.kv_dim, bias=bias, dtype=dtype)
        self.output = nn.Linear(config.q_dim, config.d_model, bias=bias, dtype=dtype)
        if config.qk_norm:  # Qwen3: each query and key head RMS-normalised before RoPE
            self.query_norm = nn.RMSNorm(config.head_dim, eps=config.norm_eps, dtype=dtype)
            self.key_norm = nn.RMSNorm(config.head_dim, eps=config.norm_eps, dtype=dtype)

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        config = self.config
        start = 0 if cache is None else cache.start
        # split by the head width, not the head count: under tensor parallelism a rank's
        # projections hold n_heads / tp of the heads, whole
        q = rearrange(self.query(x), "b s (h d) -> b h s d", d=config.head_dim)
        k = rearrange(self.key(x), "b s (k d) -> b k s d", d=config.head_dim)
        v = rearrange(self.value(x), "b s (k d) -> b k s d", d=config.head_dim)
        if config.qk_norm:
            q, k = self.query_norm(q), self.key_norm(k)
        if config.positions == "rope":
            cos, sin = rope_angles(x.shape[1], config.head_dim, config.rope_theta, x.device,
                                   start)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        causal = True
        if cache is not None:
            k, v = cache.update(k, v)
            # a prompt attends causally to itself; one new token to every cached one (the
            # kernel's causal mask is aligned top-left, which would hide them from it)
            causal = start == 0
            if not causal and x.shape[1] != 1:
                raise InputError("the reference cache runs a prompt into an empty cache, or one "
                                 "token at a time after it")
        dropout = config.dropout if self.training else 0.0
        grouped = config.n_kv_heads != config.n_heads
        if grouped and not _SDPA_SHARES_KV_HEADS:  # pragma: no cover - torch 2.4 only
            group = config.n_heads // config.n_kv_heads
            k = repeat(k, "b k s d -> b (k g) s d", g=group)
            v = repeat(v, "b k s d -> b (k g) s d", g=group)
            grouped = False
        if grouped:
            attended = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout,
                                                      is_causal=causal, enable_gqa=True)
        else:
            attended = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout,
                                                      is_causal=causal)
        return cast(torch.Tensor, self.output(rearrange(attended, "b h s d -> b s (h d)")))


class MLP(nn.Module):
    """GELU (tanh approximation, GPT-2) with two matrices, or SwiGLU (Llama) with three."""

    def __init__(self, config: TransformerConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.swiglu = config.mlp == "swiglu"
        self.up = nn.Linear(config.d_model, config.d_ff, bias=config.bias, dtype=dtype)
        if self.swiglu:
            self.gate = nn.Linear(config.d_model, config.d_ff, bias=config.bias, dtype=dtype)
        self.down = nn.Linear(config.d_ff, config.d_model, bias=config.bias, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            hidden = F.silu(self.gate(x)) * self.up(x)
        else:
            hidden = F.gelu(self.up(x), approximate="tanh")
        return cast(torch.Tensor, self.down(hidden))


class Block(nn.Module):
    """x + attention(norm(x)), then x + mlp(norm(x)): the pre-norm residual block.

    With ``config.mla`` the attention is latent (:mod:`tensorledger.models.latent`); with
    ``config.moe`` the MLP of layer ``layer`` and later ones past its dense layers is a
    mixture of experts (:mod:`tensorledger.models.moe`)."""

    def __init__(self, config: TransformerConfig, dtype: torch.dtype | None = None,
                 layer: int = 0) -> None:
        super().__init__()
        self.attention_norm = _norm(config, dtype)
        self.attention: nn.Module
        if config.mla is not None:
            from tensorledger.models.latent import LatentAttention  # it imports RoPE from here

            self.attention = LatentAttention(config, dtype)
        else:
            self.attention = Attention(config, dtype)
        self.mlp_norm = _norm(config, dtype)
        self.mlp: nn.Module
        if config.moe is not None and layer >= config.moe.first_dense_layers:
            from tensorledger.models.moe import MoE

            self.mlp = MoE(config, dtype)
        else:
            self.mlp = MLP(config, dtype)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        normed = self.attention_norm(x)
        # without a cache the attention takes x alone, as a tensor-parallel plan lays it out
        attended = self.attention(normed) if cache is None else self.attention(normed, cache)
        x = x + self.dropout(attended)
        return x + cast(torch.Tensor, self.dropout(self.mlp(self.mlp_norm(x))))


class TransformerLM(nn.Module):
    """Token ids (b, s) → logits (b, s, v).

    >>> from tensorledger.napkin.transformer import get_preset, parameter_count
    >>> with torch.device("meta"):
    ...     model = TransformerLM(get_preset("gpt2"))
    >>> sum(p.numel() for p in model.parameters())      # parameter_count(gpt2).total_params
    124439808
    """

    def __init__(self, config: TransformerConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        # dtype goes to every constructor: converting afterwards (``.to``) fails on fake tensors.
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model, dtype=dtype)
        self.position_embedding = (
            nn.Embedding(config.context_length, config.d_model, dtype=dtype)
            if config.positions == "learned" else None)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, dtype, i) for i in range(config.n_layers))
        self.final_norm = _norm(config, dtype)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False, dtype=dtype)
        if config.tied_embeddings:
            self.head.weight = self.token_embedding.weight
        self.mtp: nn.ModuleList | None = None
        if config.mtp_depth:
            from tensorledger.models.mtp import PredictionDepth  # it builds Blocks from here

            self.mtp = nn.ModuleList(PredictionDepth(config, dtype)
                                     for _ in range(config.mtp_depth))
        self.apply(_init_weights)

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits of every position; with a ``cache``, the new tokens' keys and values are
        written into it, attention reads every cached token, and only the last position's
        logits are computed (the one a next token is sampled from)."""
        start = 0 if cache is None else cache.length
        x = self.token_embedding(tokens)
        if self.position_embedding is not None:
            positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
            x = x + self.position_embedding(positions)
        x = self.dropout(x)
        for index, block in enumerate(self.blocks):
            x = block(x) if cache is None else block(x, cache.layer(index))
        if cache is not None:
            cache.advance(tokens.shape[1])
            x = x[:, -1:]
        logits = cast(torch.Tensor, self.head(self.final_norm(x)))
        if self.mtp is not None and cache is None:
            from tensorledger.models.moe import with_aux_loss
            from tensorledger.models.mtp import mtp_loss

            extra = mtp_loss(self.mtp, x, tokens, self.token_embedding, self.head,
                             self.config.mtp_loss_weight)
            logits = with_aux_loss(logits, extra)
        return logits


def _init_weights(module: nn.Module) -> None:
    # GPT-2's N(0, 0.02) for matrices and tables, zero biases; on meta this allocates nothing.
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
