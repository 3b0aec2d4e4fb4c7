"""Pipeline parallelism of the tiny preset traced on one rank of a fake process group — GPipe and
1F1B over 2 ranks with 2 and 4 micro-batches, interleaved 1F1B on a 4-layer variant — against
hand arithmetic: the send/recv each rank issues, the parameters it holds, its matmul FLOPs, the
micro-batches' saved activations in flight, and the schedule's bubble against napkin's.

The tiny preset (``get_preset("tiny")``): d_model 64, 2 layers, vocabulary 128, untied, fp32.
Its parameter tensors, by hand (as in ``test_parallel_layouts.py``): token embedding and head
128·64 = 8192 values each; per block 36 992 (query and output 64·64, key and value 32·64, up,
gate and down 128·64, two norms of 64) in 9 tensors; the final norm 64.  Cut in 2 stages:

- stage 0: the token embedding and block 0: 8192 + 36 992 = 45 184 values in 10 tensors;
- stage 1: block 1, the final norm and the head: 36 992 + 64 + 8192 = 45 248 in 11 tensors.

The whole batch is 4 sequences of 16 tokens (b 4 ≠ s 16 ≠ d 64 ≠ v 128).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tensorledger.errors import InputError, TraceError
from tensorledger.models import build_model, get_preset
from tensorledger.napkin.parallel import pipeline_bubble
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.trace.storage import storage_key
from tensorledger.workload.pipeline import (
    PipelineStep,
    Schedule,
    order_bubble,
    resolve_schedule,
    split_stages,
    trace_pipeline_step,
)

TINY = get_preset("tiny")
F32 = 4
BATCH, SEQ, D = 4, 16, 64
STAGE_PARAMS = {0: 8192 + 36_992, 1: 36_992 + 64 + 8192}  # 45 184, 45 248
STAGE_TENSORS = {0: 1 + 9, 1: 9 + 1 + 1}
# the matrices a token meets in a block: 64·64 + 32·64 + 32·64 + 64·64 + 3 · 128·64 = 36 864
BLOCK_MATRICES = 4096 + 2048 + 2048 + 4096 + 3 * 8192
HEAD = 128 * 64


def _step(schedule: str, microbatches: int, stage: int = 0) -> PipelineStep:
    return trace_pipeline_step(TINY, BATCH, SEQ, 2, microbatches, schedule, stage=stage)


@pytest.fixture(scope="module")
def steps() -> dict[tuple[str, int, int], PipelineStep]:
    return {(schedule, m, stage): _step(schedule, m, stage)
            for schedule in ("gpipe", "1f1b") for m in (2, 4) for stage in (0, 1)}


def test_split_stages_cuts_by_blocks_and_keeps_the_models_names() -> None:
    stages = split_stages(build_model(TINY, "cpu"), 2)
    assert [list(s.blocks) for s in stages] == [["0"], ["1"]]
    assert stages[0].token_embedding is not None and stages[0].head is None
    assert stages[1].token_embedding is None and stages[1].final_norm is not None
    for index, stage in enumerate(stages):
        assert sum(p.numel() for p in stage.parameters()) == STAGE_PARAMS[index]
        assert len(list(stage.parameters())) == STAGE_TENSORS[index]
    assert sum(STAGE_PARAMS.values()) == 90_432  # the whole model's, by hand
    assert "blocks.1.attention.query.weight" in dict(stages[1].named_parameters())


def test_stages_chained_compute_the_whole_model() -> None:
    torch.manual_seed(0)
    model = build_model(TINY, "cpu")
    tokens = torch.randint(0, TINY.vocab_size, (BATCH, SEQ))
    first, last = split_stages(model, 2)
    torch.testing.assert_close(last(first(tokens)), model(tokens), rtol=0, atol=0)


@pytest.mark.parametrize(("pp", "chunks", "message"), [
    (3, 1, "--pp 3 does not divide tiny's 2 layers"),
    (2, 2, "--pp 2 × 2 chunks = 4 stages do not divide tiny's 2 layers"),
])
def test_a_stage_count_that_does_not_divide_the_layers_is_refused(pp: int, chunks: int,
                                                                   message: str) -> None:
    with pytest.raises(InputError, match=message.replace("×", ".")):
        split_stages(build_model(TINY, "cpu"), pp, chunks)


def test_tied_embeddings_are_refused_across_stages() -> None:
    tied = dataclasses.replace(TINY, tied_embeddings=True)
    with pytest.raises(InputError, match="ties its head"):
        split_stages(build_model(tied, "cpu"), 2)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"microbatches": 3}, "--batch 4 does not split into 3 micro-batches"),
    ({"schedule": "1f1b", "microbatches": 1}, "1f1b needs a micro-batch per stage at least"),
    ({"schedule": "zero-bubble"}, "unknown pipeline schedule 'zero-bubble'; known: gpipe"),
    ({"stage": 2}, "the traced pipeline rank is 0 to 1, got 2"),
    ({"chunks": 2}, "gpipe runs one stage per rank"),
])
def test_a_step_the_pipeline_cannot_run_is_refused_in_one_line(kwargs: dict[str, object],
                                                               message: str) -> None:
    args: dict[str, object] = {"microbatches": 2, "schedule": "gpipe", **kwargs}
    with pytest.raises(InputError, match=message):
        trace_pipeline_step(TINY, BATCH, SEQ, 2, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("microbatches", [2, 4])
def test_each_micro_batch_sends_its_activation_and_receives_its_gradient(
        steps: dict[tuple[str, int, int], PipelineStep], schedule: str,
        microbatches: int) -> None:
    micro = BATCH // microbatches
    message = micro * SEQ * D * F32  # m 2: 2 · 16 · 64 · 4 = 8192; m 4: 4096 bytes
    first, last = steps[schedule, microbatches, 0], steps[schedule, microbatches, 1]
    # rank 0 sends each micro-batch's activation forward and receives its gradient back;
    # rank 1 receives the activations and sends the gradients: m messages each way
    assert (first.sends, first.receives) == (microbatches, microbatches)
    assert (last.sends, last.receives) == (microbatches, microbatches)
    # m × b/m × s × d × 4 = 4 · 16 · 64 · 4 = 16 384 bytes each way, whatever m
    for step in (first, last):
        assert step.sent_bytes == step.received_bytes == microbatches * message == 16_384
    p2p = [r.collective for r in first.trace.records if r.collective]
    assert {(c.kind, c.group_size, c.size_bytes) for c in p2p} == {("send-recv", 2, message)}
    assert first.trace.uncovered == {}


@pytest.mark.parametrize("stage", [0, 1])
def test_each_rank_holds_its_stages_parameters_and_their_adamw_state(
        steps: dict[tuple[str, int, int], PipelineStep], stage: int) -> None:
    step = steps["gpipe", 2, stage]
    assert step.stages == (stage,)
    assert step.params_per_rank == STAGE_PARAMS[stage]
    assert step.param_bytes_per_rank == F32 * STAGE_PARAMS[stage]  # stage 0: 180 736
    # two fp32 moments per value and a 4-byte step counter per tensor
    assert step.optimizer_state_bytes_per_rank == (2 * F32 * STAGE_PARAMS[stage]
                                                   + F32 * STAGE_TENSORS[stage])


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_each_rank_runs_the_matmuls_of_its_own_blocks(
        steps: dict[tuple[str, int, int], PipelineStep], schedule: str) -> None:
    tokens = BATCH * SEQ  # 64, all micro-batches together
    # forward 2·T·params of the matrices, backward twice that: 6 · 64 · 36 864 = 14 155 776
    # (the embedding is a lookup, not a matmul); rank 1 adds the head:
    # 6 · 64 · (36 864 + 8192) = 17 301 504
    expected = {0: 6 * tokens * BLOCK_MATRICES, 1: 6 * tokens * (BLOCK_MATRICES + HEAD)}
    assert expected == {0: 14_155_776, 1: 17_301_504}
    for microbatches in (2, 4):
        for stage in (0, 1):
            records = steps[schedule, microbatches, stage].trace.records
            assert sum(r.flops for r in records if r.category == "matmul"
                       and r.phase != "optimizer") == expected[stage]


def _saved_bytes_of_one_micro_batch(micro: int, config: TransformerConfig = TINY,
                                    pp: int = 2) -> int:
    """Stage 0's autograd-saved activations of one micro-batch on one device: the distinct
    storages its forward saves that are not parameters (a path apart from the recorder's).

    The token ids the embedding saves are left out: in the pipeline they are a view of the
    whole batch, made before the recorded step and alive after it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        stage = split_stages(build_model(config, "cpu"), pp)[0]
        params = {storage_key(p) for p in stage.parameters()}
        saved: dict[object, int] = {}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            key = storage_key(tensor)
            if key not in params and tensor.is_floating_point():
                saved[key] = tensor.untyped_storage().nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            stage(torch.randint(0, TINY.vocab_size, (micro, SEQ)))
    return sum(saved.values())


def test_in_flight_micro_batches_hold_their_saved_activations(
        steps: dict[tuple[str, int, int], PipelineStep]) -> None:
    one = _saved_bytes_of_one_micro_batch(1)  # b/m = 4/4 = 1 sequence
    # GPipe runs every forward before any backward: all 4 micro-batches in flight on rank 0
    assert steps["gpipe", 4, 0].saved_activation_peak_bytes == 4 * one
    # 1F1B lets rank 0 of 2 run p − rank = 2 forwards ahead of its first backward: 2 in flight
    assert steps["1f1b", 4, 0].saved_activation_peak_bytes == 2 * one
    # with 2 micro-batches both schedules hold both
    two = _saved_bytes_of_one_micro_batch(2)
    assert steps["gpipe", 2, 0].saved_activation_peak_bytes == 2 * two
    assert steps["1f1b", 2, 0].saved_activation_peak_bytes == 2 * two


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("microbatches", "bubble"), [
    (2, 1 / 3),  # (p − 1)/(m + p − 1) = 1/(2 + 1)
    (4, 1 / 5),  # 1/(4 + 1)
])
def test_the_schedules_bubble_is_napkins(steps: dict[tuple[str, int, int], PipelineStep],
                                         schedule: str, microbatches: int,
                                         bubble: float) -> None:
    for stage in (0, 1):
        measured = steps[schedule, microbatches, stage].bubble_fraction
        assert measured == pytest.approx(bubble)
    assert pipeline_bubble(2, microbatches).bubble_fraction == pytest.approx(bubble)


