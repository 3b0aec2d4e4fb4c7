"""Terminal view and plot of a memory ledger (``tensorledger memory``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from tensorledger.memory import phase_spans
from tensorledger.report.plots import new_figure, save_figure
from tensorledger.units import format_bytes, format_duration

__all__ = ["kv_cache_lines", "memory_figure", "memory_view", "param_offload_line",
           "write_memory_plot"]

View = list[RenderableType | str]

_LABELS = {"parameter": "parameters", "gradient": "gradients",
           "optimizer_state": "optimizer state", "saved_activation": "saved activations",
           "kv_cache": "kv cache", "temporary": "temporaries"}


def _b(value: float) -> str:
    return f"{format_bytes(value, 'auto')} ({format_bytes(value, 'auto-binary')})"


def memory_view(ledger: Any) -> View:
    """Breakdown against the closed forms, the peak and the fit."""
    rank = (f" on one of {ledger.ranks} ranks ({ledger.layout})" if ledger.ranks > 1 else "")
    kv = ledger.kv_cache
    if kv is not None:
        sizes = (f"context {kv.context:,} tokens + 1" if kv.context else
                 f"prompt of {ledger.seq_len:,} tokens")
        title = (f"Memory of one {ledger.step} step: {ledger.model}, batch {ledger.batch}, "
                 f"{sizes}, {ledger.precision}")
    else:
        title = (f"Memory of one {ledger.step} step{rank}: {ledger.model}, batch "
                 f"{ledger.batch}, seq {ledger.seq_len}, "
                 f"{ledger.optimizer + ', ' if ledger.step == 'train' else ''}"
                 f"{ledger.precision}{', checkpointed' if ledger.checkpointed else ''}")
    table = Table(title=title, title_justify="left", header_style="bold")
    table.add_column("part")
    table.add_column("measured (traced step)", justify="right")
    table.add_column("closed form (napkin)", justify="right")
    closed = ledger.activations_closed_form
    for part in ledger.parts():
        label = _LABELS[part.category] + (" (+ master)" if part.category == "optimizer_state"
                                          else "")
        predicted = part.closed_form_bytes
        table.add_row(label, _b(part.measured_bytes), "—" if predicted is None else _b(predicted))
    peak = ledger.timeline.peak
    view: View = [table]
    if ledger.routing:
        view.append(ledger.routing)
    if kv is not None:
        view.extend(kv_cache_lines(kv))
    at = f" in {peak.module}" if peak.module else ""
    view.append(f"peak of the steady-state step {_b(ledger.peak_bytes)} after {peak.op} "
                f"({peak.phase}{at}); live then: "
                + ", ".join(f"{_LABELS[c]} {format_bytes(v, 'auto')}"
                            for c, v in peak.by_category().items() if v))
    first = ledger.first_step_peak_bytes
    if first is not None and first != ledger.peak_bytes:
        view.append(f"the first step peaks at {_b(first)} (no optimizer state yet until its "
                    "optimizer step)")
    timeline = ledger.timeline
    if timeline.measured_peak_bytes is not None:
        gap = timeline.measured_peak_bytes - timeline.allocator_peak_bytes
        view.append(f"on CUDA: torch.cuda.max_memory_allocated {_b(timeline.measured_peak_bytes)}"
                    f" against the traced peak {_b(ledger.peak_bytes)}, or "
                    f"{_b(timeline.allocator_peak_bytes)} in the allocator's 512-byte blocks; "
                    f"the remaining {format_bytes(gap, 'auto')} is memory the kernels take "
                    "that no op returns (cuBLAS workspace, kernels' scratch)")
    else:
        view.append(f"in the CUDA allocator's 512-byte blocks the peak is "
                    f"{_b(timeline.allocator_peak_bytes)}: what torch.cuda.max_memory_allocated "
                    "would count for these storages (run with --device cuda to measure)")
    if ledger.ranks > 1:
        view.append("every figure is one rank's: its shards of the parameters, gradients and "
                    "optimizer state (closed form: napkin's bytes of those shards), what it "
                    "saves for backward, and under FSDP, while a unit runs, the parameters it "
                    "gathered (counted as parameters at the peak)")
    if kv is not None:
        pass  # nothing is saved for a backward: no activations to set beside a closed form
    elif closed is None and ledger.ranks > 1:
        view.append("saved activations split by tensor or pipeline parallelism: the closed "
                    "form of one device does not apply; the traced figure stands alone")
    elif closed is None:
        view.append("saved activations under bf16 autocast have no closed form here (autocast "
                    "keeps bf16 copies of inputs and weights; torchao's fp8 linears keep the "
                    "bf16 input alone); the measured figure stands alone")
    offload = ledger.offload
    if offload is not None:
        priced = _host_link_priced(offload, offload.to_host_s, offload.to_device_s)
        view.append(f"activations offloaded (torch's save_on_cpu, every saved tensor, weights "
                    f"included): {_b(ledger.host_peak_bytes)} at most in host memory, apart from"
                    f" the device's; {format_bytes(offload.to_host_bytes, 'auto')} to the host in"
                    f" forward and {format_bytes(offload.to_device_bytes, 'auto')} back in "
                    f"backward, {priced}")
    shards = getattr(ledger, "param_offload", None)
    if shards is not None:
        view.append(param_offload_line(ledger, shards))
    if ledger.fit is not None:
        fit = ledger.fit
        verdict = "fits" if fit.fits_replicated else "does not fit"
        where = "each device" if ledger.ranks > 1 else "one device"
        beside = (f"against the budget of {format_bytes(fit.budget_bytes, 'auto')} given"
                  if fit.budget_bytes is not None else
                  f"beside a reserve of {format_bytes(fit.reserve_bytes, 'auto')}: {fit.reserve}; "
                  "--budget sets the usable bytes instead")
        view.append(f"{fit.hardware} ({_b(fit.device_memory_bytes)}): the step {verdict} on "
                    f"{where} (peak {format_bytes(fit.replica_peak_bytes, 'auto')}, {beside})")
        if fit.count > 1:
            verdict = "fits" if fit.fits_sharded else "does not fit"
            view.append(f"× {fit.count} with parameters, gradients and optimizer state fully "
                        f"sharded (ZeRO-3): {format_bytes(fit.sharded_peak_bytes, 'auto')} per "
                        f"device, {verdict}")
    return view


def _host_link_priced(moved: Any, there: float | None, back: float | None) -> str:
    """The two copies' times over the host link, or why they are not priced."""
    if there is None or back is None:
        return f"not priced ({moved.host_link})"
    return (f"over the host link ({moved.host_link}, "
            f"{format_bytes(moved.host_link_bytes_per_s or 0, 'auto')}/s per direction): "
            f"{format_duration(there)} and {format_duration(back)}, unless overlapped with "
            "compute")


