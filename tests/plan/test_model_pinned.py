"""model.py pinned: a LoRA search's adapters counted at the recipe's stored width (fp32 here,
not napkin's 2-byte default), and the head's FLOPs of a LoRA step (no frozen weight's
gradient: 4·d·V, and 6 a parameter of the head's own adapter)."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import adapter_counts, lora_shape
from tensorledger.napkin.context import context_parallel_rank
from tensorledger.napkin.parallel import zero_bytes
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup
from tensorledger.plan.model import search_model
from tensorledger.plan.stages import RankLoad

TINY = get_preset("tiny")
# tiny widened to d 256 and heads of 64: every block matrix (256 × 256, 256 × 128, 256 × 128)
# holds whole NF4 blocks of scales, so QLoRA quantises them, their scales at the stored width
WIDE = dataclasses.replace(TINY, d_model=256, head_dim=64)


def test_a_qlora_search_counts_its_adapters_at_the_stored_width() -> None:
    lora = lora_shape(WIDE, 8, ("query", "head"), nf4=True)
    setup = PlanSetup(WIDE, get_hardware("h100"), 2, 16, 4, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 80e9, lora=lora)
    model = search_model(setup)
    assert model.adapters == adapter_counts(WIDE, lora, 4)
    assert model.adapters != adapter_counts(WIDE, lora, 2)  # the scales' width tells
    # the head's adapter on a 256 × 128 head: 8 · (256 + 128) = 3,072 parameters; the head's
    # FLOPs a token 4 · 256 · 128 (forward and the input's gradient) + 6 · 3,072
    assert model.head_flops_per_token == 4.0 * 256 * 128 + 6.0 * 8 * (256 + 128)
    # torchao's dequantisation of a use: 2 blocks × the
    # block's matrices ( q 65,536, k and v 32,768 each, o 65,536, gate, up and down 32,768
    # each: 294,912 elements) × (2 + 2/64) FLOPs an element
    assert model.dequantize_flops_per_use == 2 * 294_912 * (2 + 2 / 64)


# tiny (d 64, V 128, 2 blocks of 36,864 matrix elements: q 64·64, k and v 64·32 each, o 64·64,
# gate, up and down 64·128 each; two RMSNorm scales of 64) in bf16, LoRA r=8 on the query
# (8 · (64 + 64) = 1,024), the value (8 · (64 + 32) = 768) and the head (8 · (64 + 128) =
# 1,536), at TP 2
LORA = lora_shape(TINY, 8, ("query", "value", "head"))
# a block's frozen bytes on a rank: 36,864 · 2 B / 2 + 128 · 2 B = 37,120 B
LAYER = 36_864 * 2 / 2 + 128 * 2
EMBEDDING = 128 * 64 // 2 * 2  # the rank's half of the 8,192 embedding parameters, 2 B each
HEAD = (128 * 64 // 2 + 64) * 2  # the rank's half of the head and the final norm's 64


def _lora_setup() -> PlanSetup:
    return PlanSetup(TINY, get_hardware("h100"), 4, 16, 4, resolve_precision("bf16"),
                     resolve_optimizer("adamw"), 80e9, lora=LORA)


def _adapter_state(params: int, shard: int, zero: int) -> tuple[float, float]:
    z = zero_bytes(params, shard, zero, "fp32", "adamw")
    return float(z.total_bytes), float(z.grads_bytes)


@pytest.mark.parametrize(("load", "zero", "shard", "expected"), [
    # the first stage, 1 block, ZeRO-3 over 2: adapters ⌈1,792 / 2⌉ = 896; frozen 37,120 +
    # 8,192; its state sharded with the adapters'; FSDP's gathered: the whole stage (45,312 +
    # 896 · 4 B) is less than two blocks (2 · (37,120 + 1,792 / 2 · 4))
    (RankLoad(0, 1, 1, True, False, 1), 3, 2,
     (896, LAYER + EMBEDDING, _adapter_state(896, 2, 3), (LAYER + EMBEDDING) / 2,
      LAYER + EMBEDDING + 896 * 4)),
    # the last stage: adapters ⌈(1,792 + 1,536) / 2⌉ = 1,664; the head and final norm
    (RankLoad(1, 1, 1, False, True, 0), 3, 2,
     (1664, LAYER + HEAD, _adapter_state(1664, 2, 3), (LAYER + HEAD) / 2,
      LAYER + HEAD + 1664 * 4)),
    # both ends and both blocks: ⌈(2 · 1,792 + 1,536) / 2⌉ = 2,560 adapters; gathered: two
    # blocks, 2 · (37,120 + 3,584) = 81,408 B, less than the whole stage
    (RankLoad(0, 2, 2, True, True, 1), 3, 2,
     (2560, 2 * LAYER + EMBEDDING + HEAD, _adapter_state(2560, 2, 3),
      (2 * LAYER + EMBEDDING + HEAD) / 2, 2 * (LAYER + 1792 / 2 * 4))),
    # ZeRO-2: the frozen base whole on the rank, the whole stage gathered
    (RankLoad(0, 1, 1, True, False, 1), 2, 2,
     (896, LAYER + EMBEDDING, _adapter_state(896, 2, 2), LAYER + EMBEDDING,
      LAYER + EMBEDDING + 896 * 4)),
    # ZeRO-3 over a group of 1: nothing gathered
    (RankLoad(0, 1, 1, True, False, 1), 3, 1,
     (896, LAYER + EMBEDDING, _adapter_state(896, 1, 3), LAYER + EMBEDDING, 0.0)),
    # ZeRO-1 over 2: the frozen base whole, nothing gathered
    (RankLoad(0, 1, 1, True, False, 1), 1, 2,
     (896, LAYER + EMBEDDING, _adapter_state(896, 2, 1), LAYER + EMBEDDING, 0.0)),
    # a first stage of no block: no adapter, no adapter state
    (RankLoad(0, 0, 0, True, False, 1), 3, 2,
     (0, EMBEDDING, (0.0, 0.0), EMBEDDING / 2, EMBEDDING)),
])
def test_a_lora_stage_by_hand(load: RankLoad, zero: int, shard: int,
                              expected: tuple) -> None:  # type: ignore[type-arg]
    trained, frozen, (state, grads), frozen_held, gathered = expected
    choice = LayoutChoice(dp=shard, tp=2, pp=2, zero=zero, shard=shard)
    setup = _lora_setup()
    assert search_model(setup).lora_stage(setup, choice, load, zero) == (
        trained, frozen, state + frozen_held, grads, gathered)


def test_adapter_states_are_remembered_apart_from_the_base_recipes() -> None:
    setup = _lora_setup()
    model = search_model(setup)
    base = model.states_bytes(setup, 896, 2, 3)  # the bf16 recipe's, asked first
    z = zero_bytes(896, 2, 3, "bf16", "adamw")
    assert base == (float(z.total_bytes), float(z.grads_bytes))
    assert model.adapter_states(setup, 896, 2, 3) == _adapter_state(896, 2, 3)


# tiny with an odd vocabulary and width (127 × 65 = 8,255 embedding and head parameters), LoRA
# on the query alone: TP 2 holds ⌈8,255 / 2⌉ = 4,128 of each, 2 B apiece
ODD = dataclasses.replace(TINY, vocab_size=127, d_model=65)


@pytest.mark.parametrize(("first", "last", "frozen"), [
    (True, False, 4128 * 2),  # the embedding's half, rounded up
    (False, True, (4128 + 65) * 2),  # the head's, and the final norm's 65 whole
])
def test_a_lora_stage_rounds_the_split_parts_up(first: bool, last: bool, frozen: int) -> None:
    setup = PlanSetup(ODD, get_hardware("h100"), 4, 16, 4, resolve_precision("bf16"),
                      resolve_optimizer("adamw"), 80e9, lora=lora_shape(ODD, 8, ("query",)))
    choice = LayoutChoice(dp=2, tp=2, pp=2, zero=3, shard=2)
    load = RankLoad(0, 0, 0, first, last, 1 if first else 0)
    assert search_model(setup).lora_stage(setup, choice, load, 3)[1] == frozen



def test_the_ring_of_a_sequence_parallel_tensor_parallel_rank() -> None:
    setup = PlanSetup(TINY, get_hardware("h100"), 4, 16, 4, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 80e9)
    ring = search_model(setup).ring(setup, 2, 2, True, False, 2)
    assert ring == context_parallel_rank(TINY, 2, 16, 2, dtype_bytes=4, tp=2, autocast=False,
                                         checkpointed=False, sequence_parallel=True)
    # napkin's ring at TP 2 exchanges each rank's one key/value head (of 2)
    assert ring.exchanged_heads == 1
