"""The one table of op cost rules, filled by a decorator that rejects duplicates.

A rule belongs to an aten op *packet* (``"aten.mm"``, every overload of it) and says three
things: how many FLOPs a call costs, as a pure function of shapes and flags; which category
the op belongs to; and which bytes it moves.  The recorder looks a rule up once per op
overload and caches it; an op with no rule is reported as uncovered, never silently zero.
The rule modules apply :func:`register` as a call after each function rather than with ``@``
syntax: mutation testing (``make mutation``, mutmut) leaves decorated functions alone.

A rule is registered as ``register("aten.relu", category="elementwise")(_relu)`` with
``_relu(args, kwargs, out) -> int``; the example below reuses a registered op, so that running
it leaves the table as it was:

>>> lookup("aten.mm").category, lookup("aten.mm_").op   # in-place forms fall back
('matmul', 'aten.mm')
>>> register("aten.mm", category="other")(lambda args, kwargs, out: 2 * numel(args[0]))
Traceback (most recent call last):
...
ValueError: a cost rule for 'aten.mm' is already registered
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from tensorledger.costs.collectives import CollectiveRule

__all__ = [
    "CATEGORIES",
    "FlopRule",
    "Moves",
    "Rule",
    "lookup",
    "numel",
    "packet",
    "register",
    "rules",
    "shape",
]

#: Categories every op falls into; ``view`` is the metadata and aliasing ops that move nothing.
CATEGORIES = ("matmul", "attention", "elementwise", "reduction", "normalization", "embedding",
              "copy", "communication", "view", "other")

#: ``io``: distinct input storages read + new outputs written (the house convention);
#: ``write``: outputs written only (fills, random initialisation, ``ones_like``);
#: ``none``: nothing moved (views, ``empty``: an allocation writes no byte).
Moves = Literal["io", "write", "none"]

#: A rule's FLOP count: ``(args, kwargs, out) -> int``, reading shapes and flags only.
FlopRule = Callable[[Sequence[Any], dict[str, Any], Any], int]
#: An override of the bytes read, for ops that read a small part of an input (embedding).
ReadRule = Callable[[Sequence[Any], dict[str, Any], Any], int]


@dataclass(frozen=True)
class Rule:
    """How one op packet is counted."""

    op: str  # "aten.mm"
    flops: FlopRule
    category: str
    moves: Moves = "io"
    bytes_read: ReadRule | None = None
    causal: Callable[[Sequence[Any], dict[str, Any]], bool] | None = None  # attention only
    write_only_self: bool = False  # copy_, fill_: the first argument is written, not read
    collective: CollectiveRule | None = None  # collectives: kind, group, bytes between ranks


_RULES: dict[str, Rule] = {}


def register(*ops: str, category: str, moves: Moves = "io", bytes_read: ReadRule | None = None,
             causal: Callable[[Sequence[Any], dict[str, Any]], bool] | None = None,
             write_only_self: bool = False, collective: CollectiveRule | None = None
             ) -> Callable[[FlopRule], FlopRule]:
    """Register one FLOP rule for op packets such as ``"aten.mm"``; a second rule for the
    same op raises ``ValueError``."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; known: {', '.join(CATEGORIES)}")

    def decorate(flops: FlopRule) -> FlopRule:
        for op in ops:
            if op in _RULES:
                raise ValueError(f"a cost rule for {op!r} is already registered")
        for op in ops:
            _RULES[op] = Rule(op, flops, category, moves, bytes_read, causal, write_only_self,
                             collective)
        return flops

    return decorate


def packet(op: str) -> str:
    """An op's name without its overload, as rules and the profiler name it; a name already
    without one stays.

    >>> packet("aten.mm.default"), packet("aten.mm")
    ('aten.mm', 'aten.mm')
    """
    return op.rsplit(".", 1)[0] if op.count(".") >= 2 else op


def lookup(op: str) -> Rule | None:
    """The rule of an op packet (``"aten.add_"`` falls back to ``"aten.add"``), or None."""
    _load_rules()
    rule = _RULES.get(op)
    if rule is None and op.endswith("_") and not op.endswith("__"):
        rule = _RULES.get(op[:-1])
    return rule


def rules() -> dict[str, Rule]:
    """A copy of the whole table, for listing and tests."""
    _load_rules()
    return dict(_RULES)


def shape(tensor: Any) -> tuple[int, ...]:
    """The shape of a tensor argument as a tuple of ints."""
    return tuple(int(n) for n in tensor.shape)


def numel(tensor: Any) -> int:
    """Elements of a tensor argument (from its shape only)."""
    return math.prod(int(n) for n in tensor.shape)


_LOADED = False


def _load_rules() -> None:
    # The rule modules register themselves on import; imported here, once, so that
    # `lookup` always sees the full table without a circular import at module load.
    global _LOADED
    if not _LOADED:
        _LOADED = True
        from tensorledger.costs import (  # noqa: F401
            attention,
            collectives,
            elementwise,
            matmul,
            memory_ops,
            normalization,
            optimizer,
            selection,
        )