def param_offload_line(ledger: Any, shards: Any) -> str:
    """What ``--offload params`` (FSDP2's CPUOffloadPolicy) keeps on the host, moves each step
    and runs on the host's CPU."""
    priced = _host_link_priced(shards, shards.to_device_s, shards.to_host_s)
    return (f"parameters offloaded (FSDP2's CPUOffloadPolicy): parameters, gradients and "
            f"optimizer state in host memory (the breakdown's; {_b(ledger.host_peak_bytes)} at "
            f"most there, the optimizer step's "
            f"{format_bytes(shards.host_temporary_bytes, 'auto')} of temporaries included), "
            f"apart from the device's; each step "
            f"{format_bytes(shards.to_device_bytes, 'auto')} of shards to the device before the "
            f"all-gathers and {format_bytes(shards.to_host_bytes, 'auto')} of gradient shards "
            f"to the host, {priced}; the optimizer step ({shards.optimizer_ops:,} ops, "
            f"{shards.optimizer_flops:,} FLOPs, {format_bytes(shards.optimizer_bytes, 'auto')} "
            "moved) runs on the host's CPU: no device time")


def kv_cache_lines(kv: Any) -> list[str]:
    """What a prefill or decode step's KV cache holds, and where it departs from napkin's."""
    lines = [f"kv cache: {kv.cache_class} ({kv.layers}), {kv.dtype}, {kv.context:,} → "
             f"{kv.tokens_after:,} tokens a sequence; {_b(kv.bytes_before)} before the step, "
             f"{_b(kv.storage_bytes)} after"]
    if kv.tensor_bytes != kv.storage_bytes:
        lines.append(f"its tensors show {_b(kv.tensor_bytes)}: a sliding-window layer of "
                     "transformers keeps window − 1 tokens as a view of the torch.cat that made "
                     "them, which holds the whole storage (after a prefill: the whole prompt's)")
    gap = kv.closed_form_gap_bytes
    if gap:
        lines.append(f"the traced cache is {format_bytes(abs(gap), 'auto')} "
                     f"{'over' if gap > 0 else 'under'} napkin's closed form (min(tokens, "
                     "window) a layer, the cache's dtype)")
    return lines


