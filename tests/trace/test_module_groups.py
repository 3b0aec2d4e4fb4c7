"""Repeated modules folded into one row: labels, sums against the members counted apart, and
the module tables of ``trace``, ``roofline`` and ``account``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tensorledger.hardware import get_hardware
from tensorledger.roofline import predict
from tensorledger.roofline.modules import module_times
from tensorledger.trace import by_module, summarize, trace
from tensorledger.trace.aggregate import ModuleNode, group_modules
from tensorledger.trace.modules import group_repeats, index_label, truncate
from tensorledger.workload import trace_model


def test_labels_fold_one_integer_component_at_a_time() -> None:
    names = [f"m.blocks.{i}.mlp.up" for i in range(12)] + ["m.head"]
    grouped = group_repeats(names, [1] * 12 + [2])
    assert grouped == (("m.blocks.{0..11}.mlp.up", tuple(range(12))), ("m.head", (12,)))
    # two indices: the outer folds first, then the inner; 3 layers × 2 experts = 6 members
    nested = [f"l.{i}.e.{j}.w" for i in range(3) for j in range(2)]
    assert group_repeats(nested, [0] * 6) == (("l.{0..2}.e.{0..1}.w", tuple(range(6))),)
    assert index_label([7, 0, 1, 2, 3, 5, 9, 8]) == "{0..3,5,7..9}"
    assert truncate("a.b.c", 2) == "a.b" and truncate("a.b.c", None) == "a.b.c"


def test_different_figures_or_names_are_not_grouped() -> None:
    # block 1 differs (another signature), so blocks 0, 2, 3 fold and block 1 stays alone
    names = ["b.0.f", "b.1.f", "b.2.f", "b.3.f", "b.0.g"]
    assert group_repeats(names, [5, 6, 5, 5, 5]) == (
        ("b.{0,2..3}.f", (0, 2, 3)), ("b.1.f", (1,)), ("b.0.g", (4,)))
    with pytest.raises(ValueError):
        group_repeats(["a"], [])


class _Block(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class _Net(nn.Module):
    """Five equal blocks, then one wider block (its own row)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_Block(6, 10) for _ in range(5)] + [_Block(6, 14)])
        self.head = nn.Linear(6, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _net_trace():  # type: ignore[no-untyped-def]
    net = _Net().to("meta")
    x = torch.ones(4, 6, device="meta", requires_grad=True)  # block 0 computes its input grad
    return trace(lambda x: net(x).sum().backward(), x)


def _leaves(node: ModuleNode) -> list[ModuleNode]:
    return [node] + [n for c in node.children for n in _leaves(c)]


def test_grouped_tree_sums_its_members_and_keeps_the_root() -> None:
    result = _net_trace()
    plain = by_module(result)
    grouped = group_modules(plain)
    assert grouped == summarize(result).modules
    for field in ("ops", "flops", "flops_forward", "flops_backward", "bytes_read",
                  "bytes_written"):
        assert getattr(grouped, field) == getattr(plain, field)
    assert grouped.flops == sum(r.flops for r in result.records)
    names = {n.name: n for n in _leaves(grouped)}
    five = names["_Net.blocks.{0..4}"]
    assert five.count == 5 and "_Net.blocks.5" in names and "_Net.blocks.0" not in names
    members = [plain.find(f"_Net.blocks.{i}") for i in range(5)]
    assert all(m is not None for m in members)
    assert five.flops == sum(m.flops for m in members if m is not None)
    # each up: 2·4·6·10 = 480 forward FLOPs; five of them summed
    up = names["_Net.blocks.{0..4}.up"]
    assert up.count == 5
    assert up.flops_forward == 5 * 2 * 4 * 6 * 10  # = 2400
    assert up.flops == sum(m.flops for i in range(5)
                           if (m := plain.find(f"_Net.blocks.{i}.up")) is not None)


def test_roofline_by_module_groups_and_sums() -> None:
    result = _net_trace()
    prediction = predict(result.records, get_hardware("h100"))
    rows = module_times(prediction.by_module)
    assert sum(r.time_s for r in rows) == pytest.approx(prediction.time_s)
    assert sum(r.flops for r in rows) == prediction.flops
    by_name = {r.name: r for r in rows}
    up = by_name["_Net.blocks.{0..4}.up"]
    members = [t for t in prediction.by_module if t.name in {f"_Net.blocks.{i}.up"
                                                             for i in range(5)}]
    assert up.count == 5 and len(members) == 5
    assert up.time_s == pytest.approx(sum(t.time_s for t in members))
    assert up.flops == sum(t.flops for t in members)
    # cut to 2 components: every op under _Net.blocks in one row
    cut = {r.name: r for r in module_times(prediction.by_module, depth=2)}
    assert cut["_Net.blocks"].flops == sum(t.flops for t in prediction.by_module
                                           if t.name.startswith("_Net.blocks."))


def test_tiny_blocks_fold_in_the_trace_tree() -> None:
    run = trace_model("tiny", batch=2, seq=8, step="forward-backward", precision="fp32")
    grouped = summarize(run.trace).modules
    names = {n.name: n for n in _leaves(grouped)}
    blocks = names["TransformerLM.blocks.{0..1}"]
    plain = by_module(run.trace)
    parts = [plain.find(f"TransformerLM.blocks.{i}") for i in range(2)]
    assert blocks.count == 2
    assert blocks.flops == sum(p.flops for p in parts if p is not None)


def test_cli_tables_show_groups(cli) -> None:  # type: ignore[no-untyped-def]
    common = ("--model", "tiny", "--batch", "1", "--seq", "8", "--precision", "fp32")
    out = cli("trace", *common).stdout
    assert "blocks.{0..1} ×2" in out and "attention ×2" in out
    # the ModuleList that only holds the group is not a row of its own
    cells = [line.split("│")[1].strip() for line in out.splitlines() if line.count("│") > 2]
    assert "blocks" not in cells and "blocks.{0..1} ×2" in cells
    out = cli("roofline", *common, "--depth", "3").stdout
    assert "TransformerLM.blocks.{0..1} ×2" in out and "TransformerLM.blocks.0 " not in out
    out = cli("account", *common, "--depth", "3").stdout
    assert "blocks.{0..1} ×2" in out
    bad = cli("roofline", *common, "--depth", "-1")
    assert bad.code == 2 and "--depth must be 0 or more" in bad.stderr
