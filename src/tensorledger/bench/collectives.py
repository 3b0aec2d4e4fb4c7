"""Measure this machine's collectives under torchrun and fit the link's latency and bandwidth.

``probe_collectives(ranks)`` launches ``torchrun --standalone --nproc-per-node ranks`` on
:mod:`tensorledger.bench.collectives_rank` (gloo on the CPU, NCCL on CUDA).  Each rank times
all-reduce, all-gather and reduce-scatter over a sweep of message sizes: a barrier, warm-up
calls, then samples of several calls each, the sample's time being the slowest rank's (a
collective is done when its last rank is).  Rank 0 writes per size the median time, the
algorithm bandwidth S / t and the bus bandwidth algbw × factor, with S and the factors as
nccl-tests defines them (NVIDIA/nccl-tests, doc/PERFORMANCE.md; :mod:`tensorledger.roofline.
collectives`): all-reduce 2(n−1)/n, all-gather and reduce-scatter (n−1)/n.

``fit_link`` then fits the ring model that ``collective_time`` prices with,
t = α·steps + β·moved (steps: 2(n−1) for all-reduce, n−1 for the others; moved: factor × S
bytes each rank sends), so a profile holding α as ``intra_node_latency`` and 1/β as
``intra_node_bandwidth`` prices collectives as they were measured.

>>> from tensorledger.roofline.collectives import CollectiveKind as K
>>> fit = fit_link([(K.ALL_REDUCE, 1e6, 2 * 50e-6 + 1e6 / 1e9),   # 2 steps, sends S
...                 (K.ALL_GATHER, 4e6, 50e-6 + 2e6 / 1e9)], ranks=2)  # 1 step, sends S/2
>>> round(fit.latency_s * 1e6, 6), round(fit.bandwidth_bytes_per_s / 1e9, 6)
(50.0, 1.0)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorledger.errors import DeviceError, InputError
from tensorledger.roofline.collectives import CollectiveKind, bus_factor, ring_steps
from tensorledger.summary import show_bytes, show_time, summary

__all__ = [
    "DEFAULT_SIZES",
    "ERROR_MARK",
    "KINDS",
    "MAX_RANKS",
    "PROGRESS_MARK",
    "QUICK_SIZES",
    "CollectivePoint",
    "CollectiveProbe",
    "LinkFit",
    "check_ranks",
    "collective_point",
    "fit_link",
    "link_time_s",
    "probe_collectives",
    "read_probe",
]

#: The collectives measured, in the order they are timed.
KINDS = (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
#: S from 4 KiB to 64 MiB in powers of 4 (S as nccl-tests defines it, per kind).
DEFAULT_SIZES = tuple(4**k * 2**10 for k in range(1, 10) if 4**k * 2**10 <= 64 * 2**20)
QUICK_SIZES = (4 * 2**10, 64 * 2**10, 2**20, 16 * 2**20)
#: The most ranks the probe launches on one machine.
MAX_RANKS = 64
#: Rank 0 prefixes its progress lines with this, so the parent tells them from torchrun's.
PROGRESS_MARK = "tensorledger-progress: "
#: A rank that fails says why in one line with this prefix.
ERROR_MARK = "tensorledger-error: "

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CollectivePoint:
    """One collective at one size, as nccl-tests reports it."""

    kind: str  # a CollectiveKind value: "all-reduce", "all-gather", "reduce-scatter"
    size_bytes: int  # S: the all-reduce buffer, the whole gathered / reduced array
    ranks: int
    calls_per_sample: int
    samples_s: tuple[float, ...]  # per call, each the slowest rank's
    median_s: float
    spread: float  # interquartile range / median
    bus_factor: float
    algbw_bytes_per_s: float  # S / median
    busbw_bytes_per_s: float  # algbw × bus_factor

    def __repr__(self) -> str:
        return summary("CollectivePoint", self.kind, show_bytes(self.size_bytes),
                       f"{self.ranks} ranks", f"median {show_time(self.median_s)}",
                       f"busbw {show_bytes(self.busbw_bytes_per_s)}/s")


def collective_point(kind: CollectiveKind, size_bytes: int, ranks: int,
                     samples_s: Sequence[float], calls_per_sample: int = 1) -> CollectivePoint:
    """The nccl-tests figures of ``samples_s`` (seconds per call): median, algbw, busbw.

    >>> p = collective_point(CollectiveKind.ALL_REDUCE, 2**20, 4, [1e-3, 2e-3, 3e-3])
    >>> p.algbw_bytes_per_s, p.busbw_bytes_per_s   # 2^20 B / 2 ms; × 2·3/4
    (524288000.0, 786432000.0)
    """
    if not samples_s or not all(math.isfinite(s) and s > 0 for s in samples_s):
        raise InputError(f"a collective's samples must be positive, finite seconds, got "
                         f"{list(samples_s)[:4]!r}")
    ordered = sorted(samples_s)
    median = statistics.median(ordered)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    factor = bus_factor(kind, ranks)
    algbw = size_bytes / median
    return CollectivePoint(kind=kind.value, size_bytes=size_bytes, ranks=ranks,
                           calls_per_sample=calls_per_sample, samples_s=tuple(samples_s),
                           median_s=median, spread=(q3 - q1) / median, bus_factor=factor,
                           algbw_bytes_per_s=algbw, busbw_bytes_per_s=algbw * factor)


@dataclass(frozen=True)
class LinkFit:
    """α and β of one link, fitted to measured collectives: t = α·steps + moved / B."""

    latency_s: float  # α: per ring step
    bandwidth_bytes_per_s: float  # B = 1/β: per device, per direction (busbw's scale)
    ranks: int
    points: int
    rms_relative_error: float  # of the fitted times against the measured ones
    latency_clamped: bool = False  # the free fit gave α < 0; α = 0 and B refitted alone

    def __repr__(self) -> str:
        return summary("LinkFit", f"α {show_time(self.latency_s)}",
                       f"B {show_bytes(self.bandwidth_bytes_per_s)}/s", f"{self.ranks} ranks",
                       f"{self.points} points", f"rms error {self.rms_relative_error:.1%}")


def link_time_s(kind: CollectiveKind, size_bytes: float, ranks: int, latency_s: float,
                bandwidth_bytes_per_s: float) -> float:
    """The ring model on one link: α·steps + factor·S / B (what ``collective_time`` gives on a
    single node with ``intra_node_latency`` α and ``intra_node_bandwidth`` B)."""
    return (latency_s * ring_steps(kind, ranks)
            + bus_factor(kind, ranks) * size_bytes / bandwidth_bytes_per_s)


def fit_link(points: Sequence[tuple[CollectiveKind, float, float]], ranks: int) -> LinkFit:
    """Least squares fit of α and β to ``(kind, S bytes, seconds)`` points on ``ranks`` ranks.

    Each point is a row t = α·steps + β·moved with the ring's step count and the bytes each
    rank sends (``bus_factor`` × S).  The rows are weighted by 1/t, so the residuals are
    relative: sizes span four decades, and unweighted the largest messages alone would set α.
    A negative α (noise at small sizes) is clamped to 0 and β refitted alone.  Exact points
    are recovered exactly (to rounding).
    """
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise InputError(f"a link is fitted on 2 or more ranks, got {ranks!r}")
    rows = []
    for kind, size, time_s in points:
        if not (math.isfinite(size) and size > 0 and math.isfinite(time_s) and time_s > 0):
            raise InputError(f"a fitted point needs a size and a time above 0, got "
                             f"({kind.value}, {size!r}, {time_s!r})")
        weight = 1.0 / time_s
        rows.append((ring_steps(kind, ranks) * weight, bus_factor(kind, ranks) * size * weight,
                     1.0))  # t/t
    # normal equations of the weighted problem: [[aa, ab], [ab, bb]] · [α, β] = [ay, by]
    aa = math.fsum(a * a for a, _, _ in rows)
    ab = math.fsum(a * b for a, b, _ in rows)
    bb = math.fsum(b * b for _, b, _ in rows)
    ay = math.fsum(a * y for a, _, y in rows)
    by = math.fsum(b * y for _, b, y in rows)
    determinant = aa * bb - ab * ab
    if len(rows) < 2 or determinant <= 1e-12 * aa * bb:
        raise InputError("fitting a latency and a bandwidth needs at least two points whose "
                         "steps and bytes are not in the same proportion (two sizes, or two "
                         "kinds)")
    alpha = (ay * bb - ab * by) / determinant
    beta = (aa * by - ab * ay) / determinant
    clamped = alpha < 0
    if clamped:
        alpha, beta = 0.0, by / bb
    if beta <= 0:
        raise InputError("the measured times do not grow with the message size, so no "
                         "bandwidth can be fitted; measure larger messages")
    residuals = [alpha * a + beta * b - y for a, b, y in rows]
    rms = math.sqrt(math.fsum(r * r for r in residuals) / len(rows))
    return LinkFit(latency_s=alpha, bandwidth_bytes_per_s=1.0 / beta, ranks=ranks,
                   points=len(rows), rms_relative_error=rms, latency_clamped=clamped)


@dataclass(frozen=True)
class CollectiveProbe:
    """What ``probe_collectives`` measured and the link fitted to it."""

    backend: str  # "gloo" or "nccl"
    device: str
    ranks: int
    link: str  # "intra-node": every rank on this machine
    points: tuple[CollectivePoint, ...]
    fit: LinkFit
    skipped: tuple[str, ...] = field(default=())  # kinds the backend does not run, with why
    max_spread: float = 0.10  # a point more spread than this is named unreliable (as the probe)

    @property
    def unreliable(self) -> tuple[str, ...]:
        """The points whose samples spread more than ``max_spread`` of their median."""
        return tuple(f"{p.kind} {p.size_bytes} B (spread {p.spread:.0%})" for p in self.points
                     if p.spread > self.max_spread)

    def __repr__(self) -> str:
        return summary("CollectiveProbe", self.backend, f"{self.ranks} ranks",
                       f"{len(self.points)} points", repr(self.fit))

    def busbw_curves(self) -> dict[str, tuple[tuple[float, float], ...]]:
        """``busbw.<kind>`` → ((S bytes, busbw bytes/s), ...), sizes increasing."""
        curves: dict[str, list[tuple[float, float]]] = {}
        for point in self.points:
            curves.setdefault(f"busbw.{point.kind}", []).append(
                (float(point.size_bytes), point.busbw_bytes_per_s))
        return {name: tuple(sorted(points)) for name, points in curves.items()}


def _sizes(sizes: Sequence[int], ranks: int) -> tuple[int, ...]:
    """Each S rounded down to whole fp32 elements that split evenly over the ranks."""
    unit = 4 * ranks
    out = sorted({max(unit, size - size % unit) for size in sizes})
    return tuple(out)


def read_probe(document: dict[str, Any]) -> tuple[tuple[CollectivePoint, ...], tuple[str, ...]]:
    """The points and skipped kinds of the JSON rank 0 wrote."""
    points = tuple(CollectivePoint(**{**p, "samples_s": tuple(p["samples_s"])})
                   for p in document["points"])
    return points, tuple(document.get("skipped", ()))


def check_ranks(ranks: int, device: str = "cpu") -> str:
    """The backend for ``ranks`` local ranks on ``device`` (``gloo`` or ``nccl``), or an
    :class:`InputError` saying why they cannot be launched."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 2 <= ranks <= MAX_RANKS:
        raise InputError(f"collectives need 2 to {MAX_RANKS} ranks, got {ranks!r}")
    kind = device.strip().lower().split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise InputError(f"collectives are probed on cpu (gloo) or cuda (nccl), not {device!r}")
    if kind == "cpu":
        return "gloo"
    import torch

    present = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if ranks > present:
        raise InputError(f"{ranks} NCCL ranks need {ranks} CUDA devices; this machine has "
                         f"{present} (use --device cpu for gloo ranks)")
    return "nccl"


