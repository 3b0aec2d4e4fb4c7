"""Benchmark one square matmul and set its achieved FLOP/s against a spec and a probed peak."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from tensorledger.bench.harness import Measurement, measure
from tensorledger.devices import resolve_device
from tensorledger.dtypes import resolve_dtype
from tensorledger.errors import DeviceError, InputError
from tensorledger.hardware import Hardware
from tensorledger.hostmemory import check_fits_in_memory

__all__ = ["MAX_BUDGET_S", "MAX_MATMUL_N", "MatmulBenchmark", "bench_matmul", "matmul_bytes",
           "spec_matches"]

#: The largest matrix size accepted (a 2^20² fp32 operand is 4 TiB); what fits in memory is
#: checked against the memory available, with both figures in the refusal.
MAX_MATMUL_N = 2**20
#: The longest time budget of repeats, in seconds.
MAX_BUDGET_S = 600.0


@dataclass(frozen=True)
class MatmulBenchmark:
    n: int
    dtype: str
    device: str
    flops: int  # 2·n³: n² outputs, each n multiplies and n adds
    measurement: Measurement
    achieved_flop_per_s: float
    spec_hardware: str | None
    spec_peak_flop_per_s: float | None
    mfu_spec: float | None
    probed_peak_flop_per_s: float | None
    mfu_probed: float | None
    device_name: str = ""  # what the measured device calls itself ("cpu" on the host)
    spec_is_device: bool | None = None  # the spec chip is the device measured (None: no spec)


def spec_matches(hardware: Hardware, device_type: str, device_name: str) -> bool:
    """True when the spec chip can be the device measured: never on the host CPU (the
    catalog holds accelerators); on an accelerator when the chip's model token (the first
    word of its name with a digit: ``H100``, ``MI300X``) is in the device's own name.

    >>> from tensorledger.hardware import get_hardware
    >>> h100 = get_hardware("h100")
    >>> spec_matches(h100, "cpu", "cpu"), spec_matches(h100, "cuda", "NVIDIA H100 80GB HBM3")
    (False, True)
    >>> spec_matches(h100, "cuda", "NVIDIA H200")
    False
    >>> spec_matches(get_hardware("a100"), "cuda", "NVIDIA A100-SXM4-80GB")
    True
    """
    if device_type == "cpu":
        return hardware.origin != "catalog"  # a user's or a probed profile may describe it
    token = next((w for w in hardware.name.split() if any(c.isdigit() for c in w)), None)
    # "NVIDIA A100-SXM4-80GB" names its model between dashes
    return token is not None and token.lower() in re.split(r"[\s_-]+", device_name.lower())


def matmul_bytes(n: int, element_bytes: int) -> int:
    """Peak bytes the benchmark holds: two n×n operands and the product in the dtype, and one
    fp32 operand drawn before its conversion (n² · (3·element_bytes + 4))."""
    return n * n * (3 * element_bytes + 4)


def bench_matmul(n: int, dtype: str = "bf16", device: str = "cpu", *,
                 hardware: Hardware | None = None, probed: Hardware | None = None,
                 budget_s: float = 1.0) -> MatmulBenchmark:
    """Time an n×n by n×n matmul; MFU against ``hardware``'s dense peak and a probed one."""
    if not 1 <= n <= MAX_MATMUL_N:
        raise InputError(f"--n must be from 1 to {MAX_MATMUL_N}, got {n}")
    if not 0 <= budget_s <= MAX_BUDGET_S:
        raise InputError(f"--budget must be from 0 to {MAX_BUDGET_S:g} seconds, got {budget_s:g}")
    resolved = resolve_dtype(dtype)
    if resolved.torch_name is None:
        raise InputError(f"dtype {dtype!r} has no torch type to multiply in")
    torch_dtype = getattr(torch, resolved.torch_name)
    dev = resolve_device(device, ("cpu", "cuda", "mps", "xpu"))
    needed = matmul_bytes(n, torch.empty((), dtype=torch_dtype).element_size())
    free = int(torch.cuda.mem_get_info(dev)[0]) if dev.type == "cuda" else None
    check_fits_in_memory(needed, f"a {n}×{n} {resolved.name} matmul on {dev.type} (two operands, "
                         "the product and one fp32 draw)", "give a smaller --n", free)
    a = torch.randn(n, n, device=dev).to(torch_dtype)
    b = torch.randn(n, n, device=dev).to(torch_dtype)
    try:
        result = measure(lambda: a @ b, device=dev, budget_s=budget_s, name=f"matmul {n}")
    except RuntimeError as error:
        raise DeviceError(f"{dev.type} cannot multiply {resolved.name}: "
                          f"{str(error).splitlines()[0]}") from None
    flops = 2 * n**3
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type
    achieved = flops / result.median_s
    spec_peak = hardware.peak_flop_per_s(resolved.name) if hardware is not None else None
    probed_peak = None
    if probed is not None and probed.compute_key(resolved.name) in probed.dense_flop_per_s:
        probed_peak = probed.peak_flop_per_s(resolved.name)
    return MatmulBenchmark(
        n=n, dtype=resolved.name, device=str(dev), flops=flops, measurement=result,
        achieved_flop_per_s=achieved,
        spec_hardware=hardware.id if hardware is not None else None,
        spec_peak_flop_per_s=spec_peak,
        mfu_spec=None if spec_peak is None else achieved / spec_peak,
        probed_peak_flop_per_s=probed_peak,
        mfu_probed=None if probed_peak is None else achieved / probed_peak,
        device_name=device_name,
        spec_is_device=None if hardware is None else spec_matches(hardware, dev.type,
                                                                  device_name))
