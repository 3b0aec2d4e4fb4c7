"""A made-up model profile the planner's pinned tests share: four blocks of width 8, no
tensor-parallel plan (no ``tp_plan``), every figure a round number to work by hand."""

from __future__ import annotations

from tensorledger.plan.profile import ModelProfile, Split


def made_up_profile() -> ModelProfile:
    """The profile, fresh each call (the tests change copies of it)."""
    return ModelProfile(name="made-up", source="by hand", seq_len=16, precision="fp32",
                        n_layers=4, d_model=8, vocab_size=100, context_length=512,
                        embedding=Split(0.0, 1000.0), block=Split(20.0, 280.0),
                        head=Split(500.0), block_flops_per_token=1800.0,
                        other_flops_per_token=3000.0, block_forward_flops_per_token=600.0,
                        other_forward_flops_per_token=1000.0,
                        largest_matmul_flops_per_token=200.0)
