"""Binary max/min are elementwise, not reductions: never a silent zero."""

from __future__ import annotations

import torch

from tensorledger.costs import lookup
from tensorledger.trace import trace


def test_binary_max_and_min_cost_one_compare_per_element() -> None:
    # torch.max(a, b) is a composite that reaches the dispatcher as aten.maximum, so a trace
    # never shows aten.max with two tensors; the reduction rule's binary branch is called with
    # them directly and must agree with maximum's element-wise count
    a = torch.empty(4, 6, device="meta")
    b = torch.empty(6, device="meta")  # broadcast: the output has 24 elements, b only 6
    for name, named in (("max", torch.maximum), ("min", torch.minimum)):
        (reference,) = [r for r in trace(lambda f=named: f(a, b)).records if r.category != "view"]
        rule = lookup(f"aten.{name}")
        assert rule is not None
        out = named(a, b)
        assert rule.flops((b, a), {}, out) == reference.flops == 4 * 6  # 24, not 6 - 1


def test_max_as_a_reduction_still_counts_n_minus_one_per_group() -> None:
    a = torch.empty(4, 6, device="meta")
    (record,) = [r for r in trace(lambda: torch.max(a, dim=1)).records if r.category != "view"]
    assert record.flops == 4 * (6 - 1)  # 5 compares for each of 4 rows
    (whole,) = [r for r in trace(lambda: torch.max(a)).records if r.category != "view"]
    assert whole.flops == 24 - 1
