"""A made-up model profile the planner's pinned tests share: 4 blocks of 300 parameters
(20 + 280), an embedding of 1,000 and a head of 500 (2,700 in all); 10,200 training FLOPs a
token (4 · 1,800 + 3,000), 3,400 forward (4 · 600 + 1,000); its largest matmul 200 FLOPs a
token; no tensor-parallel plan."""

from __future__ import annotations

import dataclasses

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
