"""What a pipeline schedule's own action lists say: the step's length and bubble, and the
micro-batches each stage and each rank holds in flight.

torch builds every schedule as lists of actions, one per rank (``pipeline_order``: a forward,
a full backward, or a backward split into its input and its weight gradients, of one stage and
one micro-batch; ``None`` for a wait).  Replayed here with each action taking a fixed time and
starting as soon as its rank is free and its inputs are there, the lists give the bubble of
that schedule as torch runs it, not as a formula of p and m says.

Times: a forward 1 unit, a backward's input half 1 and its weight half 1 (a full backward 2),
the zero-bubble papers' equal-thirds case (Qi et al. 2024, §2: F = B = W).  GPipe's and
1F1B's bubble, (p − 1)/(m + p − 1), and the interleaved one, (p − 1)/(v·m + p − 1), hold
for any ratio of forward to backward; the zero-bubble schedules fill theirs with weight
gradients only when those take time of their own.

In flight: a micro-batch enters a stage with its forward and leaves it with its last backward
action (the full backward, or the weight half, which still reads the saved inputs); the count
walks each rank's list in its order, so it does not depend on the times.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from tensorledger.errors import InputError, TraceError

__all__ = ["OrderTimeline", "order_bubble", "order_timeline"]


@dataclass(frozen=True)
class OrderTimeline:
    """A schedule's action lists replayed: the step's length, each rank's busy time and the
    micro-batches in flight."""

    ranks: int
    stages: int
    length: float  # units from the first action's start to the last one's end
    busy: float  # units computed, all ranks together
    in_flight: tuple[int, ...]  # per stage: the most micro-batches forwarded and not done
    rank_in_flight: tuple[int, ...]  # per rank: the most over its stages at once

    @property
    def bubble_fraction(self) -> float:
        """The share of ranks × length no rank computes."""
        return 1 - self.busy / (self.ranks * self.length)


_F, _B, _I, _W = "F", "B", "I", "W"


@functools.cache
def _kinds() -> dict[Any, str]:
    from torch.distributed.pipelining.schedules import _ComputationType as T

    return {T.FORWARD: _F, T.FULL_BACKWARD: _B, T.BACKWARD_INPUT: _I, T.BACKWARD_WEIGHT: _W}


def _kind(action: Any) -> str | None:
    return _kinds().get(action.computation_type)


def order_timeline(order: dict[int, list[Any]], *, forward: float = 1.0,
                   backward_input: float = 1.0, backward_weight: float = 1.0
                   ) -> OrderTimeline:
    """Replay torch's action lists (rank → its actions in order, ``None`` for a wait).

    A forward of stage ``s`` waits for stage ``s − 1``'s of the same micro-batch; a backward
    (full or input half) for its own forward and stage ``s + 1``'s backward; a weight half for
    its input half.  torch's waits are dropped (its drawing of the same dependencies), and so
    are actions that compute nothing (communication, gradient reduction, unshard).
    """
    cost = {_F: forward, _B: backward_input + backward_weight, _I: backward_input,
            _W: backward_weight}
    queues: dict[int, list[tuple[int, int, str]]] = {}  # rank → (stage, micro-batch, kind)
    for rank, actions in sorted(order.items()):
        seen: dict[tuple[int, str], int] = {}
        queues[rank] = []
        for action in actions:
            kind = None if action is None else _kind(action)
            if kind is None:
                continue
            key = (action.stage_index, kind)
            # each stage runs its micro-batches in order in every torch schedule: number
            # them so (torch 2.13's Schedule1F1B lists the last rank's forwards from 1)
            seen[key] = seen.get(key, -1) + 1
            queues[rank].append((action.stage_index, seen[key], kind))
    actions_all = [a for q in queues.values() for a in q]
    if not actions_all:
        raise InputError("the schedule's action lists hold no forward nor backward")
    stages = 1 + max(a[0] for a in actions_all)
    in_flight, rank_in_flight = _in_flight(queues, stages)
    done: dict[tuple[int, int, str], float] = {}  # action → when it ended

    def inputs(action: tuple[int, int, str]) -> list[tuple[int, int, str]] | None:
        """The actions ``action`` waits for, None while one of them has not run."""
        stage, micro, kind = action
        if kind == _F:
            needs = [(stage - 1, micro, _F)] if stage else []
        elif kind == _W:
            needs = [(stage, micro, _I)]
        else:
            needs = [(stage, micro, _F)]
            if stage < stages - 1:
                later = [(stage + 1, micro, k) for k in (_B, _I) if (stage + 1, micro, k) in done]
                if not later:
                    return None
                needs += later
        return needs if all(n in done for n in needs) else None

    free = dict.fromkeys(queues, 0.0)
    heads = dict.fromkeys(queues, 0)
    left = len(actions_all)
    while left:
        ran = False
        for rank, queue in queues.items():
            while heads[rank] < len(queue):
                action = queue[heads[rank]]
                needs = inputs(action)
                if needs is None:
                    break
                start = max([free[rank], *(done[n] for n in needs)])
                free[rank] = done[action] = start + cost[action[2]]
                heads[rank] += 1
                left -= 1
                ran = True
        if not ran:
            raise TraceError("the schedule's action lists do not progress: an action waits "
                             "for one no rank runs")
    busy = sum(cost[a[2]] for a in actions_all)
    return OrderTimeline(ranks=len(queues), stages=stages, length=max(done.values()),
                         busy=busy, in_flight=in_flight, rank_in_flight=rank_in_flight)


def _in_flight(queues: dict[int, list[tuple[int, int, str]]], stages: int
               ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    split = {(a[0], a[1]) for q in queues.values() for a in q if a[2] == _I}
    peak = [0] * stages
    rank_peak = []
    for queue in queues.values():
        now = [0] * stages
        most = 0
        for stage, micro, kind in queue:
            if kind == _F:
                now[stage] += 1
            elif kind == _W or (kind == _B and (stage, micro) not in split):
                now[stage] -= 1
            peak[stage] = max(peak[stage], now[stage])
            most = max(most, sum(now))
        rank_peak.append(most)
    return tuple(peak), tuple(rank_peak)


def order_bubble(order: dict[int, list[Any]]) -> float:
    """The idle fraction of a schedule's action lists (:func:`order_timeline`): napkin's
    (p−1)/(m+p−1) for fill-drain and 1F1B (:func:`tensorledger.napkin.parallel.
    pipeline_bubble`)."""
    return order_timeline(order).bubble_fraction
