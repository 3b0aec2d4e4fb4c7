"""Small networks the trace tests run: a deep Linear+ReLU stack and a tiny transformer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn


class DeepNet(nn.Module):
    """L blocks of (D×D matmul without bias → ReLU), as in the lecture."""

    def __init__(self, width: int, layers: int, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Linear(width, width, bias=False, device=device) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.relu(layer(x))
        return x


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, device: str | torch.device) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False, device=device)
        self.out = nn.Linear(dim, dim, bias=False, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = rearrange(self.qkv(x), "b s (three h d) -> three b h s d", three=3,
                            h=self.heads)
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(rearrange(mixed, "b h s d -> b s (h d)"))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, device: str | torch.device) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, device=device)
        self.attn = Attention(dim, heads, device)
        self.norm2 = nn.LayerNorm(dim, device=device)
        self.up = nn.Linear(dim, 4 * dim, device=device)
        self.down = nn.Linear(4 * dim, dim, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


class TinyTransformer(nn.Module):
    """Embedding, blocks, final norm and an untied head."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2,
                 device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, device=device)
        self.blocks = nn.ModuleList(Block(dim, heads, device) for _ in range(layers))
        self.norm = nn.LayerNorm(dim, device=device)
        self.head = nn.Linear(dim, vocab, bias=False, device=device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    return F.cross_entropy(rearrange(logits, "b s v -> (b s) v"),
                           rearrange(tokens, "b s -> (b s)"))
