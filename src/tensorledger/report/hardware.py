"""Terminal views of the hardware catalog."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.console import RenderableType
from rich.table import Table

from tensorledger.hardware import COMPUTE_KEYS, Hardware
from tensorledger.units import (
    format_bandwidth,
    format_bytes,
    format_duration,
    format_flop_rate,
    format_sci,
)

__all__ = ["catalog_table", "chip_view", "efficiency_table"]


def _tflops(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e12:g}"


def catalog_table(chips: Iterable[Hardware]) -> Table:
    """One row per chip: dense peaks in TFLOP/s, memory, bandwidth."""
    table = Table(title="Hardware catalog (dense peaks, TFLOP/s; no sparsity)",
                  title_justify="left", header_style="bold")
    table.add_column("id")
    table.add_column("aliases", style="dim")
    shown = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
    for key in shown:
        table.add_column(key, justify="right")
    table.add_column("memory", justify="right")
    table.add_column("bandwidth", justify="right")
    for chip in chips:
        table.add_row(chip.id, ", ".join(chip.aliases),
                      *(_tflops(chip.dense_flop_per_s.get(k)) for k in shown),
                      format_bytes(chip.memory_bytes, "GB"),
                      format_bandwidth(chip.memory_bandwidth_bytes_per_s))
    return table


def chip_view(chip: Hardware, intensities: Mapping[str, float]) -> list[RenderableType | str]:
    """Every number of one chip with its source, and its intensity per dtype."""
    table = Table(title=f"{chip.name} ({chip.id})", title_justify="left", header_style="bold")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("with sparsity", justify="right", style="dim")
    table.add_column("intensity", justify="right")
    table.add_column("source (when not the chip's)", style="dim", overflow="fold")
    table.add_row("memory", f"{format_bytes(chip.memory_bytes, 'GB')} "
                  f"({format_bytes(chip.memory_bytes, 'GiB')})", "", "",
                  chip.specific_source("memory"))
    table.add_row("memory bandwidth", format_bandwidth(chip.memory_bandwidth_bytes_per_s), "", "",
                  chip.specific_source("memory_bandwidth"))
    if chip.interconnect_bytes_per_s is not None:
        table.add_row(f"interconnect ({chip.interconnect_kind or '?'})",
                      format_bandwidth(chip.interconnect_bytes_per_s), "", "",
                      chip.specific_source("interconnect"))
    if chip.host_link_bytes_per_s is not None:
        table.add_row(f"host link ({chip.host_link_kind or '?'}), per direction",
                      format_bandwidth(chip.host_link_bytes_per_s), "", "",
                      chip.specific_source("host_link"))
    if chip.op_overhead_s > 0:  # a probed (or stated) per-op cost
        table.add_row("per-op cost, training", format_duration(chip.op_overhead_s), "", "",
                      chip.specific_source("op_overhead"))
    if chip.inference_op_overhead_s > 0:
        table.add_row("per-op cost, inference",  # a forward under no_grad
                      format_duration(chip.inference_op_overhead_s), "", "",
                      chip.specific_source("inference_op_overhead"))
    if chip.fresh_page_bytes_per_s > 0:
        threshold = format_bytes(chip.fresh_pages_from_bytes, "auto-binary")
        table.add_row(f"fresh pages ≥ {threshold}",  # a new tensor's, at glibc's mmap size
                      format_bandwidth(chip.fresh_page_bytes_per_s), "", "",
                      chip.specific_source("fresh_page_rate"))
    topology_source = _topology_rows(table, chip)
    for key in COMPUTE_KEYS:
        if key not in chip.dense_flop_per_s:
            continue
        sparse = chip.sparse_flop_per_s.get(key)
        table.add_row(f"{key} dense peak", format_flop_rate(chip.dense_flop_per_s[key]),
                      "" if sparse is None else f"[{format_flop_rate(sparse)}]",
                      f"{intensities[key]:.1f} FLOP/byte", chip.specific_source(key))
    lines: list[RenderableType | str] = [table, f"source: {chip.source('*')}"]
    if chip.efficiency is not None:
        lines.append(efficiency_table(chip))
    if topology_source:
        lines.append(f"node topology source: {topology_source}")
    lines.append("intensity = dense peak / memory bandwidth: ops below it are memory-bound, "
                 "above it compute-bound")
    if chip.aliases:
        lines.append(f"aliases: {', '.join(chip.aliases)}")
    return lines


def efficiency_table(chip: Hardware) -> Table:
    """What eager PyTorch attains on the chip (the expected figures' inputs), with sources."""
    eff = chip.efficiency
    assert eff is not None
    table = Table(title="Expected: what eager PyTorch attains (fractions of the datasheet)",
                  title_justify="left", header_style="bold")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("source", style="dim", overflow="fold")
    for key, points in eff.matmul.items():
        curve = ", ".join(f"{fraction:.1%} at {format_sci(flops)} FLOPs" for flops, fraction
                          in points)
        table.add_row(f"matmul {key} (by size)", curve, eff.source("matmul"))
    if eff.attention is not None:
        table.add_row("fused attention", f"{eff.attention:.0%}", eff.source("attention"))
    table.add_row("memory bandwidth", f"{eff.memory_bandwidth:.0%}",
                  eff.source("memory_bandwidth"))
    table.add_row("per-op overhead", format_duration(eff.op_overhead_s), eff.source("op_overhead"))
    table.caption = eff.source("*")
    return table


def _topology_rows(table: Table, chip: Hardware) -> str:
    """The node topology rows (link bandwidths per device and per direction); returns the
    source they share, printed once below the table."""
    shared = chip.specific_source("devices_per_node")
    rows = (
        ("devices_per_node", f"devices per node ({chip.node_kind or '?'})",
         None if chip.devices_per_node is None else str(chip.devices_per_node)),
        ("intra_node_bandwidth", "intra-node, per device, per direction",
         None if chip.intra_node_bytes_per_s is None
         else format_bandwidth(chip.intra_node_bytes_per_s)),
        ("inter_node_bandwidth", f"inter-node ({chip.inter_node_kind or '?'}), per device, "
         "per direction", None if chip.inter_node_bytes_per_s is None
         else format_bandwidth(chip.inter_node_bytes_per_s)),
        ("intra_node_latency", "hop latency inside a node", None
         if chip.intra_node_latency_s is None else format_duration(chip.intra_node_latency_s)),
        ("inter_node_latency", "hop latency between nodes", None
         if chip.inter_node_latency_s is None else format_duration(chip.inter_node_latency_s)),
    )
    for key, label, value in rows:
        if value is not None:
            source = chip.specific_source(key)
            table.add_row(label, value, "", "", "" if source == shared else source)
    return shared
