"""HSDP (``--dp R --fsdp S``: torch's ``fully_shard`` on a 2-D replicate × shard mesh) beside
tensor parallelism and inside pipeline stages, traced on the fake group, against hand
arithmetic: what a rank holds and every collective it issues, by the mesh dimension it runs on
(the group's rank stride: the innermost dimension is 1 apart).

The tiny preset's tensors by hand (``test_parallel_layouts.py``): token embedding and head
128·64 = 8192 values each, a block 36,992 (query and output 4096, key and value 2048, up, gate
and down 8192, two norms of 64), the final norm 64; fp32.  Under TP 2 a block keeps
(4096 + 2048 + 2048 + 4096 + 3·8192) / 2 + 2·64 = 18,560 values, the tables half each.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tensorledger.models import build_model, get_preset
from tensorledger.trace.records import Trace
from tensorledger.workload.layout import Layout
from tensorledger.workload.parallel import trace_parallel_step
from tensorledger.workload.pipeline import trace_pipeline_step

TINY = get_preset("tiny")
F32 = 4
TABLE, BLOCK, NORM = 8192, 36_992, 64
TP_BLOCK = 18_560  # a block's TP-local values (TP 2)

Key = tuple[str, str, int, int]


def _collectives(trace: Trace) -> Counter[Key]:
    """(phase, kind, size in bytes, rank stride) → how many; every group here has 2 ranks."""
    assert {r.collective.group_size for r in trace.records if r.collective} == {2}
    return Counter((r.phase, r.collective.kind, r.collective.size_bytes,
                    r.collective.rank_stride) for r in trace.records if r.collective)


def test_hsdp_beside_tensor_parallelism_by_hand() -> None:
    # the mesh (dp 2, fsdp 2, tp 2): tp ranks 1 apart, fsdp 2, dp 4
    step = trace_parallel_step(lambda: build_model(TINY, "cpu"),
                               lambda: torch.randint(0, TINY.vocab_size, (2, 16)),
                               Layout(dp=2, fsdp=2, tp=2))
    assert step.trace.uncovered == {}
    # FSDP halves what TP leaves (the replicas hold the same): the root unit (the tables'
    # halves and the final norm) 4096 + 4096 + 64 = 8256 values, 2 blocks of 18,560: 45,376
    # TP-local values, 22,688 a rank
    root, block = F32 * 8256, F32 * TP_BLOCK
    assert step.params_per_rank == (8256 + 2 * TP_BLOCK) // 2 == 22_688
    # AdamW: two fp32 moments a value and a step counter for each of the 21 tensors
    assert step.optimizer_state_bytes_per_rank == 2 * F32 * 22_688 + 21 * F32
    stream = 2 * 16 * 64 * F32  # a (b, s, d) activation: 8192 bytes
    assert _collectives(step.trace) == {
        # FSDP over its shard dimension (stride 2): each block gathered in forward and again
        # in backward (the root stays gathered), every unit reduce-scattered
        ("forward", "all-gather", root, 2): 1, ("forward", "all-gather", block, 2): 2,
        ("backward", "all-gather", block, 2): 2,
        ("backward", "reduce-scatter", root, 2): 1, ("backward", "reduce-scatter", block, 2): 2,
        # then each reduced shard (half a unit) all-reduced over the replicas (stride 4)
        ("backward", "all-reduce", root // 2, 4): 1, ("backward", "all-reduce", block // 2, 4): 2,
        # TP's own (stride 1): the embedding's partial rows and each block's attention and
        # MLP outputs all-reduced (5) forward, the half inputs' gradients and the head's (5)
        # backward; the logits (2·16·128·4) gathered once
        ("forward", "all-reduce", stream, 1): 5, ("backward", "all-reduce", stream, 1): 5,
        ("forward", "all-gather", 2 * 16 * 128 * F32, 1): 1}


#: Per stage of 2 (1F1B, 2 micro-batches of b 2, s 16): the stage's root unit (stage 0: the
#: token embedding; stage 1: the final norm and the head) and its one block, in values, whole
#: or TP-local.
ROOTS = {(1, 0): TABLE, (1, 1): NORM + TABLE, (2, 0): TABLE // 2, (2, 1): NORM + TABLE // 2}


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("stage", [0, 1])
def test_hsdp_inside_pipeline_stages_by_hand(tp: int, stage: int) -> None:
    step = trace_pipeline_step(TINY, 4, 16, 2, 2, "1f1b", stage=stage,
                               within=Layout(dp=2, fsdp=2, tp=tp))
    assert dict(step.trace.uncovered) == {}
    root_values, block_values = ROOTS[tp, stage], BLOCK if tp == 1 else TP_BLOCK
    # sharded over the 2 fsdp ranks, replicated over the 2 dp ranks
    assert step.params_per_rank * 2 == root_values + block_values
    # tensors held: stage 0 the table and the block's 9; stage 1 the block's 9, norm, head
    tensors = 10 if stage == 0 else 11
    assert step.optimizer_state_bytes_per_rank == (2 * F32 * step.params_per_rank
                                                   + tensors * F32)
    # the mesh (pp 2, dp 2, fsdp 2[, tp 2]): strides tp 1, fsdp tp, dp 2·tp, pp 4·tp
    fsdp, dp, pp = tp, 2 * tp, 4 * tp
    root, block = F32 * root_values, F32 * block_values
    # 1F1B on 2 ranks: stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1.  torch's stage keeps
    # every unit gathered after a backward that is not the step's last: the block is gathered
    # before each forward that follows a reshard (stage 0: F0, F1; stage 1: F0 only, B0
    # leaves it gathered for F1) and before each backward that follows a forward (stage 0:
    # B0; stage 1: B0, B1); the root once.  The gradients are reduced once, after the last
    # backward: reduce-scattered over fsdp, the halves all-reduced over dp
    forward_gathers, backward_gathers = (2, 1) if stage == 0 else (1, 2)
    expected: Counter[Key] = Counter({
        ("forward", "all-gather", root, fsdp): 1,
        ("forward", "all-gather", block, fsdp): forward_gathers,
        ("backward", "all-gather", block, fsdp): backward_gathers,
        ("other", "reduce-scatter", root, fsdp): 1, ("other", "reduce-scatter", block, fsdp): 1,
        ("other", "all-reduce", root // 2, dp): 1, ("other", "all-reduce", block // 2, dp): 1})
    # the stages' messages over pp: a micro-batch's stream, 2·16·64·4 = 8192 bytes, 2
    # activations one way and 2 gradients the other (those the schedule posts after a
    # backward are outside forward and backward: "other")
    stream = 2 * 16 * 64 * F32
    expected[("forward", "send-recv", stream, pp)] = 3 if stage == 0 else 1
    expected[("other", "send-recv", stream, pp)] = 1 if stage == 0 else 3
    if tp == 2:
        # TP's all-reduces of the stream, a micro-batch each: stage 0 the embedding's and 2
        # of its block forward, 2 backward; stage 1 its block's 2 forward, 2 and the head's
        # input gradient backward, and the logits (2·16·128·4) gathered forward
        expected[("forward", "all-reduce", stream, 1)] = 2 * (3 if stage == 0 else 2)
        expected[("backward", "all-reduce", stream, 1)] = 2 * (2 if stage == 0 else 3)
        if stage == 1:
            expected[("forward", "all-gather", 2 * 16 * 128 * F32, 1)] = 2
    assert _collectives(step.trace) == expected
