"""Probe this device's ceilings and write them as a hardware profile.

- matmul FLOP/s per dtype: square matmuls over a sweep of sizes, best median taken as the
  peak (2·n³ FLOPs each, the house convention for an n×n×n matmul);
- memory bandwidth: copy (reads and writes each byte once: 2·size bytes) and triad
  a = b + s·c (3·size bytes) on warmed buffers several times the last-level cache;
- per-op overhead: the median time of an op on a one-element tensor.

The profile is TOML in the catalog's own format, so ``load_hardware_file`` reads it back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tensorledger.bench.harness import measure
from tensorledger.dtypes import resolve_dtype
from tensorledger.errors import DeviceError

__all__ = ["BandwidthPoint", "MatmulPoint", "ProbeResult", "probe", "profile_toml"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class MatmulPoint:
    dtype: str
    n: int
    flops: int
    median_s: float
    flop_per_s: float


@dataclass(frozen=True)
class BandwidthPoint:
    kernel: str  # "copy" or "triad"
    buffer_bytes: int
    bytes_moved: int
    median_s: float
    bytes_per_s: float


@dataclass(frozen=True)
class ProbeResult:
    """What the probe measured; the peaks are the best points of each sweep."""

    device: str
    name: str
    memory_bytes: int
    dense_flop_per_s: dict[str, float]
    memory_bandwidth_bytes_per_s: float
    op_overhead_s: float
    matmul: tuple[MatmulPoint, ...] = field(default=())
    bandwidth: tuple[BandwidthPoint, ...] = field(default=())
    skipped: tuple[str, ...] = field(default=())  # dtypes the device cannot multiply
    curves: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)


def _device_name(device: torch.device) -> tuple[str, int]:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return props.name, int(props.total_memory)
    name = "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{name} ({torch.get_num_threads()} threads)", int(memory)


def _last_level_cache_bytes() -> int:
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = index.read_text().strip()
        factor = {"K": 2**10, "M": 2**20}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KM")) * factor)
    return max(sizes, default=32 * 2**20)


def _matmul_point(dtype: str, n: int, device: torch.device, budget_s: float) -> MatmulPoint:
    torch_dtype = getattr(torch, resolve_dtype(dtype).torch_name or "float32")
    a = torch.randn(n, n, device=device).to(torch_dtype)
    b = torch.randn(n, n, device=device).to(torch_dtype)
    result = measure(lambda: a @ b, device=device, budget_s=budget_s, min_repeats=3, warmup=2,
                     name=f"matmul {dtype} {n}")
    flops = 2 * n**3
    return MatmulPoint(dtype, n, flops, result.median_s, flops / result.median_s)


def _bandwidth_points(device: torch.device, buffer_bytes: int, budget_s: float
                      ) -> tuple[BandwidthPoint, ...]:
    elements = max(buffer_bytes // 4, 1)
    a = torch.empty(elements, device=device)
    b = torch.rand(elements, device=device)
    c = torch.rand(elements, device=device)
    copy = measure(lambda: a.copy_(b), device=device, budget_s=budget_s, min_repeats=3)
    triad = measure(lambda: torch.add(b, c, alpha=3.0, out=a), device=device,
                    budget_s=budget_s, min_repeats=3)
    size = elements * 4
    return (BandwidthPoint("copy", size, 2 * size, copy.median_s, 2 * size / copy.median_s),
            BandwidthPoint("triad", size, 3 * size, triad.median_s, 3 * size / triad.median_s))


def _curve(points: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Points sorted by size, one per size (the best rate at that size)."""
    best: dict[float, float] = {}
    for size, rate in points:
        best[size] = max(best.get(size, 0.0), rate)
    return tuple(sorted(best.items()))


