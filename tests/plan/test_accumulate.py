"""Gradient accumulation: the splits of a global batch, their memory and their time, by hand."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
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