def memory_figure(ledger: Any) -> Any:
    """Live memory by category across the step's ops, stacked, as a matplotlib figure: the
    peak marked with its value, and a dotted line where each phase begins."""
    timeline = ledger.timeline
    points = timeline.points
    xs = [p.index for p in points]
    # a step without a KV cache (training) draws none
    categories = [c for c in _LABELS
                  if c != "kv_cache" or any(p.kv_cache_bytes for p in points)]
    peak = timeline.peak
    unit, scale = ("GiB", 2**30) if peak.total_bytes >= 2**30 else ("MiB", 2**20)
    ys = [[p.by_category()[c] / scale for p in points] for c in categories]
    figure, axes = new_figure(10, 4.8)
    # each op a step one op wide, so the peak is a plateau and not a hairline spike
    axes.stackplot(xs, *ys, labels=[_LABELS[c] for c in categories], step="mid")
    top = peak.total_bytes / scale
    axes.set_ylim(0, top * 1.22 or 1.0)
    for number, span in enumerate(phase_spans(points)):
        at = span.first_index - 0.5  # between the last op of one phase and the first of the next
        if number:
            axes.axvline(at, color="0.25", linewidth=0.9, linestyle=":",
                         label="_phase boundary")
        axes.annotate(f"{span.phase} →", (at, 1.0), xycoords=("data", "axes fraction"),
                      xytext=(3, -3), textcoords="offset points", ha="left", va="top",
                      fontsize=8, color="0.25")
    axes.plot([peak.index], [top], marker="v", color="black", markersize=7, linestyle="",
              zorder=5, label="_peak")
    axes.annotate(f"peak {_b(peak.total_bytes)}\nafter {peak.op} "
                  f"({peak.phase})", (peak.index, top), xytext=(0, 12),
                  textcoords="offset points", ha="center", va="bottom", fontsize=8,
                  bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "alpha": 0.85,
                        "edgecolor": "0.6"})
    axes.set_xlim(xs[0] - 0.5 if xs else -0.5, xs[-1] + 0.5 if xs else 0.5)
    axes.set_xlabel("op (in the order the step runs them)")
    axes.set_ylabel(f"live memory ({unit})")
    kv = ledger.kv_cache
    if kv is not None:
        sizes = f"context {kv.context:,} + 1" if kv.context else f"prompt of {ledger.seq_len:,}"
        axes.set_title(f"{ledger.model}: {ledger.step}, {ledger.precision}, batch "
                       f"{ledger.batch}, {sizes}: memory over one step")
    else:
        axes.set_title(f"{ledger.model}: {ledger.optimizer}, {ledger.precision}, batch "
                       f"{ledger.batch}, seq {ledger.seq_len}: memory over one step")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return figure


def write_memory_plot(ledger: Any, path: str | Path) -> Path:
    """Write :func:`memory_figure` to ``path`` (.png, .svg or .pdf), whole or not at all."""
    return save_figure(memory_figure(ledger), path)
