"""The ledger of one workload on one page: the terminal view (rich) and the lines
``tensorledger account`` prints (Jupyter's HTML: :mod:`tensorledger.report.document`).
Formats; computes nothing."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table

from tensorledger.report.memory import memory_view
from tensorledger.report.roofline import (
    cluster_lines,
    measurement_view,
    serving_lines,
    step_lines,
    totals_table,
)
from tensorledger.report.trace import flops_notes, flops_table, module_table
from tensorledger.units import format_bytes, format_count, format_duration, format_sci

if TYPE_CHECKING:
    from tensorledger.ledger.account import Ledger

__all__ = ["account_view", "ledger_group"]

View = list[RenderableType | str]


def _parts_table(ledger: Ledger) -> Table:
    whole = ledger.part_params
    title = f"Parameters: {whole:,} ({format_count(whole)})"
    if ledger.params != whole:  # sharded: what the rank holds beside the model it runs
        title += f"; this rank holds {ledger.params:,} ({format_count(ledger.params)})"
    table = Table(title=title, title_justify="left", header_style="bold")
    for column in ("part", "params", "share"):
        table.add_column(column, justify="left" if column == "part" else "right")
    shares = ledger.part_shares
    for part, params in ledger.params_by_part.items():
        table.add_row(part, f"{params:,}", f"{shares[part]:.1%}")
    return table


def account_view(ledger: Ledger) -> View:
    """Header, parameters, FLOPs by phase, memory, time by category, and the run."""
    s = ledger.trace
    optimizer = f", {ledger.optimizer}" if ledger.optimizer else ""
    view: View = [
        f"{ledger.model} (built by {ledger.built_by}): {ledger.step} step{optimizer}, "
        f"batch {ledger.batch} × seq {ledger.seq} = {ledger.tokens_per_step:,} tokens per "
        f"device, {ledger.precision}, traced on {ledger.device}; {ledger.count} × "
        f"{ledger.hardware}",
        _parts_table(ledger),
        flops_table("FLOPs by phase", "phase", s.by_phase),
    ]
    view.append(f"FLOPs per step {format_sci(s.flops)} ({format_sci(s.flops_causal_halved)} "
                "with causal attention halved)")
    view += flops_notes(s)
    view.append(module_table(s.modules))
    # the routing is said once, among the trace's notes above
    view += memory_view(dataclasses.replace(ledger.memory, routing=""))
    if ledger.fits_with is not None:
        best = ledger.fits_with
        view.append(f"to fit: the planner's fastest layout of these {ledger.count} device(s) "
                    f"that fits is {best.layout}, micro-batch {best.choice.micro_batch} × "
                    f"{best.choice.accumulation}, checkpoint {best.choice.checkpoint} "
                    f"({format_bytes(best.memory.total_bytes, 'auto')} per rank, closed form; "
                    "`tensorledger plan` for the others)")
    elif ledger.fits_nowhere is not None:
        view.append(f"to fit: no layout of these {ledger.count} device(s) does "
                    f"({ledger.fits_nowhere})")
    view.append(totals_table(f"Predicted time by category on {ledger.hardware}",
                             ledger.roofline.by_category))
    view.append(f"on {ledger.count} device(s), stepping together:")
    view += step_lines(ledger.roofline, (ledger.cluster_tokens_per_s,
                                         ledger.cluster_bound_tokens_per_s))
    if ledger.cluster is not None:
        view += cluster_lines(ledger.cluster)
    view += serving_lines(ledger.serving, ledger.step)
    if ledger.run is not None:
        r = ledger.run
        cost = f", ${r.cost_usd:,.0f} at ${r.usd_per_device_hour:g} per device-hour" if (
            r.cost_usd is not None and r.usd_per_device_hour is not None) else ""
        view.append(f"the whole run: {format_sci(r.tokens)} tokens in {r.steps:,.0f} steps, "
                    f"{format_duration(r.time_s)}, {r.device_hours:,.0f} device-hours{cost} at "
                    f"the expected step time ({format_duration(r.bound_time_s)} at the roofline "
                    "bound)")
    if ledger.measured is not None and ledger.measured.comparison is not None:
        view.append(f"Measured on this machine ({ledger.measured.device}), predicted for its "
                    f"profile {ledger.measured.prediction.hardware}:")
        view += measurement_view(ledger.measured)
    view.append(f"peak memory per device {format_bytes(ledger.memory.peak_bytes, 'auto')}")
    return view


def ledger_group(ledger: Ledger) -> Group:
    """The terminal view as one rich renderable (``Ledger.__rich__``)."""
    return Group(*account_view(ledger))
