"""Expert parallelism on the fake process group (issue 38, item 5): ``--ep N`` shards a tiny HF
Mixtral's experts and moves its token-slots by ``all_to_all_single`` split by the stated
routing; the bytes of each all-to-all, per rank per layer, derived by hand here; forward,
backward, and the forward's again under recomputation; priced on the links the ep group
crosses.

The tiny Mixtral: hidden d = 40, 2 layers, E = 4 experts, top-k = 2, expert width 24; a step of
batch 2 × seq 12 = 24 tokens, 48 token-slots per layer, hidden states fp32 (4 bytes).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.roofline.collectives import CollectiveKind, collective_time
from tensorledger.roofline.model import predict_op
from tensorledger.workload import resolve_routing, resolve_workload, trace_workload
from tensorledger.workload.layout import Layout, resolve_layout
from tensorledger.workload.parallel import trace_parallel_step

pytest.importorskip("transformers")

D, LAYERS, E, K, WIDTH = 40, 2, 4, 2, 24
B, S = 2, 12
T = B * S  # 24 tokens
SLOTS = T * K  # 48 token-slots a layer
F32 = 4
ROW = D * F32  # 160 bytes a token-slot
MIXTRAL = {"model_type": "mixtral", "vocab_size": 97, "hidden_size": D,
           "intermediate_size": WIDTH, "num_hidden_layers": LAYERS, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 12, "num_local_experts": E,
           "num_experts_per_tok": K, "max_position_embeddings": 64}


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL))
    return path


def _trace(tmp_path: Path, routing: str | None = None, **layout: Any) -> Any:
    work = resolve_workload(str(_config(tmp_path)), batch=B, seq=S, step="train",
                            precision="fp32", device="fake", layout=resolve_layout(**layout),
                            routing=resolve_routing(routing))
    return trace_workload(work)


def _all_to_alls(run: Any, phase: str | None = None) -> list[Any]:
    return [r for r in run.trace.records if r.collective is not None
            and r.collective.kind == "all-to-all" and (phase is None or r.phase == phase)]


def _tokens(records: list[Any]) -> list[Any]:
    """The all-to-alls of token-slots (not of the 4 int64 counts)."""
    return [r for r in records if r.collective.size_bytes != E * 8]


@pytest.mark.parametrize("ep", [2, 4])
def test_balanced_all_to_all_bytes_by_hand(tmp_path: Path, ep: int) -> None:
    run = _trace(tmp_path, ep=ep)
    forward = _all_to_alls(run, "forward")
    # per layer: the counts (E int64, E / EP to each rank), dispatch, combine
    assert len(forward) == 3 * LAYERS
    counts = [r for r in forward if r.collective.size_bytes == E * 8]
    assert [r.collective.bytes_sent for r in counts] == [E * 8 * (ep - 1) // ep] * LAYERS
    tokens = _tokens(forward)
    # balanced: 12 slots an expert, E / EP experts a rank: each rank's share of the 48 slots
    # leaves it, (EP − 1) / EP of them: 48 · 160 · (EP − 1) / EP = 3,840 (EP 2), 5,760 (EP 4)
    each_way = SLOTS * ROW * (ep - 1) // ep
    assert each_way == {2: 3_840, 4: 5_760}[ep]
    assert [(r.collective.size_bytes, r.collective.bytes_sent, r.collective.bytes_received)
            for r in tokens] == [(SLOTS * ROW, each_way, each_way)] * 2 * LAYERS
    assert {r.module for r in tokens} == {f"DistributedDataParallel.module.model.layers.{i}"
                                          ".mlp.experts" for i in range(LAYERS)}
    # backward: each token all-to-all's gradient, splits swapped (the counts have none)
    backward = _all_to_alls(run, "backward")
    assert [(r.collective.bytes_sent, r.collective.bytes_received) for r in backward] == [
        (each_way, each_way)] * 2 * LAYERS


def test_a_skewed_histogram_splits_unevenly(tmp_path: Path) -> None:
    routing = tmp_path / "routing.json"
    routing.write_text(json.dumps([20, 12, 10, 6]))  # 48 slots
    run = _trace(tmp_path, str(routing), ep=2)
    tokens = _tokens(_all_to_alls(run, "forward"))
    # rank 0 holds experts 0 and 1 (20 + 12 = 32 slots of its own tokens): it sends the 16
    # slots of experts 2 and 3 and receives the other rank's 32 for experts 0 and 1 (every
    # rank routes alike); the combine sends them back
    dispatch, combine = tokens[0].collective, tokens[1].collective
    assert (dispatch.bytes_sent, dispatch.bytes_received) == (16 * ROW, 32 * ROW)
    assert (combine.bytes_sent, combine.bytes_received) == (32 * ROW, 16 * ROW)
    # the experts' products run on the 32 + 32 = 64 slots this rank's experts receive
    rows = {r.input_shapes[0][0] for r in run.trace.records
            if r.phase == "forward" and r.op == "aten._grouped_mm.default"}
    assert rows == {64}


def test_each_rank_holds_its_experts(tmp_path: Path) -> None:
    single = _trace(tmp_path)
    laid_out = _trace(tmp_path, ep=2)
    # a layer's experts: gate_up 4 · 48 · 40 + down 4 · 40 · 24 = 11,520 values; EP 2 keeps
    # half of them, 2 layers → 11,520 fewer values a rank
    experts = E * (2 * WIDTH * D + D * WIDTH)
    assert experts == 11_520
    assert sum(single.param_numels) - sum(laid_out.param_numels) == LAYERS * experts // 2
    assert laid_out.model_params == single.model_params  # the whole model, counted once
    # DDP over ep all-reduces the non-expert gradients only
    reduced = [r.collective for r in laid_out.trace.records
               if r.collective is not None and r.collective.kind == "all-reduce"]
    assert sum(c.size_bytes for c in reduced) == F32 * (sum(single.param_numels)
                                                        - LAYERS * experts)


def test_recomputation_repeats_the_forward_all_to_alls() -> None:
    from tensorledger.trace.grouped import GroupedMMMode
    from tests.distributed.ep_torchrun import TOKENS_SHAPE, loss, mixtral, routed

    def checkpointed() -> torch.nn.Module:
        model = mixtral()
        model.activation_checkpointing_enable(  # type: ignore[operator]
            activation_checkpointing_kwargs={"use_reentrant": False})
        return model

    def modes() -> ExitStack:
        stack = ExitStack()
        stack.enter_context(GroupedMMMode())
        stack.enter_context(routed())
        return stack

    runs = {name: trace_parallel_step(build, lambda: torch.zeros(TOKENS_SHAPE,
                                                                 dtype=torch.long),
                                      Layout(ep=2), loss=loss, modes=modes)
            for name, build in (("plain", mixtral), ("checkpointed", checkpointed))}
    phases = {name: [r.phase for r in step.trace.records
                     if r.collective is not None and r.collective.kind == "all-to-all"]
              for name, step in runs.items()}
    # per layer 3 forward (counts, dispatch, combine) and 2 backward; recomputing a layer in
    # backward runs its 3 again there
    assert phases["plain"].count("forward") == phases["checkpointed"].count("forward") == 6
    assert phases["plain"].count("backward") == 4
    assert phases["checkpointed"].count("backward") == 4 + 6


def test_all_to_alls_are_priced_on_the_links_of_the_ep_group(tmp_path: Path) -> None:
    h100 = get_hardware("h100")
    run = _trace(tmp_path, ep=4)
    record = _tokens(_all_to_alls(run, "forward"))[0]
    assert record.collective.rank_stride == 1  # ep is the innermost dimension here
    priced = predict_op(0, record, h100)
    # balanced: an even all-to-all of the 7,680-byte buffer over 4 ranks on one node
    assert priced.link_time_s == collective_time(CollectiveKind.ALL_TO_ALL, SLOTS * ROW, 4,
                                                 h100, ranks_per_node=4).time_s > 0


def test_an_uneven_all_to_all_is_priced_by_its_busier_direction(tmp_path: Path) -> None:
    h100 = get_hardware("h100")
    routing = tmp_path / "routing.json"
    routing.write_text(json.dumps([20, 12, 10, 6]))
    run = _trace(tmp_path, str(routing), ep=2)
    dispatch = _tokens(_all_to_alls(run, "forward"))[0]
    # it receives 32 slots (5,120 bytes) and sends 16: as long as the even all-to-all of 2
    # ranks whose rank receives 5,120 bytes, a buffer of 2 · 5,120 = 10,240
    assert predict_op(0, dispatch, h100).link_time_s == collective_time(
        CollectiveKind.ALL_TO_ALL, 2 * 32 * ROW, 2, h100, ranks_per_node=2).time_s


def test_ep_needs_experts_it_divides(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--ep 3 does not divide .* 4 routed experts"):
        resolve_workload(str(_config(tmp_path)), batch=B, seq=S, device="fake",
                         layout=resolve_layout(ep=3))
    with pytest.raises(InputError, match="--ep 2 shards routed experts; 'tiny' has none"):
        resolve_workload("tiny", layout=resolve_layout(ep=2))
    with pytest.raises(InputError, match="--ep 2 beside --dp 2 is not laid out yet"):
        resolve_layout(ep=2, dp=2)
    assert resolve_layout(ep=2, fsdp=4).mesh_dims == (("fsdp", 4), ("ep", 2))
    assert resolve_layout(ep=2, fsdp=4).dim_strides == {1: "ep", 2: "fsdp"}


def test_the_groups_fsdp_shards_over_are_named(tmp_path: Path) -> None:
    from tensorledger.trace.aggregate import communication

    layout = resolve_layout(ep=2, fsdp=2)
    # ep innermost (stride 1, 2 ranks), fsdp 2 apart, fsdp·ep the 4 consecutive ranks
    assert layout.group_names == {1: "ep", 2: "fsdp", (1, 4): "fsdp·ep"}
    run = _trace(tmp_path, ep=2, fsdp=2)
    dims = {(c.kind, c.mesh_dim) for c in communication(run.trace, layout.group_names)}
    assert dims == {("all-to-all", "ep"), ("all-gather", "fsdp"), ("all-gather", "fsdp·ep"),
                    ("reduce-scatter", "fsdp"), ("reduce-scatter", "fsdp·ep")}


def test_experts_called_by_keyword_are_routed_too() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from tensorledger.trace.grouped import GroupedMMMode
    from tensorledger.workload.expert_parallel import apply_expert_parallel, expert_modules
    from tensorledger.workload.parallel import fake_process_group
    from tensorledger.workload.routed import RoutedMode
    from tests.distributed.ep_torchrun import mixtral

    with fake_process_group(2), torch._subclasses.fake_tensor.FakeTensorMode(), \
            GroupedMMMode(), RoutedMode(E, K):
        model = mixtral()
        apply_expert_parallel(model, init_device_mesh("cpu", (2,)))
        (_, experts), *_ = expert_modules(model)
        hidden = torch.zeros(T, D)
        index = torch.topk(torch.zeros(T, E), K).indices  # the routing's: 12 slots an expert
        out = experts(hidden_states=hidden, top_k_index=index, top_k_weights=torch.ones(T, K))
        assert tuple(out.shape) == (T, D)
        assert tuple(experts.gate_up_proj.shape) == (E // 2, 2 * WIDTH, D)


@pytest.mark.parametrize("experts", ["eager", "grouped_mm"])
@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"])
def test_every_hf_moe_type_trains_under_ep(tmp_path: Path, family: str, experts: str) -> None:
    from tests.workload.test_moe_routing import OTHERS

    config = (MIXTRAL if family == "mixtral" else OTHERS[family]) | {
        "experts_implementation": experts}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    routed = config.get("n_routed_experts", E)
    work = resolve_workload(str(path), batch=B, seq=S, step="train", precision="fp32",
                            device="fake", layout=resolve_layout(ep=2))
    run = trace_workload(work)
    assert not run.trace.uncovered
    # balanced over EP 2: half of each layer's 48 slots leave, d = 40 fp32 each; the
    # combine returns them (DeepSeek-V3's first layer is dense: 2 of its 3 are routed)
    layers = config["num_hidden_layers"] - config.get("first_k_dense_replace", 0)
    tokens = [r.collective for r in _tokens(_all_to_alls(run, "forward"))
              if r.collective.size_bytes != routed * 8]
    assert [(c.size_bytes, c.bytes_sent, c.bytes_received) for c in tokens] == [
        (SLOTS * ROW, SLOTS * ROW // 2, SLOTS * ROW // 2)] * 2 * layers


def test_hsdp_beside_ep(tmp_path: Path) -> None:
    """--dp 2 --fsdp 2 --ep 2 (8 ranks): the non-experts' FSDP2 over the 2-D (dp, fsdp·ep)
    mesh, the experts' over (dp, fsdp): each reduce-scatters within its shard group and
    all-reduces across the 2 replicas."""
    run = _trace(tmp_path, dp=2, fsdp=2, ep=2)
    groups = {(r.collective.kind, r.collective.group_size, r.collective.rank_stride)
              for r in run.trace.records if r.collective is not None and r.phase == "backward"}
    # mesh (dp 2, fsdp 2, ep 2): ep ranks 1 apart, fsdp 2 apart, dp 4 apart
    assert ("reduce-scatter", 4, 1) in groups  # fsdp·ep: the non-experts' shards
    assert ("reduce-scatter", 2, 2) in groups  # fsdp: the experts' shards
    assert ("all-reduce", 2, 4) in groups  # dp: the replicas
    assert ("all-to-all", 2, 1) in groups  # ep
    # a rank holds rank 0's dim-0 shard of each tensor (FSDP2 rounds rows up): the
    # non-experts' over fsdp·ep = 4 ranks, the experts' E/2 = 2 rows (ep) over fsdp = 2
    from tests.distributed.ep_torchrun import mixtral

    with torch.device("meta"):
        model = mixtral()
    expected = 0
    for name, p in model.named_parameters():
        rows, rest = p.shape[0], p[0].numel()
        ranks, rows = (2, rows // 2) if ".experts." in name else (4, rows)
        expected += -(-rows // ranks) * rest
    assert sum(run.param_numels) == expected
