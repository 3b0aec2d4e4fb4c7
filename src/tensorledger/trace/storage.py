"""Storage identity: the one place that decides when two tensors share memory.

Two tensors share memory when they are views of one untyped storage; a storage is counted
once, at its full size (a view keeps the whole storage alive).  The key is the address of
PyTorch's ``StorageImpl``, which is stable while the storage lives and exists on every device
(meta and fake storages have no data pointer to compare, but they do have a ``StorageImpl``).
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

__all__ = ["local_tensor", "storage_bytes", "storage_key"]

#: Where a wrapper subclass keeps the one tensor whose storage is the memory: DTensor's local
#: shard, torchao's weight wrapped for its fp8 all-gather (``WeightWithDynamicFloat8CastTensor``).
_INNER = ("_local_tensor", "_tensor")


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor this rank holds: a DTensor's local shard (whose storage is the memory), the
    one tensor a wrapper subclass wraps (torchao's fp8-gathered weight inside it), else the
    tensor itself.

    >>> t = torch.zeros(2, device="meta")
    >>> local_tensor(t) is t
    True
    """
    while is_traceable_wrapper_subclass(tensor):
        # the attribute each keeps it in, not __tensor_flatten__: torchao's asks a tensor for
        # its truth value once a scale is precomputed, which a fake tensor cannot answer
        inner = next((value for value in (getattr(tensor, name, None) for name in _INNER)
                      if isinstance(value, torch.Tensor)), None)
        if inner is None:
            break
        tensor = inner
    return tensor


def storage_key(tensor: torch.Tensor) -> int:
    """An id shared by all views of one storage, valid while the storage is alive.

    >>> base = torch.zeros(4, device="meta")
    >>> storage_key(base) == storage_key(base[1:]), storage_key(base) == storage_key(base.clone())
    (True, False)
    """
    return int(tensor.untyped_storage()._cdata)


def storage_bytes(tensor: torch.Tensor) -> int:
    """Bytes of the whole storage behind ``tensor`` (not just of the view).

    >>> storage_bytes(torch.zeros(4, 8, device="meta")[0])   # the whole 4·8 fp32 storage
    128
    """
    return int(tensor.untyped_storage().nbytes())
