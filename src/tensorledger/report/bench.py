"""Terminal views of measurements."""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table

from tensorledger.bench.collectives import CollectiveProbe
from tensorledger.bench.harness import HIGH_SPREAD, Measurement
from tensorledger.bench.matmul import MatmulBenchmark
from tensorledger.bench.probe import ProbeResult
from tensorledger.units import (
    format_bandwidth,
    format_bytes,
    format_duration,
    format_flop_rate,
    format_sci,
)

__all__ = ["collectives_view", "matmul_view", "measurement_line", "probe_view"]

View = list[RenderableType | str]


def measurement_line(m: Measurement) -> str:
    line = (f"median {format_duration(m.median_s)} (min {format_duration(m.min_s)}, IQR "
            f"{format_duration(m.iqr_s)}, {len(m.samples_s)} samples × {m.number} calls, "
            f"{m.timer})")
    return line + (f"\nwarning: {m.warning}" if m.warning else "")


def probe_view(result: ProbeResult, path: str) -> View:
    table = Table(title=f"Probe of {result.name}", title_justify="left", header_style="bold")
    for column in ("what", "size", "median", "rate"):
        table.add_column(column, justify="left" if column == "what" else "right")
    for point in result.matmul:
        table.add_row(f"matmul {point.dtype}", f"{point.n}×{point.n}",
                      format_duration(point.median_s), format_flop_rate(point.flop_per_s))
    for point in result.attention:
        table.add_row("attention fp32 fwd+bwd", f"seq {point.n}", format_duration(point.median_s),
                      format_flop_rate(point.flop_per_s))
    kernels = result.kernels
    for a in kernels.attention if kernels is not None else ():
        table.add_row(f"attention {a.dtype} {a.direction}",
                      f"seq {a.seq}, d {a.head_dim}, {a.heads} heads",
                      format_duration(a.median_s), format_flop_rate(a.flop_per_s))
        if a.call_s > 0:  # the call's own time, and its heads' rate (timed at two counts)
            table.add_row("  of which the call's own", f"and {a.few_heads} heads",
                          format_duration(a.call_s),
                          f"{format_flop_rate(a.head_flop_per_s)} a head")
    for st in kernels.streams if kernels is not None else ():
        table.add_row(f"{st.kernel} {st.dtype} (new output)",
                      f"{st.elements} elements", format_duration(st.median_s),
                      format_bandwidth(st.bytes_per_s))
    for li in kernels.linear if kernels is not None else ():
        table.add_row(f"linear {li.dtype}, operands cold",
                      f"{li.tokens}×{li.width} → {li.outputs}", format_duration(li.median_s),
                      format_flop_rate(li.flop_per_s))
    for n in kernels.norms if kernels is not None else ():
        table.add_row(f"layer norm {n.dtype} {n.direction}", f"{n.tokens}×{n.width}",
                      format_duration(n.median_s), format_bandwidth(n.bytes_per_s))
    for o in kernels.ops if kernels is not None else ():
        kernel = f"{o.op} ({o.variant})" if o.variant else o.op  # GELU's tanh kernel apart
        table.add_row(f"{kernel} {o.dtype}", f"{o.rows}×{o.width}", format_duration(o.median_s),
                      format_bandwidth(o.bytes_per_s))
    for lp in kernels.loops if kernels is not None else ():
        table.add_row(f"add {lp.dtype}, strided", f"inner loops of {lp.loop}",
                      format_duration(lp.median_s), format_bandwidth(lp.bytes_per_s))
    for mv in kernels.matvec if kernels is not None else ():
        cold = mv.working_set > mv.weight_bytes
        table.add_row(f"decode product {mv.dtype}, {mv.rows} row{'s' if mv.rows > 1 else ''}"
                      f" ({'cold' if cold else 'warm'})",
                      f"weight {format_bytes(mv.weight_bytes, 'auto-binary')}"
                      + (f" of {format_bytes(mv.working_set, 'auto-binary')}" if cold else ""),
                      format_duration(mv.median_s), format_bandwidth(mv.bytes_per_s))
    for bw in result.bandwidth:
        table.add_row(f"{bw.kernel}{' (new output)' if bw.fresh_output else ' (warm)'}",
                      format_bytes(bw.buffer_bytes, "auto-binary"),
                      format_duration(bw.median_s), format_bandwidth(bw.bytes_per_s))
    pages = result.fresh_pages
    for page in pages.points if pages is not None else ():
        table.add_row("write into a new tensor (its pages, its free)",
                      format_bytes(page.size_bytes, "auto-binary"),
                      format_duration(page.fresh_s), f"warm {format_duration(page.warm_s)}")
    if pages is not None:
        table.add_row(f"fresh pages, tensors of {format_bytes(pages.from_bytes, 'auto-binary')}"
                      " or more", "", "", format_bandwidth(pages.bytes_per_s))
    table.add_row("per-op overhead in a training step", "Transformer d 8, 2 layers",
                  format_duration(result.op_overhead_s), "")
    if result.inference_op_overhead_s > 0:
        table.add_row("per-op overhead in a forward under no_grad", "Transformer d 8, 2 layers",
                      format_duration(result.inference_op_overhead_s), "")
    table.add_row("one bare op", "1 element", format_duration(result.bare_op_overhead_s), "")
    lines: View = [table]
    peaks = ", ".join(f"{k} {format_flop_rate(v)}" for k, v in result.dense_flop_per_s.items())
    bandwidth = format_bandwidth(result.memory_bandwidth_bytes_per_s)
    lines.append(f"peaks: {peaks}; bandwidth {bandwidth}")
    if result.skipped:
        lines.append(f"skipped (no kernel on this device): {', '.join(result.skipped)}")
    if result.unreliable:
        lines.append(f"unreliable: {len(result.unreliable)} figure(s) stayed more spread than "
                     f"{result.max_spread:.0%} of their median after re-measuring: "
                     f"{', '.join(result.unreliable)}; the profile marks them, and predictions "
                     "made with it say so (probe again on a quiet machine)")
    if result.max_spread > HIGH_SPREAD:
        lines.append(f"noise limit: figures with a spread up to {result.max_spread:.0%} of their "
                     "median are in the profile, unmarked (--max-spread)")
    if result.set_aside:
        lines.append(f"set aside: {len(result.set_aside)} figure(s) stayed too noisy after "
                     "re-measuring, longer, and are left out of the profile (no peak, no curve "
                     "point): " + "; ".join(map(str, result.set_aside)))
    lines.append(f"profile written to {path}; use it with --hardware local")
    return lines


