"""Gradient accumulation: the splits of a global batch, their memory and their time, by hand."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin import largest_model, largest_model_with_activations
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan import NoLayoutError, plan_accumulation

H100 = get_hardware("h100")


def test_splits_and_activations_by_hand() -> None:
    plan = plan_accumulation(get_preset("llama-3-8b"), H100, seq_len=8192,
                             global_batch_seqs=64, count=8, zero=3)
    assert [(o.micro_batch, o.accumulation) for o in plan.options] == [
        (1, 8), (2, 4), (4, 2), (8, 1)]
    # one sequence: 32 layers · 8192·4096·34 + fp32 logits 4·8192·128,256
    #   = 32 · 1,140,850,688 + 4,202,692,608 = 40,709,914,624 bytes
    one = plan.options[0]
    assert one.activation_bytes == 32 * 8192 * 4096 * 34 + 4 * 8192 * 128_256 == 40_709_914_624
    assert plan.options[1].activation_bytes == 2 * one.activation_bytes  # linear in b
    # ZeRO-3 over 8: 16 · ⌈8,030,261,248 / 8⌉ = 16,060,522,496 + two gathered layers in bf16
    # 2 · 218,112,000 · 2 = 872,448,000
    assert one.memory_bytes == 16_060_522_496 + 872_448_000 + 40_709_914_624
    assert [o.fits for o in plan.options] == [True, False, False, False]
    assert plan.chosen == one
    # the intensity of one micro-batch grows with it: FLOPs ∝ b, weight traffic fixed
    assert plan.options[1].intensity_flop_per_byte == pytest.approx(
        2 * one.intensity_flop_per_byte)


def test_more_smaller_steps_cost_time_when_memory_bound() -> None:
    # short sequences: every micro-batch rereads 16 GB of bf16 weights and gradients
    plan = plan_accumulation(get_preset("llama-3-8b"), H100, seq_len=64,
                             global_batch_seqs=256, count=1, checkpoint="full",
                             budget_bytes=80e9, precision="bf16", optimizer="sgd")
    steps = [o.step_s for o in plan.options]
    assert steps == sorted(steps, reverse=True)  # fewer, larger micro-batches are faster
    assert plan.options[0].memory_bound and not plan.options[-1].memory_bound
    assert plan.chosen.micro_batch == max(o.micro_batch for o in plan.options if o.fits)


def test_refusals() -> None:
    with pytest.raises(InputError, match="does not split over 8"):
        plan_accumulation(get_preset("llama-3-8b"), H100, seq_len=8192, global_batch_seqs=4,
                          count=8)
    with pytest.raises(NoLayoutError, match="memory per rank binds"):
        plan_accumulation(get_preset("llama-3-70b"), H100, seq_len=8192, global_batch_seqs=8,
                          count=8, zero=0)


# ------------------------------------------------ the lecture's largest model, with activations

def test_lecture_largest_model_with_and_without_activations() -> None:
    # 8 × 80 GB = 640 GB at 12 bytes per parameter (lecture): 53.3e9 without activations
    bound = largest_model(H100, 8, "lecture", "adamw")
    assert bound.params == pytest.approx(640e9 / 12)
    fit = largest_model_with_activations(H100, 8, "lecture", "adamw", batch=8, seq_len=4096)
    assert fit.params_without_activations == bound.params
    # d = 128·L, 12·12·128²·L³ + 34·4096·8·128·L² = 640e9 → L ≈ 49.64, params ≈ 24.05e9
    L = fit.n_layers
    used = 12 * 12 * 128**2 * L**3 + 34 * 4096 * 8 * 128 * L**2
    assert used == pytest.approx(640e9)
    assert fit.params == pytest.approx(12 * L * (128 * L) ** 2)
    assert fit.params / 1e9 == pytest.approx(24.05, abs=0.01)
    assert fit.states_bytes + fit.activations_bytes == pytest.approx(640e9)
    # checkpointing every block keeps 2·s·B·d per layer instead of 34: between the two
    full = largest_model_with_activations(H100, 8, "lecture", "adamw", batch=8, seq_len=4096,
                                          checkpoint="full")
    assert fit.params < full.params < bound.params


def test_largest_model_with_activations_exact_case() -> None:
    # L = 10 exactly: 12·12·128²·10³ + 34·4096·8·128·10² = 2,359,296,000 + 14,260,633,600
    chip = dataclasses.replace(H100, memory_bytes=16_619_929_600.0)
    fit = largest_model_with_activations(chip, 1, "lecture", "adamw", batch=8, seq_len=4096)
    assert fit.n_layers == pytest.approx(10)
    assert fit.params == pytest.approx(12 * 10 * 1280**2)  # 196,608,000
    assert fit.activations_bytes == pytest.approx(14_260_633_600)
    with pytest.raises(InputError, match="not even one layer fits"):
        largest_model_with_activations(chip, 1, "lecture", "adamw", batch=8,
                                       seq_len=4096 * 1000)
