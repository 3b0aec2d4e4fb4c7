"""The cost of a CPU tensor's fresh pages: what a large new tensor costs beyond its bytes.

PyTorch's CPU allocator asks the C library for each tensor and gives it back when the tensor
dies.  glibc serves a request below its mmap threshold (at most 32 MiB on 64-bit Linux) from
memory it keeps, but maps a larger one anew each time: the kernel zeroes each page at its
first touch and unmaps it at the free.  On a 2-core EPYC a first write to a fresh 64 MiB
tensor ran at 5.6 GB/s and freeing it took 5 ms, where writing it again ran at 33 GB/s and a
16 MiB tensor cost nothing beyond its bytes.  GPT-2's 154 MB token table makes several such
tensors a step (its fp32 gradient; in AdamW the square root and the quotient of its second
moment), and a roofline that streamed them at the warm rate put a mixed-bf16 step's square
roots at 22 ms against 58 ms measured.

:func:`fresh_pages` times, at sizes around the threshold, a write into a new tensor (its
allocation, faults and free included) against a write into one that exists; the first size
whose new tensor costs twice the warm write is the threshold, and the extra time per byte at
the sizes from it is the fresh pages' rate.  The roofline adds each op's new tensors of that
size or more at that rate (``Hardware.fresh_pages_from_bytes``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tensorledger.bench.probe import _Timer

__all__ = ["PAGE_LABEL", "PAGE_SIZES", "FreshPages", "fresh_pages"]

#: Tensor sizes timed: glibc's largest threshold (32 MiB), sizes on either side, and one of a
#: model's large tables (GPT-2's token embedding is 147 MiB in fp32).
PAGE_SIZES = (2**23, 2**24, 2**25, 2**26, 2**27)

#: How the timer's labels of these figures begin.
PAGE_LABEL = "fresh pages: "

#: A new tensor this many times slower to write than a warm one is mapped anew.
_SLOWER = 2.0


@dataclass(frozen=True)
class PagePoint:
    size_bytes: int
    warm_s: float  # a write into a tensor that exists
    fresh_s: float  # a new tensor written and freed


@dataclass(frozen=True)
class FreshPages:
    from_bytes: int  # the smallest size whose new tensors are mapped anew
    bytes_per_s: float  # the extra cost of such a tensor: its bytes / (fresh − warm)
    points: tuple[PagePoint, ...]


def _label(kind: str, size: int) -> str:
    return f"{PAGE_LABEL}{kind} write {size} B"


def _point(timer: _Timer, size: int, budget_s: float) -> PagePoint:
    """A write of ``size`` bytes into a tensor that exists, and into a new one."""
    elements = size // 4
    kept = torch.empty(elements)
    warm = timer(lambda: kept.fill_(1.0), _label("warm", size), budget_s=budget_s,
                 min_repeats=3, warmup=1)
    fresh = timer(lambda: torch.empty(elements).fill_(1.0), _label("fresh", size),
                  budget_s=budget_s, min_repeats=3, warmup=1)
    return PagePoint(size, warm.median_s, fresh.median_s)


def fresh_pages(timer: _Timer, sizes: Sequence[int] = PAGE_SIZES, *,
                budget_s: float, say: Callable[[str], None]) -> FreshPages | None:
    """The threshold and rate of fresh pages on ``timer``'s CPU, from the sizes whose figures
    were kept (a size still too noisy after its retries is left out, and the timer names it;
    the others decide: left out whole, a model's large new tensors were priced at no cost
    beyond their bytes, GPT-2's 154 MB square root of AdamW's second moment at 10 ms against
    53 to 215 ms measured); None on another device, or where no kept size's new tensor costs
    twice a warm write (an allocator that keeps its memory)."""
    if timer.device.type != "cpu":
        return None
    points = []
    for size in sorted(sizes):
        say(f"fresh pages, {size / 2**20:.0f} MiB tensors")
        point = _point(timer, size, budget_s)
        if timer.kept(_label("warm", size)) and timer.kept(_label("fresh", size)):
            points.append(point)  # a size still noisy after its retries is left out
    mapped = [p for p in points if p.fresh_s >= _SLOWER * p.warm_s]
    if not mapped:
        return None
    extra = sum(p.fresh_s - p.warm_s for p in mapped)
    return FreshPages(mapped[0].size_bytes, sum(p.size_bytes for p in mapped) / extra,
                      tuple(points))