def probe(device: str = "cpu", *, dtypes: Sequence[str] = ("fp32", "bf16", "fp16"),
          sizes: Sequence[int] | None = None, buffer_bytes: int | None = None,
          budget_s: float = 0.5, slow_call_s: float = 1.0, bandwidth_sweep: bool = True,
          progress: Progress | None = None) -> ProbeResult:
    """Measure the ceilings of ``device``.  ``progress`` is told each step as it starts.

    A dtype's sweep stops early once one call takes longer than ``slow_call_s`` (fp16 on a
    CPU without fp16 units runs a thousand times slower than fp32).  ``bandwidth_sweep`` adds
    smaller buffers, which stream from cache, to the profile's bandwidth curve.
    """
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError("no CUDA device is available; probe the cpu instead")
    if dev.type not in ("cpu", "cuda"):
        raise DeviceError(f"probing {dev.type!r} is not supported; use cpu or cuda")
    say = progress or (lambda _: None)
    name, memory = _device_name(dev)
    if sizes is None:
        sizes = ((256, 512, 1024, 2048, 4096, 8192) if dev.type == "cuda"
                 else (64, 128, 256, 512, 1024, 2048))
    points: list[MatmulPoint] = []
    skipped: list[str] = []
    for dtype in dtypes:
        for n in sorted(sizes):
            say(f"matmul {dtype} {n}×{n}")
            try:
                point = _matmul_point(dtype, n, dev, budget_s)
            except RuntimeError:  # the device has no kernel for this dtype
                skipped.append(dtype)
                break
            points.append(point)
            if point.median_s > slow_call_s:  # larger sizes would only take longer
                break
    if buffer_bytes is None:
        buffer_bytes = 2**30 if dev.type == "cuda" else max(4 * _last_level_cache_bytes(),
                                                            64 * 2**20)
    say(f"memory bandwidth, {buffer_bytes / 2**20:.0f} MiB buffers")
    bandwidth = _bandwidth_points(dev, buffer_bytes, budget_s)
    small: list[BandwidthPoint] = []
    if bandwidth_sweep:
        for size in (2**16, 2**18, 2**20, 2**22, 2**24):
            if size < buffer_bytes:
                say(f"memory bandwidth, {size / 2**10:.0f} KiB buffers (cache)")
                small.extend(_bandwidth_points(dev, size, budget_s / 2))
    say("per-op overhead")
    tiny = torch.ones(1, device=dev)
    overhead = measure(lambda: torch.add(tiny, tiny), device=dev, budget_s=budget_s / 2,
                       min_sample_s=1e-4).median_s
    peaks: dict[str, float] = {}
    for point in points:
        peaks[point.dtype] = max(peaks.get(point.dtype, 0.0), point.flop_per_s)
    curves = {f"matmul.{resolve_dtype(dtype).compute}": _curve(
        [(p.flops, p.flop_per_s) for p in points if p.dtype == dtype]) for dtype in peaks}
    if small:
        curves["bandwidth"] = _curve([(p.bytes_moved, p.bytes_per_s)
                                      for p in (*small, *bandwidth)])
    return ProbeResult(device=str(dev), name=name, memory_bytes=memory,
                       dense_flop_per_s={resolve_dtype(k).compute: v for k, v in peaks.items()},
                       memory_bandwidth_bytes_per_s=max(p.bytes_per_s for p in bandwidth),
                       op_overhead_s=overhead, matmul=tuple(points),
                       bandwidth=(*small, *bandwidth), skipped=tuple(skipped), curves=curves)


def profile_toml(result: ProbeResult, chip_id: str = "local") -> str:
    """The probe as a hardware file in the catalog's format (``load_hardware_file`` reads it)."""
    lines = [
        f"# measured by `tensorledger probe` on {result.device}",
        f'id = "{chip_id}"',
        f'name = "{result.name} (probed)"',
        f'memory = "{result.memory_bytes}B"',
        f'memory_bandwidth = "{result.memory_bandwidth_bytes_per_s!r}B/s"',
        f'op_overhead = "{result.op_overhead_s * 1e9!r}ns"',
        f'source = "measured by tensorledger probe on {result.device}: best median of a matmul '
        'sweep; bandwidth from copy and triad"',
        "[dense]",
    ]
    lines += [f'{key} = "{value!r}FLOP/s"' for key, value in result.dense_flop_per_s.items()]
    if result.curves:
        lines.append("[curves]  # [size, rate]: FLOPs and FLOP/s, or bytes moved and bytes/s")
        for name, points in result.curves.items():
            pairs = ", ".join(f"[{size!r}, {rate!r}]" for size, rate in points)
            lines.append(f'"{name}" = [{pairs}]')
    return "\n".join(lines) + "\n"
