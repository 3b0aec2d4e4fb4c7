"""Pins of workload/precision.py (issue 42: its mutants).  Plain SGD, whose update is
w − lr · g, so each expected weight is hand arithmetic."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from tensorledger.napkin.recipes import resolve_precision
from tensorledger.workload.precision import RecipeOptimizer, param_dtype


def _param(value: float, dtype: torch.dtype = torch.float32) -> nn.Parameter:
    p = nn.Parameter(torch.full((2,), value, dtype=dtype))
    p.grad = torch.ones(2, dtype=dtype)
    return p


def test_param_dtype_by_recipe_name_and_object() -> None:
    assert param_dtype("fp32") == torch.float32
    assert param_dtype("mixed-bf16") == torch.float32  # fp32 parameters, bf16 autocast
    assert param_dtype("bf16") == torch.bfloat16
    assert param_dtype("bf16-master") == torch.bfloat16
    assert param_dtype(resolve_precision("bf16")) == torch.bfloat16
    assert param_dtype(resolve_precision("fp32")) == torch.float32


def test_the_default_learning_rate_is_one_thousandth() -> None:
    p = _param(1.0)
    RecipeOptimizer([p], "sgd", "fp32").step()
    # 1 − 1e-3 · 1 = 0.999
    assert torch.allclose(p.detach(), torch.full((2,), 0.999), rtol=0, atol=1e-7)


def test_bf16_fp32_states_steps_with_rate_and_kernel_and_frees_its_shadows() -> None:
    p = _param(1.0, torch.bfloat16)
    opt = RecipeOptimizer([p], "sgd", "bf16-fp32-states", lr=0.5, kernel="foreach")
    # before the first step every shadow is an empty fp32 tensor on the parameter's device
    assert [(s.numel(), s.dtype, s.device) for s in opt._shadows] == [
        (0, torch.float32, p.device)]
    opt.step()
    # 1 − 0.5 · 1 = 0.5, exact in bf16
    assert p.detach().tolist() == [0.5, 0.5] and p.dtype == torch.bfloat16
    assert [s.numel() for s in opt._shadows] == [0]
    # the inner optimizer, made at the first step, runs the kernel asked for
    assert opt._inner[0].defaults["foreach"] is True
    assert opt.master_tensors() == []


def test_bf16_master_keeps_an_fp32_copy_and_passes_rate_and_kernel() -> None:
    p = _param(1.0, torch.bfloat16)
    opt = RecipeOptimizer([p], "sgd", "bf16-master", lr=0.25, kernel="foreach")
    assert opt._inner[0].defaults["foreach"] is True
    assert opt._inner[0].defaults["lr"] == 0.25
    opt.step()
    # 1 − 0.25 · 1 = 0.75 in both the fp32 master and the bf16 weight
    (master,) = opt.master_tensors()
    assert master.dtype == torch.float32 and master.detach().tolist() == [0.75, 0.75]
    assert p.detach().tolist() == [0.75, 0.75]


def test_fp32_recipe_passes_rate_and_kernel_to_its_optimizer() -> None:
    opt = RecipeOptimizer([_param(1.0)], "sgd", "fp32", lr=0.25, kernel="foreach")
    assert opt._inner[0].defaults["foreach"] is True
    assert opt._inner[0].defaults["lr"] == 0.25


def test_a_caller_made_inner_optimizer_is_used() -> None:
    p = _param(1.0)
    opt = RecipeOptimizer([p], "sgd", "fp32", inner=lambda ps: torch.optim.SGD(ps, lr=0.5))
    opt.step()
    # the caller's rate, not the default: 1 − 0.5 · 1 = 0.5
    assert p.detach().tolist() == [0.5, 0.5]


def test_tied_parameters_are_stepped_once() -> None:
    p = _param(1.0)
    opt = RecipeOptimizer([p, p], "sgd", "fp32", lr=0.25)
    assert len(opt.params) == 1
    opt.step()
    assert p.detach().tolist() == [0.75, 0.75]  # 1 − 0.25, once


def test_optimizer_name_resolves_aliases() -> None:
    opt = RecipeOptimizer([_param(1.0)], "adamw", "fp32")
    assert opt.optimizer_name == "adamw"
    assert type(opt._inner[0]).__name__ == "AdamW"


def test_autocast_only_for_mixed_off_meta() -> None:
    mixed = RecipeOptimizer([_param(1.0)], "sgd", "mixed-bf16")
    with mixed.autocast("cpu"):
        out = torch.ones(2, 2) @ torch.ones(2, 2)
    assert out.dtype == torch.bfloat16
    with mixed.autocast("meta"):
        out = torch.ones(2, 2, device="meta") @ torch.ones(2, 2, device="meta")
    assert out.dtype == torch.float32
    plain = RecipeOptimizer([_param(1.0)], "sgd", "fp32")
    with plain.autocast("cpu"):
        out = torch.ones(2, 2) @ torch.ones(2, 2)
    assert out.dtype == torch.float32


def test_zero_grad_drops_the_gradients() -> None:
    p = _param(1.0)
    opt = RecipeOptimizer([p], "sgd", "fp32")
    opt.zero_grad()
    assert p.grad is None


def test_state_tensors_of_adam_are_two_moments_and_a_step() -> None:
    p = _param(1.0)
    opt = RecipeOptimizer([p], "adam", "fp32")
    opt.step()
    # exp_avg and exp_avg_sq of 2 elements each, a 0-dim step counter
    assert sorted(t.numel() for t in opt.state_tensors()) == [1, 2, 2]


def test_autocast_asks_for_bf16_on_cuda_too() -> None:
    """CPU autocast defaults to bf16 anyway; CUDA's default is fp16, so the dtype must be
    asked for.  The context is only made (not entered): without CUDA, torch warns and
    disables it, but keeps the dtype asked for."""
    mixed = RecipeOptimizer([_param(1.0)], "sgd", "mixed-bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ctx = mixed.autocast("cuda")
    assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16
