"""Activation checkpointing as the step runs it, pinned on a probe block (issue 42's mutation run
of ``tensorledger.workload.recompute``): each call of the block sees whether it runs inside
:func:`recomputation` and under which target, and the numbers and gradients are torch's own
(non-reentrant) checkpoint's."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

from tensorledger.errors import InputError
from tensorledger.hardware.target import Target
from tensorledger.trace import recorder
from tensorledger.trace.kernels import active_target, target_program
from tensorledger.workload.recompute import (
    CheckpointedBlock,
    checkpoint_blocks,
    checkpoint_hf_layers,
    checkpoint_in_target,
)

H100 = Target("h100-sxm", "cuda", (9, 0))


class Probe(nn.Module):
    """y = 3·x·w (w = 2 at start): each call's (recomputing depth, target) noted."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(2.0))
        self.calls: list[tuple[int, Target | None]] = []

    def forward(self, x: torch.Tensor, scale: float = 3.0) -> torch.Tensor:
        self.calls.append((recorder._recomputing, active_target()))
        return scale * x * self.w


def test_a_checkpointed_block_recomputes_once_in_backward_as_recomputation() -> None:
    probe = Probe()
    block = CheckpointedBlock(probe)
    x = torch.tensor([1.0, 2.0])  # no gradient of its own: the weight's must still come back
    y = block(x)
    assert y.tolist() == [6.0, 12.0]  # 3 · x · 2
    y.sum().backward()  # type: ignore[no-untyped-call]
    # d/dw Σ 3·x·w = 3·(1 + 2) = 9
    assert probe.w.grad is not None and probe.w.grad.item() == 9.0
    # the forward and its recomputation, both inside recomputation() (depth 1), no target
    assert probe.calls == [(1, None), (1, None)]
    assert recorder._recomputing == 0  # left again


def test_a_checkpointed_block_recomputes_under_the_forwards_target() -> None:
    probe = Probe()
    block = CheckpointedBlock(probe)
    x = torch.tensor([1.0], requires_grad=True)
    with target_program(H100):
        y = block(x)
    assert active_target() is None
    y.sum().backward()  # type: ignore[no-untyped-call]  # outside the target's program
    assert probe.calls == [(1, H100), (1, H100)]
    assert x.grad is not None and x.grad.item() == 6.0  # 3 · w = 3 · 2


def test_checkpoint_in_target_passes_every_argument_and_recomputes_in_the_target() -> None:
    probe = Probe()
    x = torch.tensor([1.0, 3.0])
    with target_program(H100):
        y = checkpoint_in_target(probe, x, scale=5.0)
    assert y.tolist() == [10.0, 30.0]  # 5 · x · 2
    y.sum().backward()
    assert probe.w.grad is not None and probe.w.grad.item() == 20.0  # 5 · (1 + 3)
    assert probe.calls == [(1, H100), (1, H100)]


def test_checkpoint_in_target_without_a_target() -> None:
    probe = Probe()
    y = checkpoint_in_target(probe, torch.tensor([2.0]), scale=4.0)
    assert y.item() == 16.0  # 4 · 2 · 2
    y.sum().backward()
    assert probe.w.grad is not None and probe.w.grad.item() == 8.0  # 4 · 2
    assert probe.calls == [(1, None), (1, None)]


def test_checkpoint_blocks_wraps_every_block_in_place() -> None:
    model = nn.Module()
    model.blocks = nn.ModuleList([Probe(), Probe(), Probe()])
    inner = list(model.blocks)
    assert checkpoint_blocks(model) is model
    assert [type(b) for b in model.blocks] == [CheckpointedBlock] * 3
    assert [b.block for b in model.blocks] == inner  # each its own block, in order


def test_checkpoint_blocks_needs_a_blocks_list() -> None:
    with pytest.raises(InputError, match=r"Linear has no \.blocks list to checkpoint"):
        checkpoint_blocks(nn.Linear(2, 2))
    model = nn.Module()
    model.blocks = nn.Sequential(Probe())  # a module, not a ModuleList
    with pytest.raises(InputError, match=r"no \.blocks list"):
        checkpoint_blocks(model)


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._gradient_checkpointing_func: Any = None


class _HFModel(nn.Module):
    """transformers' shape of it: the flag, an enable method that warns, layers that hold
    their checkpointing function."""

    supports_gradient_checkpointing = True

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Layer(), _Layer()])
        self.head = nn.Linear(2, 2)
        self.enabled_by: list[str] = []

    def gradient_checkpointing_enable(self) -> None:
        warnings.warn("use_cache=True is incompatible", UserWarning, stacklevel=1)
        self.enabled_by.append("gradient")


class _HFModel5(_HFModel):
    def activation_checkpointing_enable(self) -> None:
        warnings.warn("transformers 5's name", UserWarning, stacklevel=1)
        self.enabled_by.append("activation")


@pytest.mark.parametrize(("kind", "enabled_by"), [(_HFModel, ["gradient"]),
                                                  (_HFModel5, ["activation"])])
def test_hf_layers_checkpoint_in_the_target(kind: type[_HFModel], enabled_by: list[str]
                                            ) -> None:
    model = kind()  # made here: a parametrized instance would carry one run's state to the next
    # warnings are errors in the tests: the enable method's warning must be silenced
    assert checkpoint_hf_layers(model) is model
    assert model.enabled_by == enabled_by  # transformers 5's method first, else the old one
    assert [layer._gradient_checkpointing_func for layer in model.layers] == [
        checkpoint_in_target] * 2
    assert not hasattr(model.head, "_gradient_checkpointing_func")  # only where it was


def test_hf_model_without_checkpointing_is_refused() -> None:
    with pytest.raises(InputError, match="transformers' Linear does not support activation "
                       "checkpointing"):
        checkpoint_hf_layers(nn.Linear(2, 2))  # no flag at all
    refused = _HFModel()
    refused.supports_gradient_checkpointing = False
    with pytest.raises(InputError, match="_HFModel does not support"):
        checkpoint_hf_layers(refused)
