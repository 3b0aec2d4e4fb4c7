"""What the search asks of a pipeline: each schedule's bubble and the micro-batches each of
its stages holds in flight, and the ways to cut a model's blocks into stages.

The figures of a schedule come from a :class:`SchedulePricer`.  This one, torch-free, prices
the two single-stage schedules whose action lists have a closed form (Narayanan et al. 2021):

- GPipe runs every forward, then every backward: the bubble is (p−1)/(m+p−1) of the step and
  every stage holds all m micro-batches in flight;
- 1F1B starts p − s forwards on stage s before its first backward: the same bubble, and
  min(p − s, m) micro-batches in flight on stage s.

Both equal torch's action lists replayed (:mod:`tensorledger.workload.schedule_order`; a test
holds them equal).  The others (interleaved 1F1B with any chunks, looped BFS, interleaved
zero-bubble, ZBV) have no such form: :class:`tensorledger.ledger.schedules.ActionListPricer`
replays torch's own lists for them (and for these two), and ``plan`` uses it.  The planner
does not import torch itself (the import contract keeps the analyses pure), so a caller
without torch searches the two above.

>>> pricer = SchedulePricer()
>>> one = pricer.figures("1f1b", 4, 8, 1)
>>> round(one.bubble_fraction, 4), one.stage_in_flight   # 3 / 11; min(4 − s, 8)
(0.2727, (4, 3, 2, 1))
>>> stage_splits(126, 16)[0]                                # Llama 3 405B's stages
(7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7)
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.errors import InputError

__all__ = ["MULTI_STAGE", "SCHEDULES", "SEARCHED_CHUNKS", "ScheduleFigures", "SchedulePricer",
           "balanced_cut", "describe_stages", "schedule_chunks", "stage_splits"]

#: torch.distributed.pipelining's schedules, by the names the workload takes.
SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv")
#: The schedules that place several stages (chunks) on a rank.
MULTI_STAGE = frozenset({"interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv"})
#: Chunks per rank searched for the multi-stage schedules but ZBV (which runs exactly 2);
#: any other count is priced when fixed.
SEARCHED_CHUNKS = (2, 4)


@dataclass(frozen=True)
class ScheduleFigures:
    """One schedule at ``pp`` ranks, ``microbatches`` micro-batches and ``chunks`` stages a
    rank: its idle share and what each stage holds."""

    schedule: str
    pp: int
    microbatches: int
    chunks: int
    bubble_fraction: float  # the share of ranks × step no rank computes
    stage_in_flight: tuple[int, ...]  # per stage (pp · chunks): the most micro-batches held
    rank_stages: tuple[tuple[int, ...], ...]  # the stages each rank holds
    source: str  # where the figures come from

    @property
    def bubble_to_compute(self) -> float:
        """Idle time over compute time: f / (1 − f); (p−1)/m for 1F1B."""
        return self.bubble_fraction / (1.0 - self.bubble_fraction)


def schedule_chunks(schedule: str, fixed: int | None = None) -> tuple[int, ...]:
    """The chunks a rank holds that a search prices for ``schedule``.

    >>> schedule_chunks("1f1b"), schedule_chunks("zbv"), schedule_chunks("looped-bfs", 5)
    ((1,), (2,), (5,))
    """
    if schedule not in MULTI_STAGE:
        return (1,) if fixed in (None, 1) else ()
    if schedule == "zbv":
        return (2,) if fixed in (None, 2) else ()
    return SEARCHED_CHUNKS if fixed is None else ((fixed,) if fixed > 1 else ())


class SchedulePricer:
    """Prices schedules for a search; figures are remembered per (schedule, p, m, v).

    This base prices GPipe and 1F1B in closed form (the module's docstring); a subclass
    overrides :meth:`_price` and :attr:`names` to price more."""

    names: tuple[str, ...] = ("gpipe", "1f1b")
    source = "closed form (equal to torch's action lists)"

    def __init__(self) -> None:
        self._held: dict[tuple[str, int, int, int], ScheduleFigures | str] = {}

    def figures(self, schedule: str, pp: int, microbatches: int, chunks: int
                ) -> ScheduleFigures | str:
        """The figures, or why torch would refuse the schedule (one line)."""
        key = (schedule, pp, microbatches, chunks)
        held = self._held.get(key)
        if held is None:
            if schedule not in self.names:
                raise InputError(f"schedule {schedule!r} is not priced here; priced: "
                                 f"{', '.join(self.names)}")
            held = self._price(schedule, pp, microbatches, chunks)
            self._held[key] = held
        return held

    def known(self, schedule: str, pp: int, microbatches: int, chunks: int) -> bool:
        """Whether these figures are priced already (asking again costs nothing)."""
        return (schedule, pp, microbatches, chunks) in self._held

    def placement(self, schedule: str, pp: int, chunks: int) -> tuple[tuple[int, ...], ...]:
        """The stages each rank holds: ``r, r + p, …`` (a loop), or ``r`` and ``2p − 1 − r``
        for ZBV (a V)."""
        if schedule == "zbv":
            return tuple((r, 2 * pp - 1 - r) for r in range(pp))
        return tuple(tuple(r + pp * k for k in range(chunks)) for r in range(pp))

    def floor(self, schedule: str, pp: int, microbatches: int, chunks: int) -> ScheduleFigures:
        """Figures no schedule goes below: no bubble, one micro-batch in flight a stage (a
        search prices memory with them first, and spares the lists of a layout that does
        not fit even so)."""
        return ScheduleFigures(schedule=schedule, pp=pp, microbatches=microbatches,
                               chunks=chunks, bubble_fraction=0.0,
                               stage_in_flight=(1,) * (pp * chunks),
                               rank_stages=self.placement(schedule, pp, chunks),
                               source="a floor: one micro-batch in flight a stage")

    def _price(self, schedule: str, pp: int, microbatches: int, chunks: int
               ) -> ScheduleFigures | str:
        p, m = pp, microbatches
        if chunks != 1:
            return f"{schedule} runs one stage per rank, not {chunks}"
        if schedule == "1f1b" and m < p:
            return f"1f1b needs a micro-batch per stage at least; {m} < {p} stages"
        in_flight = tuple(m if schedule == "gpipe" else min(p - s, m) for s in range(p))
        return ScheduleFigures(schedule=schedule, pp=p, microbatches=m, chunks=1,
                               bubble_fraction=(p - 1) / (m + p - 1),
                               stage_in_flight=in_flight,
                               rank_stages=self.placement(schedule, p, 1), source=self.source)


def stage_splits(layers: int, stages: int) -> tuple[tuple[int, ...], ...]:
    """The cuts of ``layers`` blocks into ``stages`` stages a search prices, each once:

    - even, when the stages divide the blocks;
    - else the blocks spread as evenly as they go, the lighter stages at the two ends (they
      also hold the embedding and the head): 126 over 16 is 7, 8 × 14, 7;
    - the first and last stage one block shorter than the rest (torchtitan's
      ``*_stage_less_layers``), and the last alone one shorter, where those divide.

    >>> stage_splits(8, 4)
    ((2, 2, 2, 2),)
    >>> stage_splits(10, 4)
    ((2, 3, 3, 2),)
    >>> stage_splits(15, 4)
    ((3, 4, 4, 4), (4, 4, 4, 3))
    """
    if stages > layers:
        return ()
    splits = [balanced_cut(layers, stages)]
    for first, last in ((1, 1), (0, 1)):
        cut = shorter_ends_cut(layers, stages, first, last)
        if cut is not None and min(cut) >= 1:
            splits.append(cut)
    return tuple(dict.fromkeys(splits))


def shorter_ends_cut(layers: int, stages: int, first: int, last: int
                     ) -> tuple[int, ...] | None:
    """``layers`` blocks over ``stages`` stages, the first ``first`` and the last ``last``
    blocks shorter than the others, the rest even (torchtitan's ``*_stage_less_layers``);
    None where they do not divide (or one stage).  A stage may come out empty: the caller
    says what that means.

    >>> shorter_ends_cut(10, 4, 1, 1), shorter_ends_cut(9, 4, 1, 1)
    ((2, 3, 3, 2), None)
    """
    rest = layers + first + last
    if stages < 2 or rest % stages:
        return None
    cut = [rest // stages] * stages
    cut[0] -= first
    cut[-1] -= last
    return tuple(cut)


def balanced_cut(layers: int, stages: int) -> tuple[int, ...]:
    """``layers`` blocks over ``stages`` stages as evenly as they go, the extra blocks in the
    middle stages (the ends, which hold the embedding and the head, stay light).

    >>> balanced_cut(10, 4), balanced_cut(8, 4)
    ((2, 3, 3, 2), (2, 2, 2, 2))
    """
    base, extra = divmod(layers, stages)
    counts = [base] * stages
    order = sorted(range(stages), key=lambda s: (min(s, stages - 1 - s), s), reverse=True)
    for s in order[:extra]:
        counts[s] += 1
    return tuple(counts)


def describe_stages(counts: tuple[int, ...]) -> str:
    """Stage sizes, repeats folded: ``7,8×14,7``.

    >>> describe_stages((7, 8, 8, 8, 7))
    '7,8×3,7'
    """
    parts: list[str] = []
    index = 0
    while index < len(counts):
        run = index
        while run < len(counts) and counts[run] == counts[index]:
            run += 1
        parts.append(f"{counts[index]}" + (f"×{run - index}" if run - index > 1 else ""))
        index = run
    return ",".join(parts)
