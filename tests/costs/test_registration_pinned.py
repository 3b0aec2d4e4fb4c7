"""Registration itself pinned: ``register`` stores every field it is given (and its defaults),
``_collective`` files a zero-FLOP communication rule with its kind, group, size and direction,
and the size builders read the argument they name.  The table's own rules register while the
package is imported, so these call the registrars directly, on a copy of the table."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tensorledger.costs import registry
from tensorledger.costs.collectives import (
    CollectiveRule,
    _collective,
    _times_ranks,
    _whole,
    per_rank_bytes,
)
from tensorledger.costs.registry import Rule, register


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> dict[str, Rule]:
    registry.rules()  # the real table loaded first, then a copy to write into
    copy = dict(registry._RULES)
    monkeypatch.setattr(registry, "_RULES", copy)
    return copy


def _flops(args: Any, kwargs: Any, out: Any) -> int:
    return 7


def _read(args: Any, kwargs: Any, out: Any) -> int:
    return 3


def _causal(args: Any, kwargs: Any) -> bool:
    return True


def test_register_stores_every_field(table: dict[str, Rule]) -> None:
    coll = CollectiveRule("broadcast", lambda a, k: 1, lambda a, k, o, n: 2, "send")
    returned = register("test.full_a", "test.full_b", category="copy", moves="write",
                        bytes_read=_read, causal=_causal, write_only_self=True,
                        collective=coll)(_flops)
    assert returned is _flops
    for op in ("test.full_a", "test.full_b"):
        assert table[op] == Rule(op, _flops, "copy", "write", _read, _causal, True, coll)


def test_register_defaults(table: dict[str, Rule]) -> None:
    register("test.plain", category="other")(_flops)
    # moves "io" (inputs read, outputs written), no overrides, not write-only, no collective
    assert table["test.plain"] == Rule("test.plain", _flops, "other", "io", None, None, False,
                                       None)


def test_collective_registers_a_zero_flop_communication_rule(table: dict[str, Rule]) -> None:
    def size(args: Any, kwargs: Any, out: Any, ranks: int) -> int:
        return 5

    _collective("test.coll_a", "test.coll_b", kind="all-gather", group=1, size=size)
    for op in ("test.coll_a", "test.coll_b"):
        rule = table[op]
        assert (rule.op, rule.category, rule.flops(("x", "g"), {}, None)) == (
            op, "communication", 0)
        c = rule.collective
        assert c is not None
        # the group is the argument at position 1; the direction defaults to both
        assert (c.kind, c.group(("x", "g", "z"), {}), c.size_bytes, c.direction) == (
            "all-gather", "g", size, "both")
    _collective("test.send", kind="send-recv", group=0, size=size, direction="send")
    assert table["test.send"].collective.direction == "send"  # type: ignore[union-attr]
    assert table["test.send"].collective.peer is None  # type: ignore[union-attr]
    # a point-to-point op files the position of its peer argument
    _collective("test.recv", kind="send-recv", group=3, size=size, direction="recv", peer=1)
    assert table["test.recv"].collective.peer == 1  # type: ignore[union-attr]


def test_size_builders_read_the_named_argument() -> None:
    small = torch.empty(3, 5, dtype=torch.float16, device="meta")  # 15 · 2 = 30 bytes
    large = torch.empty(7, 11, dtype=torch.float32, device="meta")  # 77 · 4 = 308 bytes
    args = (small, large)
    assert _whole(1)(args, {}, None, 4) == 308
    assert _whole(0)(args, {}, None, 4) == 30
    # an all-gather's whole array is N × the input: 4 · 308 = 1232
    assert _times_ranks(1)(args, {}, None, 4) == 1232
    # a list of tensors counts them all: 30 + 308 = 338
    assert _whole(0)(([small, large],), {}, None, 4) == 338


def test_a_collective_of_no_bytes_moves_nothing() -> None:
    # S = 0 is allowed (an empty bucket): 2 · 0 · 3/4 = 0 each way
    assert per_rank_bytes("all-reduce", 0, 4) == (0, 0)
    assert per_rank_bytes("all-gather", 0, 4) == (0, 0)
