"""Checkpointed segments and the traced step of the lecture's deep network, pinned by hand
(issue 42's mutation run of ``tensorledger.workload.checkpointing``)."""

from __future__ import annotations

from collections import Counter

import pytest
from torch import nn

from tensorledger.workload.checkpointing import CheckpointedSegment, trace_deep_network

L = 3


def test_a_segment_runs_its_blocks_in_full_unless_told() -> None:
    segment = CheckpointedSegment([nn.Identity(), nn.Identity()])
    assert segment.mode == "full" and len(segment.segment) == 2


@pytest.mark.parametrize(("activation", "saved"), [
    # ReLU saves its output, which is also the next block's (and the loss's) input: one
    # storage a block; the network's input was made before the trace began, so it is not in it
    ("relu", L),
    # GELU saves its input (the matmul's output) besides the block's input: two a block
    ("gelu", 2 * L),
])
def test_the_deep_networks_storages_tagged_by_kind(activation: str, saved: int) -> None:
    traced = trace_deep_network(4, L, 2, activation)
    # L weights (D × D, no bias), each with one gradient
    assert Counter(traced.tags.values()) == {"parameter": L, "gradient": L,
                                             "saved_activation": saved}