def probe_collectives(ranks: int = 2, *, device: str = "cpu",
                      sizes: Sequence[int] = DEFAULT_SIZES, budget_s: float = 0.2,
                      warmup: int = 2, min_repeats: int = 5, max_repeats: int = 50,
                      timeout_s: float = 600.0, progress: Progress | None = None
                      ) -> CollectiveProbe:
    """Time all-reduce, all-gather and reduce-scatter on ``ranks`` local ranks under torchrun
    and fit this machine's link.  ``budget_s``: seconds of samples per point, within
    ``min_repeats`` to ``max_repeats`` samples.  A failed or timed-out torchrun is one
    :class:`DeviceError`; ``progress`` is told each point as rank 0 starts it."""
    backend = check_ranks(ranks, device)
    if not sizes or not all(isinstance(s, int) and 1 <= s <= 2**34 for s in sizes):
        raise InputError("collective sizes must be whole numbers of bytes from 1 to 2^34")
    kind = "cuda" if backend == "nccl" else "cpu"
    say = progress or (lambda _: None)
    spec = {"backend": backend, "device": kind, "sizes": list(_sizes(sizes, ranks)),
            "kinds": [k.value for k in KINDS], "budget_s": budget_s, "warmup": warmup,
            "min_repeats": min_repeats, "max_repeats": max_repeats}
    with tempfile.TemporaryDirectory(prefix="tensorledger-collectives-") as folder:
        spec_path, out_path = Path(folder) / "spec.json", Path(folder) / "result.json"
        spec_path.write_text(json.dumps(spec))
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(ranks), "-m", "tensorledger.bench.collectives_rank",
                   str(spec_path), str(out_path)]
        say(f"torchrun with {ranks} ranks ({backend})")
        _run(command, ranks, timeout_s, say)
        try:
            document = json.loads(out_path.read_text())
            points, skipped = read_probe(document)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DeviceError(f"torchrun with {ranks} ranks ended without a readable result "
                              f"({type(error).__name__}: {str(error)[:120]})") from None
    fit = fit_link([(CollectiveKind(p.kind), p.size_bytes, p.median_s) for p in points], ranks)
    return CollectiveProbe(backend=backend, device=kind, ranks=ranks, link="intra-node",
                           points=points, fit=fit, skipped=skipped)


