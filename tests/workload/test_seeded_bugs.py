"""Bugs a reviewer seeded by hand (issue 42) that left every test green; each test below is
named after what it guards and derives its expectation by hand."""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

from tensorledger.napkin.recipes import QUANTIZATION_BLOCK
from tensorledger.workload.optimizers import Adam8bit, _dequantize, _quantize
from tensorledger.workload.state import classify_state, measure_state


def _uniform(n: int, low: float, high: float) -> torch.Tensor:
    # evenly spaced values, no randomness: the worst rounding error is then known
    return torch.linspace(low, high, n)


@pytest.mark.parametrize(("signed", "low", "levels"), [(True, -1.0, 127), (False, 0.0, 255)])
def test_8bit_adam_quantiser_round_trip_is_within_half_a_level(signed: bool, low: float,
                                                               levels: int) -> None:
    # two blocks and a ragged tail: 2·2048 + 100 values in [low, 1]; each block's absmax is
    # the largest |value| in it, so rounding to the nearest of `levels` steps of absmax/levels
    # errs by at most absmax/(2·levels) ≤ 1/(2·levels): 0.0039 signed, 0.0020 unsigned
    values = _uniform(2 * QUANTIZATION_BLOCK + 100, low, 1.0)
    codes, absmax = _quantize(values, signed)
    assert codes.dtype == (torch.int8 if signed else torch.uint8)
    assert codes.shape == values.shape and absmax.shape == (3,)  # ⌈4196 / 2048⌉ blocks
    back = _dequantize(codes, absmax, signed)
    worst = (back - values).abs().max().item()
    assert worst <= 1 / (2 * levels) + 1e-6
    # the extremes of each block come back exactly: its absmax maps to ±levels
    assert back[-1].item() == pytest.approx(1.0, abs=1e-6)


def test_8bit_adam_codes_span_every_level_of_their_type() -> None:
    # a block of [−1, 1] uses codes −127…127; of [0, 1], 0…255: a quantiser with 127 unsigned
    # levels would stop at 127 and its dequantiser (÷255) would halve every value
    signed, _ = _quantize(_uniform(QUANTIZATION_BLOCK, -1.0, 1.0), True)
    unsigned, _ = _quantize(_uniform(QUANTIZATION_BLOCK, 0.0, 1.0), False)
    assert (signed.min().item(), signed.max().item()) == (-127, 127)
    assert (unsigned.min().item(), unsigned.max().item()) == (0, 255)


def test_8bit_adam_step_follows_adam_within_the_quantisation_error() -> None:
    # one step from zero moments: m = (1−β1)·g, v = (1−β2)·g², bias-corrected to g and g²;
    # the update is lr·g/(|g| + eps) ≈ lr·sign(g) for Adam, and 8-bit Adam only rounds m and v
    # after using them, so its first step equals Adam's; its second uses the rounded moments
    # gradients of one magnitude, |g| in [0.5, 1] with alternating signs: v spans a factor 4
    # in each block, so no second moment rounds to zero (linear codes flush v ≪ absmax to 0,
    # the reason the paper uses a dynamic map; the bytes, which are what is accounted, agree)
    torch.manual_seed(0)
    start = torch.randn(3000)
    signs = torch.tensor([1.0, -1.0]).repeat(1500)
    grads = [signs * (0.5 + 0.5 * torch.rand(3000)) for _ in range(2)]
    mine, ref = nn.Parameter(start.clone()), nn.Parameter(start.clone())
    ours = Adam8bit([mine], lr=0.1)
    theirs = torch.optim.Adam([ref], lr=0.1)
    for g in grads:
        mine.grad, ref.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
    # the second step uses rounded moments: m within 1/254 of its absmax (≤ 0.1 here), v within
    # 1/510 of its absmax (≤ 0.001), against m ≥ 0.05 and v ≥ 0.00025: the update m̂/√v̂ moves
    # by a few per cent of lr at most (a broken dequantiser moves it by ≫ lr)
    diff = (mine.detach() - ref.detach()).abs().max().item()
    assert diff < 0.1 * 0.1  # a tenth of one step
    state = ours.state[mine]
    assert state["exp_avg"].dtype == torch.int8 and state["exp_avg_sq"].dtype == torch.uint8
    assert state["exp_avg_absmax"].numel() == 2  # ⌈3000 / 2048⌉ blocks, one fp32 scale each


def test_each_state_storage_counts_under_its_first_category_only() -> None:
    # a tied embedding/head (one storage, two parameters), and an optimizer that hands back a
    # parameter as "master" and a gradient as "state": each storage is counted once, under the
    # first category of (parameter, gradient, master, optimizer_state) that holds it
    embed = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = embed.weight
    extra = nn.Linear(4, 3)
    model = nn.ModuleDict({"embed": embed, "head": head, "extra": extra})
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    state = torch.zeros(7)
    aliasing = types.SimpleNamespace(
        master_tensors=lambda: [extra.weight],  # already a parameter
        state_tensors=lambda: [extra.bias.grad, state],  # a gradient, then real state
        precision=types.SimpleNamespace(name="fp32"), optimizer_name="adamw")
    found = classify_state(model, aliasing)  # type: ignore[arg-type]
    categories = sorted(category for category, _ in found.values())
    # parameters: the tied 10·4, extra's 4·3 and 3 → 3 storages; gradients: 3 more; state: 1
    assert categories == ["gradient"] * 3 + ["optimizer_state"] + ["parameter"] * 3
    totals = measure_state(model, aliasing)  # type: ignore[arg-type]
    assert totals.params_bytes == (10 * 4 + 4 * 3 + 3) * 4 == 220
    assert totals.grads_bytes == 220
    assert totals.master_bytes == 0
    assert totals.optimizer_bytes == 7 * 4
    assert totals.total_bytes == 220 + 220 + 28
