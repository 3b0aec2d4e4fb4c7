"""Context parallelism inside pipeline stages (``--cp`` beside ``--pp``): a rank of each stage,
traced on the fake group, runs torch's ring attention on its chunks of every micro-batch;
what its ring sends and its attention FLOPs equal napkin's closed form (napkin/context.py)
for the stage's own layers, and the figures are written out by hand beside it.

The tiny preset (kv heads 2, query heads 4, head 16, d_model 64), fp32 on this CPU's fused
kernel, the whole batch B = 4 of S = 32 tokens in M = 2 micro-batches of 2; CP 2 gives each
rank s_r = 16 tokens of a sequence, in 2 chunks of c = 8.
"""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.napkin.context import context_parallel_rank
from tensorledger.napkin.transformer import get_preset
from tensorledger.trace.records import Trace
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import Layout, resolve_layout
from tensorledger.workload.pipeline import trace_pipeline_step

B, S, M, CP = 4, 32, 2, 2
TINY = get_preset("tiny")
F32 = 4
# one layer, one micro-batch (b = 2): K = 2·b·kv_heads·s_r·d·4 = 2·2·2·16·16·4 = 8,192 bytes,
# G (fp32) = K; forward (cp − 1)·K, backward (cp − 1)·K + cp·G: 4·8,192 = 32,768
RING_PER_LAYER = M * 32_768  # both micro-batches: 65,536
# forward, causal-halved: cp blocks of 8·b·h·c²·d = 2 · 8·2·4·8²·16 = 131,072 a micro-batch
ATTENTION_PER_LAYER = M * 131_072  # 262,144 = 2·B·h·S²·d/cp /2 = 2·4·4·32²·16/2/2


def _ring_sent(trace: Trace) -> int:
    return sum(r.collective.bytes_sent for r in trace.records
               if r.collective is not None and r.module.endswith(".attention")
               and r.collective.kind in ("all-gather", "all-to-all"))


def _attention_forward(trace: Trace) -> int:
    return sum(r.flops_causal_halved for r in trace.records
               if r.phase == "forward" and "scaled_dot_product" in r.op)


def _closed(layers: int, dtype_bytes: int = F32, autocast: bool = False) -> tuple[int, int]:
    """The closed form for a stage of ``layers`` blocks: ring bytes and attention FLOPs of the
    whole batch (both are linear in the batch, so M micro-batches of B/M are one of B)."""
    ring = context_parallel_rank(dataclasses.replace(TINY, n_layers=layers), B, S, CP,
                                 dtype_bytes=dtype_bytes, autocast=autocast)
    return ring.sent_bytes, ring.attention_flops


@pytest.mark.parametrize("stage", [0, 1])
def test_cp2_pp2_each_stage_by_hand(stage: int) -> None:
    step = trace_pipeline_step(TINY, B, S, 2, M, "1f1b", stage=stage, within=Layout(cp=CP))
    assert dict(step.trace.uncovered) == {}
    assert {r.collective.group_size for r in step.trace.records if r.collective is not None
            and r.module.endswith(".attention")} == {CP}  # the ring is over the cp ranks
    # each stage holds 1 of tiny's 2 blocks
    assert _ring_sent(step.trace) == RING_PER_LAYER == _closed(1)[0] == 65_536
    assert _attention_forward(step.trace) == ATTENTION_PER_LAYER == _closed(1)[1] == 262_144
    # the stream between the stages is the rank's share of the sequence: a micro-batch's
    # b · s_r · d_model · 4 = 2·16·64·4 = 8,192 bytes, half of what it is without CP
    sent = [c.bytes_sent for c in (r.collective for r in step.trace.records)
            if c is not None and c.kind == "send-recv" and c.bytes_sent]
    assert sent == [8_192] * M
    # FSDP shards the stage over the cp ranks (fsdp·cp = 2): stage 0 holds the embedding
    # (128·64) and block 0 (36,992 values), stage 1 block 1, the final norm (64) and the head
    # (128·64); each halves exactly
    held = 8_192 + 36_992 if stage == 0 else 36_992 + 64 + 8_192
    assert step.params_per_rank * CP == held


