"""What the probe does with a figure it cannot trust: take it again, longer, or leave it out.

A busy machine bends a probe's figures in two ways, and both only ever add time:

- a *wild round*: one round of a figure reads far slower than the others (another job ran
  meanwhile).  A round whose median is more than ``WILD_ROUND`` times the fastest round's is
  dropped and taken again;
- a *stalled thread team*: a CPU kernel that splits its work over the OpenMP team waits at the
  end for every thread, and a thread whose core another process holds runs only when the
  scheduler gives it a slice.  On a shared two-core machine every 64³ matmul then took 12 to
  24 ms (the scheduler's 4 ms ticks) where one thread did it in 7 µs: a floor of 16 ms a call
  under every size to 512, which priced a GPT-2 decode step at 1,288 ms against 116 ms
  measured.  The samples of such a round agree with each other (their spread was under 1%), so
  spread cannot see it; the same call on one thread can.  A figure whose team time is more
  than ``STALL_RATIO`` times, and ``STALL_MIN_S`` more than, its one-thread time is taken
  again.

A figure still spread more than the limit (or still stalled) after its retries and one
measurement ``LONGER`` times as long is *set aside*: left out of the profile — no peak, no
point of a curve — and named, with the reason, in the probe's output and the profile's
comments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from tensorledger.bench.harness import Measurement, pooled
from tensorledger.summary import show_time

__all__ = ["LONGER", "STALL_CHECK_S", "STALL_MIN_S", "STALL_RATIO", "WILD_ROUND", "SetAside",
           "figure_of", "one_thread", "settle_rounds", "stall_reason", "stalled"]

#: A round slower than this many times the figure's fastest round is dropped and taken again.
WILD_ROUND = 2.0
#: The last measurement of a figure that stays spread runs this many times its budget.
LONGER = 4.0
#: A thread team this many times slower than one thread on the same call is stalled ...
STALL_RATIO = 3.0
#: ... when the difference is also at least a scheduler slice (a team's start-up costs µs).
STALL_MIN_S = 1e-3
#: Calls slower than this are not checked on one thread: a slice is small beside them (on a
#: 2-core machine at load 12 a 512³ fp32 matmul read 60 ms a call on two threads, which a
#: 50 ms limit let through).
STALL_CHECK_S = 0.5


@dataclass(frozen=True)
class SetAside:
    """A figure the probe measured but left out of the profile, and why."""

    figure: str  # as the probe names it: "matmul bf16 256", "attention fp32 512"
    reason: str

    def __str__(self) -> str:
        return f"{self.figure} ({self.reason})"


def figure_of(unreliable: str) -> str:
    """The figure an ``unreliable`` entry names: ``"matmul fp32 64 (spread 40%)"`` →
    ``"matmul fp32 64"``."""
    return unreliable.split(" (", 1)[0]


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch's CPU kernels on one thread for a while (restored after)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def stalled(team_s: float, alone_s: float) -> bool:
    """Whether a thread team taking ``team_s`` a call waited for a descheduled thread, against
    ``alone_s`` for the same call on one thread.

    >>> stalled(16e-3, 7.9e-6), stalled(12e-6, 7.9e-6), stalled(0.3, 0.15)
    (True, False, False)
    """
    return team_s > STALL_RATIO * alone_s and team_s - alone_s >= STALL_MIN_S


def stall_reason(team_s: float, alone_s: float) -> str:
    """What a figure set aside for a stalled thread team says."""
    return (f"stalled: {torch.get_num_threads()} threads took {show_time(team_s)} a call, one "
            f"thread {show_time(alone_s)}; another process holds a core")


def settle_rounds(label: str, rounds: Sequence[Measurement],
                  again: Callable[[float], Measurement], round_budget_s: float, *,
                  max_spread: float, retries: int,
                  alone: Callable[[], Measurement] | None = None,
                  say: Callable[[str], None] = lambda _: None,
                  ) -> tuple[Measurement, SetAside | None]:
    """The pooled figure of ``rounds`` of one figure, with wild rounds dropped, or the figure
    set aside.

    ``again(budget_s)`` takes one more round; ``alone()`` times the same call on one thread
    (None: no team to check, as on a GPU); ``say`` is told why a round is taken again.  A
    wild round is taken again; a stalled figure is taken afresh (every kept round is
    suspect); a spread figure is given one more round.  Up to ``retries`` such rounds of
    ``round_budget_s``, then one ``LONGER`` times as long; a figure whose only fault is a
    round that stayed wild keeps its other rounds.
    """
    taken = list(rounds)
    last = retries + 1
    for attempt in range(last + 1):
        fastest = min(r.median_s for r in taken)
        kept = [r for r in taken if r.median_s <= WILD_ROUND * fastest]
        result = pooled(kept)
        problem = ""
        single = alone() if alone is not None and result.median_s < STALL_CHECK_S else None
        if single is not None and stalled(result.median_s, single.median_s):
            problem = stall_reason(result.median_s, single.median_s)
            kept = []
        elif result.spread > max_spread:
            problem = f"spread {result.spread:.0%}, limit {max_spread:.0%}"
        elif len(kept) < len(taken):
            slowest = max(r.median_s for r in taken)
            if attempt == last:  # the rounds kept agree: the one that stayed wild goes
                return result, None
            problem = f"a round {slowest / fastest:.0f}× slower than the fastest"
        if not problem:
            return result, None
        if attempt == last:
            tries = f"{len(rounds)} rounds and {last} more, the last {LONGER:g}× longer"
            return result, SetAside(label, f"{problem}; after {tries}")
        say(problem)
        taken = [*kept, again(round_budget_s * (LONGER if attempt == last - 1 else 1.0))]
    raise AssertionError("unreachable")  # pragma: no cover
