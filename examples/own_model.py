"""Your own model in tensorledger: a factory, its inputs and its loss (the README's example).

    tensorledger trace   --model examples/own_model.py:make_model --batch 4 --seq 64
    tensorledger memory  --model examples/own_model.py:make_model --batch 4 --seq 64
    tensorledger roofline --model examples/own_model.py:make_model --hardware h100
    tensorledger models  examples/own_model.py:make_model

The factory returns an ``nn.Module`` that takes keyword inputs and returns a ``ModelOutput``;
``make_inputs`` and ``loss`` are optional (without them: token ids in, cross-entropy of the
logits out).  Everything is built under fake tensors by default: nothing is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, HEADS = 1000, 96, 4


@dataclass
class Output:
    """What the model returns (a ModelOutput-like dataclass with ``.logits``)."""

    logits: torch.Tensor


class TinyClassifierLM(nn.Module):
    """Token embedding, one self-attention block with a padding mask, a vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(),
                                 nn.Linear(4 * WIDTH, WIDTH))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Output:
        x = self.embed(input_ids)
        batch, seq, _ = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        keep = attention_mask[:, None, None, :].bool()  # padding positions are masked out
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, seq, WIDTH))
        x = x + self.mlp(self.norm(x))
        return Output(logits=self.head(x))


def make_model() -> nn.Module:
    return TinyClassifierLM()


def make_inputs(batch: int, seq: int) -> dict[str, torch.Tensor]:
    """Keyword inputs of one step: token ids and an attention mask (the last quarter padded)."""
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[:, seq - seq // 4:] = 0
    return {"input_ids": torch.zeros(batch, seq, dtype=torch.long), "attention_mask": mask}


def loss(output: Output, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Next-token cross-entropy over the positions the mask keeps."""
    logits = output.logits[:, :-1].flatten(0, 1)
    targets = inputs["input_ids"][:, 1:].flatten()
    kept = inputs["attention_mask"][:, 1:].flatten().float()
    losses = F.cross_entropy(logits, targets, reduction="none")
    return (losses * kept).sum() / kept.sum()
