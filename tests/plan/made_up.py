"""A made-up model profile the planner's pinned tests share: 4 blocks of 300 parameters
(20 + 280), an embedding of 1,000 and a head of 500 (2,700 in all); 10,200 training FLOPs a
token (4 · 1,800 + 3,000), 3,400 forward (4 · 600 + 1,000); its largest matmul 200 FLOPs a
token; no tensor-parallel plan."""

from __future__ import annotations

import dataclasses

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup
from tensorledger.plan.profile import ModelProfile, Split

_MADE_UP = ModelProfile(name="made-up", source="by hand", seq_len=16, precision="fp32",
                        n_layers=4, d_model=8, vocab_size=100, context_length=512,
                        embedding=Split(0.0, 1000.0), block=Split(20.0, 280.0),
                        head=Split(500.0), block_flops_per_token=1800.0,
                        other_flops_per_token=3000.0, block_forward_flops_per_token=600.0,
                        other_forward_flops_per_token=1000.0,
                        largest_matmul_flops_per_token=200.0)


def made_up_profile(**change: object) -> ModelProfile:
    """The profile at 16 tokens in fp32, with ``change``'s fields replaced."""
    return dataclasses.replace(_MADE_UP, **change)  # type: ignore[arg-type]


def tiny_three_heads_on_tp3() -> tuple[PlanSetup, LayoutChoice]:
    """tiny with 3 heads (and d_ff 192, vocabulary 129, which 3 divides) on 3 H100s in fp32
    with AdamW: TP 3, 8 micro-batches of 1 sequence of 16 tokens."""
    config = dataclasses.replace(get_preset("tiny"), name="tiny-3", n_heads=3, n_kv_heads=3,
                                 d_ff=192, vocab_size=129)
    setup = PlanSetup(config, get_hardware("h100"), 3, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    return setup, LayoutChoice(dp=1, tp=3, pp=1, accumulation=8)
