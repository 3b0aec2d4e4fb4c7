"""trace.records and trace.modules pinned: a record's and a trace's one-line summaries and
totals, the norm classes, and a nameless module in a grouping, each figure by hand."""

from __future__ import annotations

from tensorledger.trace.modules import group_repeats, truncate
from tensorledger.trace.records import OpRecord, Trace, is_norm_class


def _record(index: int, *, module: str = "", flops: int = 0, halved: int | None = None,
            read: int = 0, written: int = 0, covered: bool = True) -> OpRecord:
    return OpRecord(index=index, op="aten.mm.default", module=module, phase="forward",
                    category="matmul", input_shapes=(), input_dtypes=(), output_shapes=(),
                    output_dtypes=(), flops=flops,
                    bytes_read=read, bytes_written=written, covered=covered,
                    flops_causal_halved=flops if halved is None else halved,
                    storages_created=(), storages_freed=())


def test_a_record_s_summary_names_where_it_ran_and_what_it_cost() -> None:
    inside = _record(3, module="M.fc", flops=2000, read=1_500_000, written=500_000)
    assert inside.bytes == 2_000_000  # 1.5 MB read + 0.5 MB written
    # 2000 FLOPs to four digits; 2e6 bytes in the largest decimal unit, MB
    assert repr(inside) == (
        "OpRecord(#3 aten.mm.default (forward in M.fc), matmul, 2000 FLOPs, 2 MB)")
    outside = _record(0, covered=False)
    assert repr(outside) == (
        "OpRecord(#0 aten.mm.default (forward), matmul, 0 FLOPs, 0 B, uncovered)")


def test_a_trace_s_totals_and_summary() -> None:
    records = (_record(0, flops=1000, halved=600, read=1_000_000, written=250_000),
               _record(1, flops=3000, halved=3000, read=500_000, written=250_000))
    trace = Trace(records=records, uncovered={"aten.foo.default": 2, "aten.bar.default": 1},
                  device="meta")
    assert trace.flops == 4000  # 1000 + 3000
    assert trace.flops_causal_halved == 3600  # 600 + 3000
    assert trace.bytes == 2_000_000  # 1.25 MB + 0.75 MB
    # two ops, 4000 FLOPs, 2 MB, two uncovered op names (not their three calls)
    assert repr(trace) == "Trace(2 ops, 4000 FLOPs, 2 MB moved, 2 uncovered, on meta)"
    empty = Trace(records=(), uncovered={}, device="fake:cpu")
    assert repr(empty) == "Trace(0 ops, 0 FLOPs, 0 B moved, 0 uncovered, on fake:cpu)"


def test_a_trace_s_html_is_the_report_s_trace_display() -> None:
    from tensorledger.report.document import trace_display_html

    trace = Trace(records=(_record(0, module="M.fc", flops=2000, read=16, written=8),),
                  uncovered={}, device="meta")
    html = trace._repr_html_()
    assert isinstance(html, str) and html == trace_display_html(trace)
    assert "<" in html


def test_norm_classes_end_in_norm_with_an_optional_dimension() -> None:
    assert is_norm_class("LayerNorm") and is_norm_class("LlamaRMSNorm")
    assert is_norm_class("BatchNorm1d") and is_norm_class("InstanceNorm12d")
    assert not is_norm_class("PreNormBlock")  # "Norm" not at the end
    assert not is_norm_class("LayerNorm1")  # a number without the d
    assert not is_norm_class("Linear") and not is_norm_class("")


def test_a_nameless_module_keeps_its_empty_label() -> None:
    # the root ("") is alone, whatever its signature: its own label, ""
    assert group_repeats(["", "h.0", "h.1"], [1, 2, 2]) == (("", (0,)), ("h.{0..1}", (1, 2)))
    assert truncate("", 2) == "" and truncate("a.b.c", None) == "a.b.c"
    assert truncate("a.b.c", 2) == "a.b" and truncate("a.b.c", 0) == ""


def test_folded_groups_fold_again_by_signature_and_the_next_index() -> None:
    # round one folds the first index: a.{0..1}.0 and a.{0..1}.1; round two the second
    assert group_repeats(["a.0.0", "a.0.1", "a.1.0", "a.1.1"], [1, 1, 1, 1]) == (
        ("a.{0..1}.{0..1}", (0, 1, 2, 3)),)
    # the same names with the second index's pairs of other figures: folded once only
    assert group_repeats(["b.0.c.0", "b.1.c.0", "b.0.c.1", "b.1.c.1"], [1, 1, 2, 2]) == (
        ("b.{0..1}.c.0", (0, 1)), ("b.{0..1}.c.1", (2, 3)))


def test_an_index_that_cannot_fold_leaves_the_next_one_to_fold() -> None:
    # position 1 holds 0 in both names, so no fold there (duplicate indices); the search
    # moves on to position 2 (1 past it, not 2), where 0 and 1 fold
    assert group_repeats(["a.0.0", "a.0.1"], [1, 1]) == (("a.0.{0..1}", (0, 1)),)
    # alone at position 1 (different positions 2): each moves to position 2 and they fold
    assert group_repeats(["a.0.0.w", "a.0.1.w"], [1, 1]) == (("a.0.{0..1}.w", (0, 1)),)
