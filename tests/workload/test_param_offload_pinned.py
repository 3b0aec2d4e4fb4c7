"""FSDP2's offload copies seen one ``Tensor.to`` at a time (issue 42's mutation run of
``tensorledger.workload.param_offload``): which calls count, which way, how many bytes, and the
copy a stand-in device makes; the two FSDP2 functions wrapped and put back."""

from __future__ import annotations

import torch

from tensorledger.workload.param_offload import (
    ParamOffload,
    _Copies,
    _device_of,
    offload_policy,
)


def test_the_device_a_to_call_names() -> None:
    t = torch.ones(1)
    assert _device_of((t, "cpu"), {}) == torch.device("cpu")  # positional, by name
    assert _device_of((t, torch.device("meta")), {}) == torch.device("meta")
    assert _device_of((t,), {"device": "meta"}) == torch.device("meta")  # by keyword
    assert _device_of((t, torch.float16), {}) is None  # a dtype alone names none
    assert _device_of((t,), {}) is None


def test_pinned_only_where_there_is_an_accelerator() -> None:
    assert offload_policy("cpu").pin_memory is False
    assert offload_policy("cuda").pin_memory is True


def test_copies_to_the_host_counted_and_made_on_a_stand_in() -> None:
    told: list[torch.Tensor] = []
    offload = ParamOffload(stand_in=True, on_host=told.append)
    t = torch.ones(3)  # 3 fp32: 12 B
    with _Copies(offload, to_host=True):
        host = t.to("cpu", non_blocking=True)  # FSDP2's form: counted
        t.to("cpu")  # no non_blocking: not FSDP2's copy
        t.to(torch.float64, non_blocking=True)  # names no device
        t.to("meta", non_blocking=True)  # not to the host
    assert host is not t and torch.equal(host, t)  # the stand-in's copy, a new tensor
    assert told == [host]
    assert (offload.copies, offload.to_host_bytes, offload.to_device_bytes) == (1, 12, 0)


def test_copies_to_the_device_counted_whichever_device() -> None:
    offload = ParamOffload(stand_in=True)
    t = torch.ones(2, dtype=torch.float64)  # 2 fp64: 16 B
    with _Copies(offload, to_host=False):
        same = t.to(device=torch.device("cpu"), non_blocking=True)  # the stand-in device
        meta = t.to("meta", non_blocking=True)  # torch's own copy: counted, not copied again
    assert same is not t and meta.device.type == "meta"
    assert (offload.copies, offload.to_device_bytes, offload.to_host_bytes) == (2, 32, 0)
    offload.reset()
    assert (offload.copies, offload.to_device_bytes, offload.to_host_bytes) == (0, 0, 0)


def test_on_a_real_device_the_copies_are_torchs_own() -> None:
    offload = ParamOffload(stand_in=False)
    t = torch.ones(4)
    with _Copies(offload, to_host=True):
        back = t.to("cpu", non_blocking=True)
    assert back is t  # the CPU's .to returns the tensor itself; nothing made here
    assert (offload.copies, offload.to_host_bytes) == (1, 16)


def test_fsdp2s_functions_wrapped_while_watching_and_put_back() -> None:
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam

    inputs = FSDPParam.__dict__["all_gather_inputs"]
    reduce = _fsdp_param_group.foreach_reduce
    offload = ParamOffload(stand_in=True)
    assert offload.seen is False
    with offload.watching():
        assert offload.seen is True
        assert FSDPParam.__dict__["all_gather_inputs"] is not inputs
        assert _fsdp_param_group.foreach_reduce is not reduce
    assert FSDPParam.__dict__["all_gather_inputs"] is inputs
    assert _fsdp_param_group.foreach_reduce is reduce
