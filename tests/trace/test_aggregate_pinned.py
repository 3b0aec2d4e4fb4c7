"""trace.aggregate pinned on hand-built records: every total is a sum worked out beside it."""

from __future__ import annotations

import math

from tensorledger.trace.aggregate import (
    CategoryTotal,
    ClassTotal,
    CollectiveTotal,
    Norms,
    PhaseTotal,
    SixND,
    by_category,
    by_module,
    by_phase,
    class_total,
    communication,
    group_modules,
    hand_attention,
    norms,
    summarize,
    unhalved_attention,
    versus_6nd,
)
from tensorledger.trace.records import CollectiveInfo, OpRecord, Trace


def _r(index: int, *, op: str = "aten.mm.default", module: str = "", phase: str = "forward",
       category: str = "matmul", flops: int = 0, halved: int | None = None, read: int = 0,
       written: int = 0, collective: CollectiveInfo | None = None) -> OpRecord:
    return OpRecord(index=index, op=op, module=module, phase=phase, category=category,
                    input_shapes=(), input_dtypes=(), output_shapes=(), output_dtypes=(),
                    flops=flops, bytes_read=read, bytes_written=written, covered=True,
                    flops_causal_halved=flops if halved is None else halved,
                    storages_created=(), storages_freed=(), collective=collective)


def _trace(*records: OpRecord, classes: dict[str, str] | None = None) -> Trace:
    return Trace(records=records, uncovered={}, device="meta",
                 module_classes=classes or {})


def test_categories_by_flops_then_bytes_and_phases_in_their_order() -> None:
    trace = _trace(
        _r(0, category="elementwise", flops=10, read=5, written=1),
        _r(1, category="copy", flops=10, read=2, written=2),
        _r(2, category="matmul", flops=100, halved=40, read=3, written=4, phase="backward"),
        _r(3, category="matmul", flops=50, read=1, written=1, phase="optimizer"),
        _r(4, category="elementwise", flops=0, read=1, written=0, phase="other"))
    # matmul: 150 FLOPs (100 + 50), halved 40 + 50 = 90, read 3 + 1, written 4 + 1; then the
    # two of 10 FLOPs by bytes: elementwise 5 + 1 + 1 = 7 before copy's 2 + 2 = 4
    assert by_category(trace) == (CategoryTotal("matmul", 2, 150, 90, 4, 5),
                                  CategoryTotal("elementwise", 2, 10, 10, 6, 1),
                                  CategoryTotal("copy", 1, 10, 10, 2, 2))
    # forward, backward, optimizer, other, whatever order they ran in
    assert by_phase(trace) == (PhaseTotal("forward", 2, 20, 20, 7, 3),
                               PhaseTotal("backward", 1, 100, 40, 3, 4),
                               PhaseTotal("optimizer", 1, 50, 50, 1, 1),
                               PhaseTotal("other", 1, 0, 0, 1, 0))
    summary = summarize(trace)
    assert summary.phase_flops() == {"forward": 20, "backward": 100, "optimizer": 50,
                                     "other": 0}
    assert list(summary.category_flops().items()) == [("matmul", 150), ("elementwise", 10),
                                                      ("copy", 10)]
    assert summary.backward_forward_ratio == 5.0  # 100 / 20
    assert math.isnan(summarize(_trace(_r(0, phase="backward", flops=3))).backward_forward_ratio)


