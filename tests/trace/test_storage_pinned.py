"""trace.storage pinned: a DTensor's memory is its local shard's, views share one storage."""

from __future__ import annotations

import torch

from tensorledger.trace.storage import local_tensor, storage_bytes, storage_key
from tensorledger.workload.parallel import fake_process_group


def test_a_dtensor_is_read_through_to_its_local_shard() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    with fake_process_group(2):
        mesh = init_device_mesh("cpu", (2,))
        shard = torch.zeros(4, 3, device="meta")
        whole = DTensor.from_local(shard, mesh, [Shard(0)], run_check=False)
        assert tuple(whole.shape) == (8, 3)  # two shards of 4 rows
        inner = local_tensor(whole)
        # the shard (a view of it that DTensor keeps): its shape, its storage
        assert type(inner) is torch.Tensor and tuple(inner.shape) == (4, 3)
        assert storage_key(inner) == storage_key(shard)
        # the shard's storage: 4 · 3 fp32 = 48 bytes, not the global 96
        assert storage_bytes(local_tensor(whole)) == 48
        assert storage_key(local_tensor(whole)) == storage_key(shard[1:])
    plain = torch.zeros(2, device="meta")
    assert local_tensor(plain) is plain
