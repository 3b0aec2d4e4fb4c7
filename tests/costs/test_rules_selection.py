"""Rules of the ops that choose, order or count by value (costs/selection.py), run on real
CPU tensors under the recorder; every dimension differs (rows 6, width 10, k 3), so a wrong
axis changes the count.  The counts restate the module's conventions by hand."""

from __future__ import annotations

import torch

from tests.costs.rules_support import record_op

aten = torch.ops.aten
ROWS, WIDTH, K = 6, 10, 3


def scores() -> torch.Tensor:
    return torch.arange(ROWS * WIDTH, dtype=torch.float32).reshape(ROWS, WIDTH)


def test_rule_aten_topk() -> None:
    # per row: 10 elements against a heap of 3: ⌈log₂ 4⌉ = 2 compares each → 6·10·2 = 120
    record = record_op("aten.topk", lambda: torch.topk(scores(), K, dim=-1))
    assert (record.flops, record.category) == (120, "reduction")
    # along the first dimension: rows of 6, 10 of them, k 3: still 60 elements · 2 = 120;
    # top-1: one compare per element, 60
    assert record_op("aten.topk", lambda: torch.topk(scores(), 1, dim=0)).flops == 60


def test_rule_aten_sort() -> None:
    # rows of 10: ⌈log₂ 10⌉ = 4 compares per element → 60 · 4 = 240; along dim 0 (rows of 6,
    # ⌈log₂ 6⌉ = 3): 180
    assert record_op("aten.sort", lambda: torch.sort(scores())).flops == 240
    assert record_op("aten.sort", lambda: torch.sort(scores(), dim=0)).flops == 180
    stable = record_op("aten.sort", lambda: torch.sort(scores(), dim=0, stable=True))
    assert (stable.flops, stable.category) == (180, "reduction")


def test_rule_aten_argsort() -> None:
    # torch's argsort reaches the dispatcher as sort; the rule for the name is sort's
    from tensorledger.costs.registry import lookup

    rule = lookup("aten.argsort")
    assert rule is not None
    assert rule.flops((scores(), 0), {}, None) == 180
    assert record_op("aten.sort", lambda: torch.argsort(scores())).flops == 240


def test_rule_aten_msort() -> None:
    from tensorledger.costs.registry import lookup

    rule = lookup("aten.msort")
    assert rule is not None and rule.flops((scores(),), {"dim": 0}, None) == 180


def test_rule_aten_histc() -> None:
    # 4 per element: subtract, scale, floor, add to the bin → 60 · 4 = 240
    record = record_op("aten.histc", lambda: torch.histc(scores(), bins=7, min=0, max=59))
    assert (record.flops, record.category) == (240, "reduction")


def test_rule_aten_bincount() -> None:
    ids = torch.tensor([3, 1, 4, 1, 5, 2, 6])
    record = record_op("aten.bincount", lambda: torch.bincount(ids, minlength=9))
    assert (record.flops, record.category) == (7, "reduction")  # one add per element


def test_rule_aten_nonzero() -> None:
    mask = scores() > 20  # 60 elements compared
    record = record_op("aten.nonzero", lambda: torch.nonzero(mask))
    assert (record.flops, record.category) == (60, "reduction")
    assert record.output_shapes == ((39, 2),)  # 21..59


def test_rule_aten_nonzero_static() -> None:
    mask = scores() > 20
    record = record_op("aten.nonzero_static", lambda: torch.nonzero_static(mask, size=50))
    assert record.flops == 60