def test_uneven_and_interleaved_stages_follow_their_layers() -> None:
    # 3 blocks cut 1 + 2: the second stage's rank runs the ring in 2 layers
    three = dataclasses.replace(TINY, n_layers=3)
    uneven = trace_pipeline_step(three, B, S, 2, M, "1f1b", stage=1, within=Layout(cp=CP),
                                 stage_layers=(1, 2))
    assert _ring_sent(uneven.trace) == 2 * RING_PER_LAYER == _closed(2)[0]
    assert _attention_forward(uneven.trace) == 2 * ATTENTION_PER_LAYER == _closed(2)[1]
    # interleaved 1F1B, 4 blocks in 4 stages: rank 0 holds stages 0 and 2, a block each
    four = dataclasses.replace(TINY, n_layers=4)
    interleaved = trace_pipeline_step(four, B, S, 2, M, "interleaved-1f1b", stage=0,
                                      within=Layout(cp=CP))
    assert interleaved.stages == (0, 2)
    assert _ring_sent(interleaved.trace) == 2 * RING_PER_LAYER == _closed(2)[0]
    assert _attention_forward(interleaved.trace) == 2 * ATTENTION_PER_LAYER


def test_mixed_bf16_workload_through_the_cli_path() -> None:
    work = resolve_workload("tiny", batch=B, seq=S, precision="mixed-bf16", device="fake",
                            layout=resolve_layout(cp=CP, pp=2, microbatches=M))
    run = trace_workload(work)
    # bf16 keys and values, fp32 gradients: K = 4,096 a micro-batch and layer, G = 8,192:
    # (cp − 1)·K forward, (cp − 1)·K + cp·G backward = 2·4,096 + 2·8,192 = 24,576; 2 of them
    assert _ring_sent(run.trace) == M * 24_576 == _closed(1, 2, autocast=True)[0]
    assert _attention_forward(run.trace) == ATTENTION_PER_LAYER
    assert any("ring attention" in note for note in run.assumptions)
    assert run.work.layout.count == 4


def test_cp_that_does_not_cut_the_sequence_is_refused() -> None:
    with pytest.raises(InputError, match="does not divide by 6"):
        resolve_workload("tiny", batch=B, seq=S, device="fake",
                         layout=resolve_layout(cp=3, pp=2, microbatches=M))
    with pytest.raises(InputError, match="does not divide by 6"):
        trace_pipeline_step(TINY, B, S, 2, M, "1f1b", within=Layout(cp=3))


def test_replicas_beside_cp_inside_stages() -> None:
    # --dp 2 --cp 2 --pp 2: HSDP on (dp, cp) within each stage, the mesh (pp, dp, cp) with
    # cp ranks 1 apart, dp 2, pp 4
    step = trace_pipeline_step(TINY, B, S, 2, M, "1f1b", stage=0, within=Layout(dp=2, cp=CP))
    by_stride: dict[tuple[str, int], int] = {}
    for record in step.trace.records:
        if record.collective is not None:
            key = (record.collective.kind, record.collective.rank_stride)
            by_stride[key] = by_stride.get(key, 0) + record.collective.size_bytes
    # the ring over cp as without replicas
    assert _ring_sent(step.trace) == RING_PER_LAYER
    # the stage (the embedding, 8192 values, and block 0, 36,992) sharded over the 2 cp
    # ranks only, its gradients reduce-scattered over them once, and each half all-reduced
    # over the 2 replicas: (8192 + 36,992) · 4 / 2 = 90,368 bytes
    assert step.params_per_rank * CP == 8_192 + 36_992
    assert by_stride[("reduce-scatter", 1)] == F32 * (8_192 + 36_992)
    assert by_stride[("all-reduce", 2)] == F32 * (8_192 + 36_992) // 2 == 90_368
    # 2 activations sent, 2 gradients received over pp: 4 messages of 2·16·64·4 bytes
    assert by_stride[("send-recv", 4)] == 4 * 8_192


@pytest.mark.parametrize(("schedule", "held"), [("gpipe", (0,)), ("looped-bfs", (0, 2)),
                                                ("interleaved-zb", (0, 2)), ("zbv", (0, 3))])
def test_every_schedule_runs_the_ring_in_its_stages(schedule: str, held: tuple[int, ...]
                                                    ) -> None:
    # 4 blocks: rank 0 of 2 holds 2 of them under every schedule (one stage of 2 blocks, or
    # two stages of 1: interleaved r and r + 2, ZBV's V 0 and 3); zero bubble splits each
    # backward into its input and weight halves, the ring's backward in the first
    four = dataclasses.replace(TINY, n_layers=4)
    step = trace_pipeline_step(four, B, S, 2, M, schedule, stage=0, within=Layout(cp=CP))
    assert step.stages == held
    assert dict(step.trace.uncovered) == {}
    assert _ring_sent(step.trace) == 2 * RING_PER_LAYER == _closed(2)[0]
    assert _attention_forward(step.trace) == 2 * ATTENTION_PER_LAYER == _closed(2)[1]
