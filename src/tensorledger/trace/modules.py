"""Repeated modules folded into one row: twelve ``blocks.3.mlp.up`` that differ only in their
block number, with the same figures, become ``blocks.{0..11}.mlp.up`` counted twelve times.

Pure functions of names and figures: the members of a group are summed, never averaged, so a
grouped table adds up to the same whole as the ungrouped one.

>>> group_repeats(["h.0.mlp", "h.1.mlp", "h.2.mlp", "ln_f"], [7, 7, 7, 3])
(('h.{0..2}.mlp', (0, 1, 2)), ('ln_f', (3,)))
>>> truncate("GPT2LMHeadModel.transformer.h.0.attn", 3)
'GPT2LMHeadModel.transformer.h'
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

__all__ = ["group_repeats", "index_label", "truncate"]


def truncate(name: str, depth: int | None) -> str:
    """The first ``depth`` path components of a module name (all of them for ``None``)."""
    if depth is None or not name:
        return name
    return ".".join(name.split(".")[:depth])


def index_label(indices: Sequence[int]) -> str:
    """``{0..11}`` for a run, ``{0..3,5,8..9}`` for runs with gaps.

    >>> index_label([3, 0, 1, 2, 5, 9, 8])
    '{0..3,5,8..9}'
    """
    ordered = sorted(set(indices))
    runs: list[list[int]] = []
    for value in ordered:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return "{" + ",".join(f"{r[0]}..{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs) + "}"


@dataclass
class _Group:
    parts: list[str | tuple[int, ...]]  # a tuple: a component already folded (its indices)
    members: list[int]
    signature: Hashable
    next_part: int = 0  # the first component this group may still fold


def _plain_index(part: str | tuple[int, ...]) -> bool:
    return isinstance(part, str) and part.isascii() and part.isdigit()


def _label(parts: Sequence[str | tuple[int, ...]]) -> str:
    return ".".join(p if isinstance(p, str) else index_label(p) for p in parts)


def group_repeats(names: Sequence[str], signatures: Sequence[Hashable]
                  ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Group names that differ only in integer path components and share a signature (the
    figures the caller holds equal: its choice; ``aggregate`` uses FLOPs by phase).  Returns
    ``(label, member positions)`` in the order of each group's first member; a name alone
    keeps its own label.

    Components are folded left to right (the outer index first), so
    ``layers.{0..3}.experts.{0..7}.w1`` is one group of 32.
    """
    if len(names) != len(signatures):
        raise ValueError("one signature per name")
    groups = [_Group(list(name.split(".")) if name else [""], [i], signature)
              for i, (name, signature) in enumerate(zip(names, signatures, strict=True))]
    while True:
        buckets: dict[tuple[Hashable, int, Hashable], list[_Group]] = {}
        done: list[_Group] = []
        for group in groups:
            position = next((p for p in range(group.next_part, len(group.parts))
                             if _plain_index(group.parts[p])), None)
            if position is None:
                done.append(group)
                continue
            shape = tuple(None if p == position else part for p, part in enumerate(group.parts))
            key = (shape, position, group.signature)
            buckets.setdefault(key, []).append(group)
        if not buckets:
            break
        merged: list[_Group] = list(done)
        for (_, position, signature), bucket in buckets.items():
            indices = [int(str(g.parts[position])) for g in bucket]
            if len(bucket) == 1 or len(set(indices)) != len(indices):
                for g in bucket:
                    g.next_part = position + 1
                merged.extend(bucket)
                continue
            parts = list(bucket[0].parts)
            parts[position] = tuple(sorted(indices))
            merged.append(_Group(parts, sorted(m for g in bucket for m in g.members),
                                 signature, position + 1))
        groups = merged
    groups.sort(key=lambda g: g.members[0])
    return tuple((_label(g.parts), tuple(g.members)) for g in groups)
