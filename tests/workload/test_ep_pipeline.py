"""Expert parallelism inside pipeline stages (issue 38): ``--ep 2 --pp 2 --fsdp 2`` on the
reference tiny-moe, fake tensors; the stage's MoE layer shards its experts over its ep ranks and
moves its token-slots by all-to-all within them, once per micro-batch.

tiny-moe: d = 64, 2 layers (stage 0 holds block 0), E = 6 routed experts of width 32, top-k 2.
A step of batch 4 × seq 24 in 2 micro-batches: 2 · 24 = 48 tokens, 96 token-slots a
micro-batch; fp32 hidden states, 64 · 4 = 256 bytes a slot.  Routing skew=1: expert 0 takes
round(2 · 96 / 6) = 32 slots, the other five 64 evenly: 13, 13, 13, 13, 12.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tensorledger.errors import InputError
from tensorledger.models import get_preset
from tensorledger.workload import resolve_routing, resolve_workload, trace_workload
from tensorledger.workload.layout import Layout, resolve_layout

D, E, K, WIDTH = 64, 6, 2, 32
B, S, M = 4, 24, 2
TOKENS = B // M * S  # 48 tokens a micro-batch
SLOTS = TOKENS * K  # 96
ROW = D * 4  # 256 bytes a slot (fp32)
SKEWED = (32, 13, 13, 13, 13, 12)  # skew=1: 32 = round(2 · 96 / 6), then 64 over 5
EP_LAYOUT = {"ep": 2, "pp": 2, "fsdp": 2, "microbatches": M}


def _trace(routing: str | None = None, **layout: Any) -> Any:
    work = resolve_workload("tiny-moe", batch=B, seq=S, step="train", precision="fp32",
                            device="fake", layout=resolve_layout(**layout),
                            routing=resolve_routing(routing))
    return trace_workload(work)


def _all_to_alls(run: Any, phase: str) -> list[Any]:
    return [r.collective for r in run.trace.records if r.collective is not None
            and r.collective.kind == "all-to-all" and r.phase == phase]


def test_skewed_all_to_all_bytes_by_hand() -> None:
    assert sum(SKEWED) == SLOTS
    run = _trace("skew=1", **EP_LAYOUT)
    forward = _all_to_alls(run, "forward")
    # per micro-batch, in the one MoE layer of stage 0: the counts, dispatch, combine
    assert len(forward) == 3 * M
    # rank 0 of ep holds experts 0, 1, 2: 32 + 13 + 13 = 58 of its 96 slots stay, 38 leave;
    # the other ep rank routes alike and sends it 58
    kept, leave = 58, 38
    assert kept + leave == SLOTS
    counts = (E * 8, E // 2 * 8, E // 2 * 8)  # 6 int64, 3 of them to the other rank
    dispatch = (SLOTS * ROW, leave * ROW, kept * ROW)  # (24,576, 9,728, 14,848)
    combine = (2 * kept * ROW, kept * ROW, leave * ROW)  # sends back the 116 it ran
    assert dispatch == (24_576, 9_728, 14_848) and combine == (29_696, 14_848, 9_728)
    assert [(c.size_bytes, c.bytes_sent, c.bytes_received) for c in forward] == [
        counts, dispatch, combine] * M
    assert {c.group_size for c in forward} == {2}
    # backward: each token all-to-all's gradient, the splits swapped (combine's first)
    backward = _all_to_alls(run, "backward")
    assert [(c.bytes_sent, c.bytes_received) for c in backward] == [
        (leave * ROW, kept * ROW), (kept * ROW, leave * ROW)] * M
    # the experts' grouped GEMMs run the 2 · 58 = 116 slots this rank's experts receive
    rows = {r.input_shapes[0][0] for r in run.trace.records
            if r.phase == "forward" and r.op == "aten._grouped_mm.default"}
    assert rows == {2 * kept}


def test_ep_group_is_within_the_stage() -> None:
    layout = resolve_layout(**EP_LAYOUT)
    # mesh (pp 2, fsdp 2, ep 2): ep ranks 1 apart, fsdp 2 apart, pp 4 apart
    assert layout.mesh_dims == (("pp", 2), ("fsdp", 2), ("ep", 2))
    run = _trace(**EP_LAYOUT)
    strides = {(r.collective.kind, r.collective.group_size, r.collective.rank_stride)
               for r in run.trace.records if r.collective is not None}
    assert ("all-to-all", 2, 1) in strides  # ep: the two ranks of this stage
    assert ("send-recv", 2, 4) in strides  # pp: the next stage, 4 ranks on
    assert ("reduce-scatter", 2, 2) in strides  # the experts' shards over fsdp
    assert ("reduce-scatter", 4, 1) in strides  # the others' over fsdp·ep


def test_each_rank_holds_its_stages_experts() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tensorledger.trace.storage import local_tensor
    from tensorledger.workload.parallel import build_mesh, fake_process_group
    from tensorledger.workload.pipeline import build_pipeline_rank, resolve_schedule
    from tensorledger.workload.routed import RoutedMode

    config = get_preset("tiny-moe")
    layout = Layout(**EP_LAYOUT)
    within = dataclasses.replace(layout, pp=1, microbatches=1)
    with fake_process_group(layout.count), FakeTensorMode(), RoutedMode(E, K):
        (stage,), _ = build_pipeline_rank(config, 2, 0, 1, resolve_schedule("1f1b"), M,
                                          B // M, S, within=within, mesh=build_mesh(layout))
        experts = stage.get_submodule("blocks.0.mlp.experts")
        shapes = {name: tuple(local_tensor(p).shape) for name, p in experts.named_parameters()}
    # E / EP = 3 experts a rank, whose 3 rows FSDP2 splits over fsdp = 2 ranks: rank 0 holds
    # ⌈3 / 2⌉ = 2 of them; gate and up (d, f) = 64 × 32, down 32 × 64
    assert shapes == {"gate": (2, D, WIDTH), "up": (2, D, WIDTH), "down": (2, WIDTH, D)}
    expert_bytes = 3 * 2 * D * WIDTH * 4
    assert expert_bytes == 49_152  # 3 matrices · 2 experts · 2,048 values · 4 bytes


def test_rank_parameters_by_a_second_path() -> None:
    """The rank's parameter values: the stage's tensors from a meta model, each rank's dim-0
    shard rounded up (FSDP2): experts E / EP rows over fsdp, the rest over fsdp·ep."""
    from tensorledger.models import build_model
    from tensorledger.workload.pipeline import split_stages

    run = _trace(**EP_LAYOUT)
    stage = split_stages(build_model(get_preset("tiny-moe"), "meta"), 2)[0]
    expected = 0
    for name, p in stage.named_parameters():
        rows, rest = p.shape[0], p[0].numel()
        ranks, rows = (2, rows // 2) if ".experts." in name else (4, rows)
        expected += -(-rows // ranks) * rest
    assert sum(run.param_numels) == expected
    # the whole model counted once
    from tensorledger.napkin.transformer import parameter_count

    assert run.model_params == parameter_count(get_preset("tiny-moe")).total_params


def test_a_stage_of_dense_layers_has_no_all_to_all() -> None:
    """A stage whose layers are all dense (DeepSeek-V3's first ones) holds no experts: it
    is laid out without them, its MoE stages with them."""
    from tensorledger.workload.pipeline import trace_pipeline_step

    config = get_preset("tiny-moe")
    assert config.moe is not None
    dense_first = dataclasses.replace(config, moe=dataclasses.replace(config.moe,
                                                                      first_dense_layers=1))
    within = Layout(ep=2, fsdp=2)
    steps = [trace_pipeline_step(dense_first, B, S, 2, M, "1f1b", stage=stage, within=within,
                                 precision="fp32") for stage in (0, 1)]
    kinds = [{r.collective.kind for r in step.trace.records if r.collective is not None}
             for step in steps]
    assert "all-to-all" not in kinds[0]
    assert "all-to-all" in kinds[1]


def test_ep_beside_pp_needs_fsdp() -> None:
    with pytest.raises(InputError, match=r"--ep 2 beside --pp 2 .* give --fsdp N"):
        resolve_layout(ep=2, pp=2)
    with pytest.raises(InputError, match=r"--ep 4 does not divide tiny-moe's 6 routed"):
        resolve_workload("tiny-moe", batch=2, layout=resolve_layout(ep=4, pp=2, fsdp=2,
                                                             microbatches=2))


def test_capacity_buffer_travels_evenly() -> None:
    """With a capacity factor each expert's buffer is C slots from every rank: one even
    all-to-all of E / EP · C slots to each rank.  cf 1.5: C = ⌈1.5 · 48 · 2 / 6⌉ = 24."""
    from tensorledger.workload.pipeline import trace_pipeline_step

    config = get_preset("tiny-moe")
    assert config.moe is not None
    capped = dataclasses.replace(config, moe=dataclasses.replace(config.moe,
                                                                 capacity_factor=1.5))
    capacity = 24
    assert capped.moe is not None and capped.moe.capacity(TOKENS) == capacity
    step = trace_pipeline_step(capped, B, S, 2, M, "1f1b", within=Layout(ep=2, fsdp=2),
                               precision="fp32")
    forward = [r.collective for r in step.trace.records if r.collective is not None
               and r.collective.kind == "all-to-all" and r.phase == "forward"]
    # E · C = 144 slots of 256 bytes, half of them to the other rank; dispatch and combine
    buffer = E * capacity * ROW
    assert buffer == 36_864
    assert [(c.size_bytes, c.bytes_sent, c.bytes_received) for c in forward] == [
        (buffer, buffer // 2, buffer // 2)] * 2 * M
    # each local expert runs its C slots from each of the 2 ranks
    shapes = {r.input_shapes[0] for r in step.trace.records
              if r.phase == "forward" and r.op == "aten.bmm.default"
              and r.module.endswith("experts")}
    assert shapes == {(E // 2, 2 * capacity, D), (E // 2, 2 * capacity, WIDTH)}
