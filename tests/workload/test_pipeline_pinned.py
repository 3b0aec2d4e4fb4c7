"""Pipeline parallelism by hand (issue 42's mutation run of
``tensorledger.workload.pipeline``): stages cut from the reference model run to the model's
own output, the checks' refusals, the examples' shapes, the loss, the saved-activation peak,
the action lists and one traced step's figures."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from tensorledger.errors import InputError, TensorLedgerError, TraceError
from tensorledger.models import build_model, get_preset
from tensorledger.workload import pipeline as pl
from tensorledger.workload.layout import Layout
from tensorledger.workload.pipeline import (
    action_lists,
    run_pipeline_step,
    split_stages,
    trace_pipeline_step,
)
from tensorledger.workload.recompute import CheckpointedBlock
from tensorledger.workload.schedules import Schedule

TINY = get_preset("tiny")  # 2 layers, d 64, vocab 128, context 32, rope, untied
# 4 layers, learned positions and dropout: every part a first stage can hold
LEARNED = replace(TINY, name="tiny-learned", n_layers=4, positions="learned", dropout=0.1)


def _model(config: Any = TINY) -> nn.Module:
    torch.manual_seed(0)
    return build_model(config, "cpu")


# ---- the stages ---------------------------------------------------------------------------

@pytest.mark.parametrize("config", [TINY, LEARNED])
def test_the_stages_in_turn_compute_the_models_output(config: Any) -> None:
    model = _model(config).eval()  # no dropout: both paths alike
    tokens = torch.randint(0, config.vocab_size, (2, 5))
    stages = split_stages(model, 2)
    x = tokens
    for stage in stages:
        stage.eval()
        x = stage(x)
    assert torch.allclose(x, model(tokens), atol=1e-6)


def test_the_first_stage_holds_the_embeddings_and_the_last_the_head() -> None:
    model = _model(LEARNED)
    stages = split_stages(model, 2, chunks=2)  # 4 stages of one block each
    first, middle, last = stages[0], stages[1], stages[3]
    assert first.token_embedding is model.token_embedding
    assert first.position_embedding is model.position_embedding
    assert first.dropout is model.dropout and first.head is None and first.final_norm is None
    assert middle.token_embedding is None and middle.position_embedding is None
    assert middle.dropout is None and middle.head is None
    assert last.head is model.head and last.final_norm is model.final_norm
    assert list(first.blocks) == ["0"] and list(last.blocks) == ["3"]
    assert first.blocks["0"] is model.blocks[0] and first.autocast is False


def test_a_stage_runs_under_bf16_autocast_when_asked() -> None:
    (first, last) = split_stages(_model(), 2)
    hidden = first(torch.zeros(1, 3, dtype=torch.long))
    assert last(hidden).dtype == torch.float32
    last.autocast = True
    assert last(hidden).dtype == torch.bfloat16  # the head's matmul under bf16 autocast
    first.autocast = True
    with torch.autocast("cpu", enabled=False):  # no autocast outside: the stage's own
        assert last(first(torch.zeros(1, 3, dtype=torch.long))).dtype == torch.bfloat16


def test_dropout_applies_on_the_first_stage() -> None:
    (first, _) = split_stages(_model(LEARNED), 2)
    first.eval()
    assert first.dropout is not None
    first.dropout.train()  # the embeddings' dropout alone, the blocks' off
    torch.manual_seed(1)
    tokens = torch.zeros(1, 4, dtype=torch.long)
    noisy = first(tokens)
    first.eval()
    assert not torch.equal(noisy, first(tokens))  # p = 0.1 of 4 · 64 values dropped


def test_stages_of_given_layers_and_their_refusals() -> None:
    model = _model(LEARNED)
    stages = split_stages(model, 2, stage_layers=[1, 3])
    assert [list(s.blocks) for s in stages] == [["0"], ["1", "2", "3"]]
    assert [list(s.blocks) for s in split_stages(model, 4)] == [["0"], ["1"], ["2"], ["3"]]
    assert [list(s.blocks) for s in split_stages(model, 1)] == [["0", "1", "2", "3"]]
    single = split_stages(model, 1)[0]
    assert single.token_embedding is not None and single.head is not None  # first and last
    for layers, says in (([1, 2], "stage layers 1,2 are not 2 stages"),
                         ([1, 1, 2], "stage layers 1,1,2 are not 2 stages"),
                         ([0, 4], "of 1 block or more adding up to tiny-learned's 4")):
        with pytest.raises(InputError, match=says):
            split_stages(model, 2, stage_layers=layers)
    with pytest.raises(InputError, match="--pp 3 does not divide tiny-learned's 4 layers"):
        split_stages(model, 3)
    with pytest.raises(InputError, match="--pp 2 × 3 chunks = 6 stages do not divide"):
        split_stages(model, 2, chunks=3)
    for name, pp, chunks in (("pp", 0, 1), ("pp", True, 1), ("chunks", 2, 0),
                             ("chunks", 2, 1.0)):
        with pytest.raises(InputError, match=f"--{name} must be a whole number >= 1"):
            split_stages(model, pp, chunks)
    with pytest.raises(InputError, match="got Linear"):
        split_stages(nn.Linear(2, 2), 2)
    tied = _model(replace(TINY, tied_embeddings=True))
    with pytest.raises(InputError, match="ties its head to its token embedding"):
        split_stages(tied, 2)
    assert len(split_stages(tied, 1)) == 1  # one stage keeps them together


# ---- the checks and the examples ----------------------------------------------------------

GPIPE = Schedule.GPIPE


@pytest.mark.parametrize(("args", "says"), [
    ((0, 16, 2, 2, 0, 1), "--batch must be a whole number >= 1, got 0"),
    ((2, True, 2, 2, 0, 1), "--seq must be"),
    ((2, 16, 2.0, 2, 0, 1), "--pp must be"),
    ((2, 16, 2, 0, 0, 1), "--microbatches must be"),
    ((2, 16, 2, 2, 0, 0), "--chunks must be"),
    ((2, 16, 1, 1, 0, 1), "pipelining needs --pp 2 or more ranks, got 1"),
    ((2, 16, 2, 2, 2, 1), "the traced pipeline rank is 0 to 1, got 2"),
    ((2, 16, 2, 2, -1, 1), "got -1"),
    ((2, 16, 2, 2, True, 1), "got True"),
    ((3, 16, 2, 2, 0, 1), "--batch 3 does not split into 2 micro-batches"),
    ((2, 33, 2, 2, 0, 1), "--seq 33 is longer than tiny's context of 32"),
])
def test_a_pipeline_step_is_checked(args: tuple[Any, ...], says: str) -> None:
    batch, seq, pp, micro, rank, chunks = args
    with pytest.raises(InputError, match=says):
        pl._check(TINY, batch, seq, pp, micro, GPIPE, rank, chunks)


def test_the_last_rank_and_the_whole_context_are_accepted() -> None:
    pl._check(TINY, 4, 32, 2, 2, GPIPE, 1, 1)  # rank 1 of 2, seq = context 32
    with pytest.raises(InputError, match="micro-batch"):  # the schedule's own check
        pl._check(TINY, 2, 16, 2, 1, Schedule.ONE_F_ONE_B, 0, 1)


def test_the_examples_are_one_micro_batchs_input_and_output() -> None:
    first_in, first_out = pl._examples(TINY, 3, 8, True, False, torch.bfloat16, 4,
                                       torch.float32)
    assert (tuple(first_in.shape), first_in.dtype) == ((3, 8), torch.long)  # token ids
    # the stream between stages: micro 3 × stream 4 × d 64, in the parameters' dtype
    assert (tuple(first_out.shape), first_out.dtype) == ((3, 4, 64), torch.bfloat16)
    assert first_out.requires_grad
    last_in, last_out = pl._examples(TINY, 3, 8, False, True, torch.bfloat16, 4,
                                     torch.float32)
    assert (tuple(last_in.shape), last_in.dtype, last_in.requires_grad) == (
        (3, 4, 64), torch.bfloat16, True)
    # whole logits: micro 3 × seq 8 × vocab 128
    assert (tuple(last_out.shape), last_out.dtype, last_out.requires_grad) == (
        (3, 8, 128), torch.float32, True)


# ---- the loss and the schedule ------------------------------------------------------------

@pytest.mark.parametrize("autocast", [False, True])
def test_the_schedules_loss_is_the_mean_next_token_cross_entropy(autocast: bool) -> None:
    from tensorledger.workload.parallel import fake_process_group

    with fake_process_group(2):
        from torch.distributed.pipelining import PipelineStage

        example = torch.zeros(1, 2)
        stage = PipelineStage(nn.Linear(2, 2), 0, 2, torch.device("cpu"),
                              input_args=example, output_args=example)
        runner = pl._make_schedule(GPIPE, [stage], 2, autocast=autocast)
    assert type(runner).__name__ == "ScheduleGPipe" and runner._n_microbatches == 2
    logits = torch.zeros(2, 3, 5)  # 5 ids, equally likely: ln 5 at each of 2 · 3 positions
    loss = runner._loss_fn(logits, torch.tensor([[0, 1, 2], [3, 4, 0]]))
    assert loss.item() == pytest.approx(math.log(5))
    favoured = torch.zeros(1, 1, 3)
    favoured[..., 0] = 1.0
    # p(0) = e / (e + 2); under autocast the same to bf16's precision
    expected = -math.log(math.e / (math.e + 2))
    assert runner._loss_fn(favoured, torch.tensor([[0]])).item() == pytest.approx(
        expected, rel=1e-2 if autocast else 1e-6)


def _two_stages() -> list[Any]:
    """Stages 0 and 2 of 4 (a rank's two of an interleaved schedule), each a Linear(2, 2)."""
    from torch.distributed.pipelining import PipelineStage

    example = torch.zeros(1, 2)
    return [PipelineStage(nn.Linear(2, 2), index, 4, torch.device("cpu"),
                          input_args=example, output_args=example) for index in (0, 2)]


def test_a_multi_stage_schedule_gets_every_stage() -> None:
    from tensorledger.workload.parallel import fake_process_group

    with fake_process_group(2):
        stages = _two_stages()
        runner = pl._make_schedule(Schedule.INTERLEAVED_1F1B, stages, 2)
    assert type(runner).__name__ == "ScheduleInterleaved1F1B"
    assert [s.stage_index for s in runner._stages] == [0, 2]


# ---- the saved-activation peak ------------------------------------------------------------

def _record(created: tuple[tuple[int, int], ...] = (), freed: tuple[int, ...] = ()) -> Any:
    return SimpleNamespace(storages_created=created, storages_freed=freed)


def test_the_saved_peak_is_the_most_saved_bytes_live_at_once() -> None:
    trace = SimpleNamespace(records=[
        _record(((1, 100), (9, 1000))),  # 9 is not saved: not counted
        _record(((2, 50),)),  # 150 live
        _record(((3, 30),), freed=(1,)),  # 1 freed first: 50 + 30 = 80
        _record(freed=(7,)),  # a storage never created: nothing
        _record(((4, 200),), freed=(2, 3)),  # 200
        _record(freed=(4,)),
    ])
    assert pl._saved_peak(trace, {1, 2, 3, 4}) == 200  # type: ignore[arg-type]
    assert pl._saved_peak(trace, {1, 2}) == 150  # type: ignore[arg-type]
    assert pl._saved_peak(SimpleNamespace(records=[]), {1}) == 0  # type: ignore[arg-type]


# ---- tensor parallelism and checkpointing within a stage ---------------------------------

def test_a_stages_plan_names_its_own_parts() -> None:
    first, last = split_stages(_model(), 2)
    plan = pl.stage_tp_plan(first, sp=False)
    assert "token_embedding" in plan and "head" not in plan
    assert any(key.startswith("blocks.0.") for key in plan)
    assert not any(key.startswith("blocks.1.") for key in plan)
    last_plan = pl.stage_tp_plan(last, sp=False)
    assert "head" in last_plan and "token_embedding" not in last_plan
    assert any(key.startswith("blocks.1.") for key in last_plan)
    assert "final_norm" in pl.stage_tp_plan(last, sp=True)  # the norm over the sequence shards
    assert "final_norm" not in last_plan
    learned = split_stages(_model(LEARNED), 2)[0]
    with pytest.raises(InputError, match="learned position embedding"):
        pl.stage_tp_plan(learned, sp=True)
    assert "token_embedding" in pl.stage_tp_plan(learned, sp=False)
    # a checkpointed block is planned by the block inside it
    checkpointed = pl._checkpoint_stage(split_stages(_model(), 2)[0])
    assert pl.stage_tp_plan(checkpointed, sp=False).keys() == plan.keys()


def test_experts_within_a_stage_are_planned_as_experts() -> None:
    moe = get_preset("tiny-moe")
    first = split_stages(_model(moe), 2)[0]
    with pytest.raises(InputError, match="no plan for the reference mixture of experts"):
        pl.stage_tp_plan(first, sp=False)
    assert any(key.startswith("blocks.0.") for key in pl.stage_tp_plan(first, sp=False,
                                                                        experts=True))


def test_checkpointing_a_stage_wraps_each_block() -> None:
    stage = split_stages(_model(), 1)[0]
    blocks = list(stage.blocks.values())
    assert pl._checkpoint_stage(stage) is stage
    wrapped = list(stage.blocks.values())
    assert all(isinstance(b, CheckpointedBlock) for b in wrapped)
    assert [b.block for b in wrapped] == blocks and list(stage.blocks) == ["0", "1"]


# ---- building a rank ----------------------------------------------------------------------

def _recording_stage() -> tuple[type, list[dict[str, Any]]]:
    from torch.distributed.pipelining import PipelineStage

    made: list[dict[str, Any]] = []

    class Recording(PipelineStage):
        def __init__(self, module: nn.Module, index: int, count: int, device: torch.device,
                     **kwargs: Any) -> None:
            made.append({"module": module, "index": index, "count": count, **kwargs})
            super().__init__(module, index, count, device, **kwargs)

    return Recording, made


def test_a_rank_is_built_of_its_stages_in_the_recipe() -> None:
    from tensorledger.workload.parallel import fake_process_group

    kind, made = _recording_stage()
    with fake_process_group(2):
        modules, runner = pl.build_pipeline_rank(LEARNED, 2, 0, 2, Schedule.INTERLEAVED_1F1B,
                                                 2, 3, 8, kind, precision="mixed-bf16",
                                                 checkpoint=True)
    # rank 0 of 2 with 2 chunks holds stages 0 and 2 of 4: blocks 0 and 2
    assert [list(m.blocks) for m in modules] == [["0"], ["2"]]
    assert all(m.autocast for m in modules)  # mixed-bf16: autocast over each stage
    assert all(isinstance(b, CheckpointedBlock) for m in modules for b in m.blocks.values())
    assert {p.dtype for m in modules for p in m.parameters()} == {torch.float32}
    assert [s.stage_index for s in runner._stages] == [0, 2]
    assert [(m["index"], m["count"], m["module"] is mod) for m, mod in
            zip(made, modules, strict=True)] == [(0, 4, True), (2, 4, True)]
    assert made[0]["group"] is None  # no mesh: the default group
    # the first stage: micro 3 × seq 8 token ids in, the fp32 stream 3 × 8 × 64 out
    assert tuple(made[0]["input_args"].shape) == (3, 8)
    assert (tuple(made[0]["output_args"].shape), made[0]["output_args"].dtype) == (
        (3, 8, 64), torch.float32)
    kind, made = _recording_stage()
    with fake_process_group(2):
        plain, runner = pl.build_pipeline_rank(LEARNED, 2, 1, 1, GPIPE, 2, 1, 8, kind,
                                               precision="bf16")
    assert [list(m.blocks) for m in plain] == [["2", "3"]]
    assert not plain[0].autocast and not any(
        isinstance(b, CheckpointedBlock) for b in plain[0].blocks.values())
    assert {p.dtype for p in plain[0].parameters()} == {torch.bfloat16}
    # the last stage: the bf16 stream in, whole logits 1 × 8 × 128 out in bf16
    ((last,),) = [[m] for m in made]
    assert (last["index"], last["count"]) == (1, 2)
    assert (tuple(last["input_args"].shape), last["input_args"].dtype) == (
        (1, 8, 64), torch.bfloat16)
    assert (tuple(last["output_args"].shape), last["output_args"].dtype) == (
        (1, 8, 128), torch.bfloat16)
    kind, made = _recording_stage()
    with fake_process_group(2):
        pl.build_pipeline_rank(LEARNED, 2, 1, 1, GPIPE, 2, 1, 8, kind, precision="mixed-bf16")
    # mixed-bf16: fp32 parameters, the stream fp32, the logits of the autocast head bf16
    assert made[0]["input_args"].dtype == torch.float32
    assert made[0]["output_args"].dtype == torch.bfloat16


def test_a_rank_laid_out_within_its_stages_sees_its_share_of_the_sequence() -> None:
    from torch.distributed.tensor import DTensor

    from tensorledger.workload.parallel import build_mesh, fake_process_group

    within = Layout(tp=2, sp=True)
    whole = replace(within, pp=2, microbatches=2)
    kind, made = _recording_stage()
    with fake_process_group(4):
        mesh = build_mesh(whole)
        modules, _ = pl.build_pipeline_rank(TINY, 2, 0, 1, GPIPE, 2, 1, 8, kind,
                                            within=within, mesh=mesh, checkpoint=True)
        (stage,) = made
        assert stage["group"] is mesh["pp"].get_group()
    # seq 8 over 2 sequence-parallel ranks: a stream of 4 tokens between stages
    assert tuple(stage["output_args"].shape) == (1, 4, 64)
    assert tuple(stage["input_args"].shape) == (1, 8)
    (module,) = modules
    assert isinstance(module.token_embedding.weight, DTensor)  # laid out by the stage's plan
    assert all(isinstance(b, CheckpointedBlock) for b in module.blocks.values())
    within = Layout(cp=2)
    whole = replace(within, pp=2, microbatches=2)
    kind, made = _recording_stage()
    with fake_process_group(4):
        modules, _ = pl.build_pipeline_rank(TINY, 2, 1, 1, GPIPE, 2, 1, 8, kind,
                                            within=within, mesh=build_mesh(whole))
    # seq 8 over 2 cp ranks: 4 tokens a rank, in the stream and in the logits
    assert tuple(made[0]["input_args"].shape) == (1, 4, 64)
    assert tuple(made[0]["output_args"].shape) == (1, 4, 128)
    assert not any(isinstance(b, CheckpointedBlock) for b in modules[0].blocks.values())
    # no tp: no plan; FSDP2 shards the head over the cp ranks alone
    assert modules[0].head.weight.device_mesh.mesh_dim_names == ("cp",)


def test_a_rank_laid_out_within_needs_its_mesh() -> None:
    with pytest.raises(TensorLedgerError, match="needs the layout's mesh"):
        pl.build_pipeline_rank(TINY, 2, 0, 1, GPIPE, 2, 1, 8, within=Layout(fsdp=2))


def test_the_stage_class_given_is_used_and_the_votes_answer_is_static() -> None:
    from tensorledger.workload.parallel import fake_process_group

    kind = pl._vote_stage_class()
    with fake_process_group(2):
        _, runner = pl.build_pipeline_rank(TINY, 2, 0, 1, GPIPE, 2, 1, 8, kind)
    assert isinstance(runner._stage, kind)


def test_the_votes_answer_is_static_after_its_own_send_and_receive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.pipelining import PipelineStage

    kind = pl._vote_stage_class()
    assert issubclass(kind, PipelineStage)
    seen: list[Any] = []
    monkeypatch.setattr(PipelineStage, "_warmup_backward_result",
                        lambda self, received=None: seen.append(received))
    stage = object.__new__(kind)
    received = torch.zeros(1, dtype=torch.int32)
    answer = stage._warmup_backward_result(received)
    assert seen == [received]  # torch's own send and receive ran, with what was received
    assert answer.tolist() == [1] and answer.dtype == torch.int32  # 1: every stage static


# ---- the sequence under context parallelism -----------------------------------------------

def test_the_token_ids_are_cut_for_context_parallelism_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.context_parallel as cp

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(cp, "sequence_sharded", lambda *args: calls.append(args) or "cut")
    tokens = torch.zeros(2, 8, dtype=torch.long)
    assert pl._sequence_sharded(Layout(fsdp=2), None, tokens) is not None
    assert calls == []
    mesh = {"cp": "the cp mesh"}
    assert pl._sequence_sharded(Layout(cp=2, cp_rotate="alltoall"), mesh,  # type: ignore[arg-type]
                                tokens) == "cut"
    ((given, buffers, rotate),) = calls
    assert given == "the cp mesh" and rotate == "alltoall"
    assert len(buffers) == 1 and buffers[0] is tokens


# ---- the action lists ---------------------------------------------------------------------

def test_the_action_lists_are_torchs_for_each_rank() -> None:
    order = action_lists("gpipe", 2, 3)
    # GPipe: each rank runs 3 forwards then 3 backwards of its one stage
    computed = [a for a in order[1] if a is not None]
    assert [a.computation_type.name for a in computed].count("FORWARD") == 3
    assert {a.stage_index for a in computed} == {1}
    assert sorted(order) == [0, 1]
    v = action_lists(Schedule.ZBV, 2, 4)
    assert sorted({a.stage_index for a in v[1] if a is not None}) == [1, 2]  # the V's middle
    interleaved = action_lists("interleaved-1f1b", 2, 2, chunks=3)
    assert sorted({a.stage_index for a in interleaved[0] if a is not None}) == [0, 2, 4]


def test_action_list_refusals() -> None:
    for args, says in (((2, 0), "--microbatches must be"), ((0, 2), "--pp must be"),
                       ((2, True), "--microbatches must be")):
        with pytest.raises(InputError, match=says):
            action_lists("gpipe", *args)
    with pytest.raises(InputError, match="--chunks must be"):
        action_lists("gpipe", 2, 2, chunks=0)


def test_the_compute_only_schedule_skips_the_lowering() -> None:
    from tensorledger.workload.parallel import fake_process_group

    with fake_process_group(2):
        stages = _two_stages()
        lean = pl._compute_only(Schedule.INTERLEAVED_1F1B, stages, 2)
    assert type(lean).__name__ == "ScheduleInterleaved1F1B"
    assert lean.pipeline_order_with_comms is None
    assert lean._loss_fn(torch.ones(2, 3), None).item() == 6.0  # the sum of the logits


# ---- one step ----------------------------------------------------------------------------

def test_a_step_feeds_the_first_stage_and_scores_on_the_last() -> None:
    steps: list[tuple[tuple[Any, ...], Any]] = []
    runner = SimpleNamespace(step=lambda *args, target: steps.append((args, target)))
    tokens = torch.zeros(1, 2)
    run_pipeline_step(runner, (0,), 2, tokens)  # type: ignore[arg-type]
    run_pipeline_step(runner, (1,), 2, tokens)  # type: ignore[arg-type]
    run_pipeline_step(runner, (0, 3), 4, tokens)  # type: ignore[arg-type]
    run_pipeline_step(runner, (1, 2), 4, tokens)  # type: ignore[arg-type]
    assert [(len(args), target is tokens) for args, target in steps] == [
        (1, False), (0, True), (1, True), (0, False)]
    assert steps[0][0][0] is tokens


def test_the_traced_gpipe_step_of_each_rank_by_hand() -> None:
    first = trace_pipeline_step(TINY, batch=2, seq=16, pp=2, microbatches=2,
                                schedule="gpipe")
    # 2 micro-batches' activations sent forward, each 1 · 16 · 64 fp32 = 4,096 bytes;
    # their gradients received back
    assert (first.sends, first.sent_bytes) == (2, 8192)
    assert (first.receives, first.received_bytes) == (2, 8192)
    assert (first.schedule, first.pp, first.chunks, first.microbatches, first.rank,
            first.stages) == (Schedule.GPIPE, 2, 1, 2, 0, (0,))
    last = trace_pipeline_step(TINY, batch=2, seq=16, pp=2, microbatches=2, schedule="gpipe",
                               stage=1)
    assert (last.sends, last.receives, last.stages) == (2, 2, (1,))
    whole = sum(p.numel() for p in _model().parameters())
    assert first.params_per_rank + last.params_per_rank == whole
    assert first.param_bytes_per_rank == first.params_per_rank * 4
    assert sum(first.param_numels) == first.params_per_rank
    # AdamW: two fp32 moments a value and a 4-byte step a tensor
    assert first.optimizer_state_bytes_per_rank == (2 * first.params_per_rank * 4
                                                    + len(first.param_numels) * 4)
    # GPipe over 2 ranks and 2 micro-batches: bubble (pp − 1) / (m + pp − 1) = 1/3
    assert first.bubble_fraction == pytest.approx(1 / 3)
    assert first.timeline is not None
    assert first.saved_activation_peak_bytes > 0
    # every storage the step holds is tagged by what it is
    assert {"parameter", "gradient", "optimizer_state", "saved_activation"} <= set(
        first.tags.values())
    assert first.trace.records  # the recorded step's ops
    # checkpointing (not the default) keeps each block's input alone: a lower peak
    checkpointed = trace_pipeline_step(TINY, batch=2, seq=16, pp=2, microbatches=2,
                                       schedule="gpipe", checkpoint=True)
    assert checkpointed.saved_activation_peak_bytes < first.saved_activation_peak_bytes


def test_trace_refusals() -> None:
    with pytest.raises(InputError, match="its pp must be 1"):
        trace_pipeline_step(TINY, 2, 16, 2, 2, "gpipe", within=Layout(pp=2, microbatches=2))
    with pytest.raises(InputError, match="--cp 2 splits each sequence into 2 × 2 chunks; "
                                         "--seq 6 does not divide by 4"):
        trace_pipeline_step(TINY, 2, 6, 2, 2, "gpipe", within=Layout(cp=2))
    for within in (Layout(dp=2), Layout(fsdp=2, zero=1)):
        with pytest.raises(InputError, match="DDP"):
            trace_pipeline_step(TINY, 2, 16, 2, 2, "gpipe", within=within)
    with pytest.raises(InputError, match="--batch 3 does not split"):
        trace_pipeline_step(TINY, 3, 16, 2, 2, "gpipe")


def test_a_failing_step_names_the_schedule_and_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("stage failed")

    monkeypatch.setattr(pl, "run_pipeline_step", broken)
    with pytest.raises(TraceError, match="the gpipe pipeline step of rank 1 of 2 raised "
                                         "RuntimeError: stage failed"):
        trace_pipeline_step(TINY, 2, 16, 2, 2, "gpipe", stage=1)

    def refused(*args: Any, **kwargs: Any) -> None:
        try:
            raise InputError("the library's own refusal")
        except InputError as error:
            raise RuntimeError("a stage's wrapper") from error

    monkeypatch.setattr(pl, "run_pipeline_step", refused)
    with pytest.raises(InputError, match="the library's own refusal"):
        trace_pipeline_step(TINY, 2, 16, 2, 2, "gpipe")


def test_an_interleaved_step_of_rank_0_by_hand() -> None:
    step = trace_pipeline_step(LEARNED, batch=2, seq=8, pp=2, microbatches=2,
                               schedule="interleaved-1f1b")
    # 2 chunks a rank by default: rank 0 holds stages 0 and 2 of 4 (one block each)
    assert (step.chunks, step.stages) == (2, (0, 2))
    # sends: stage 0's and stage 2's activations forward, stage 2's gradient back, for each
    # of 2 micro-batches (6); receives: stage 2's input, stage 2's and stage 0's gradients (6);
    # each 1 · 8 · 64 fp32 = 2,048 bytes
    assert (step.sends, step.sent_bytes) == (6, 6 * 2048)
    assert (step.receives, step.received_bytes) == (6, 6 * 2048)


def test_the_schedule_is_checked_before_tracing() -> None:
    # 1F1B needs a micro-batch per stage at least: 1 < 2
    with pytest.raises(InputError, match="micro-batch per stage"):
        trace_pipeline_step(TINY, 2, 16, 2, 1, "1f1b")


def test_positions_are_made_where_the_tokens_are() -> None:
    (first, _) = split_stages(_model(LEARNED).eval(), 2)
    tokens = torch.zeros(1, 3, dtype=torch.long)
    expected = first(tokens)
    with torch.device("meta"):  # a default device the tokens are not on
        assert torch.equal(first(tokens), expected)


def test_a_stage_autocasts_to_bf16_whatever_the_default() -> None:
    (first, last) = split_stages(_model(), 2)
    hidden = first(torch.zeros(1, 3, dtype=torch.long))
    last.autocast = True
    before = torch.get_autocast_dtype("cpu")
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        assert last(hidden).dtype == torch.bfloat16
    finally:
        torch.set_autocast_dtype("cpu", before)


def test_a_rank_is_built_of_the_stage_layers_given() -> None:
    from tensorledger.workload.parallel import fake_process_group

    with fake_process_group(2):
        modules, _ = pl.build_pipeline_rank(LEARNED, 2, 0, 1, GPIPE, 2, 1, 8,
                                            stage_layers=[1, 3])
    assert [list(m.blocks) for m in modules] == [["0"]]  # 1 block, then 3 on rank 1


# ---- the third pass over the open mutants (issue 42) ----------------------------------------
# bf16 logits tell whether the loss ran under autocast: cross-entropy is on CPU autocast's
# fp32 list, so under it bf16 logits are read in fp32 (an fp32 loss); without it the loss
# stays bf16


def _gpipe_stage() -> Any:
    from torch.distributed.pipelining import PipelineStage

    example = torch.zeros(1, 2)
    return PipelineStage(nn.Linear(2, 2), 0, 2, torch.device("cpu"),
                         input_args=example, output_args=example)


def test_the_schedules_loss_is_autocast_only_when_asked() -> None:
    from tensorledger.workload.parallel import fake_process_group

    logits = torch.zeros(1, 3, 5, dtype=torch.bfloat16)
    target = torch.tensor([[0, 1, 2]])
    with fake_process_group(2):
        plain = pl._make_schedule(GPIPE, [_gpipe_stage()], 2)  # the default: no autocast
        cast_ = pl._make_schedule(GPIPE, [_gpipe_stage()], 2, autocast=True)
        unasked = pl._make_schedule(GPIPE, [_gpipe_stage()], 2, autocast=False)
    assert plain._loss_fn(logits, target).dtype == torch.bfloat16
    assert unasked._loss_fn(logits, target).dtype == torch.bfloat16
    assert cast_._loss_fn(logits, target).dtype == torch.float32  # read in fp32 under autocast
    # all-zero logits over 5 ids: ln 5 either way (bf16 holds ln 5 = 1.609 to 1 part in 256)
    assert cast_._loss_fn(logits, target).item() == pytest.approx(math.log(5), rel=4e-3)


def test_a_ranks_schedule_scores_under_its_recipes_autocast() -> None:
    from tensorledger.workload.parallel import fake_process_group

    logits = torch.zeros(1, 8, 128, dtype=torch.bfloat16)
    target = torch.zeros(1, 8, dtype=torch.long)
    with fake_process_group(2):
        _, mixed = pl.build_pipeline_rank(TINY, 2, 1, 1, GPIPE, 2, 1, 8,
                                          precision="mixed-bf16")
        _, plain = pl.build_pipeline_rank(TINY, 2, 1, 1, GPIPE, 2, 1, 8, precision="bf16")
    assert mixed._loss_fn(logits, target).dtype == torch.float32  # mixed-bf16: autocast loss
    assert plain._loss_fn(logits, target).dtype == torch.bfloat16  # bf16: none


def test_an_fp32_last_stage_gives_fp32_logits() -> None:
    from tensorledger.workload.parallel import fake_process_group

    kind, made = _recording_stage()
    with fake_process_group(2):
        pl.build_pipeline_rank(TINY, 2, 1, 1, GPIPE, 2, 1, 8, kind)  # fp32 by default
    ((last,),) = [[m] for m in made]
    # fp32 parameters and no autocast: the head's logits, 1 × 8 × vocab 128, stay fp32
    assert (tuple(last["output_args"].shape), last["output_args"].dtype) == (
        (1, 8, 128), torch.float32)


def _recording_parallelize(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """parallelize replaced by one that records what each stage was laid out by and leaves the
    stage as it is (the layout itself is tensorledger.workload.parallel's, pinned there)."""
    import tensorledger.workload.parallel as par

    laid: list[dict[str, Any]] = []

    def record(module: nn.Module, within: Layout, mesh: Any, plan: Any,
               **kwargs: Any) -> nn.Module:
        laid.append({"module": module, "within": within, "mesh": mesh, "plan": plan,
                     **kwargs})
        return module

    monkeypatch.setattr(par, "parallelize", record)
    return laid


_PP_MESH = {"pp": SimpleNamespace(get_group=lambda: None)}  # the stages on the default group


def test_a_stage_is_laid_out_by_its_own_plan_as_a_stage(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorledger.workload.parallel import fake_process_group

    laid = _recording_parallelize(monkeypatch)
    within = Layout(tp=2, sp=True)
    with fake_process_group(2):
        (last,), _ = pl.build_pipeline_rank(TINY, 2, 1, 1, GPIPE, 2, 1, 8, within=within,
                                            mesh=_PP_MESH,  # type: ignore[arg-type]
                                            checkpoint=True)
    ((call,),) = [laid]
    assert call["module"] is last and call["within"] is within and call["mesh"] is _PP_MESH
    # the sequence-parallel plan of the last stage's parts: its blocks, the head and the
    # final norm, which sequence parallelism runs over the sequence shards
    assert call["plan"].keys() == pl.stage_tp_plan(last, sp=True).keys()
    assert "final_norm" in call["plan"] and "head" in call["plan"]
    assert call["stage"] is True  # one stage: its layers may hold no experts under --ep
    assert call["between"] is pl._checkpoint_stage


def test_experts_within_a_stage_are_planned_as_experts_under_ep_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorledger.workload.parallel import fake_process_group

    moe = get_preset("tiny-moe")  # 2 layers, each a mixture of 6 experts
    laid = _recording_parallelize(monkeypatch)
    with fake_process_group(2):
        (first,), _ = pl.build_pipeline_rank(moe, 2, 0, 1, GPIPE, 2, 1, 8,
                                             within=Layout(tp=2, ep=2),
                                             mesh=_PP_MESH)  # type: ignore[arg-type]
    # --ep 2: the experts sharded over ep, the plan of the rest (experts=True), not sp
    assert laid[0]["plan"].keys() == pl.stage_tp_plan(first, sp=False, experts=True).keys()
    # --tp 2 without --ep: the reference mixture of experts has no tensor-parallel plan
    with fake_process_group(2), pytest.raises(
            InputError, match="no plan for the reference mixture of experts"):
        pl.build_pipeline_rank(moe, 2, 0, 1, GPIPE, 2, 1, 8, within=Layout(tp=2),
                               mesh=_PP_MESH)  # type: ignore[arg-type]


def _standin_rank(monkeypatch: pytest.MonkeyPatch, built: list[dict[str, Any]],
                  steps: list[tuple[tuple[Any, ...], Any]]) -> None:
    """build_pipeline_rank replaced by a rank of one Linear(2, 2) (made under the step's fake
    tensors) whose schedule records each step's arguments and gives each parameter a
    gradient, and keeps no action lists (as the single-stage schedules of an older torch)."""

    def build(config: Any, pp: int, rank: int, chunks: int, kind: Schedule, microbatches: int,
              micro: int, seq: int, stage_class: Any, **kwargs: Any) -> tuple[Any, Any]:
        module = nn.Linear(2, 2)
        built.append({"rank": rank, "chunks": chunks, **kwargs})

        def step(*args: Any, target: Any) -> None:
            steps.append((args, target))
            for p in module.parameters():
                p.grad = torch.ones_like(p)

        return [module], SimpleNamespace(step=step)

    monkeypatch.setattr(pl, "build_pipeline_rank", build)


def test_an_interleaved_rank_scores_when_it_holds_the_last_of_all_stages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, Any]] = []
    steps: list[tuple[tuple[Any, ...], Any]] = []
    _standin_rank(monkeypatch, built, steps)
    step = trace_pipeline_step(TINY, 2, 16, 2, 2, "interleaved-1f1b", stage=1)
    # rank 1 of 2 with 2 chunks holds stages 1 and 3 of 2 · 2 = 4: not the first (no token
    # ids fed), the last (the loss's target given), in the warm-up and the recorded step
    assert step.stages == (1, 3)
    assert [(args, target is not None) for args, target in steps] == [((), True), ((), True)]
    assert tuple(steps[0][1].shape) == (2, 16)  # the whole batch's ids
    assert built[0]["mesh"] is None  # one rank a stage: no mesh, the default group
    # a schedule without action lists: no timeline and no bubble, not an error
    assert step.timeline is None and step.bubble_fraction is None


def test_the_optimizers_kernel_is_the_one_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[tuple[tuple[Any, ...], Any]] = []
    _standin_rank(monkeypatch, [], steps)
    looped = trace_pipeline_step(TINY, 2, 16, 2, 2, "gpipe")
    fused = trace_pipeline_step(TINY, 2, 16, 2, 2, "gpipe", optimizer_kernel="foreach")
    ops = [{r.op for r in s.trace.records if r.phase == "optimizer"} for s in (looped, fused)]
    # AdamW over the Linear's weight and bias: one tensor at a time (aten.lerp_, ...) or the
    # _foreach_ ops over both at once
    assert not any("_foreach_" in op for op in ops[0]) and "aten.lerp_.Scalar" in ops[0]
    assert any(op.startswith("aten._foreach_") for op in ops[1])


def test_fsdp_within_the_stages_tags_what_it_gathers(monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.run as run

    built: list[dict[str, Any]] = []
    strategies: list[str] = []
    real = run.gathered_events

    def gathered(recorder: Any, strategy: str) -> Any:
        strategies.append(strategy)
        return real(recorder, strategy)

    monkeypatch.setattr(run, "gathered_events", gathered)
    _standin_rank(monkeypatch, built, [])
    trace_pipeline_step(TINY, 2, 16, 2, 2, "gpipe", within=Layout(fsdp=2))
    assert strategies == ["fsdp"]  # FSDP's gathered parameters told to the recorder
    # the whole layout's mesh, pp outermost, over 2 stages × 2 FSDP ranks
    assert built[0]["mesh"].mesh_dim_names == ("pp", "fsdp")


def test_a_refusal_raised_while_handling_another_error_is_passed_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: Any, **kwargs: Any) -> None:
        try:
            raise InputError("the ring's own refusal")
        except InputError:
            # raised while handling it: the refusal is its __context__, with no __cause__
            raise RuntimeError("a stage's wrapper")  # noqa: B904

    monkeypatch.setattr(pl, "run_pipeline_step", refused)
    _standin_rank(monkeypatch, [], [])
    with pytest.raises(InputError, match="the ring's own refusal"):
        trace_pipeline_step(TINY, 2, 16, 2, 2, "gpipe")


def test_an_odd_sequence_is_refused_under_context_parallelism_alone() -> None:
    # --seq 15 without --cp is no refusal of its own: the DDP within the stages is the one
    with pytest.raises(InputError, match="DDP"):
        trace_pipeline_step(TINY, 2, 15, 2, 2, "gpipe", within=Layout(dp=2))