def _run(command: list[str], ranks: int, timeout_s: float, say: Progress) -> None:
    """Run torchrun; rank 0's marked lines go to ``say``, the rest is kept for the error."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONUNBUFFERED": "1"}
    tail: deque[str] = deque(maxlen=400)
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, text=True, env=env,
                                   start_new_session=True)
    except OSError as error:
        raise DeviceError(f"could not start torchrun: {error}") from None
    timer = threading.Timer(timeout_s, lambda: _kill(process))
    timer.daemon = True
    timer.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            text = line.rstrip()
            if text.startswith(PROGRESS_MARK):
                say(text[len(PROGRESS_MARK):])
            elif text:
                tail.append(text)
        code = process.wait()
    finally:
        timer.cancel()
        if process.poll() is None:
            _kill(process)
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
    if code != 0:
        reason = _reason(tail) if code > 0 else f"killed after {timeout_s:g} s"
        raise DeviceError(f"torchrun with {ranks} ranks failed (exit {code}): {reason}")


def _kill(process: subprocess.Popen[str]) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _reason(tail: deque[str]) -> str:
    """The line of torchrun's output that says most: a rank's own marked line, else the first
    error a rank printed (before torchrun's report of the failure, which names no cause)."""
    for line in reversed(tail):
        if line.startswith(ERROR_MARK):
            return line[len(ERROR_MARK):].strip()[:200]
    for line in tail:
        if line[:1].isspace() or "elastic" in line or "torch.distributed" in line:
            continue
        if any(word in line for word in ("Error", "error", "No module named", "Killed")):
            return line.strip()[:200]
    return tail[-1].strip()[:200] if tail else "no output"
