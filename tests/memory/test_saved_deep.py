"""What PyTorch keeps for the lecture's deep network, pinned exactly (FACTS.md)."""

from __future__ import annotations

import pytest
import torch

from tensorledger.models import DeepNetwork
from tensorledger.workload.saved import saved_activations

B, D, L = 3, 16, 5


def _saved_values(activation: str, checkpointed: bool, device: str = "meta") -> int:
    net = DeepNetwork(D, L, activation, checkpointed=checkpointed, device=device)
    x = torch.ones(B, D, device=device)
    saved, out = saved_activations(net, lambda: net(x))
    out.sum().backward()
    assert saved.total_bytes % 4 == 0
    return saved.total_bytes // 4  # fp32 values


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_relu_keeps_l_plus_one(device: str) -> None:
    # Each block's input (the previous ReLU's output, saved by both) plus the last output.
    assert _saved_values("relu", False, device) == (L + 1) * B * D  # 6 · 3 · 16 = 288


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_gelu_keeps_two_l(device: str) -> None:
    # GELU keeps its input (the matmul output) as well as the block input.
    assert _saved_values("gelu", False, device) == 2 * L * B * D  # 10 · 3 · 16 = 480


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_checkpointing_each_block_keeps_l(activation: str) -> None:
    # Only each block's input survives: L·B·D for both activations.
    assert _saved_values(activation, True) == L * B * D  # 5 · 3 · 16 = 240


def test_saved_counted_once_per_storage_and_by_module() -> None:
    net = DeepNetwork(D, L, "relu", device="meta")
    saved, _ = saved_activations(net, lambda: net(torch.ones(B, D, device="meta")))
    # Saves: L inputs to mm (one is x) + L ReLU outputs; L - 1 of these are the same storage.
    assert saved.storages == L + 1
    # Weights are saved for the input's gradient, which x (no grad) does not need: L - 1.
    assert saved.saves == 2 * L + (L - 1)  # 14
    assert saved.params_saved_bytes == (L - 1) * D * D * 4
    by_module = {m.module: m.saved_bytes for m in saved.by_module}
    # Block 0's linear saves x; each ReLU saves its output; the inner linears save nothing new.
    assert by_module["blocks.0.linear"] == B * D * 4
    assert all(by_module[f"blocks.{i}.activation"] == B * D * 4 for i in range(L))
    assert sum(by_module.values()) == saved.total_bytes
