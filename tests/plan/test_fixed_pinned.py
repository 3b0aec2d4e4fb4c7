"""FixedDims.describe pinned word for word: expert parallelism, SP off, one micro-batch,
chunks without a schedule and a schedule without chunks."""

from __future__ import annotations

from tensorledger.plan import FixedDims


def test_describe_ep_sp_off_one_micro_batch_and_chunks_alone() -> None:
    assert FixedDims(dp=2, ep=2, sp=False, accumulation=1, chunks=2).describe() == (
        "DP 2, EP 2, SP off, 1 micro-batch, chunks × 2")


def test_describe_a_schedule_alone_and_two_micro_batches() -> None:
    assert FixedDims(accumulation=2, schedule="1f1b").describe() == (
        "2 micro-batches, 1f1b")
