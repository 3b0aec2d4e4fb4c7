"""The probe written as a hardware file in the catalog's format (``load_hardware_file`` reads
it): peaks, curves, the figures set aside or marked unreliable, and the collectives' node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorledger.bench.harness import HIGH_SPREAD

if TYPE_CHECKING:
    from tensorledger.bench.collectives import CollectiveProbe
    from tensorledger.bench.probe import ProbeResult

__all__ = ["profile_toml"]


def profile_toml(result: ProbeResult, chip_id: str = "local", calibration: str = "",
                 collectives: CollectiveProbe | None = None) -> str:
    """The probe as a hardware file in the catalog's format (``load_hardware_file`` reads it);
    ``calibration``: a ``[calibration]`` table to append (``ledger.calibrate``);
    ``collectives``: the measured collectives, written as this machine's node (its ranks as
    ``devices_per_node``, the fitted link as ``intra_node_bandwidth`` and
    ``intra_node_latency``, so ``collective_time`` prices collectives as measured) and each
    kind's bus bandwidth by size as a ``busbw.<kind>`` curve."""
    lines = [
        f"# measured by `tensorledger probe` on {result.device}",
        f'id = "{chip_id}"',
        f'name = "{result.name} (probed)"',
        f'memory = "{result.memory_bytes}B"',
        f'memory_bandwidth = "{result.memory_bandwidth_bytes_per_s!r}B/s"',
        f'op_overhead = "{result.op_overhead_s * 1e9!r}ns"',
        *([f'inference_op_overhead = "{result.inference_op_overhead_s * 1e9!r}ns"']
          if result.inference_op_overhead_s > 0 else []),
        f'source = "measured by tensorledger probe on {result.device}: best median of a matmul '
        'sweep; bandwidth from copy and triad"',
    ]
    pages = result.fresh_pages
    if pages is not None:
        lines += [f'fresh_pages_from = "{pages.from_bytes}B"',
                  f'fresh_page_rate = "{pages.bytes_per_s!r}B/s"']
    curves = dict(result.curves)
    unreliable = list(result.unreliable)
    if collectives is not None:
        fit = collectives.fit
        lines += [
            f"devices_per_node = {collectives.ranks}",
            f'node_kind = "this machine: {collectives.ranks} ranks over {collectives.backend} '
            f'on {collectives.device} (measured)"',
            f'intra_node_bandwidth = "{fit.bandwidth_bytes_per_s!r}B/s"',
            f'intra_node_latency = "{fit.latency_s * 1e9!r}ns"',
            f'topology_source = "fitted by tensorledger probe --collectives: t = alpha * ring '
            f'steps + bytes sent / B over {fit.points} timed all-reduce, all-gather and '
            f'reduce-scatter points (rms error {fit.rms_relative_error:.1%})"',
        ]
        curves.update(collectives.busbw_curves())
        unreliable += collectives.unreliable
    if result.max_spread > HIGH_SPREAD:
        lines.append(f"# probed with --max-spread {result.max_spread:g}: figures whose "
                     f"interquartile range is up to {result.max_spread:.0%} of their median "
                     "are in this profile, unmarked")
    if result.set_aside:
        lines.append("# set aside (measured, but too noisy to enter this profile):")
        lines += [f"#   {entry}" for entry in result.set_aside]
    if unreliable:
        spread = max(result.max_spread, collectives.max_spread if collectives else 0.0)
        lines.append("# these figures' repeated measurements stayed more spread than "
                     f"{spread:.0%} of their median: probe again on a quiet machine")
        lines.append("unreliable = [" + ", ".join(f'"{u}"' for u in unreliable) + "]")
    lines.append("[dense]")
    lines += [f'{key} = "{value!r}FLOP/s"' for key, value in result.dense_flop_per_s.items()]
    if curves:
        lines.append("[curves]  # [size, rate]: FLOPs and FLOP/s, or bytes moved and bytes/s; "
                     "busbw: S and bus bytes/s")
        for name, points in curves.items():
            pairs = ", ".join(f"[{size!r}, {rate!r}]" for size, rate in points)
            lines.append(f'"{name}" = [{pairs}]')
    return "\n".join(lines) + "\n" + calibration
