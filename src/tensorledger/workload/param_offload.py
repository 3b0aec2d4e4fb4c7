"""Parameter offloading with FSDP2's own ``CPUOffloadPolicy``: parameters, gradients and
optimizer state on the host, the optimizer step on the CPU.

``fully_shard(..., offload_policy=CPUOffloadPolicy())`` keeps each rank's parameter shards in
host memory.  Before each all-gather FSDP2 copies a unit's shards to the device
(``sharded_param_data.to(device, non_blocking=True)`` in ``FSDPParam.all_gather_inputs``), and
after each reduce-scatter copies the rank's gradient shard back to the host
(``new_sharded_grad.to("cpu", non_blocking=...)`` in ``foreach_reduce``); the optimizer holds
host tensors, so its step runs on the CPU.

A trace on fake tensors stands in for the device with the CPU, where both ``.to`` calls return
the tensor itself.  :class:`ParamOffload` wraps the two FSDP2 places that make them
(``FSDPParam.all_gather_inputs`` and ``foreach_reduce``, private to torch) while the step runs:
inside them each such ``.to`` is seen (a torch-function mode), its bytes counted, and on the
stand-in device the copy a GPU would make is made (a ``clone``: a recorded op, a new storage:
the device's copy of the shards before the all-gather, the host's copy of a gradient shard
after the reduce-scatter, which ``on_host`` is told of to tag).  On a real accelerator the
copies are torch's own and are only counted.  A torch whose FSDP2 lacks the two functions is
left alone: the host placement is still tagged, the transfers then not counted
(``seen`` says).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["ParamOffload", "offload_policy"]


def _nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel()) * tensor.element_size()


def offload_policy(device_type: str) -> Any:
    """FSDP2's ``CPUOffloadPolicy``; its host tensors pinned only where there is an accelerator
    to pin them for (pinning a CPU tensor, fake or real, needs one)."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    return CPUOffloadPolicy(pin_memory=device_type != "cpu")


def _device_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device | None:
    """The device a ``Tensor.to`` call names (positionally or by keyword), else None."""
    for value in (*args[1:], kwargs.get("device")):
        if isinstance(value, torch.device):
            return value
        if isinstance(value, str):
            return torch.device(value)
    return None


class _Copies(TorchFunctionMode):
    """Inside one FSDP2 function: each ``Tensor.to(device, non_blocking=...)`` counted."""

    def __init__(self, offload: ParamOffload, to_host: bool) -> None:
        super().__init__()
        self.offload, self.to_host = offload, to_host

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func is not torch.Tensor.to or "non_blocking" not in kwargs:
            return result
        device = _device_of(args, kwargs)
        # to the host: to the CPU; to the device: to FSDP's device, the CPU on a stand-in
        if device is None or (self.to_host and device.type != "cpu"):
            return result
        return self.offload.moved(args[0], result, self.to_host)


class ParamOffload:
    """FSDP2's ``CPUOffloadPolicy`` copies counted each way (made on a stand-in device).

    ``to_device_bytes``: parameter shards copied to the device before the all-gathers;
    ``to_host_bytes``: gradient shards copied to the host after the reduce-scatters.
    """

    def __init__(self, stand_in: bool,
                 on_host: Callable[[torch.Tensor], None] | None = None) -> None:
        self.stand_in = stand_in  # the CPU stands in for the device: make each copy
        self.on_host = on_host
        self.to_device_bytes = 0
        self.to_host_bytes = 0
        self.copies = 0
        self.seen = False  # FSDP2's functions were found and wrapped

    def moved(self, source: torch.Tensor, result: torch.Tensor, to_host: bool
              ) -> torch.Tensor:
        if self.stand_in and result is source:
            result = source.clone()  # the copy a GPU's .to makes into the other memory
        self.copies += 1
        if to_host:
            self.to_host_bytes += _nbytes(result)
            if self.on_host is not None:
                self.on_host(result)
        else:
            self.to_device_bytes += _nbytes(result)
        return result

    def reset(self) -> None:
        """Count one step afresh (the warm-up step's copies are not the traced step's)."""
        self.to_device_bytes = self.to_host_bytes = self.copies = 0

    @contextmanager
    def watching(self) -> Iterator[None]:
        """FSDP2's all-gather inputs and gradient reduction run with their copies seen."""
        try:
            from torch.distributed.fsdp._fully_shard import _fsdp_param_group
            from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
            inputs = FSDPParam.__dict__["all_gather_inputs"]
            reduce = getattr(_fsdp_param_group, "foreach_reduce")  # noqa: B009  # private
        except (ImportError, AttributeError, KeyError):
            yield
            return
        if not isinstance(inputs, property) or inputs.fget is None:
            yield
            return
        read = inputs.fget

        def gathered(param: Any) -> Any:
            with _Copies(self, to_host=False):
                return read(param)

        def reduced(*args: Any, **kwargs: Any) -> Any:
            with _Copies(self, to_host=True):
                return reduce(*args, **kwargs)

        self.seen = True
        # the property serves both the all-gather and a 1-rank mesh's direct copy
        patched = [(FSDPParam, "all_gather_inputs", property(gathered), inputs),
                   (_fsdp_param_group, "foreach_reduce", reduced, reduce)]
        try:
            for owner, name, replacement, _ in patched:
                setattr(owner, name, replacement)
            yield
        finally:
            for owner, name, _, original in patched:
                setattr(owner, name, original)
