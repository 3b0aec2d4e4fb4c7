"""Every pipeline schedule torch has, priced for the planner from torch's own action lists.

:class:`ActionListPricer` is the :class:`~tensorledger.plan.pipeline.SchedulePricer` that
``plan`` gives its search: for each (schedule, p, m, v) it builds the schedule's action lists
(:func:`tensorledger.workload.pipeline.action_lists`: torch's ``pipeline_order`` over stand-in
stages on a fake group) and replays them
(:func:`tensorledger.workload.schedule_order.order_timeline`): the bubble, each stage's
micro-batches in flight, and the stages each rank holds.  The planner is pure (no torch, no
workload), so the replay lives here, one layer up, and travels down as an object.

Long lists: a schedule's lists grow with p · m · v actions, and building and replaying them
takes tens of milliseconds per thousand.  Past ``EXACT_MICROBATCHES`` × p micro-batches (and
one period more) every schedule is in its steady state, where each further p micro-batches
add the same idle time and the same micro-batches in flight per stage (the replays at 2p, 3p
and 4p show it, and a test holds an extrapolated figure equal to a replay at 16p): there the
figures are the replays at two counts of the same remainder mod p, extended linearly.
Each stage's figures
are those of torch's lists; nothing is a formula of p and m.

>>> pricer = ActionListPricer()
>>> zbv = pricer.figures("zbv", 4, 8, 2)
>>> zbv.rank_stages[0], zbv.source
((0, 7), "torch's action lists, replayed")
"""

from __future__ import annotations

from typing import ClassVar

from tensorledger.errors import InputError
from tensorledger.plan.pipeline import SCHEDULES, ScheduleFigures, SchedulePricer
from tensorledger.workload.schedules import check_schedule, resolve_schedule

__all__ = ["EXACT_MICROBATCHES", "ActionListPricer"]

#: Micro-batches per pipeline rank up to which the lists are replayed whole.
EXACT_MICROBATCHES = 2


class ActionListPricer(SchedulePricer):
    """All of torch's schedules, from their action lists (see the module)."""

    names = SCHEDULES
    source = "torch's action lists, replayed"

    #: replays by (schedule, p, m, v), shared by every pricer of the process: torch's lists
    #: are the same for every search
    _replays: ClassVar[dict[tuple[str, int, int, int], ScheduleFigures | str]] = {}

    def _price(self, schedule: str, pp: int, microbatches: int, chunks: int
               ) -> ScheduleFigures | str:
        kind = resolve_schedule(schedule)
        try:
            check_schedule(kind, pp, microbatches, chunks)
        except InputError as refusal:
            return str(refusal)
        p, m = pp, microbatches
        if m <= (EXACT_MICROBATCHES + 1) * p:
            return self._replayed(schedule, p, m, chunks)
        # the steady state: two replays of the same remainder mod p, a period apart
        low = EXACT_MICROBATCHES * p + m % p
        high = low + p
        one, two = (self._replayed(schedule, p, low, chunks),
                    self._replayed(schedule, p, high, chunks))
        if isinstance(one, str) or isinstance(two, str):  # torch takes m but not these
            return self._replayed(schedule, p, m, chunks)
        periods = (m - low) // p
        idle = _idle(one) + periods * (_idle(two) - _idle(one))
        in_flight = tuple(a + periods * (b - a)
                          for a, b in zip(one.stage_in_flight, two.stage_in_flight, strict=True))
        return ScheduleFigures(schedule=schedule, pp=p, microbatches=m, chunks=chunks,
                               bubble_fraction=idle / (idle + m),
                               stage_in_flight=in_flight, rank_stages=one.rank_stages,
                               source=self.source + f", its steady state past {low} "
                               "micro-batches extended")

    def _replayed(self, schedule: str, pp: int, microbatches: int, chunks: int
                  ) -> ScheduleFigures | str:
        key = (schedule, pp, microbatches, chunks)
        held = self._replays.get(key)
        if held is not None:
            return held
        from tensorledger.workload.pipeline import action_lists  # imports torch
        from tensorledger.workload.schedule_order import order_timeline

        kind = resolve_schedule(schedule)
        try:
            check_schedule(kind, pp, microbatches, chunks)
        except InputError as refusal:
            self._replays[key] = str(refusal)
            return str(refusal)
        timeline = order_timeline(action_lists(kind, pp, microbatches, chunks))
        figures = ScheduleFigures(
            schedule=schedule, pp=pp, microbatches=microbatches, chunks=chunks,
            bubble_fraction=timeline.bubble_fraction, stage_in_flight=timeline.in_flight,
            rank_stages=self.placement(schedule, pp, chunks),
            source=self.source)
        self._replays[key] = figures
        return figures


def _idle(figures: ScheduleFigures) -> float:
    """The replay's idle time in units of one micro-batch's busy time (busy time grows as
    m, the same actions each micro-batch): m · f / (1 − f)."""
    return figures.bubble_fraction / (1.0 - figures.bubble_fraction) * figures.microbatches
