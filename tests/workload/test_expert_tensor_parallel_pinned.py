"""Expert tensor parallelism's pieces (issue 42's mutation run of
``tensorledger.workload.expert_tensor_parallel``): the all-reduce on a real one-rank gloo group
(a fake group accepts any reduce op; gloo refuses one it does not know), and the split of frozen
experts (frozen they stay)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from tensorledger.models import get_preset
from tensorledger.models.moe import RoutedExperts
from tensorledger.workload import expert_tensor_parallel as etp
from tensorledger.workload.parallel import fake_process_group


@pytest.fixture
def one_rank() -> Iterator[object]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_the_all_reduce_sums_over_the_group(one_rank: object) -> None:
    x = torch.tensor([1.0, -2.0, 3.5])
    # a sum over one rank is the tensor itself
    assert torch.equal(etp._all_reduce(x, one_rank), x)


def test_to_and_from_shards_on_a_real_group(one_rank: object) -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = etp.from_expert_shards(etp.to_expert_shards(x, one_rank) * 3, one_rank)
    assert torch.equal(y.detach(), torch.tensor([3.0, 6.0]))  # 3·x, summed over one rank
    y.sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.tensor([3.0, 3.0]))  # d(3x)/dx


def test_frozen_experts_stay_frozen_when_split() -> None:
    moe = get_preset("tiny-moe").moe
    assert moe is not None
    experts = RoutedExperts(8, moe)  # d = 8; tiny-moe: 6 experts, f = 32
    experts.requires_grad_(False)
    with fake_process_group(2, rank=1):
        from torch.distributed.device_mesh import init_device_mesh

        whole = {key: getattr(experts, key).detach().clone() for key in ("gate", "up", "down")}
        etp.split_expert_width(experts, "experts", init_device_mesh("cpu", (2,)))
    assert [getattr(experts, key).requires_grad for key in ("gate", "up", "down")] == [False] * 3
    # rank 1 of 2 keeps hidden features 16 … 31: gate and up along dim 2, down along dim 1
    assert torch.equal(experts.gate, whole["gate"][:, :, 16:])
    assert torch.equal(experts.up, whole["up"][:, :, 16:])
    assert torch.equal(experts.down, whole["down"][:, 16:, :])
