"""Quantization speed on a 4096×4096 fp32 tensor, each against a reference in the same run.

- our NVFP4 quantize + dequantize (block amax, E4M3 scales, E2M1 codes, decoded tensor) against
  ml_dtypes' plain fp4 ``astype`` round trip of the same tensor, which does no block scaling;
- our saturating fp8 e4m3 cast (values and codes) against torch's own
  ``x.to(torch.float8_e4m3fn).float()``.

Prints a table, then one line of JSON.  A ratio above 1 means ours is faster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np
import torch

from tensorledger.formats.blocks import quantize_nvfp4
from tensorledger.formats.quantize import cast

SHAPE = (4096, 4096)
REPEATS = 7


def best_times_s(operations: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Fastest of REPEATS runs of each operation, the operations interleaved so that a noisy
    neighbour on a shared machine slows each of them alike."""
    for work in operations.values():
        work()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in operations}
    for _ in range(REPEATS):
        for name, work in operations.items():
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    return {name: min(values) for name, values in times.items()}


def main() -> None:
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0))
    x_np = x.numpy()
    elements = x.numel()
    timings = best_times_s({
        "nvfp4_quantize_dequantize": lambda: quantize_nvfp4(x).dequantized,
        "ml_dtypes_fp4_astype_round_trip":
            lambda: x_np.astype(ml_dtypes.float4_e2m1fn).astype(np.float32),
        "fp8_e4m3_cast": lambda: cast(x, "fp8_e4m3fn", saturate=True).values,
        "torch_float8_e4m3fn_round_trip": lambda: x.to(torch.float8_e4m3fn).float(),
    })
    nvfp4_ratio = timings["ml_dtypes_fp4_astype_round_trip"] / timings["nvfp4_quantize_dequantize"]
    fp8_ratio = timings["torch_float8_e4m3fn_round_trip"] / timings["fp8_e4m3_cast"]
    print(f"{SHAPE[0]}×{SHAPE[1]} fp32, best of {REPEATS} (interleaved), torch threads "
          f"{torch.get_num_threads()}")
    print(f"{'operation':36s} {'time ms':>9s} {'Melem/s':>9s}")
    for name, seconds in timings.items():
        print(f"{name:36s} {seconds * 1e3:9.1f} {elements / seconds / 1e6:9.1f}")
    print(f"NVFP4 q+dq vs ml_dtypes fp4 astype round trip: {nvfp4_ratio:.2f}× (target >= 1.0)")
    print(f"our fp8 e4m3 cast vs torch float8_e4m3fn round trip: {fp8_ratio:.2f}×")
    document: dict[str, float | int] = {"elements": elements}
    for name, seconds in timings.items():
        document[f"{name}_time_s"] = seconds
        document[f"{name}_elements_per_s"] = elements / seconds
    document["nvfp4_vs_ml_dtypes_throughput_ratio"] = nvfp4_ratio
    document["fp8_vs_torch_throughput_ratio"] = fp8_ratio
    print(json.dumps(document))


if __name__ == "__main__":
    main()
