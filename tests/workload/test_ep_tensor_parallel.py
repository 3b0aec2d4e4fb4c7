"""Expert parallelism beside tensor parallelism (issue 38; torchtitan's ETP = 1): the reference
tiny-moe's attention and shared experts split over ``tp``, its router and routed experts whole
on every tp rank, the routed experts sharded over ``ep`` (the ranks of one tp index).

tiny-moe: d = 64, 2 layers, E = 6 routed experts of width 32, top-k 2, one shared expert of
width 48.  A step of batch 2 × seq 20 = 40 tokens: 80 token-slots a layer, fp32, 256 bytes a
slot; balanced routing: 14, 14, 13, 13, 13, 13 slots.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tensorledger.errors import InputError
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout

D, E, K, WIDTH, SHARED, LAYERS = 64, 6, 2, 32, 48, 2
B, S = 2, 20
TOKENS = B * S  # 40
SLOTS = TOKENS * K  # 80
ROW = D * 4  # 256 bytes a slot
STREAM = TOKENS * D * 4  # 10,240 bytes: the residual stream of the step, fp32


def _trace(**layout: Any) -> Any:
    work = resolve_workload("tiny-moe", batch=B, seq=S, step="train", precision="fp32",
                            device="fake", layout=resolve_layout(**layout))
    return trace_workload(work)


def _collectives(run: Any, kind: str, phase: str) -> list[Any]:
    return [r for r in run.trace.records if r.collective is not None
            and r.collective.kind == kind and r.phase == phase]


def test_all_to_all_bytes_are_those_of_ep_alone() -> None:
    """Every tp rank routes the whole sequence: its ep group moves what EP alone moves."""
    run = _trace(ep=2, tp=2)
    tokens = [r.collective for r in _collectives(run, "all-to-all", "forward")
              if r.collective.size_bytes != E * 8]
    # rank 0 of ep holds experts 0, 1, 2: 14 + 14 + 13 = 41 slots stay, 39 leave; it runs 82
    kept, leave = 41, 39
    assert kept + leave == SLOTS
    assert [(c.size_bytes, c.bytes_sent, c.bytes_received) for c in tokens] == [
        (SLOTS * ROW, leave * ROW, kept * ROW), (2 * kept * ROW, kept * ROW, leave * ROW)
    ] * LAYERS
    assert (SLOTS * ROW, leave * ROW, kept * ROW) == (20_480, 9_984, 10_496)
    # ep is laid out outside tp: its ranks are tp = 2 apart
    assert {c.rank_stride for c in tokens} == {2}


def test_tp_reduces_attention_and_shared_experts_only() -> None:
    run = _trace(ep=2, tp=2)
    forward = _collectives(run, "all-reduce", "forward")
    # the embedding's rows (1), and per block the attention's output and the shared
    # experts' down projection (2 · 2): 5 all-reduces of the 40 × 64 fp32 stream
    assert [r.collective.size_bytes for r in forward] == [STREAM] * (1 + 2 * LAYERS)
    assert STREAM == 10_240
    assert sum(".mlp.shared" in r.module for r in forward) == LAYERS
    # backward: the input gradient of each block's attention and shared experts (once each,
    # their inputs taken as one replicated DTensor) and the head's
    backward = [r for r in _collectives(run, "all-reduce", "backward")
                if r.collective.group_size == 2 and r.collective.rank_stride == 1]
    assert [r.collective.size_bytes for r in backward] == [STREAM] * (1 + 2 * LAYERS)


def test_experts_whole_on_each_tp_rank_and_shared_split() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tensorledger.models import build_model, get_preset
    from tensorledger.trace.storage import local_tensor
    from tensorledger.workload.parallel import build_mesh, fake_process_group, parallelize
    from tensorledger.workload.routed import RoutedMode

    layout = resolve_layout(ep=2, tp=2)
    with fake_process_group(layout.count), FakeTensorMode(), RoutedMode(E, K):
        model = parallelize(build_model(get_preset("tiny-moe"), "cpu"), layout,
                            build_mesh(layout))
        shapes = {name.removeprefix("module.blocks.0.mlp."): tuple(local_tensor(p).shape)
                  for name, p in model.named_parameters() if ".blocks.0.mlp." in name}
    # 3 whole experts of the 6 (ep), the router whole, the shared expert's 48 split over tp
    assert shapes == {"router.proj.weight": (E, D),
                      "experts.gate": (3, D, WIDTH), "experts.up": (3, D, WIDTH),
                      "experts.down": (3, WIDTH, D),
                      "shared.gate.weight": (SHARED // 2, D), "shared.up.weight": (SHARED // 2, D),
                      "shared.down.weight": (D, SHARED // 2)}


def test_ep_tp_inside_pipeline_stages() -> None:
    run = _trace(ep=2, tp=2, fsdp=2, pp=2, microbatches=2)
    kinds = {(r.collective.kind, r.collective.group_size, r.collective.rank_stride)
             for r in run.trace.records if r.collective is not None}
    # mesh (pp 2, fsdp 2, ep 2, tp 2): tp 1 apart, ep 2, fsdp 4, pp 8
    assert {("all-to-all", 2, 2), ("all-reduce", 2, 1), ("send-recv", 2, 8)} <= kinds
    assert not run.trace.uncovered


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--ep 2 beside --sp is not laid out yet"):
        resolve_layout(ep=2, tp=2, sp=True)
    with pytest.raises(InputError, match="no plan for the reference mixture of experts "
                                         "without --ep"):
        _trace(tp=2)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "mixtral", "vocab_size": 97, "hidden_size": 40,
        "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 12, "num_local_experts": 4,
        "num_experts_per_tok": 2, "max_position_embeddings": 64}))
    with pytest.raises(InputError, match="--ep 2 beside --tp 2 is planned for the reference"):
        resolve_workload(str(config), batch=2, seq=4, layout=resolve_layout(ep=2, tp=2))


def test_a_mesh_built_under_the_fake_and_routed_modes_holds_real_ranks() -> None:
    """The mesh's rank table stays a real tensor inside FakeTensorMode and the routed mode: a
    fake one gave rank 0's tp coordinate as whatever its memory held (140,202,865,532,240 once,
    a failure that came and went with what the tests before had freed)."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from tensorledger.workload.parallel import build_mesh, fake_process_group
    from tensorledger.workload.routed import RoutedMode

    layout = resolve_layout(ep=2, tp=2)
    with fake_process_group(layout.count):
        with FakeTensorMode(), RoutedMode(E, K):
            mesh = build_mesh(layout)
            coordinate = mesh.get_coordinate()
        # rank 0 of a 2 (ep) × 2 (tp) mesh: coordinate (0, 0)
        assert not isinstance(mesh.mesh, FakeTensor) and mesh.mesh.tolist() == [[0, 1], [2, 3]]
        assert tuple(coordinate or ()) == (0, 0)