def test_the_bubble_of_a_hand_written_fill_drain_order() -> None:
    from torch.distributed.pipelining.schedules import _Action, _ComputationType

    f, b = _ComputationType.FORWARD, _ComputationType.FULL_BACKWARD
    # 3 ranks, 2 micro-batches, fill-drain: the step lasts 2·(m + p − 1) = 8 ticks, each rank
    # computes 2·m = 4 of them: idle 3·4 / (3·8) = 1/2 = (p − 1)/(m + p − 1) = 2/4
    order = {rank: [_Action(rank, f, 0), _Action(rank, f, 1), _Action(rank, b, 0),
                    _Action(rank, b, 1)] for rank in range(3)}
    assert order_bubble(order) == pytest.approx(1 / 2)
    # a backward before its own forward never becomes ready
    order[2] = order[2][2:] + order[2][:2]
    with pytest.raises(TraceError, match="do not progress"):
        order_bubble(order)


def test_interleaved_1f1b_holds_two_stages_per_rank_and_shrinks_the_bubble() -> None:
    four = dataclasses.replace(TINY, n_layers=4)
    step = trace_pipeline_step(four, BATCH, SEQ, 2, 4, "interleaved-1f1b")
    assert step.schedule is Schedule.INTERLEAVED_1F1B and step.chunks == 2
    assert step.stages == (0, 2)  # of 2 ranks × 2 chunks = 4 stages of one block each
    # stage 0 sends 4 activations, stage 2 sends 4 activations and 4 gradients: 12 of
    # 1 · 16 · 64 · 4 = 4096 bytes; it receives 4 gradients (stage 0), 4 activations and 4
    # gradients (stage 2): 12
    assert (step.sends, step.sent_bytes) == (12, 12 * 4096)
    assert (step.receives, step.received_bytes) == (12, 12 * 4096)
    # embedding 8192 + two blocks 2 · 36 992 = 82 176
    assert step.params_per_rank == 82_176
    # (p − 1)/(v·m + p − 1) = 1/(2·4 + 1) = 1/9
    assert step.bubble_fraction == pytest.approx(1 / 9)
    assert pipeline_bubble(2, 4, chunks=2).bubble_fraction == pytest.approx(1 / 9)


def test_schedule_names_resolve_once() -> None:
    assert resolve_schedule("GPipe") is Schedule.GPIPE
    assert resolve_schedule(Schedule.ONE_F_ONE_B) is Schedule.ONE_F_ONE_B


def test_four_ranks_of_1f1b_keep_four_micro_batches_of_eight_in_flight() -> None:
    four = dataclasses.replace(TINY, n_layers=4)  # one block per stage, as tiny's stage 0
    step = trace_pipeline_step(four, 8, SEQ, 4, 8, "1f1b")
    # 8 micro-batches of 8/8 = 1 sequence: 8 sends of 1 · 16 · 64 · 4 = 4096 bytes
    assert (step.sends, step.sent_bytes) == (8, 8 * 4096)
    # rank 0 of 4 runs p − 0 = 4 forwards before its first backward
    assert step.saved_activation_peak_bytes == 4 * _saved_bytes_of_one_micro_batch(1, four, 4)
    # (p − 1)/(m + p − 1) = 3/(8 + 3) = 3/11
    assert step.bubble_fraction == pytest.approx(3 / 11)
    assert pipeline_bubble(4, 8).bubble_fraction == pytest.approx(3 / 11)
