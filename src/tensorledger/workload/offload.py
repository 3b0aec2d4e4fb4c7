"""Activation offloading with torch's own ``torch.autograd.graph.save_on_cpu``.

``save_on_cpu(pin_memory=True)`` packs every tensor autograd saves into a fresh host tensor
(``torch.empty`` + ``copy_``: the device-to-host copy) and unpacks it in backward with
``.to(device)`` (the host-to-device copy).  It packs *every* saved tensor: a linear's weight as
well as its input, so each weight crosses the host link twice a step too.

A trace on fake tensors stands in for the device with the CPU, where torch's ``.to(device)``
of a CPU tensor is the tensor itself: there the unpacked tensor is cloned, the copy a GPU
would make back into its own memory.  Both copies are recorded ops; the host tensors are
tagged ``host_activation`` (kept apart from the device's memory), and the bytes each way are
counted here for pricing on the chip's host link.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["ActivationOffload"]


def _nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel()) * tensor.element_size()


class ActivationOffload:
    """torch's ``save_on_cpu(pin_memory=True)``, its bytes counted each way.

    >>> offload = ActivationOffload(stand_in=True)
    >>> x = torch.ones(4, 8, requires_grad=True)
    >>> with offload.hooks():
    ...     y = (x * x).sum()
    >>> y.backward()
    >>> offload.to_host_bytes, offload.to_device_bytes   # x saved twice by mul: 2 · 128 bytes
    (256, 256)
    """

    def __init__(self, stand_in: bool,
                 on_host: Callable[[torch.Tensor], None] | None = None) -> None:
        own = torch.autograd.graph.save_on_cpu(pin_memory=True)
        self._pack: Callable[[torch.Tensor], Any] = own.pack_hook
        self._unpack: Callable[[Any], torch.Tensor] = own.unpack_hook
        self.stand_in = stand_in  # the CPU stands in for the device: copy back on unpack
        self.on_host = on_host
        self.to_host_bytes = 0
        self.to_device_bytes = 0

    def pack(self, tensor: torch.Tensor) -> Any:
        packed = self._pack(tensor)
        host = packed[1]
        self.to_host_bytes += _nbytes(host)
        if self.on_host is not None:
            self.on_host(host)
        return packed

    def unpack(self, packed: Any) -> torch.Tensor:
        tensor = self._unpack(packed)
        if self.stand_in and tensor is packed[1]:
            tensor = tensor.clone()  # the copy into device memory a GPU's .to(device) makes
        self.to_device_bytes += _nbytes(tensor)
        return tensor

    @contextmanager
    def hooks(self) -> Iterator[None]:
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            yield
