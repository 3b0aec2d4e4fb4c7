"""The meter's words: one compact line per interval and a short summary at the end.

Formats the figures of :class:`tensorledger.bench.meter_records.MeterInterval` and
:class:`~tensorledger.bench.meter_records.MeterSummary`; computes none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorledger.units import (
    format_bytes,
    format_count,
    format_duration,
    format_flop_rate,
    format_sci,
)

if TYPE_CHECKING:
    from tensorledger.bench.meter_records import MeterInterval, MeterSummary

__all__ = ["interval_line", "summary_text"]


def _mfu(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def interval_line(interval: MeterInterval) -> str:
    """``meter step 40 | 12.3 ms/step + 400 µs outside | 41.6K tok/s | 3.2 TFLOP/s | MFU 0.312
    (bf16 on h100-sxm), expected 0.405 | mem 1.23 GB | cluster 83.2K tok/s, MFU 0.310``: the
    expected MFU is the roofline's time model on the same FLOPs and peak (named in full in the
    summary)."""
    parts = [f"meter step {interval.step}"]
    if interval.step_time_s is not None:
        timing = f"{format_duration(interval.step_time_s, 3)}/step"
        if interval.outside_time_s is not None:
            timing += f" + {format_duration(interval.outside_time_s, 3)} outside"
        parts.append(timing)
    if interval.tokens_per_s is not None:
        parts.append(f"{format_count(interval.tokens_per_s, 3)} tok/s")
    if interval.flop_per_s is not None:
        parts.append(format_flop_rate(interval.flop_per_s, 3))
    where = f"{interval.peak_dtype} on {interval.hardware}" if interval.peak_dtype else (
        interval.hardware)
    expected = ("" if interval.expected_mfu is None
                else f", expected {_mfu(interval.expected_mfu)}")
    parts.append(f"MFU {_mfu(interval.mfu)} ({where}){expected}")
    parts.append(f"mem {format_bytes(interval.peak_memory_bytes, 'auto', 3)}")
    if interval.world_size > 1:
        rate = ("n/a" if interval.cluster_tokens_per_s is None
                else format_count(interval.cluster_tokens_per_s, 3))
        parts.append(f"{interval.world_size} ranks {rate} tok/s, MFU "
                     f"{_mfu(interval.cluster_mfu)}")
    return " | ".join(parts)


def summary_text(summary: MeterSummary) -> str:
    """A few lines: step time (median, IQR), tokens/s, MFU (median, quartiles), memory."""
    lines = [f"meter summary: {summary.measured_steps} of {summary.steps} steps measured on "
             f"{summary.hardware} ({summary.timer}); left out: the first "
             f"{summary.warmup_steps} (warm-up) and {summary.recorded_steps} recorded, "
             f"{format_duration(summary.recording_time_s, 3)} in all"]
    m = summary.step_time
    if m is not None:
        outside = "" if summary.outside_share is None else (
            f"; outside the steps {summary.outside_share:.1%} of the time")
        lines.append(f"  step time median {format_duration(m.median_s, 3)} (IQR "
                     f"{format_duration(m.iqr_s, 3)}, spread {m.spread:.1%}){outside}")
    if summary.tokens_per_s is not None:
        lines.append(f"  tokens/s {format_count(summary.tokens_per_s, 3)} (median per step "
                     f"{format_count(summary.tokens_per_s_median or 0.0, 3)})")
    if summary.mfu is not None and summary.peak is not None:
        lines.append(f"  MFU {_mfu(summary.mfu)} (median {_mfu(summary.mfu_median)}, quartiles "
                     f"{_mfu(summary.mfu_q1)}–{_mfu(summary.mfu_q3)}) against the dense "
                     f"{summary.peak.label} peak {format_flop_rate(summary.peak.flop_per_s, 4)}, "
                     f"attention counted {summary.attention}")
    if summary.expected_mfu is not None and summary.expected_step_time_s is not None:
        ratio = summary.measured_over_expected
        against = "" if ratio is None else f"; measured / expected {ratio:.2f}"
        lines.append(f"  {summary.expected_name} {_mfu(summary.expected_mfu)}: a step of "
                     f"{format_duration(summary.expected_step_time_s, 3)} from "
                     f"{summary.expected_rests_on}{against}")
    if summary.flops_per_step is not None:
        per_token = ("" if summary.flops_per_token is None
                     else f", {format_sci(summary.flops_per_token)} per token")
        routed = "; MoE routing as measured, below" if summary.routing else ""
        lines.append(f"  FLOPs per step {format_sci(summary.flops_per_step)}{per_token}{routed}")
    lines.extend(_routing_lines(summary))
    if summary.uncounted_steps:
        lines.append(f"  {summary.uncounted_steps} steps had shapes never recorded: timed, "
                     "not in MFU")
    lines.append(f"  peak memory {format_bytes(summary.peak_memory_bytes, 'auto', 3)} "
                 f"({summary.memory_source})")
    if summary.world_size > 1:
        rate = ("n/a" if summary.cluster_tokens_per_s is None
                else format_count(summary.cluster_tokens_per_s, 3))
        lines.append(f"  cluster of {summary.world_size} ranks: {rate} tok/s, MFU "
                     f"{_mfu(summary.cluster_mfu)}")
    return "\n".join(lines)


#: MoE layers listed one by one; past them, how many more and their worst imbalance.
_ROUTING_LAYERS = 4
_ROUTING_EXPERTS = 8


def _routing_lines(summary: MeterSummary) -> list[str]:
    """The recorded step's measured MoE routing, and why one recording serves every step."""
    if not summary.routing:
        return []
    lines = ["  MoE routing measured on the recorded step (token-slots per expert); its FLOPs "
             "serve every step of the same shapes: a dropless MoE's FLOPs do not depend on "
             "routing"]
    for layer in summary.routing[:_ROUTING_LAYERS]:
        counts = layer.tokens_per_expert
        shown = ", ".join(format(c, ",") for c in counts[:_ROUTING_EXPERTS])
        if len(counts) > _ROUTING_EXPERTS:
            shown += f", … ({len(counts)} experts)"
        lines.append(f"    {layer.module}: {shown} (busiest / mean "
                     f"{layer.max_over_mean:.2f})")
    rest = summary.routing[_ROUTING_LAYERS:]
    if rest:
        worst = max(layer.max_over_mean for layer in rest)
        lines.append(f"    … {len(rest)} more MoE layers, busiest / mean up to {worst:.2f}")
    return lines
