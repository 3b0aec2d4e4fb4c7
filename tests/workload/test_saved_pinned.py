"""What autograd keeps, per storage and per module, pinned on small modules whose saves are
known from torch's derivative formulas (issue 42's mutation run of
``tensorledger.workload.saved``): ``mul`` saves both operands, ``sin`` and ``cos`` their input,
``exp`` its output; ``double`` (a copy) and ``add`` save nothing."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from tensorledger.workload.saved import ROOT, ModuleSaved, saved_activations


class _Square(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x  # saves x twice: one storage, two saves


class _Wide(nn.Module):
    def forward(self, y: torch.Tensor) -> torch.Tensor:
        d = y.double()
        return d.sin() + d.exp()  # saves d (sin's input) and exp's output: two storages


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = _Square()
        self.b = _Wide()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x)).cos()  # cos saves the sum, outside every child: the root


def test_each_storage_once_with_its_first_saver_shape_dtype_and_saves() -> None:
    net = _Net()
    x = torch.ones(2, 3, requires_grad=True)
    saved, out = saved_activations(net, lambda: net(x))
    assert out.dtype == torch.float64
    rows = [(t.module, t.nbytes, t.shape, t.dtype, t.saves) for t in saved.tensors]
    assert rows == [
        ("a", 2 * 3 * 4, (2, 3), "float32", 2),  # x, fp32: 24 B, saved twice by mul
        ("b", 2 * 3 * 8, (2, 3), "float64", 1),  # d, fp64: 48 B
        ("b", 48, (2, 3), "float64", 1),  # exp's output
        (ROOT, 48, (2, 3), "float64", 1),  # the sum, saved by cos
    ]
    assert saved.total_bytes == 24 + 48 + 48 + 48 == 168
    assert (saved.storages, saved.saves, saved.params_saved_bytes) == (4, 2 + 1 + 1 + 1, 0)
    assert saved.by_module == (ModuleSaved("a", 24, 1), ModuleSaved("b", 48 + 48, 2),
                               ModuleSaved(ROOT, 48, 1))


class _Fails(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("caught by the parent")


class _Recovers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bad = _Fails()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with contextlib.suppress(ValueError):
            self.bad(x)
        return x.sin()  # saved by the root itself, after the child left by raising


def test_a_child_that_raises_leaves_the_module_stack() -> None:
    net = _Recovers()
    x = torch.ones(4, requires_grad=True)
    saved, _ = saved_activations(net, lambda: net(x))
    assert [(t.module, t.nbytes) for t in saved.tensors] == [(ROOT, 4 * 4)]  # x: 4 fp32


def test_storages_freed_during_the_forward_are_still_told_apart() -> None:
    x = torch.ones(64, requires_grad=True)

    def forward() -> torch.Tensor:
        for i in range(4):
            (x + i).sin()  # its graph dropped at once: x + i freed as soon as it is counted
        return x.cos()

    saved, _ = saved_activations(nn.Identity(), forward)
    # four sums and x: five storages of 64 fp32 values (256 B), each saved once, even where
    # the allocator hands a later sum the memory of an earlier one
    assert [t.saves for t in saved.tensors] == [1] * 5
    assert saved.total_bytes == 5 * 256
