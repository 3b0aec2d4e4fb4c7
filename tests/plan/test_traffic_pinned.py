"""traffic.py pinned: a verified layout's relative errors, and a profiled model's
tensor-parallel bytes (what a rank of two sent a token, scaled by the ring's 2·(t−1)/t)."""

from __future__ import annotations

import dataclasses

from tensorledger.plan.estimate import LayoutChoice
from tensorledger.plan.profile import _example
from tensorledger.plan.traffic import Verified, _profiled_tp_bytes


def test_verified_errors_are_relative_and_zero_where_nothing_was_traced() -> None:
    v = Verified(layout="a", traced_layout="a", closed_state_bytes=110.0, traced_state_bytes=100,
                 closed_activation_bytes=30.0, traced_activation_bytes=40,
                 closed_total_bytes=5.0, traced_peak_bytes=0, closed_sent_bytes=8.0,
                 traced_sent_bytes=8)
    # (110 − 100)/100, (30 − 40)/40, nothing traced, (8 − 8)/8
    assert v.errors() == {"state": 0.1, "activations": -0.25, "peak": 0.0, "sent": 0.0}


PROFILE = dataclasses.replace(
    _example(), tp_sent_per_token={(False, True): 100.0, (False, False): 512.0},
    other_tp_sent_per_token={False: 30.0, True: 7.0})


def test_profiled_tp_bytes_of_the_last_stage() -> None:
    choice = LayoutChoice(dp=1, tp=4, pp=2, micro_batch=2, accumulation=3, checkpoint="full")
    # 3 micro-batches × 2 · 16 tokens × (2 blocks · 100 B + 30 B outside) × 2 · 3/4
    assert _profiled_tp_bytes(PROFILE, choice, 2, True) == 3 * 32 * 230 * 1.5


def test_profiled_tp_bytes_of_a_middle_stage() -> None:
    choice = LayoutChoice(dp=1, tp=4, pp=2, micro_batch=2, accumulation=3)
    # 3 × 32 tokens × 2 blocks · 512 B × 1.5, nothing outside the blocks
    assert _profiled_tp_bytes(PROFILE, choice, 2, False) == 3 * 32 * 1024 * 1.5


def test_profiled_tp_bytes_of_an_unmeasured_split() -> None:
    choice = LayoutChoice(dp=1, tp=2, pp=1, sp=True, micro_batch=1, accumulation=1,
                          checkpoint="full")
    # no (SP, full) block measured: 0 a block; the last stage's 7 B outside, × 16 tokens ×
    # 2 · 1/2
    assert _profiled_tp_bytes(PROFILE, choice, 4, True) == 16 * 7 * 1.0


def test_profiled_tp_bytes_with_nothing_measured_outside_the_blocks() -> None:
    profile = dataclasses.replace(PROFILE, other_tp_sent_per_token={})
    choice = LayoutChoice(dp=1, tp=2, pp=1, micro_batch=1, accumulation=1)
    # 16 tokens × 1 block · 512 B × 2 · 1/2, and 0 outside
    assert _profiled_tp_bytes(profile, choice, 1, True) == 16 * 512 * 1.0
