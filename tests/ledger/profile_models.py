"""Factories for tests/ledger/test_profile_trace_pinned.py: three small models whose traced
figures are worked by hand there (``_trace`` of ``tensorledger.ledger.profile``).

Each reads token ids only (no ``make_inputs``) and returns its logits (cross-entropy by the
tool).  Widths are small and differ from each other and from the tests' sequence (5) and batch
(2, a factory's), so a figure taken per step rather than per token, or from the wrong records,
changes the answer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH = 8, 7
ROWS, INNER = 11, 9  # the fixed table: ROWS positions by WIDTH, a product over INNER
BLOCK_INNER = 3  # the numbered block's table: a product over 3


class Gpt2Names(nn.Module):
    """GPT-2's embedding names (``wte``, ``wpe``, and again under ``transformer``), none with
    "embed" in it, and no numbered module: a table made by a product of two buffers (no
    gradient, the same FLOPs whatever the batch), attention of the stream with itself, a head."""

    left: torch.Tensor
    right: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(ROWS, WIDTH)
        self.transformer = nn.ModuleDict({"wte": nn.Embedding(VOCAB, WIDTH),
                                          "wpe": nn.Embedding(ROWS, WIDTH)})
        self.register_buffer("left", torch.ones(ROWS, INNER))
        self.register_buffer("right", torch.ones(INNER, WIDTH))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        positions = torch.arange(seq, device=input_ids.device)
        table = self.left @ self.right
        inner = self.transformer
        x = (self.wte(input_ids) + self.wpe(positions) + inner["wte"](input_ids)
             + inner["wpe"](positions) + table[:seq])
        stream = x[:, None]  # one head of width WIDTH
        x = F.scaled_dot_product_attention(stream, stream, stream)[:, 0]
        return self.head(x)  # type: ignore[no-any-return]


class Table(nn.Module):
    """A numbered block whose one product is of two buffers: no gradient, no backward product."""

    left: torch.Tensor
    right: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("left", torch.ones(ROWS, BLOCK_INNER))
        self.register_buffer("right", torch.ones(BLOCK_INNER, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (self.left @ self.right)[:x.shape[1]]


class NumberedBlock(nn.Module):
    """An embedding, ``blocks.0`` (a :class:`Table`), and a head larger than the block's product."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([Table()])
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks[0](self.embed(input_ids)))  # type: ignore[no-any-return]


def make_gpt2_names() -> nn.Module:
    return Gpt2Names()


def make_numbered_block() -> nn.Module:
    return NumberedBlock()


def make_no_product() -> nn.Module:
    """An embedding whose rows are the logits: no product anywhere."""
    return nn.Embedding(VOCAB, VOCAB)
