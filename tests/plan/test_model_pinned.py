"""model.py pinned: a LoRA search's adapters counted at the recipe's stored width (fp32 here,
not napkin's 2-byte default), and the head's FLOPs of a LoRA step (no frozen weight's
gradient: 4·d·V, and 6 a parameter of the head's own adapter)."""

from __future__ import annotations

import dataclasses

from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import adapter_counts, lora_shape
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import PlanSetup
from tensorledger.plan.model import search_model

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