def test_the_module_tree_sums_each_subtree_by_phase() -> None:
    trace = _trace(
        _r(0, module="M", flops=1, read=1),
        _r(1, module="M.a.x", flops=10, read=2, written=1),
        _r(2, module="M.a.x", flops=20, phase="backward", written=3),
        _r(3, module="M.b", flops=5, phase="optimizer"),
        _r(4, module="", flops=7, phase="other", read=4))
    root = by_module(trace)
    # the root: every record, 1 + 10 + 20 + 5 + 7 = 43, forward 11, backward 20, ...
    assert (root.name, root.ops, root.flops, root.flops_forward, root.flops_backward,
            root.flops_optimizer, root.flops_other, root.bytes_read, root.bytes_written) == (
        "", 5, 43, 11, 20, 5, 7, 7, 4)
    (m,) = root.children
    assert (m.name, m.ops, m.flops) == ("M", 4, 36)  # all but the root's own 7
    a, b = m.children  # M.a (30) before M.b (5)
    assert (a.name, a.flops, a.flops_forward, a.flops_backward, b.name, b.flops_optimizer) == (
        "M.a", 30, 10, 20, "M.b", 5)
    assert root.find("M.a.x") is a.children[0] and root.find("M.a") is a
    assert root.find("") is root and root.find("M.c") is None and root.find("M.ab") is None
    folded = by_module(trace, depth=1)
    assert [c.name for c in folded.children] == ["M"] and folded.children[0].children == ()


def test_equal_siblings_fold_into_one_node_that_sums_them() -> None:
    trace = _trace(*[_r(i, module=f"M.h.{i}.mlp", flops=4, read=i + 1) for i in range(3)],
                   _r(3, module="M.h.3.mlp", flops=5))  # another figure: apart
    grouped = group_modules(by_module(trace))
    (h,) = grouped.children[0].children
    three, four = h.children  # 12 FLOPs before 5
    assert (three.name, three.count, three.ops, three.flops, three.bytes_read) == (
        "M.h.{0..2}", 3, 3, 12, 6)  # read 1 + 2 + 3
    assert [(c.name, c.count, c.flops) for c in three.children] == [("M.h.{0..2}.mlp", 3, 12)]
    assert (four.name, four.count, four.flops) == ("M.h.3", 1, 5)


def test_a_class_s_total_covers_its_modules_and_those_under_them() -> None:
    classes = {"M.q.0": "NF4", "M.q.1": "NF4", "M.lin": "Linear", "M.q.10": "Other"}
    trace = _trace(
        _r(0, module="M.q.0", flops=3, read=1, written=2),
        _r(1, module="M.q.0.inner", flops=4, phase="backward", read=5),
        _r(2, module="M.q.10", flops=100),  # "M.q.1" is a prefix of its name, not its parent
        _r(3, module="M.q.1", flops=6, phase="optimizer", written=7),
        _r(4, module="M.lin", flops=50), classes=classes)
    # M.q.0 (two records, one of them under it) and M.q.1: two modules, three ops; forward 3,
    # backward 4, the optimizer's 6 in neither; read 1 + 5, written 2 + 7
    total = class_total(trace, "NF4")
    assert total == ClassTotal("NF4", 2, 3, 3, 4, 6, 9)
    assert total.flops == 7 and total.bytes == 15
    assert class_total(trace, "Missing") is None
    three = {"A": "NF4", "B": "NF4", "C": "NF4"}
    # ops in B and C: two modules of the three ran
    two = class_total(_trace(_r(0, module="B"), _r(1, module="C.x"), classes=three), "NF4")
    assert two is not None and (two.modules, two.ops) == (2, 2)
    idle = _trace(_r(0, module="M.lin", flops=1), classes=classes)
    assert class_total(idle, "NF4") is None  # modules of the class, but no op ran in them


def test_counted_flops_against_six_n_d() -> None:
    trace = _trace(_r(0, flops=1200))
    # 6 · 10 · 5 = 300; 1200 / 300 = 4
    assert versus_6nd(trace, 10, 5) == SixND(10, 5, 300, 1200, 4.0)
    moe = versus_6nd(trace, 10, 5, active=4)
    assert moe.active_ratio == 10.0  # 1200 / (6 · 4 · 5)
    assert versus_6nd(trace, 10, 5).active_ratio is None
    assert SixND(10, 0, 0, 1200, math.nan, 4).active_ratio is None  # no tokens
    assert SixND(10, 5, 300, 1200, 4.0, 0).active_ratio is None  # no active parameters
    assert math.isnan(versus_6nd(trace, 0, 5).ratio)
    assert summarize(trace, params=10, tokens=5, active_params=4).six_n_d == moe
    assert summarize(trace, params=10).six_n_d is None
    assert summarize(trace, tokens=5).six_n_d is None


