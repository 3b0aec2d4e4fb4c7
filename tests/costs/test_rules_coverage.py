"""Every rule in the cost registry has a test named after its op, or a row in one of the
tables the per-family tests run over; a new rule without one fails here."""

from __future__ import annotations

from types import ModuleType

from tensorledger.costs import rules
from tests.costs import (
    test_rules_attention,
    test_rules_collectives,
    test_rules_elementwise,
    test_rules_matmul,
    test_rules_memory_ops,
    test_rules_normalization,
    test_rules_optimizer,
    test_rules_selection,
)
from tests.costs.rules_support import rule_test_name

MODULES: tuple[ModuleType, ...] = (test_rules_attention, test_rules_collectives,
                                   test_rules_elementwise,
                                   test_rules_matmul, test_rules_memory_ops,
                                   test_rules_normalization, test_rules_optimizer,
                                   test_rules_selection)

#: the tables that parametrized tests run over: op → (test, its table)
TABLES: dict[str, dict[str, object]] = {
    "test_rule_elementwise_table": dict(test_rules_elementwise.ELEMENTWISE),
    "test_rule_foreach_table": dict(test_rules_elementwise.FOREACH),
    "test_rule_reduction_table": dict(test_rules_elementwise.REDUCTIONS),
    "test_rule_memory_table": dict(test_rules_memory_ops.MOVES),
    "test_rule_collective_table": dict(test_rules_collectives.COLLECTIVES),
    "test_rule_sync_and_copy_table": dict(test_rules_collectives.OTHERS),
}


def named_tests() -> set[str]:
    return {name for module in MODULES for name in vars(module)
            if name.startswith("test_rule_") and callable(getattr(module, name))}


def covering_test(op: str) -> str | None:
    """The test that pins ``op``'s rule, or None."""
    if rule_test_name(op) in named_tests():
        return rule_test_name(op)
    for test, table in TABLES.items():
        if op in table:
            return f"{test}[{op}]"
    return None


#: the namespaces of real ops; the registry's doctest registers an ``example.`` op of its own
NAMESPACES = ("aten", "c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor",
              "fsdp")


def registered_ops() -> list[str]:
    return [op for op in rules() if op.split(".", 1)[0] in NAMESPACES]


def test_every_registered_op_has_a_test() -> None:
    missing = sorted(op for op in registered_ops() if covering_test(op) is None)
    assert missing == [], f"rules with no test named after their op: {missing}"


def test_the_tables_name_only_registered_ops_and_each_op_once() -> None:
    registered = set(registered_ops())
    seen: set[str] = set()
    for table in TABLES.values():
        assert set(table) <= registered, sorted(set(table) - registered)
        assert not seen & set(table)
        seen |= set(table)
    for name in named_tests():
        if name in TABLES:
            continue
        # a named test belongs to a registered op (a stale name would pin nothing)
        assert any(rule_test_name(op) == name for op in registered), name


def test_names_follow_the_op() -> None:
    assert rule_test_name("aten.mm") == "test_rule_aten_mm"
    assert rule_test_name("aten._fused_adam_") == "test_rule_aten__fused_adam_"
    assert covering_test("aten.mm") == "test_rule_aten_mm"
    assert covering_test("aten.relu") == "test_rule_elementwise_table[aten.relu]"
    assert covering_test("aten.never_an_op") is None
    assert len(registered_ops()) >= 316  # every rule module loaded
