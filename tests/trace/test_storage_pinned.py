"""trace.storage pinned: a DTensor's memory is its local shard's, views share one storage."""

from __future__ import annotations

from typing import Any

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


class _Wrapper(torch.Tensor):
    """A traceable wrapper subclass that keeps its tensor under a name ``local_tensor`` does
    not read (neither ``_local_tensor`` nor ``_tensor``)."""

    held: torch.Tensor

    @staticmethod
    def __new__(cls, held: torch.Tensor) -> _Wrapper:
        made = torch.Tensor._make_wrapper_subclass(cls, held.shape, dtype=held.dtype,
                                                   device=held.device)
        made.held = held
        return made

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["held"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], meta: None, size: object,
                             stride: object) -> _Wrapper:
        return _Wrapper(inner["held"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (),  # type: ignore[override]
                           kwargs: Any = None) -> Any:
        raise NotImplementedError  # local_tensor runs no op on it


def test_a_wrapper_without_a_known_inner_tensor_is_its_own_local_tensor() -> None:
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    wrapper = _Wrapper(torch.zeros(3, device="meta"))
    assert is_traceable_wrapper_subclass(wrapper)  # so local_tensor looks inside it
    # neither attribute is there: no inner tensor found, so the wrapper itself, not None
    # and not a StopIteration or AttributeError out of the search
    assert local_tensor(wrapper) is wrapper
    # one of the two names there and the other missing: the search reads past the missing one
    wrapper._tensor = torch.ones(2, device="meta")
    assert tuple(local_tensor(wrapper).shape) == (2,)