def test_collectives_summed_by_phase_kind_group_and_mesh_dimension() -> None:
    def c(kind: str, size: int, stride: int = 1, group: int = 4) -> CollectiveInfo:
        return CollectiveInfo(kind, group, size, size // 2, size // 4, rank_stride=stride)

    trace = _trace(
        _r(0, phase="backward", category="communication", collective=c("all-reduce", 40)),
        _r(1, phase="forward", category="communication", collective=c("all-gather", 8, 2)),
        _r(2, phase="backward", category="communication", collective=c("all-reduce", 80)),
        _r(3, phase="forward", category="communication", collective=c("all-gather", 16, 1, 8)),
        _r(4, phase="forward", category="communication", collective=c("all-gather", 4, 1)),
        _r(5, phase="warmup", category="communication", collective=c("broadcast", 12)),
        _r(6, phase="forward", flops=3))
    names = {2: "fsdp", (1, 8): "fsdp·ep"}
    # forward first: all-gather over 4 (stride 2: fsdp), over 4 (stride 1: unnamed), over 8
    # (stride 1 and size 8: fsdp·ep); then backward's two all-reduces summed (40 + 80); an
    # unknown phase last
    assert communication(trace, names) == (
        CollectiveTotal("forward", "all-gather", 4, 1, 4, 2, 1, ""),
        CollectiveTotal("forward", "all-gather", 4, 1, 8, 4, 2, "fsdp"),
        CollectiveTotal("forward", "all-gather", 8, 1, 16, 8, 4, "fsdp·ep"),
        CollectiveTotal("backward", "all-reduce", 4, 2, 120, 60, 30, ""),
        CollectiveTotal("warmup", "broadcast", 4, 1, 12, 6, 3, ""))
    known = _trace(*[r for r in trace.records if r.phase != "warmup"])  # summarize: phases
    assert summarize(known, mesh_dims=names).communication == communication(known, names)
    assert len(summarize(known, mesh_dims=names).communication) == 4  # the five less warmup
    # unnamed, the two all-gathers over 4 ranks are one row: 2 calls, 4 + 8 = 12 bytes
    assert communication(trace) == (
        CollectiveTotal("forward", "all-gather", 4, 2, 12, 6, 3, ""),
        CollectiveTotal("forward", "all-gather", 8, 1, 16, 8, 4, ""),
        CollectiveTotal("backward", "all-reduce", 4, 2, 120, 60, 30, ""),
        CollectiveTotal("warmup", "broadcast", 4, 1, 12, 6, 3, ""))


def test_norms_hand_attention_and_unhalved_attention() -> None:
    classes = {"M.ln": "LayerNorm", "M.ln2": "LayerNorm", "M.rms": "LlamaRMSNorm",
               "M.lin": "Linear", "M.idle": "LayerNorm"}
    trace = _trace(
        _r(0, module="M.ln", category="normalization", flops=10),
        _r(1, module="M.ln", category="copy", flops=1),  # a cast beside: not counted
        _r(2, module="M.ln2", category="normalization", flops=20),
        _r(3, module="M.rms", category="normalization", flops=30, phase="backward"),
        _r(4, module="M.lin", category="normalization", flops=99),  # not a norm module
        _r(5, module="", category="normalization", flops=50),
        _r(6, module="M.unnamed", category="normalization", flops=70),  # no class known
        classes=classes)
    # three norm modules ran (M.idle ran nothing): LayerNorm twice, LlamaRMSNorm once; their
    # normalization ops 10 + 20 + 30
    assert norms(trace) == Norms(3, (("LayerNorm", 2), ("LlamaRMSNorm", 1)), 3, 60)
    assert norms(_trace(_r(0, module="M.lin"), classes=classes)) is None
    tie = {"M.b": "BNorm", "M.a": "ANorm"}
    assert norms(_trace(_r(0, module="M.b"), _r(1, module="M.a"), classes=tie)) == Norms(
        2, (("ANorm", 1), ("BNorm", 1)), 0, 0)  # one each: by name
    by_count = {"M.a": "ANorm", "M.z1": "ZNorm", "M.z2": "ZNorm"}
    assert norms(_trace(_r(0, module="M.a"), _r(1, module="M.z1"), _r(2, module="M.z2"),
                        classes=by_count)) == Norms(
        3, (("ZNorm", 2), ("ANorm", 1)), 0, 0)  # the most modules first, not by name

    hand = _trace(
        _r(0, module="M.attn", op="aten.bmm.default", flops=8),
        _r(1, module="M.attn", op="aten._softmax.default", category="reduction"),
        _r(2, module="M.attn", op="aten.baddbmm.default", flops=4, phase="backward"),
        _r(3, module="M.mlp", op="aten.bmm.default", flops=100),  # no softmax in it
        _r(4, module="M.b", op="aten.softmax.int", category="reduction", phase="backward"),
        _r(5, module="M.b", op="aten.bmm.default", flops=100),  # its softmax ran in backward
        _r(6, module="M.c", op="aten._safe_softmax.default", category="reduction"),
        _r(7, module="M.c", op="aten.mm.default", flops=100))  # not batched
    found = hand_attention(hand)
    assert found is not None and (found.modules, found.ops, found.flops) == (
        ("M.attn", "M.c"), 2, 12)
    assert hand_attention(_trace(_r(0, op="aten._softmax.default"))) is None

    fused = _trace(
        _r(0, module="M.x", category="attention", flops=40, halved=40),
        _r(1, module="M.y", category="attention", flops=40, halved=20),  # halved: causal
        _r(2, module="M.z", category="attention", flops=0, halved=0),  # no FLOPs
        _r(3, module="M.x", category="matmul", flops=8),
        _r(4, module="M.a", category="attention", flops=6, halved=6))
    found_fused = unhalved_attention(fused)
    assert found_fused is not None and (found_fused.modules, found_fused.ops,
                                        found_fused.flops) == (("M.a", "M.x"), 2, 46)
    assert unhalved_attention(_trace(_r(0, category="attention", flops=4, halved=2))) is None


def test_the_summaries_one_line_and_drawn() -> None:
    from rich.console import Console

    trace = Trace(records=(_r(0, module="M.fc", flops=1200), _r(1, module="M.fc", flops=0)),
                  uncovered={"aten.foo.default": 3}, device="meta")
    root = by_module(trace)
    # the root: repr of "" names it, two ops, 1200 FLOPs, one child (M)
    assert repr(root) == "ModuleNode('', 2 ops, 1200 FLOPs, 1 children)"
    summary = summarize(trace, params=10, tokens=5)
    # 6 · 10 · 5 = 300: 1200 / 300 = 4.000 × 6·N·D
    assert repr(summary) == "TraceSummary(2 ops, 1200 FLOPs, 4.000 × 6·N·D, 1 uncovered)"
    assert repr(summarize(trace)) == "TraceSummary(2 ops, 1200 FLOPs, 1 uncovered)"
    console = Console(record=True, width=120)
    console.print(summary.__rich__())
    assert "matmul" in console.export_text()
    html = summary._repr_html_()
    assert "matmul" in html


def test_collective_rows_sort_by_phase_kind_group_then_mesh_name() -> None:
    def c(kind: str, size: int, group: int, stride: int = 1) -> CollectiveInfo:
        return CollectiveInfo(kind, group, size, size // 2, size // 4, rank_stride=stride)

    def comm(index: int, info: CollectiveInfo, phase: str = "forward") -> OpRecord:
        return _r(index, phase=phase, category="communication", collective=info)

    trace = _trace(
        _r(0, flops=3),  # no collective, first: skipped, not the end of the list
        comm(1, c("all-gather", 8, 4), "backward"),
        comm(2, c("reduce-scatter", 100, 4)),
        comm(3, c("all-gather", 200, 8)),
        comm(4, c("all-gather", 400, 2)),
        comm(5, c("all-gather", 16, 4, stride=2)),
        comm(6, c("all-gather", 800, 4, stride=3)))
    names = {2: "b", 3: "a"}  # stride 1 is unnamed
    # forward before backward though backward ran first; then all-gather before
    # reduce-scatter; then group 2, 4, 8 (not by bytes); then mesh name a before b (a's
    # 800 bytes received 200, b's 16 received 4: not by bytes either)
    assert communication(trace, names) == (
        CollectiveTotal("forward", "all-gather", 2, 1, 400, 200, 100, ""),
        CollectiveTotal("forward", "all-gather", 4, 1, 800, 400, 200, "a"),
        CollectiveTotal("forward", "all-gather", 4, 1, 16, 8, 4, "b"),
        CollectiveTotal("forward", "all-gather", 8, 1, 200, 100, 50, ""),
        CollectiveTotal("forward", "reduce-scatter", 4, 1, 100, 50, 25, ""),
        CollectiveTotal("backward", "all-gather", 4, 1, 8, 4, 2, ""))


def test_ties_in_flops_go_to_the_category_that_moved_more_bytes() -> None:
    # elementwise: 1 read + 10 written = 11; copy: 5 + 0 = 5; equal FLOPs
    trace = _trace(_r(0, category="copy", flops=2, read=5),
                   _r(1, category="elementwise", flops=2, read=1, written=10))
    assert [t.category for t in by_category(trace)] == ["elementwise", "copy"]
    # one FLOP of attention, not halved, is still unhalved attention
    found = unhalved_attention(_trace(_r(0, category="attention", flops=1, halved=1)))
    assert found is not None and (found.ops, found.flops) == (1, 1)


def test_summarize_passes_its_arguments_through() -> None:
    trace = Trace(records=(_r(0, module="M.a.b", flops=4, phase="backward"),), uncovered={},
                  device="fake:cpu", attention_convention="causal-halved")
    summary = summarize(trace)
    assert (summary.device, summary.attention_convention) == ("fake:cpu", "causal-halved")
    assert (summary.program, summary.assumptions) == ("", ())
    deep = summary.modules.children[0]
    assert deep.name == "M" and deep.children[0].name == "M.a"  # every depth kept
    shallow = summarize(trace, depth=1, program="h100", assumptions=("x",))
    assert shallow.modules.children[0].children == ()  # folded at depth 1
    assert (shallow.program, shallow.assumptions) == ("h100", ("x",))
    assert shallow.modules.flops_backward == 4


def test_siblings_whose_children_are_named_apart_stay_apart() -> None:
    # M.h.0 holds x, M.h.1 holds y, with equal FLOPs: not repeats of one module
    trace = _trace(_r(0, module="M.h.0.x", flops=4), _r(1, module="M.h.1.y", flops=4))
    (h,) = group_modules(by_module(trace)).children[0].children
    assert [(c.name, c.count) for c in h.children] == [("M.h.0", 1), ("M.h.1", 1)]
    # with the same child, they fold, their backward FLOPs summed (3 + 3)
    same = _trace(*[_r(i, module=f"M.h.{i}.x", flops=3, phase="backward") for i in range(2)])
    (h,) = group_modules(by_module(same)).children[0].children
    (folded,) = h.children
    assert (folded.name, folded.count, folded.flops_backward) == ("M.h.{0..1}", 2, 6)
    assert folded.children[0].flops_backward == 6
