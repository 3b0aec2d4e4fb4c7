"""One training step of rank 0 under FSDP2, DDP and DTensor tensor parallelism, traced on a
fake process group: the collectives it issues and the bytes they move equal the closed forms of
napkin.parallel (the second code path) and the hand arithmetic beside each expectation; its
FLOPs and parameter bytes are the single-device figures divided as the layout divides them."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

from tensorledger.models import build_model, get_preset
from tensorledger.napkin.parallel import ddp_comm_volume, fsdp_comm_volume, zero_comm_volume
from tensorledger.napkin.transformer import parameter_count
from tensorledger.trace import trace
from tensorledger.trace.records import OpRecord, Trace
from tensorledger.workload.layout import Layout
from tensorledger.workload.parallel import ParallelStep, TpStyle, trace_parallel_step
from tests.distributed.parallel_torchrun import Mlp

TINY = get_preset("tiny")  # d 64, 2 layers, vocab 128, d_ff 128: every dim-0 divides by 8
F32 = 4


def _tiny() -> nn.Module:
    return build_model(TINY, "cpu")


def _tokens() -> torch.Tensor:
    return torch.randint(0, TINY.vocab_size, (2, 16))


def _collectives(result: Trace, kind: str, phase: str | None = None) -> list[OpRecord]:
    return [r for r in result.records if r.collective is not None
            and r.collective.kind == kind and (phase is None or r.phase == phase)]


def _size(records: list[OpRecord]) -> int:
    return sum(r.collective.size_bytes for r in records if r.collective is not None)


def _received(records: list[OpRecord]) -> int:
    return sum(r.collective.bytes_received for r in records if r.collective is not None)


def _matmul_flops(result: Trace) -> int:
    return sum(r.flops for r in result.records
               if r.category == "matmul" and r.phase in ("forward", "backward"))


def _single_device_flops(build: object, make_inputs: object) -> int:
    """The same forward and backward on one device, fake tensors, no process group."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        model = build()  # type: ignore[operator]
        inputs = make_inputs()  # type: ignore[operator]
        result = trace(lambda: model(inputs).float().pow(2).mean().backward())
    return _matmul_flops(result)


@pytest.fixture(scope="module")
def fsdp8() -> ParallelStep:
    return trace_parallel_step(_tiny, _tokens, Layout(fsdp=8))


def test_fsdp_zero3_communication_equals_the_closed_form(fsdp8: ParallelStep) -> None:
    params = parameter_count(TINY).total_params
    weights = F32 * params
    root = F32 * (2 * 128 * 64 + 64)  # embedding, head and final norm: the root's own unit
    napkin = {(c.phase, c.kind): c for c in fsdp_comm_volume(params, 8, "fp32").collectives}
    result = fsdp8.trace
    assert result.uncovered == {}

    gathered = _collectives(result, "all-gather", "forward")
    assert len(gathered) == 3  # the root, then each of the 2 blocks
    assert _size(gathered) == weights == napkin["forward", "all-gather"].size_bytes
    # each rank receives the other 7 ranks' shards: 7/8 of the parameter bytes
    assert _received(gathered) == weights * 7 // 8
    assert _received(gathered) == napkin["forward", "all-gather"].sent_bytes_per_rank

    # backward gathers the blocks again, not the root: FSDP2 keeps the root unit unsharded
    # between forward and backward (its parameters would be gathered straight back)
    regathered = _collectives(result, "all-gather", "backward")
    assert len(regathered) == 2
    assert _size(regathered) == napkin["backward", "all-gather"].size_bytes - root
    assert _received(regathered) == (weights - root) * 7 // 8

    scattered = _collectives(result, "reduce-scatter", "backward")
    assert len(scattered) == 3
    assert _size(scattered) == F32 * params == napkin["backward", "reduce-scatter"].size_bytes
    assert _received(scattered) == napkin["backward", "reduce-scatter"].sent_bytes_per_rank
    assert {r.collective.group_size for r in gathered + scattered if r.collective} == {8}
    assert not _collectives(result, "all-reduce")


def test_fsdp_rank_holds_an_eighth_and_computes_the_whole_batch(fsdp8: ParallelStep) -> None:
    params = parameter_count(TINY).total_params
    assert fsdp8.params_per_rank * 8 == params
    assert fsdp8.param_bytes_per_rank == F32 * params // 8
    assert _matmul_flops(fsdp8.trace) == _single_device_flops(_tiny, _tokens)


