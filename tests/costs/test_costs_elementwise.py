"""Binary max/min are elementwise, not reductions: never a silent zero."""

from __future__ import annotations

import torch

from tensorledger.trace import trace


def test_binary_max_and_min_cost_one_compare_per_element() -> None:
    a = torch.empty(4, 6, device="meta")
    b = torch.empty(4, 6, device="meta")
    for binary, named in ((torch.max, torch.maximum), (torch.min, torch.minimum)):
        ours = [r for r in trace(lambda f=binary: f(a, b)).records if r.category != "view"]
        reference = [r for r in trace(lambda f=named: f(a, b)).records if r.category != "view"]
        assert [r.flops for r in ours] == [r.flops for r in reference] == [4 * 6]  # 24


def test_max_as_a_reduction_still_counts_n_minus_one_per_group() -> None:
    a = torch.empty(4, 6, device="meta")
    (record,) = [r for r in trace(lambda: torch.max(a, dim=1)).records if r.category != "view"]
    assert record.flops == 4 * (6 - 1)  # 5 compares for each of 4 rows
    (whole,) = [r for r in trace(lambda: torch.max(a)).records if r.category != "view"]
    assert whole.flops == 24 - 1
