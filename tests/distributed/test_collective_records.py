"""Collectives as the recorder sees them on a fake process group: the group found from a size,
a name or a ProcessGroup object, and the bytes each rank moves; an unknown group is listed as
uncovered, never counted as zero."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tensorledger.errors import InputError, TensorLedgerError
from tensorledger.trace import Recorder
from tensorledger.trace.collectives import group_size
from tensorledger.trace.records import CollectiveInfo, OpRecord
from tensorledger.workload.parallel import fake_process_group


def _records(step: object) -> list[OpRecord]:
    with Recorder() as recorder:
        step()  # type: ignore[operator]
    return [r for r in recorder.trace.records if r.category == "communication"]


def test_functional_all_reduce_finds_its_group_by_name() -> None:
    with fake_process_group(4) as group:
        name = group.group_name
        records = _records(lambda: torch.ops._c10d_functional.wait_tensor(
            torch.ops._c10d_functional.all_reduce(torch.ones(3, 5, device="meta"), "sum", name)))
    reduce, wait = records
    # S = 3 * 5 * 4 = 60 bytes; each rank sends and receives 2 * 60 * 3/4 = 90
    assert reduce.collective == CollectiveInfo("all-reduce", 4, 60, 90, 90)
    assert reduce.covered and reduce.flops == 0
    assert wait.collective is None and wait.covered


def test_functional_all_gather_finds_its_group_by_name() -> None:
    with fake_process_group(8) as group:
        records = _records(lambda: torch.ops._c10d_functional.all_gather_into_tensor(
            torch.ones(2, 6, device="meta"), 8, group.group_name))
    # S = 8 ranks * 2 * 6 * 4 bytes = 384; each rank receives 384 * 7/8 = 336
    assert records[0].collective == CollectiveInfo("all-gather", 8, 384, 336, 336)
    assert records[0].output_shapes == ((16, 6),)


def test_eager_all_reduce_unboxes_the_process_group() -> None:
    with fake_process_group(2):
        buffer = torch.ones(10, dtype=torch.float64)
        records = _records(lambda: dist.all_reduce(buffer))
    (record,) = records
    assert record.op == "c10d.allreduce_.default"
    # S = 10 * 8 = 80 bytes; 2 * 80 * 1/2 = 80 each way
    assert record.collective == CollectiveInfo("all-reduce", 2, 80, 80, 80)


def test_a_group_that_cannot_be_found_is_uncovered() -> None:
    with Recorder() as recorder:
        torch.ops._c10d_functional.all_reduce(torch.ones(3, device="meta"), "sum", "nowhere")
    (record,) = [r for r in recorder.trace.records if r.category == "communication"]
    assert not record.covered and record.collective is None
    assert recorder.trace.uncovered == {"_c10d_functional.all_reduce.default": 1}


def test_group_size_of_each_form() -> None:
    with fake_process_group(4) as group:
        assert group_size(4) == 4
        assert group_size(group.group_name) == 4
        assert group_size(group) == 4
        with pytest.raises(ValueError, match="not a process group: float"):
            group_size(4.0)


def test_group_stride_says_how_a_mesh_dimension_lies() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from tensorledger.trace.collectives import group_stride

    with fake_process_group(8) as world:
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("fsdp", "tp"))
        # rank 0's tp group is ranks 0-3 (consecutive); its fsdp group is ranks 0 and 4
        assert group_stride(mesh.get_group("tp")) == 1
        assert group_stride(mesh.get_group("fsdp")) == 4
        assert group_stride(world) == 1 and group_stride(8) == 1
        dist.all_reduce(torch.ones(2), group=mesh.get_group("fsdp"))
        records = _records(lambda: dist.all_reduce(torch.ones(2), group=mesh.get_group("fsdp")))
    assert records[0].collective is not None and records[0].collective.rank_stride == 4


def test_fake_process_group_refuses_bad_sizes_and_a_second_group() -> None:
    with pytest.raises(InputError, match="whole number of ranks >= 1, got 0"), \
            fake_process_group(0):
        pass
    with fake_process_group(2), pytest.raises(TensorLedgerError, match="already initialised"), \
            fake_process_group(2):
        pass
    assert not dist.is_initialized()  # torn down on exit