def test_fsdp_zero2_gathers_once_and_moves_zero2_bytes() -> None:
    step = trace_parallel_step(_tiny, _tokens, Layout(fsdp=4, zero=2))
    params = parameter_count(TINY).total_params
    result = step.trace
    assert not _collectives(result, "all-gather", "backward")  # kept from forward to backward
    gathered = _collectives(result, "all-gather", "forward")
    scattered = _collectives(result, "reduce-scatter", "backward")
    assert (len(gathered), len(scattered)) == (3, 3)
    assert _size(gathered) == _size(scattered) == F32 * params
    # ZeRO-2 (ZeRO §7) moves the same bytes, the all-gather placed after the optimizer step:
    # 2 * 3/4 of the parameter bytes per rank
    assert _received(gathered + scattered) == zero_comm_volume(
        params, 4, 2, "fp32").sent_bytes_per_rank == 2 * F32 * params * 3 // 4
    assert step.param_bytes_per_rank == F32 * params // 4


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_fsdp_parameter_bytes_per_rank(ranks: int) -> None:
    step = trace_parallel_step(_mlp, lambda: torch.ones(4, 16), Layout(fsdp=ranks))
    params = 16 * 32 + 32 + 32 * 16 + 16  # 1072
    assert step.params_per_rank == params // ranks
    assert step.param_bytes_per_rank == F32 * params // ranks
    # one all-gather per Linear in forward and in backward (the root owns no parameter)
    counts = Counter((r.phase, r.collective.kind) for r in step.trace.records if r.collective)
    assert counts == {("forward", "all-gather"): 2, ("backward", "all-gather"): 2,
                      ("backward", "reduce-scatter"): 2}


def test_ddp_all_reduces_every_gradient_byte() -> None:
    step = trace_parallel_step(_tiny, _tokens, Layout(dp=2))
    params = parameter_count(TINY).total_params
    reduced = _collectives(step.trace, "all-reduce", "backward")
    assert reduced and step.trace.uncovered == {}
    assert _size(reduced) == F32 * params  # the gradients, however DDP buckets them
    assert _received(reduced) == ddp_comm_volume(params, 2, "fp32").sent_bytes_per_rank
    assert [r.collective.kind for r in step.trace.records if r.collective] == (
        ["all-reduce"] * len(reduced))
    assert step.param_bytes_per_rank == F32 * params  # replicated
    assert _matmul_flops(step.trace) == _single_device_flops(_tiny, _tokens)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tensor_parallel_mlp_by_hand(tp: int) -> None:
    def inputs() -> torch.Tensor:
        return torch.ones(3, 5, 24)

    step = trace_parallel_step(Mlp, inputs, Layout(tp=tp),
                               {"up": TpStyle.COLWISE, "down": TpStyle.ROWWISE})
    result = step.trace
    assert result.uncovered == {}
    kinds = Counter((r.phase, r.collective.kind) for r in result.records if r.collective)
    # forward: the row-parallel output's partial sums; backward: the column-parallel input's
    assert kinds == {("forward", "all-reduce"): 1, ("backward", "all-reduce"): 1}
    for record in _collectives(result, "all-reduce"):
        assert record.collective is not None
        assert record.collective.group_size == tp
        assert record.collective.size_bytes == 3 * 5 * 24 * F32 == 1440
        assert record.collective.bytes_sent == 2 * 1440 * (tp - 1) // tp  # 2160 for tp = 4
    # pre: 2·15·24·24 = 17280 forward, the same for its weight gradient (no input gradient);
    # up and down: 2·15·24·40 = 28800 each forward on one device, twice that in backward,
    # a tp-th of it on each rank
    assert _matmul_flops(result) == 2 * 17280 + 6 * 28800 // tp
    whole = _single_device_flops(Mlp, inputs)
    assert whole == 2 * 17280 + 6 * 28800
    assert _matmul_flops(result) == 2 * 17280 + (whole - 2 * 17280) // tp
    # pre replicated (576), up's rows split (960 weights + 40 bias), down's columns split (960)
    # and its bias replicated (24): 1090 values on each of 4 ranks
    assert step.params_per_rank == 576 + 1000 // tp + 960 // tp + 24
    assert step.param_bytes_per_rank == F32 * step.params_per_rank


def test_nested_module_lists_are_wrapped_inner_first() -> None:
    from tensorledger.workload.parallel import shard_units

    class Expert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Linear(8, 8, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.w(x)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.experts = nn.ModuleList([Expert(), Expert()])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return sum((e(x) for e in self.experts), torch.zeros_like(x))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Block(), Block()])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = block(x)
            return x

    model = Model()
    units = shard_units(model)
    # the experts (inner lists) come before the blocks that hold them
    assert units.index(model.blocks[0].experts[0]) < units.index(model.blocks[0])
    step = trace_parallel_step(Model, lambda: torch.randn(4, 8), Layout(fsdp=2))
    gathers = [r for r in step.trace.records if r.collective is not None
               and r.collective.kind == "all-gather" and r.phase == "forward"]
    assert gathers  # it traced


def test_a_plan_naming_no_module_and_a_layout_that_is_no_layout_are_refused() -> None:
    from tensorledger.errors import InputError

    with pytest.raises(InputError, match="'nope', which is no module"):
        trace_parallel_step(lambda: nn.Sequential(nn.Linear(8, 8)), lambda: torch.randn(2, 8),
                            Layout(tp=2), tp_plan={"nope": TpStyle.COLWISE})
    with pytest.raises(InputError, match=r"a layout is a tensorledger Layout.*got str"):
        trace_parallel_step(lambda: nn.Linear(8, 8), lambda: torch.randn(2, 8),
                            "zero9")  # type: ignore[arg-type]