def matmul_view(result: MatmulBenchmark) -> View:
    table = Table(title=f"matmul {result.n}×{result.n}×{result.n} {result.dtype} on "
                  f"{result.device}", title_justify="left", header_style="bold")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("FLOPs (2·n³)", format_sci(result.flops))
    table.add_row("time (median)", format_duration(result.measurement.median_s))
    table.add_row("achieved", format_flop_rate(result.achieved_flop_per_s))
    if result.spec_peak_flop_per_s is not None and result.mfu_spec is not None:
        other = ("" if result.spec_is_device is not False else
                 f"; not the device measured: {result.device_name or result.device}")
        table.add_row(f"MFU against {result.spec_hardware}'s dense {result.dtype} peak "
                      f"({format_flop_rate(result.spec_peak_flop_per_s)}{other})",
                      format_sci(result.mfu_spec, 3))
    if result.probed_peak_flop_per_s is not None and result.mfu_probed is not None:
        table.add_row(f"vs probed peak ({format_flop_rate(result.probed_peak_flop_per_s)})",
                      format_sci(result.mfu_probed, 3))
    return [table, measurement_line(result.measurement)]


def collectives_view(result: CollectiveProbe) -> View:
    """The timed collectives (nccl-tests' algbw and busbw) and the link fitted to them."""
    table = Table(title=f"Collectives: {result.ranks} ranks over {result.backend} on "
                  f"{result.device}", title_justify="left", header_style="bold")
    for column in ("collective", "size S", "median", "spread", "algbw", "busbw"):
        table.add_column(column, justify="left" if column == "collective" else "right")
    for point in result.points:
        table.add_row(point.kind, format_bytes(point.size_bytes, "auto-binary"),
                      format_duration(point.median_s), f"{point.spread:.0%}",
                      format_bandwidth(point.algbw_bytes_per_s),
                      format_bandwidth(point.busbw_bytes_per_s))
    fit = result.fit
    lines: View = [table, (
        f"fitted {result.link} link: latency {format_duration(fit.latency_s)} per ring step, "
        f"bandwidth {format_bandwidth(fit.bandwidth_bytes_per_s)} per direction (t = α·steps "
        f"+ bytes sent / B over {fit.points} points, rms error {fit.rms_relative_error:.1%}"
        + ("; α < 0 fitted, clamped to 0" if fit.latency_clamped else "") + ")")]
    lines += [f"skipped {why}" for why in result.skipped]
    return lines
