"""The fake process group, the mesh, the data-parallel wrapping and the traced step's figures,
each by hand on small modules (issue 42's mutation run of ``tensorledger.workload.parallel``).
Real CPU tensors where a value is read (DDP's averaged gradients), fake ones in the step."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from tensorledger.errors import InputError, TensorLedgerError, TraceError
from tensorledger.workload import parallel as par
from tensorledger.workload.layout import Layout
from tensorledger.workload.parallel import (
    build_mesh,
    fake_process_group,
    grad_bytes,
    make_optimizer,
    parallelize,
    shard_units,
    trace_parallel_step,
)
from tests.distributed.parallel_torchrun import Mlp

F32 = 4


# ---- the group and the mesh ---------------------------------------------------------------

@pytest.mark.parametrize(("world", "rank", "says"), [
    (0, 0, "got 0"), (True, 0, "got True"), (2.0, 0, "got 2.0"),
    (4, 4, "a rank of a group of 4 is 0 to 3, got 4"), (4, -1, "got -1"),
    (4, True, "got True"), (4, 1.0, "got 1.0"),
])
def test_a_group_needs_a_whole_size_and_a_rank_within_it(world: Any, rank: Any,
                                                          says: str) -> None:
    with pytest.raises(InputError, match=says), fake_process_group(world, rank):
        pass  # pragma: no cover
    assert not dist.is_initialized()


def test_a_fake_group_is_the_rank_asked_for_and_torn_down() -> None:
    with fake_process_group(4, 3) as group:
        assert (group.size(), group.rank()) == (4, 3)  # the last rank of 4
        assert dist.get_backend(group) == "fake"
        with pytest.raises(TensorLedgerError, match="already initialised"), \
                fake_process_group(2):
            pass  # pragma: no cover
    assert not dist.is_initialized()
    with fake_process_group(1) as group:  # one rank: the least group
        assert (group.size(), group.rank()) == (1, 0)


def test_a_torch_without_distributed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.distributed, "is_available", lambda: False)
    with pytest.raises(TensorLedgerError, match=r"no torch\.distributed"):
        par._distributed()


def test_the_sharding_caches_are_emptied_each(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    cleared: list[str] = []

    def cache(name: str) -> SimpleNamespace:
        return SimpleNamespace(cache_clear=lambda: cleared.append(name))

    propagator = DTensor._op_dispatcher.sharding_propagator
    monkeypatch.setattr(propagator, "propagate_op_sharding", cache("op"))
    monkeypatch.setattr(ShardingPropagator, "_propagate_tensor_meta_cached", cache("meta"))
    monkeypatch.setattr(torch._C, "_clear_DTensor_sharding_propagator_cache",
                        lambda: cleared.append("native"))
    par._forget_sharding()
    assert cleared == ["op", "meta", "native"]
    monkeypatch.delattr(propagator, "propagate_op_sharding")  # none there: nothing to clear
    par._forget_sharding()
    assert cleared == ["op", "meta", "native", "meta", "native"]
    # a torch with none of them: nothing is called, nothing fails
    monkeypatch.setattr(propagator, "propagate_op_sharding", object(), raising=False)
    monkeypatch.delattr(ShardingPropagator, "_propagate_tensor_meta_cached")
    monkeypatch.delattr(torch._C, "_clear_DTensor_sharding_propagator_cache")
    par._forget_sharding()
    assert cleared == ["op", "meta", "native", "meta", "native"]  # nothing more


def test_the_group_is_left_with_its_caches_emptied(monkeypatch: pytest.MonkeyPatch) -> None:
    forgotten: list[bool] = []
    monkeypatch.setattr(par, "_forget_sharding", lambda: forgotten.append(
        dist.is_initialized()))
    with fake_process_group(2):
        assert forgotten == []
    assert forgotten == [False]  # after the group is destroyed


def test_the_mesh_names_each_degree_above_one() -> None:
    with pytest.raises(TensorLedgerError, match="build_mesh needs a process group"):
        build_mesh(Layout(fsdp=2))
    with fake_process_group(1):
        mesh = build_mesh(Layout())
        assert (mesh.mesh_dim_names, mesh.size(), mesh.device_type) == (("dp",), 1, "cpu")
    with fake_process_group(12):
        mesh = build_mesh(Layout(dp=2, fsdp=3, tp=2))
        assert mesh.mesh_dim_names == ("dp", "fsdp", "tp")
        assert (mesh["dp"].size(), mesh["fsdp"].size(), mesh["tp"].size()) == (2, 3, 2)
    with fake_process_group(4):
        with pytest.raises(InputError, match="the layout FSDP ZeRO-3 × 2 needs 2 ranks; the "
                                             "process group has 4"):
            build_mesh(Layout(fsdp=2))
        with pytest.raises(InputError, match="the layout single device needs 1 ranks"):
            build_mesh(Layout())


def test_the_mesh_is_built_on_real_tensors_under_a_fake_mode() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with fake_process_group(4), FakeTensorMode():
        mesh = build_mesh(Layout(fsdp=2, tp=2))
    # the rank table, real and read as numbers
    assert mesh.mesh.tolist() == [[0, 1], [2, 3]]


# ---- what FSDP wraps -----------------------------------------------------------------------

def test_fsdp_units_are_list_entries_innermost_first_else_children_with_parameters() -> None:
    inner = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
    outer = nn.ModuleList([nn.Sequential(inner), nn.Linear(2, 2)])
    named = nn.ModuleDict({"a": nn.Linear(2, 2), "b": nn.Linear(2, 2)})
    model = nn.Sequential(outer, named)
    # model.modules() meets outer, inner, named in that order; reversed: named, inner, outer
    assert shard_units(model) == [named["a"], named["b"], inner[0], inner[1], outer[0],
                                  outer[1]]
    plain = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    assert shard_units(plain) == [plain[0], plain[2]]  # the ReLU holds nothing


# ---- DDP -----------------------------------------------------------------------------------

def test_ddp_on_the_fake_group_averages_each_bucket_over_the_ranks() -> None:
    with fake_process_group(4):
        mesh = build_mesh(Layout(dp=4))
        linear = nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            linear.weight.fill_(1.0)
        ddp = parallelize(linear, Layout(dp=4), mesh)
        assert isinstance(ddp, nn.parallel.DistributedDataParallel)
        ddp(torch.tensor([[1.0, 2.0, 3.0]])).sum().backward()
        # d(w · x)/dw = x = (1, 2, 3), divided by the 4 ranks (the fake all-reduce adds none)
        assert linear.weight.grad is not None
        assert linear.weight.grad.tolist() == [[0.25, 0.5, 0.75]]


def test_ddp_issues_one_all_reduce_per_bucket() -> None:
    from tensorledger.trace import trace

    with fake_process_group(2):
        mesh = build_mesh(Layout(dp=2))
        ddp = parallelize(nn.Linear(4, 2), Layout(dp=2), mesh)
        x = torch.ones(1, 4)
        result = trace(lambda: ddp(x).sum().backward())
    reduces = [r for r in result.records if r.collective is not None]
    # one bucket of the 4 · 2 + 2 = 10 fp32 gradients: 40 bytes all-reduced once
    assert [(r.collective.kind, r.collective.size_bytes) for r in reduces] == [
        ("all-reduce", 40)]


def test_tied_names_are_set_to_the_first_ones_tensor() -> None:
    model = nn.Sequential(nn.Embedding(4, 2), nn.Linear(2, 4, bias=False))
    model[1].weight = model[0].weight
    retie = par._tied_keeper(model)
    assert retie is not None
    other = nn.Parameter(torch.zeros(4, 2))
    model[1].weight = other  # what torch's swap leaves on the second name
    retie()
    assert model[1].weight is model[0].weight
    retie("hook", "arguments")  # as a forward (pre-)hook: its arguments are ignored
    assert model[1].weight is model[0].weight
    assert par._tied_keeper(nn.Linear(2, 2)) is None  # nothing tied
    # a tie at the root: the empty owner is the model itself
    root = nn.Linear(2, 2)
    root.other = root.weight
    keep = par._tied_keeper(root)
    assert keep is not None
    root.other = nn.Parameter(torch.zeros(2, 2))
    keep()
    assert root.other is root.weight


# ---- the data-parallel mesh ----------------------------------------------------------------

@pytest.mark.parametrize(("layout", "names", "size"), [
    (Layout(fsdp=2), ("fsdp",), 2),
    (Layout(dp=2), ("dp",), 2),
    (Layout(dp=2, fsdp=2), ("dp", "fsdp"), 4),
    (Layout(fsdp=2, zero=1), ("fsdp",), 2),
    (Layout(cp=2), ("cp",), 2),  # fsdp 1: the cp ranks alone shard
    (Layout(dp=2, cp=2), ("dp", "cp"), 4),  # HSDP: replicated over dp
    (Layout(fsdp=2, cp=2), ("fsdp_cp",), 4),  # fsdp · cp flattened: torchtitan's dp_shard_cp
    (Layout(dp=2, fsdp=2, cp=2), ("dp", "fsdp_cp"), 8),
    (Layout(ep=2), ("ep",), 2),
    (Layout(fsdp=2, ep=2), ("fsdp_ep",), 4),
    (Layout(dp=2, fsdp=2, ep=2), ("dp", "fsdp_ep"), 8),
    (Layout(fsdp=2, tp=2), ("fsdp",), 2),
])
def test_the_data_parallel_mesh_joins_the_dimensions_that_see_other_tokens(
        layout: Layout, names: tuple[str, ...], size: int) -> None:
    with fake_process_group(layout.count):
        shard = par._data_parallel_mesh(layout, build_mesh(layout))
        assert (shard.mesh_dim_names, shard.size()) == (names, size)


# ---- parallelize ---------------------------------------------------------------------------

def test_a_plan_without_tp_is_refused_and_one_device_is_left_alone() -> None:
    from tensorledger.workload.tensor_parallel import TpStyle

    with fake_process_group(1):
        mesh = build_mesh(Layout())
        with pytest.raises(InputError, match="no --tp"):
            parallelize(nn.Linear(2, 2), Layout(), mesh, {"": TpStyle.COLWISE})
        linear = nn.Linear(2, 2)
        assert parallelize(linear, Layout(), mesh, {}) is linear  # an empty plan is none
        assert not isinstance(linear.weight, DTensor)


@pytest.mark.parametrize(("zero", "reshards"), [(3, True), (2, False)])
def test_fsdp_shards_each_unit_and_the_root_and_zero2_keeps_them_gathered(
        zero: int, reshards: bool) -> None:
    from torch.distributed.fsdp import FSDPModule

    layout = Layout(fsdp=2, zero=zero)
    wrapped: list[nn.Module] = []

    def between(module: nn.Module) -> nn.Module:
        wrapped.append(module)
        return module

    with fake_process_group(2):
        model = nn.Sequential(nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]))
        out = parallelize(model, layout, build_mesh(layout), between=between)
        assert out is model and wrapped == [model]
        units = [m for m in model.modules() if isinstance(m, FSDPModule)]
        assert len(units) == 3  # two blocks and the root
        weight = model[0][0].weight
        assert isinstance(weight, DTensor) and tuple(weight.to_local().shape) == (2, 4)
        group = model[0][0]._get_fsdp_state()._fsdp_param_group
        assert group is not None
        # ZeRO-3 reshards each unit after forward (onto its mesh); ZeRO-2 keeps it gathered
        assert (group.post_forward_mesh_info is not None) is reshards


def test_offloaded_parameters_shard_over_one_rank_on_one_device() -> None:
    with fake_process_group(1):
        model = nn.Sequential(nn.Linear(4, 4))
        parallelize(model, Layout(), build_mesh(Layout()), offload_params=True)
        group = model[0]._get_fsdp_state()._fsdp_param_group
        assert group is not None
        assert group.fsdp_params[0].offload_to_cpu is True
        assert isinstance(model[0].weight, DTensor)
    with fake_process_group(2):  # FSDP without offload: the default policy
        model = nn.Sequential(nn.Linear(4, 4))
        parallelize(model, Layout(fsdp=2), build_mesh(Layout(fsdp=2)))
        group = model[0]._get_fsdp_state()._fsdp_param_group
        assert group is not None and group.fsdp_params[0].offload_to_cpu is False


def test_hsdp_shards_within_the_fsdp_dimension_and_replicates_across_dp() -> None:
    layout = Layout(dp=2, fsdp=2)
    with fake_process_group(4):
        model = nn.Sequential(nn.Linear(4, 4))
        parallelize(model, layout, build_mesh(layout))
        weight = model[0].weight
        assert isinstance(weight, DTensor)
        assert weight.device_mesh.mesh_dim_names == ("dp", "fsdp")
        assert tuple(weight.to_local().shape) == (2, 4)  # 4 rows over the 2 fsdp ranks


# ---- the optimizer -------------------------------------------------------------------------

def test_the_optimizer_is_made_over_all_parameters_unless_zero1() -> None:
    made: list[Any] = []

    def make(params: Any) -> torch.optim.Optimizer:
        made.append(params)
        return torch.optim.SGD(params, lr=0.1)

    linear = nn.Linear(8, 4)
    with fake_process_group(2):
        optimizer = make_optimizer(Layout(fsdp=2), build_mesh(Layout(fsdp=2)),
                                   linear.parameters(), make)
        assert isinstance(optimizer, torch.optim.SGD)
        assert made == [[linear.weight, linear.bias]]
        zero1 = Layout(fsdp=2, zero=1)
        sharded = make_optimizer(zero1, build_mesh(zero1), linear.parameters(), make)
        # rank 0 holds the larger parameter, the weight (32 values), rank 1 the bias (4)
        assert [p.shape for g in sharded.optim.param_groups for p in g["params"]] == [
            torch.Size([4, 8])]


# ---- FSDP's storage -----------------------------------------------------------------------

class Resized:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def storage_resized(self, storage: torch.UntypedStorage) -> None:
        self.sizes.append(storage.nbytes())


def test_fsdps_storage_changes_are_told_to_the_recorder() -> None:
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    original = _fsdp_param.free_storage, _fsdp_param.alloc_storage
    recorder = Resized()
    gathered: list[torch.Tensor] = []
    tensor = torch.ones(4)
    with par.fsdp_storage_events(recorder, gathered.append):  # type: ignore[arg-type]
        assert _fsdp_param.free_storage is not original[0]
        _fsdp_param.free_storage(tensor)
        assert recorder.sizes == [0] and gathered == []  # freed: nothing gathered
        _fsdp_param.free_storage(tensor)  # already free: no change, nothing told
        assert recorder.sizes == [0]
        _fsdp_param.alloc_storage(tensor)
        assert recorder.sizes == [0, 16] and gathered == [tensor]  # 4 fp32 values again
        _fsdp_param.alloc_storage(tensor)  # already allocated: nothing told
        assert recorder.sizes == [0, 16]
        if hasattr(_fsdp_param_group, "free_storage"):
            assert _fsdp_param_group.free_storage is _fsdp_param.free_storage
    assert (_fsdp_param.free_storage, _fsdp_param.alloc_storage) == original
    # without a gathered callback an allocation is told to the recorder alone
    with par.fsdp_storage_events(recorder):  # type: ignore[arg-type]
        _fsdp_param.free_storage(tensor)
        _fsdp_param.alloc_storage(tensor)
    assert recorder.sizes == [0, 16, 0, 16]


def test_the_originals_come_back_after_an_error() -> None:
    from torch.distributed.fsdp._fully_shard import _fsdp_param

    original = _fsdp_param.alloc_storage
    with pytest.raises(ValueError, match="inside"), \
            par.fsdp_storage_events(Resized()):  # type: ignore[arg-type]
        raise ValueError("inside")
    assert _fsdp_param.alloc_storage is original


# ---- the step's figures -------------------------------------------------------------------

def test_state_bytes_count_every_tensor_of_the_optimizer_state() -> None:
    linear = nn.Linear(8, 16)
    optimizer = torch.optim.AdamW(linear.parameters(), lr=1e-3)
    linear(torch.ones(1, 8)).sum().backward()
    optimizer.step()
    # exp_avg and exp_avg_sq of 16·8 + 16 = 144 fp32 values, and a 4-byte step per parameter
    assert par._state_bytes(optimizer) == 2 * 144 * F32 + 2 * 4
    wrapped = SimpleNamespace(optim=optimizer, state={})  # ZeRO-1's local optimizer inside
    assert par._state_bytes(wrapped) == 2 * 144 * F32 + 2 * 4  # type: ignore[arg-type]
    momentum = torch.optim.SGD(linear.parameters(), lr=0.1, momentum=0.9)
    momentum.step()
    assert par._state_bytes(momentum) == 144 * F32  # one momentum buffer; no step tensor


def test_gradient_bytes_count_each_tensor_once() -> None:
    linear = nn.Linear(8, 16)
    linear.weight.grad = torch.ones(16, 8)
    assert grad_bytes([linear.weight, linear.weight, linear.bias]) == 16 * 8 * F32  # no bias
    linear.bias.grad = torch.ones(16)
    assert grad_bytes(linear.parameters()) == 16 * 8 * F32 + 16 * F32
    half = nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    half.grad = torch.ones(3, dtype=torch.bfloat16)
    assert grad_bytes([half]) == 3 * 2  # bf16: 2 bytes a value


def test_the_traced_fsdp_step_reports_this_ranks_share() -> None:
    step = trace_parallel_step(lambda: nn.Linear(8, 16), lambda: torch.ones(4, 8),
                               Layout(fsdp=2))
    assert step.world_size == 2 and step.layout == Layout(fsdp=2)
    assert step.params_per_rank == 144 // 2  # (16·8 + 16) values over 2 ranks
    assert step.param_bytes_per_rank == 72 * F32
    # AdamW's two moments of the 72 local values, and a 4-byte step per parameter
    assert step.optimizer_state_bytes_per_rank == 2 * 72 * F32 + 2 * 4
    assert step.grad_bytes_per_rank == 72 * F32
    kinds = {r.collective.kind for r in step.trace.records if r.collective is not None}
    assert kinds == {"all-gather", "reduce-scatter"}


def test_the_traced_ddp_step_is_the_first_and_its_own_loss_is_used() -> None:
    losses: list[tuple[int, ...]] = []

    def loss(out: torch.Tensor) -> torch.Tensor:
        losses.append(tuple(out.shape))
        return out.sum()

    step = trace_parallel_step(lambda: nn.Linear(8, 16), lambda: torch.ones(4, 8),
                               Layout(dp=2), loss=loss)
    assert losses == [(4, 16)]  # DDP's first step traced: no warm-up
    assert step.params_per_rank == 144 and step.grad_bytes_per_rank == 144 * F32
    reduces = [r for r in step.trace.records if r.collective is not None]
    assert sum(r.collective.size_bytes for r in reduces) == 144 * F32


def test_the_modes_are_entered_before_the_model_is_built() -> None:
    entered: list[str] = []

    class Mode:
        def __enter__(self) -> None:
            entered.append("in")

        def __exit__(self, *args: object) -> None:
            entered.append("out")

    def build() -> nn.Module:
        entered.append("build")
        return nn.Linear(2, 2)

    trace_parallel_step(build, lambda: torch.ones(1, 2), Layout(fsdp=2), modes=Mode)
    assert entered == ["in", "build", "out"]


def test_a_failing_step_names_the_layout_and_a_layout_must_be_one() -> None:
    def broken(out: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("no loss here")

    with pytest.raises(TraceError, match="the FSDP ZeRO-3 × 2 step on 2 fake ranks raised "
                                         "RuntimeError: no loss here"):
        trace_parallel_step(lambda: nn.Linear(2, 2), lambda: torch.ones(1, 2),
                            Layout(fsdp=2), loss=broken)

    def refused(out: torch.Tensor) -> torch.Tensor:
        raise InputError("as it was")

    with pytest.raises(InputError, match="as it was"):
        trace_parallel_step(lambda: nn.Linear(2, 2), lambda: torch.ones(1, 2),
                            Layout(fsdp=2), loss=refused)
    with pytest.raises(InputError, match="got dict"):
        trace_parallel_step(lambda: nn.Linear(2, 2), lambda: torch.ones(1, 2),
                            {"fsdp": 2})  # type: ignore[arg-type]


# ---- DDP beside tensor parallelism, ZeRO-1, context parallelism ---------------------------
# Mlp (tests/distributed/parallel_torchrun.py): a replicated projection, then a Megatron MLP


def _plan() -> dict[str, Any]:
    from tensorledger.workload.parallel import TpStyle

    return {"up": TpStyle.COLWISE, "down": TpStyle.ROWWISE}


# pre 576 replicated; up's 960 weights + 40 biases and down's 960 weights split over tp 2;
# down's 24 biases replicated: 576 + 500 + 480 + 24 = 1,580 values on each rank
MLP_TP2 = 576 + 1000 // 2 + 960 // 2 + 24


def test_the_plan_given_lays_the_model_out() -> None:
    step = trace_parallel_step(Mlp, lambda: torch.ones(3, 5, 24), Layout(tp=2), _plan())
    assert step.params_per_rank == MLP_TP2


def test_ddp_beside_tensor_parallelism_reduces_each_ranks_shards_over_dp_alone() -> None:
    step = trace_parallel_step(Mlp, lambda: torch.ones(3, 5, 24), Layout(dp=2, tp=2),
                               _plan())
    collectives = [(r.phase, c.group_size, c.size_bytes, c.rank_stride)
                   for r in step.trace.records if (c := r.collective) is not None]
    # tp's all-reduces of down's partial output and of up's input gradient, 3 · 5 · 24 fp32
    # (1,440 bytes) over the tp pair (stride 1); then DDP's bucket of the rank's 1,580 local
    # gradients (6,320 bytes) over its 2 dp replicas: ranks 0 and 2 of the 2 × 2 mesh
    assert collectives == [("forward", 2, 1440, 1), ("backward", 2, 1440, 1),
                           ("backward", 2, MLP_TP2 * F32, 2)]
    # AdamW's two fp32 moments of the 1,580 local values and a 4-byte step for each of 5
    # tensors (the warm-up ran under no_sync, outside the trace)
    assert step.optimizer_state_bytes_per_rank == 2 * MLP_TP2 * F32 + 5 * 4
    # the rank holds the same 1,580 values and their gradients (the DTensor shards too, which
    # DDP beside TP leaves out of model.parameters() after a forward)
    assert step.params_per_rank == MLP_TP2
    assert step.param_bytes_per_rank == step.grad_bytes_per_rank == MLP_TP2 * F32


def test_zero1_shards_the_optimizer_state_by_whole_parameters() -> None:
    step = trace_parallel_step(lambda: nn.Linear(8, 16), lambda: torch.ones(4, 8),
                               Layout(fsdp=2, zero=1))
    # rank 0 holds the weight (128 values, the larger), rank 1 the bias: AdamW's two fp32
    # moments of 128 values and a 4-byte step
    assert step.optimizer_state_bytes_per_rank == 2 * 128 * F32 + 4
    assert step.params_per_rank == 144  # the parameters themselves whole (DDP)
    # DDP all-reduces every gradient: 144 fp32 values over the 2 ranks
    reduces = [r.collective for r in step.trace.records
               if r.collective is not None and r.collective.kind == "all-reduce"]
    assert [(c.group_size, c.size_bytes) for c in reduces] == [(2, 144 * F32)]


def test_context_parallelism_cuts_the_inputs_over_the_cp_mesh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager

    import tensorledger.workload.context_parallel as cp

    calls: list[tuple[Any, ...]] = []

    @contextmanager
    def cut(mesh: Any, buffers: list[torch.Tensor], rotate: str) -> Any:
        calls.append((mesh.mesh_dim_names, mesh.size(), [tuple(b.shape) for b in buffers],
                      rotate))
        yield

    monkeypatch.setattr(cp, "sequence_sharded", cut)
    trace_parallel_step(lambda: nn.Linear(8, 16), lambda: torch.ones(4, 8),
                        Layout(cp=2, cp_rotate="alltoall"))
    assert calls == [(("cp",), 2, [(4, 8)], "alltoall")]
    trace_parallel_step(lambda: nn.Linear(8, 16), lambda: torch.ones(4, 8), Layout(fsdp=2))
    assert len(calls) == 1  # no cp: nothing cut


class Viewing(nn.Linear):
    """A root whose output is a view: FSDP2 warns of it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).view(-1)


