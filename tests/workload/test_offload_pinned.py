"""torch's save_on_cpu hooks counted, one tensor at a time (issue 42's mutation run of
``tensorledger.workload.offload``): on a stand-in device the unpacked tensor is a copy of the
host one (the copy a GPU makes back into its memory); on a real device torch's own."""

from __future__ import annotations

import torch

from tensorledger.workload.offload import ActivationOffload


def test_a_stand_in_copies_back_on_unpack() -> None:
    told: list[torch.Tensor] = []
    offload = ActivationOffload(stand_in=True, on_host=told.append)
    t = torch.arange(6.0).reshape(2, 3)
    packed = offload.pack(t)
    assert len(told) == 1 and told[0] is packed[1]  # the host tensor, told once
    back = offload.unpack(packed)
    assert back is not packed[1] and torch.equal(back, t)  # a copy, the same values
    assert (offload.to_host_bytes, offload.to_device_bytes) == (6 * 4, 6 * 4)  # 6 fp32


def test_without_a_stand_in_torchs_own_tensor_comes_back() -> None:
    offload = ActivationOffload(stand_in=False)
    packed = offload.pack(torch.ones(5, dtype=torch.float64))
    # on the CPU torch's .to(device) is the host tensor itself: nothing copied here
    assert offload.unpack(packed) is packed[1]
    assert (offload.to_host_bytes, offload.to_device_bytes) == (5 * 8, 5 * 8)
