"""DeepSeek's multi-head latent attention (DeepSeek-V2 §2.1, V3 §2.1.1), from an
:class:`~tensorledger.napkin.moe.MLAConfig`.

Named dimensions: ``b`` batch, ``s`` sequence, ``h`` heads, ``n`` the part of a query/key
without positions (qk_nope_dim), ``r`` its rotary part (qk_rope_dim), ``v`` a value head.

Queries come through a low-rank latent (d → q_lora_rank, RMSNorm, → h · (n + r)); keys and
values through another (d → kv_lora_rank + r: the latent, RMSNorm, → h · (n + v); and one
rotary key of width r that every head shares).  RoPE turns the rotary parts only.  The latent
is what a serving cache keeps; the training step here computes full keys and values from it,
as DeepSeek's training code does, so the FLOPs are the up-projections' (no absorbed weights).

Parameter names: ``query_down``, ``query_norm``, ``query_up`` (or ``query``), ``kv_down``,
``kv_norm``, ``kv_up``, ``output``; the two norms count as norms
(:func:`tensorledger.models.build.parameter_parts`), as napkin's closed form has it.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn

from tensorledger.errors import InputError
from tensorledger.models.cache import LayerCache
from tensorledger.models.transformer import apply_rope, rope_angles
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["LatentAttention"]


class LatentAttention(nn.Module):
    """Causal multi-head latent attention.

    >>> from tensorledger.napkin.moe import MLAConfig
    >>> config = TransformerConfig(vocab_size=10, context_length=8, d_model=48, n_layers=1,
    ...     n_heads=3, mlp="swiglu", norm="rmsnorm", positions="rope", bias=False,
    ...     mla=MLAConfig(q_lora_rank=20, kv_lora_rank=12, qk_nope_dim=8, qk_rope_dim=4,
    ...                   v_head_dim=6))
    >>> tuple(LatentAttention(config)(torch.randn(2, 5, 48)).shape)
    (2, 5, 48)
    """

    def __init__(self, config: TransformerConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        assert config.mla is not None
        self.config = config
        mla = self.mla = config.mla
        d, h = config.d_model, config.n_heads
        q_width = h * mla.qk_head_dim
        if mla.q_lora_rank:
            self.query_down = nn.Linear(d, mla.q_lora_rank, bias=False, dtype=dtype)
            self.query_norm = nn.RMSNorm(mla.q_lora_rank, eps=config.norm_eps, dtype=dtype)
            self.query_up = nn.Linear(mla.q_lora_rank, q_width, bias=False, dtype=dtype)
        else:
            self.query = nn.Linear(d, q_width, bias=False, dtype=dtype)
        self.kv_down = nn.Linear(d, mla.kv_lora_rank + mla.qk_rope_dim, bias=False,
                                 dtype=dtype)
        self.kv_norm = nn.RMSNorm(mla.kv_lora_rank, eps=config.norm_eps, dtype=dtype)
        self.kv_up = nn.Linear(mla.kv_lora_rank, h * (mla.qk_nope_dim + mla.v_head_dim),
                               bias=False, dtype=dtype)
        self.output = nn.Linear(h * mla.v_head_dim, d, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        if cache is not None:
            raise InputError("latent attention has no reference KV cache yet (it would keep "
                             "the latent); trace a training step, or use transformers' "
                             "DeepSeek-V3 with its cache")
        mla, config = self.mla, self.config
        q = (self.query_up(self.query_norm(self.query_down(x))) if mla.q_lora_rank
             else self.query(x))
        q = rearrange(q, "b s (h w) -> b h s w", h=config.n_heads)
        q_nope, q_rope = q.split([mla.qk_nope_dim, mla.qk_rope_dim], dim=-1)
        latent, k_rope = self.kv_down(x).split([mla.kv_lora_rank, mla.qk_rope_dim], dim=-1)
        kv = rearrange(self.kv_up(self.kv_norm(latent)), "b s (h w) -> b h s w",
                       h=config.n_heads)
        k_nope, v = kv.split([mla.qk_nope_dim, mla.v_head_dim], dim=-1)
        cos, sin = rope_angles(x.shape[1], mla.qk_rope_dim, config.rope_theta, x.device)
        q_rope = apply_rope(q_rope, cos, sin)
        k_rope = apply_rope(rearrange(k_rope, "b s r -> b 1 s r"), cos, sin)
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, repeat(k_rope, "b 1 s r -> b h s r", h=config.n_heads)],
                      dim=-1)
        dropout = config.dropout if self.training else 0.0
        attended = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        return cast(torch.Tensor, self.output(rearrange(attended, "b h s v -> b s (h v)")))
