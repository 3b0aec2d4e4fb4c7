"""DeepSeek-V3's multi-token prediction (§2.2): D sequential depths, each predicting one token
further ahead than the last, sharing the model's embeddings and output head.

Depth j (1-based) takes the previous depth's hidden states h (the model's last block's for
j = 1) at positions 0 .. s − j − 1, beside the embeddings of the tokens at j .. s − 1: both
RMS-normalised, concatenated and projected 2d → d, then one Transformer block (a mixture of
experts' when the model has one), a final norm and the shared head.  Its logits at position i
predict token i + j + 1, so s − j − 1 of them have a target in the sequence.  The loss
λ / D · Σ_j CE_j joins the step's loss through :func:`tensorledger.models.moe.with_aux_loss`,
so the model's output stays the next-token logits.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from tensorledger.models.transformer import Block
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["PredictionDepth", "mtp_loss"]


class PredictionDepth(nn.Module):
    """One multi-token prediction depth: norms, the 2d → d projection, a block, a norm."""

    def __init__(self, config: TransformerConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        d = config.d_model
        self.hidden_norm = nn.RMSNorm(d, eps=config.norm_eps, dtype=dtype)
        self.embedding_norm = nn.RMSNorm(d, eps=config.norm_eps, dtype=dtype)
        self.project = nn.Linear(2 * d, d, bias=False, dtype=dtype)
        self.block = Block(config, dtype, layer=config.n_layers)
        self.final_norm = nn.RMSNorm(d, eps=config.norm_eps, dtype=dtype)

    def forward(self, hidden: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        joined = torch.cat([self.hidden_norm(hidden), self.embedding_norm(embedded)], dim=-1)
        return cast(torch.Tensor, self.block(self.project(joined)))


def mtp_loss(depths: nn.ModuleList, hidden: torch.Tensor, tokens: torch.Tensor,
             embedding: nn.Module, head: nn.Module, weight: float) -> torch.Tensor:
    """λ / D · Σ_j cross-entropy of depth j's predictions of the tokens j + 1 ahead."""
    seq = tokens.shape[1]
    total = hidden.new_zeros((), dtype=torch.float32)
    for j, depth in enumerate(depths, start=1):
        if seq - j - 1 < 1:
            break
        hidden = depth(hidden[:, :-1], embedding(tokens[:, j:]))
        logits = head(cast(nn.Module, depth.final_norm)(hidden[:, :-1]))
        targets = tokens[:, j + 1:]
        total = total + F.cross_entropy(rearrange(logits, "b s v -> (b s) v").float(),
                                        rearrange(targets, "b s -> (b s)"))
    return total * (weight / len(depths))
