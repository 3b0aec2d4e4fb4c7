"""Terminal views of a traced step and of an einsum's cost.  Formats; computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import RenderableType
from rich.table import Table

from tensorledger.units import format_bytes, format_sci

if TYPE_CHECKING:  # the trace package loads torch; `tensorledger einsum` must not
    from tensorledger.costs.einsum import EinsumCost
    from tensorledger.ledger.trace import TraceReport
    from tensorledger.trace.aggregate import CategoryTotal, ModuleNode, PhaseTotal, TraceSummary

__all__ = ["einsum_view", "flops_notes", "flops_table", "module_table", "trace_view"]

View = list[RenderableType | str]
ROOT_LABEL = "(whole step)"


def _flops(value: float) -> str:
    return format_sci(value) if value else "0"


def _bytes(value: float) -> str:
    return format_bytes(value, "auto") if value else "0"


def flops_table(title: str, key: str, rows: tuple[CategoryTotal, ...] | tuple[PhaseTotal, ...],
                  ) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for column in (key, "ops", "FLOPs", "FLOPs (causal halved)", "bytes read",
                   "bytes written"):
        table.add_column(column, justify="left" if column == key else "right")
    for row in rows:
        name = getattr(row, "category", None) or getattr(row, "phase", "")
        table.add_row(name, f"{row.ops:,}", _flops(row.flops), _flops(row.flops_causal_halved),
                      _bytes(row.bytes_read), _bytes(row.bytes_written))
    return table


def _module_label(node: ModuleNode, level: int) -> str:
    if level == 0:
        return ROOT_LABEL
    name = node.name
    if level > 1:  # the last component; a group "{0..11}" (dots inside) with its parent's
        end = name.rfind(".", 0, name.rfind("{")) if name.endswith("}") else len(name)
        name = name[name.rfind(".", 0, end) + 1:]
    return name + (f" ×{node.count}" if node.count > 1 else "")


def _same(a: ModuleNode, b: ModuleNode) -> bool:
    return (a.ops, a.flops, a.bytes_read, a.bytes_written) == (
        b.ops, b.flops, b.bytes_read, b.bytes_written)


def _module_rows(node: ModuleNode, table: Table, level: int) -> None:
    if level > 1 and len(node.children) == 1 and _same(node, node.children[0]):
        # a container that only holds its group (``blocks`` → ``blocks.{0..11}``): one row
        _module_rows(node.children[0], table, level)
        return
    label = _module_label(node, level)
    table.add_row("  " * level + label, _flops(node.flops_forward), _flops(node.flops_backward),
                  _flops(node.flops_optimizer + node.flops_other), _flops(node.flops),
                  _bytes(node.bytes_read + node.bytes_written))
    for child in node.children:
        _module_rows(child, table, level + 1)


def module_table(root: ModuleNode) -> Table:
    table = Table(title="By module (each row includes the modules under it; ×N: N repeated "
                  "modules summed)",
                  title_justify="left", header_style="bold")
    for column in ("module", "forward FLOPs", "backward FLOPs", "optimizer+other FLOPs",
                   "total FLOPs", "bytes"):
        table.add_column(column, justify="left" if column == "module" else "right")
    _module_rows(root, table, 0)
    return table


def flops_notes(s: TraceSummary) -> View:
    """What the FLOPs totals leave unsaid: 6·N·D beside them, attention written by hand (not
    halved), ops with no cost rule."""
    notes: View = []
    if s.program:
        notes.append(s.program)
    for a in s.attention:
        notes.append(f"attention: {a.kernel} in {a.modules}" + (f" ×{a.count}" if a.count > 1
                                                                 else "") + f" ({a.reason})")
    notes += s.assumptions
    if s.six_n_d is not None:
        notes.append(f"6·N·D = 6 × {s.six_n_d.params:,} × {s.six_n_d.tokens:,} = "
                     f"{_flops(s.six_n_d.six_n_d_flops)} FLOPs; counted / 6·N·D = "
                     f"{s.six_n_d.ratio:.3f}")
        active = s.six_n_d.active_ratio
        if active is not None and s.six_n_d.active_params is not None:
            notes.append(f"a mixture of experts: N_active = {s.six_n_d.active_params:,} "
                         "parameters a token runs (its routed experts and every shared "
                         f"part); counted / 6·N_active·D = {active:.3f}")
    if s.hand_attention is not None:
        h = s.hand_attention
        notes.append(f"attention written as bmm + softmax in {len(h.modules)} module(s): its "
                     f"{h.ops:,} batched matmuls ({_flops(h.flops)} FLOPs) are counted in full; "
                     "the causal-halved figure does not halve them")
    if s.unhalved_attention is not None:
        u = s.unhalved_attention
        notes.append(f"attention without a causal flag (no mask, or a mask tensor whose values "
                     f"are not read) in {len(u.modules)} module(s): its {u.ops:,} ops "
                     f"({_flops(u.flops)} FLOPs) are counted in full; the causal-halved figure "
                     "does not halve them")
    if s.norms is not None:
        n = s.norms
        kinds = ", ".join(f"{name} ×{count}" for name, count in n.classes)
        notes.append(f"normalization: {n.modules:,} norm modules ({kinds}) ran {n.ops:,} "
                     f"normalization ops, {_flops(n.flops)} FLOPs")
    if s.uncovered:
        listed = ", ".join(f"{op} ×{calls}" for op, calls in s.uncovered.items())
        notes.append(f"uncovered ops (no cost rule, counted as 0 FLOPs): {listed}")
    else:
        notes.append("uncovered ops: none")
    return notes


def trace_view(report: TraceReport) -> View:
    s = report.summary
    optimizer = f", optimizer {report.optimizer}" if report.optimizer else ""
    view: View = [
        f"{report.model}: step {report.step}{optimizer}, batch {report.batch} × seq "
        f"{report.seq} = {report.tokens:,} tokens"
        f"{'' if report.context is None else f' against a KV cache of {report.context:,}'}, "
        f"{report.params:,} parameters, "
        f"{report.precision} on {report.device} (trace device: {s.device}); built by "
        f"{report.built_by}",
        *([] if report.ranks == 1 else [
            f"one rank of {report.ranks} ({report.layout}): it holds {report.params_per_rank:,}"
            " parameters, runs its share of the step and issues the collectives below"]),
        flops_table("By category", "category", s.by_category),
        flops_table("By phase", "phase", s.by_phase),
        module_table(s.modules),
        f"total: {_flops(s.flops)} FLOPs ({_flops(s.flops_causal_halved)} with causal "
        f"attention halved; the FLOPs columns count it in {s.attention_convention}), "
        f"{_bytes(s.bytes_read + s.bytes_written)} moved over {s.ops:,} ops",
    ]
    if s.communication:
        view.append(communication_table(s.communication))
    if s.backward_forward_ratio == s.backward_forward_ratio:  # not nan
        view.append(f"backward / forward FLOPs: {s.backward_forward_ratio:.3f}")
    return view + flops_notes(s)


def communication_table(rows: Any) -> Table:
    """The collectives one rank issued, by phase, kind and group size, with the bytes of the
    buffers (nccl-tests' S) and the rank's share sent and received (ring convention)."""
    table = Table(title="Communication of this rank (ring convention)", title_justify="left",
                  header_style="bold")
    for name in ("phase", "collective", "mesh dim", "ranks", "calls", "buffers (S)", "sent",
                 "received"):
        table.add_column(name, justify="left" if name in ("phase", "collective", "mesh dim")
                         else "right")
    for row in rows:
        table.add_row(row.phase, row.kind, row.mesh_dim or "—", str(row.group_size),
                      f"{row.calls:,}",
                      _bytes(row.size_bytes), _bytes(row.bytes_sent), _bytes(row.bytes_received))
    return table


def einsum_view(cost: EinsumCost) -> View:
    sizes = " ".join(f"{axis}={size}" for axis, size in cost.sizes.items())
    view: View = [
        f"einsum {cost.pattern!r} with {sizes} in {cost.dtype}",
        f"FLOPs: {cost.flops:,}",
        f"bytes: {cost.bytes:,} ({cost.bytes_read:,} read + {cost.bytes_written:,} written)",
        f"intensity: {cost.intensity_flop_per_byte:.4g} FLOP/byte",
    ]
    m = cost.matmul
    if m is not None:
        def axes(names: tuple[str, ...]) -> str:
            return " ".join(names) if names else "-"

        view.append(f"equivalent matmul: batch {m.batch} ({axes(m.batch_axes)}) × "
                    f"(M {m.m} ({axes(m.m_axes)}) × K {m.k} ({axes(m.k_axes)})) · "
                    f"(K × N {m.n} ({axes(m.n_axes)})): 2·batch·M·N·K = {m.flops:,} FLOPs")
    return view
