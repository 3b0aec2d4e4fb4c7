"""Collectives on this machine: the fitted ring model against measured times.

Two torchrun runs of ``probe_collectives`` (2 gloo ranks on the CPU unless ``--ranks`` /
``--device`` say otherwise), all-reduce, all-gather and reduce-scatter from 4 KiB to 64 MiB.
The first run is fitted (α per ring step, B per direction); the second is the measurement the
predictions are set against, so no point predicts itself.  Predictions per kind and size:

- ``profile``: ``collective_time`` on the chip read back from the profile TOML the probe writes
  (devices_per_node = ranks, intra_node_bandwidth = B, intra_node_latency = α);
- ``fit``: the fitted α and B in the ring formula directly, without the catalog (they agree
  with ``profile`` to rounding: the check that the profile carries the fit);
- ``per-kind``: each kind fitted alone, which shows how much of the error comes from one link
  for all kinds (gloo runs each collective its own way) rather than from the formula's shape.

No threshold is asserted: loopback gloo on a shared CPU is what it is, and timings are noisy.
Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from tensorledger.bench.collectives import (
    DEFAULT_SIZES,
    KINDS,
    CollectiveProbe,
    fit_link,
    link_time_s,
    probe_collectives,
)
from tensorledger.bench.probe import ProbeResult, profile_toml
from tensorledger.hardware import Hardware
from tensorledger.hardware.catalog import parse_hardware_toml
from tensorledger.roofline.collectives import CollectiveKind, collective_time


def _profile_chip(probe: CollectiveProbe) -> Hardware:
    # the collective keys are what is read back here; the rest of a profile is a stand-in
    stand_in = ProbeResult(device=probe.device, name="bench_collectives", memory_bytes=2**30,
                           dense_flop_per_s={"fp32": 1e11}, memory_bandwidth_bytes_per_s=1e10,
                           op_overhead_s=1e-6, bare_op_overhead_s=1e-6)
    return parse_hardware_toml(profile_toml(stand_in, collectives=probe), "profile", "local")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    def say(step: str) -> None:
        print(f"  {step}", file=sys.stderr, flush=True)

    print(f"run 1 (fitted), {args.ranks} ranks:", file=sys.stderr)
    fitted = probe_collectives(args.ranks, device=args.device, progress=say)
    print("run 2 (measured):", file=sys.stderr)
    measured = probe_collectives(args.ranks, device=args.device, progress=say)
    chip = _profile_chip(fitted)
    fit = fitted.fit
    per_kind = {kind: fit_link([(kind, p.size_bytes, p.median_s) for p in fitted.points
                                if p.kind == kind.value], args.ranks) for kind in KINDS}
    print(f"fit (run 1): α = {fit.latency_s * 1e6:.1f} µs per ring step, "
          f"B = {fit.bandwidth_bytes_per_s / 1e6:.1f} MB/s per direction, "
          f"rms error {fit.rms_relative_error:.1%} over {fit.points} points"
          + (" (α clamped to 0)" if fit.latency_clamped else ""))
    for kind, own in per_kind.items():
        print(f"  {kind.value} alone: α = {own.latency_s * 1e6:.1f} µs, "
              f"B = {own.bandwidth_bytes_per_s / 1e6:.1f} MB/s")
    header = (f"{'collective':<15}{'S':>9}{'busbw MB/s':>11}{'measured':>11}{'profile':>11}"
              f"{'fit':>11}{'error':>8}{'per-kind':>11}{'error':>8}")
    print(header)
    rows: list[dict[str, object]] = []
    errors: list[float] = []
    kind_errors: list[float] = []
    for point in measured.points:
        kind = CollectiveKind(point.kind)
        size = point.size_bytes
        profile_s = collective_time(kind, size, args.ranks, chip).time_s
        fit_s = link_time_s(kind, size, args.ranks, fit.latency_s, fit.bandwidth_bytes_per_s)
        own = per_kind[kind]
        kind_s = link_time_s(kind, size, args.ranks, own.latency_s, own.bandwidth_bytes_per_s)
        error = profile_s / point.median_s - 1
        kind_error = kind_s / point.median_s - 1
        print(f"{point.kind:<15}{_size(size):>9}{point.busbw_bytes_per_s / 1e6:>11.1f}"
              f"{_ms(point.median_s):>11}{_ms(profile_s):>11}{_ms(fit_s):>11}{error:>+8.0%}"
              f"{_ms(kind_s):>11}{kind_error:>+8.0%}")
        rows.append({"kind": point.kind, "size_bytes": size, "measured_s": point.median_s,
                     "spread": point.spread, "busbw_bytes_per_s": point.busbw_bytes_per_s,
                     "profile_s": profile_s, "fit_s": fit_s, "per_kind_s": kind_s,
                     "error": error, "per_kind_error": kind_error})
        errors.append(abs(error))
        kind_errors.append(abs(kind_error))
    print(f"|error| one link: median {_median(errors):.0%}, max {max(errors):.0%}; "
          f"per kind: median {_median(kind_errors):.0%}, max {max(kind_errors):.0%} "
          "(times in ms; a shared, loaded CPU: noisy)")
    print(json.dumps({"benchmark": "collectives_fit_vs_measured", "ranks": args.ranks,
                      "backend": fitted.backend, "sizes_bytes": list(DEFAULT_SIZES),
                      "latency_s": fit.latency_s,
                      "bandwidth_bytes_per_s": fit.bandwidth_bytes_per_s,
                      "fit_rms_relative_error": fit.rms_relative_error,
                      "per_kind": {k.value: {"latency_s": f.latency_s,
                                             "bandwidth_bytes_per_s": f.bandwidth_bytes_per_s}
                                   for k, f in per_kind.items()},
                      "median_abs_error": _median(errors), "max_abs_error": max(errors),
                      "points": rows}))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if math.isfinite(seconds) else "-"


def _size(size: int) -> str:
    return f"{size // 2**20} MiB" if size >= 2**20 else f"{size // 2**10} KiB"


if __name__ == "__main__":
    main()
