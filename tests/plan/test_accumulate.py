"""Gradient accumulation: the splits of a global batch, their memory and their time, by hand."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan import NoLayoutError, plan_accumulation

H100 = get_hardware("h100")


def test_splits_and_activations_by_hand() -> None:
    # the whole 80 GB as the budget: one sequence (76.7 GB) does not fit beside the reserve
    plan = plan_accumulation(get_preset("llama-3-8b"), H100, seq_len=8192,
                             global_batch_seqs=64, count=8, zero=3, budget_bytes=80e9)
    assert [(o.micro_batch, o.accumulation) for o in plan.options] == [
        (1, 8), (2, 4), (4, 2), (8, 1)]
    # one sequence in bf16 (n = 8192 tokens, d 4096), per layer: two RMSNorms
    # 2·n·(8·d + 4 + 2·d) = 671,154,176; q, k, v, out n·(4096 + 2·1024 + 4096)·2 =
    # 167,772,160, log-sum-exp 4·32·n = 1,048,576, RoPE 4·n·128·2 = 8,388,608; SwiGLU
    # 4·n·14,336·2 = 939,524,096: 1,787,887,616.  Outside: token ids 8·n = 65,536, the final
    # norm 335,577,088, the log-softmax n·128,256·2 = 2,101,346,304, targets 65,536, scalar 4
    layer = 671_154_176 + 167_772_160 + 1_048_576 + 8_388_608 + 939_524_096
    assert layer == 1_787_887_616
    one = plan.options[0]
    assert one.activation_bytes == (32 * layer + 65_536 + 335_577_088 + 2_101_346_304
                                    + 65_536 + 4) == 59_649_458_180
    # linear in b but for the RoPE tables (per position) and the loss's scalar
    assert plan.options[1].activation_bytes == 2 * one.activation_bytes - 32 * 8_388_608 - 4
    # ZeRO-3 over 8: 16 · ⌈8,030,261,248 / 8⌉ = 16,060,522,496 + two gathered layers in bf16
    # 2 · 218,112,000 · 2 = 872,448,000
    # the peak is at the loss: no gradients yet (bf16, 2 · 1,003,782,656 of the state), the
    # logits in flight, n · 128,256 · 2 = 2,101,346,304
    backward = 16_060_522_496 + 872_448_000 + 59_649_458_180
    forward = backward - 2 * 1_003_782_656 + 2_101_346_304
    assert one.memory_bytes == max(forward, backward) == forward == 76_676_209_668
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