def test_the_default_loss_quiets_fsdps_view_warning() -> None:
    # warnings are errors here: the warning unquieted would fail the step
    step = trace_parallel_step(lambda: Viewing(8, 16), lambda: torch.ones(4, 8),
                               Layout(fsdp=2))
    assert step.params_per_rank == 72


def test_a_failing_single_device_step_is_named_so() -> None:
    def broken(out: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("no loss")

    with pytest.raises(TraceError, match="the single-device step on 1 fake ranks raised"):
        trace_parallel_step(lambda: nn.Linear(2, 2), lambda: torch.ones(1, 2), Layout(),
                            loss=broken)


def test_ddp_leaves_expert_parallel_experts_out_of_its_buckets() -> None:
    from tests.workload.test_expert_parallel_pinned import Experts

    with fake_process_group(2):
        model = nn.Sequential(nn.Linear(1, 1), Experts())
        ddp = parallelize(model, Layout(ep=2), build_mesh(Layout(ep=2)))
        assert isinstance(ddp, nn.parallel.DistributedDataParallel)
        assert ddp.parameters_to_ignore == {"1.up", "1.bias"}
    with fake_process_group(2):  # experts under plain --dp: whole, and reduced as the rest
        plain = parallelize(nn.Sequential(nn.Linear(1, 1), Experts()), Layout(dp=2),
                            build_mesh(Layout(dp=2)))
        assert plain.parameters_to_ignore == set()


# ---- experts beside FSDP -----------------------------------------------------------------

class Block(nn.Module):
    def __init__(self) -> None:
        from tests.workload.test_expert_parallel_pinned import Experts

        super().__init__()
        self.dense = nn.Linear(4, 4)
        self.experts = Experts()


class RootHeld(nn.Module):
    """A block of a dense layer and experts, and a parameter of the root's own."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block()])
        self.scale = nn.Parameter(torch.ones(4))

    @property
    def dense(self) -> nn.Module:
        return self.blocks[0].dense

    @property
    def experts(self) -> nn.Module:
        return self.blocks[0].experts


def _mesh_names(param: torch.Tensor) -> tuple[str, ...] | None:
    assert isinstance(param, DTensor)
    return param.device_mesh.mesh_dim_names


@pytest.mark.parametrize(("layout", "experts", "others"), [
    (Layout(fsdp=2, ep=2), ("fsdp",), ("fsdp_ep",)),
    (Layout(dp=2, fsdp=2, ep=2), ("dp", "fsdp"), ("dp", "fsdp_ep")),
])
def test_experts_shard_over_fsdp_and_the_rest_over_fsdp_and_ep(
        layout: Layout, experts: tuple[str, ...], others: tuple[str, ...]) -> None:
    from torch.distributed.fsdp import FSDPModule

    with fake_process_group(layout.count):
        model = RootHeld()
        parallelize(model, layout, build_mesh(layout))
        # ep first: the rank keeps 2 of the 4 experts, then FSDP shards them over fsdp
        assert model.experts.num_experts == 2
        assert isinstance(model.experts, FSDPModule)
        assert _mesh_names(model.experts.up) == experts
        assert _mesh_names(model.dense.weight) == others
        assert _mesh_names(model.scale) == others  # the root's own, over the same mesh


def test_zero2_keeps_the_experts_and_the_root_gathered() -> None:
    layout = Layout(fsdp=2, ep=2, zero=2)
    with fake_process_group(4):
        model = RootHeld()
        parallelize(model, layout, build_mesh(layout))
        for unit in (model.experts, model.blocks[0], model):
            group = unit._get_fsdp_state()._fsdp_param_group
            assert group is not None and group.post_forward_mesh_info is None


def test_a_stage_may_hold_no_experts_under_ep() -> None:
    with fake_process_group(2):
        mesh = build_mesh(Layout(ep=2))
        with pytest.raises(InputError, match="--ep 2 shards routed experts"):
            parallelize(nn.Linear(2, 2), Layout(ep=2), mesh)
        stage = parallelize(nn.Linear(2, 2), Layout(ep=2), mesh, stage=True)
        assert isinstance(stage, nn.parallel.DistributedDataParallel)


def test_expert_tensor_parallelism_splits_each_local_experts_width() -> None:
    from tensorledger.models import build_model, get_preset
    from tensorledger.workload import expert_parallel as ep

    layout = Layout(ep=2, tp=2, etp=2)
    with fake_process_group(4):
        model = build_model(get_preset("tiny-moe"), "cpu")
        parallelize(model, layout, build_mesh(layout))
        shards = [ep._SHARDS[m] for m in model.modules() if m in ep._SHARDS]
    assert shards and all(s.tp_ranks == 2 and s.local == 3 and s.tp_group is not None
                          for s in shards)
    # tiny-moe: 6 experts of width 32; 3 a rank, each 32 / 2 = 16 wide, d 64
    experts = next(m for m in model.modules() if m in ep._SHARDS)
    assert tuple(experts.gate.shape) == (3, 64, 16)
    layout = Layout(ep=2, tp=2)
    with fake_process_group(4):
        model = build_model(get_preset("tiny-moe"), "cpu")
        parallelize(model, layout, build_mesh(layout))
        whole = [ep._SHARDS[m] for m in model.modules() if m in ep._SHARDS]
    assert all(s.tp_ranks == 1 for s in whole)  # etp 1: each tp rank holds them whole


def test_zero1s_optimizer_import_is_quiet_even_the_first_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    for name in [n for n in sys.modules if n.startswith("torch.distributed.optim")]:
        monkeypatch.delitem(sys.modules, name)
    layout = Layout(fsdp=2, zero=1)
    with fake_process_group(2):
        optimizer = make_optimizer(layout, build_mesh(layout), nn.Linear(2, 2).parameters(),
                                   lambda params: torch.optim.SGD(params, lr=0.1))
    assert type(optimizer).__name__ == "ZeroRedundancyOptimizer"


def test_a_reference_mixture_of_experts_under_tp_needs_ep() -> None:
    from tensorledger.models import build_model, get_preset

    with fake_process_group(2):
        model = build_model(get_preset("tiny-moe"), "cpu")
        with pytest.raises(InputError, match="no plan for the reference mixture of experts"):
            parallelize(model, Layout(tp=2), build_mesh(Layout(tp=2)))


def test_the_roots_own_parameters_are_offloaded_too() -> None:
    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(4, 4)
            self.scale = nn.Parameter(torch.ones(4))

    with fake_process_group(1):
        model = Root()
        parallelize(model, Layout(), build_mesh(Layout()), offload_params=True)
        group = model._get_fsdp_state()._fsdp_param_group
        assert group is not None and group.fsdp_params[0].offload_to_cpu is True


def test_zero1_beside_tp_shards_the_optimizer_over_fsdp_alone() -> None:
    layout = Layout(fsdp=2, zero=1, tp=2)
    with fake_process_group(4):
        mesh = build_mesh(layout)
        optimizer = make_optimizer(layout, mesh, nn.Linear(2, 2).parameters(),
                                   lambda params: torch.optim.SGD(params, lr=0.1))
        assert optimizer.process_group is mesh["fsdp"].get_group()
