"""Pipeline schedules and stage sizes, torch-free: which of ``torch.distributed.pipelining``'s
schedules a layout runs, how many stages each rank holds and where, the micro-batches each
needs, and how many blocks each stage holds.

A command refuses a schedule that cannot run (too few micro-batches, chunks it does not take)
and stage sizes that do not add up to the model, in one line, before torch is imported.  The
rules are torch 2.13's own (``schedules.py``): 1F1B needs a micro-batch per stage; the
interleaved schedules split the micro-batches into ``max(1, m // p)`` equal rounds; ZBV runs
exactly two stages per rank, placed in a V (rank ``r`` holds stages ``r`` and ``2p − 1 − r``).

>>> resolve_schedule("ZBV").placement(4, 2, rank=1)
(1, 6)
>>> StageLayers.parse("first-1,last-1").counts(126, 16)
(7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7)
>>> StageLayers.parse("3,4,...,4,3").counts(14, 4)
(3, 4, 4, 3)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from tensorledger.errors import InputError
from tensorledger.plan.pipeline import shorter_ends_cut

__all__ = ["Schedule", "StageLayers", "check_schedule", "resolve_schedule"]


class Schedule(Enum):
    """A pipeline schedule of ``torch.distributed.pipelining``, by the name a command takes."""

    GPIPE = "gpipe"  # every micro-batch forward, then every one backward (fill, drain)
    ONE_F_ONE_B = "1f1b"  # after warm-up, one forward and one backward in turn
    INTERLEAVED_1F1B = "interleaved-1f1b"  # 1F1B over v stages (chunks) per rank, depth first
    LOOPED_BFS = "looped-bfs"  # v stages per rank, each stage's micro-batches all at once
    INTERLEAVED_ZERO_BUBBLE = "interleaved-zb"  # ZB1P: backward split into input and weight
    ZBV = "zbv"  # zero bubble over two stages per rank placed in a V

    @property
    def interleaved(self) -> bool:
        """Several stages per rank (torch's ``PipelineScheduleMulti``)."""
        return self not in (Schedule.GPIPE, Schedule.ONE_F_ONE_B)

    @property
    def split_backward(self) -> bool:
        """The backward runs as two actions: input gradients, then weight gradients."""
        return self in (Schedule.INTERLEAVED_ZERO_BUBBLE, Schedule.ZBV)

    @property
    def torch_name(self) -> str:
        """The class's name in ``torch.distributed.pipelining.schedules``."""
        return _TORCH_NAMES[self]

    def default_chunks(self) -> int:
        """Stages per rank when none are given: 2 for the multi-stage schedules, else 1."""
        return 2 if self.interleaved else 1

    def placement(self, pp: int, chunks: int, rank: int) -> tuple[int, ...]:
        """The stages rank ``rank`` of ``pp`` holds, in its local order: ``rank``,
        ``rank + pp``, … (a loop), or ``rank`` and ``2·pp − 1 − rank`` for ZBV (a V)."""
        if self is Schedule.ZBV:
            return (rank, 2 * pp - 1 - rank)
        return tuple(rank + pp * k for k in range(chunks))


_TORCH_NAMES = {
    Schedule.GPIPE: "ScheduleGPipe",
    Schedule.ONE_F_ONE_B: "Schedule1F1B",
    Schedule.INTERLEAVED_1F1B: "ScheduleInterleaved1F1B",
    Schedule.LOOPED_BFS: "ScheduleLoopedBFS",
    Schedule.INTERLEAVED_ZERO_BUBBLE: "ScheduleInterleavedZeroBubble",
    Schedule.ZBV: "ScheduleZBVZeroBubble",
}

#: Other spellings a command takes (torch's class names without ``Schedule``, lower case).
_ALIASES = {"interleaved1f1b": Schedule.INTERLEAVED_1F1B, "loopedbfs": Schedule.LOOPED_BFS,
            "interleavedzerobubble": Schedule.INTERLEAVED_ZERO_BUBBLE,
            "interleaved-zero-bubble": Schedule.INTERLEAVED_ZERO_BUBBLE,
            "zbvzerobubble": Schedule.ZBV}


def resolve_schedule(name: str | Schedule) -> Schedule:
    """The schedule of a name (``gpipe``, ``1f1b``, ``interleaved-1f1b``, ``looped-bfs``,
    ``interleaved-zb``, ``zbv``; torch's class names without ``Schedule`` too).

    >>> resolve_schedule("1F1B")
    <Schedule.ONE_F_ONE_B: '1f1b'>
    >>> resolve_schedule("LoopedBFS")
    <Schedule.LOOPED_BFS: 'looped-bfs'>
    """
    if isinstance(name, Schedule):
        return name
    key = str(name).strip().lower()
    known = {schedule.value: schedule for schedule in Schedule}
    schedule = known.get(key) or _ALIASES.get(key)
    if schedule is None:
        raise InputError(f"unknown pipeline schedule {name!r}; known: {', '.join(known)}")
    return schedule


def check_schedule(schedule: Schedule, pp: int, microbatches: int, chunks: int) -> None:
    """Refuse, in one line, what torch's schedule would refuse when it is built: chunks it
    does not take, too few micro-batches, or micro-batches that do not split into rounds.

    >>> try:
    ...     check_schedule(Schedule.ONE_F_ONE_B, 4, 2, 1)
    ... except InputError as error:
    ...     print(error)
    1f1b needs a micro-batch per stage at least; --microbatches 2 < 4 stages
    """
    if chunks > 1 and not schedule.interleaved:
        raise InputError(f"{schedule.value} runs one stage per rank; --chunks {chunks} needs a "
                         "schedule of several: "
                         + ", ".join(s.value for s in Schedule if s.interleaved))
    if schedule is Schedule.ZBV and chunks != 2:
        raise InputError(f"zbv runs exactly 2 stages per rank (a V); got --chunks {chunks}")
    if schedule is Schedule.ONE_F_ONE_B and microbatches < pp:
        raise InputError(f"1f1b needs a micro-batch per stage at least; --microbatches "
                         f"{microbatches} < {pp} stages")
    if schedule in (Schedule.INTERLEAVED_1F1B, Schedule.INTERLEAVED_ZERO_BUBBLE):
        rounds = max(1, microbatches // pp)
        if microbatches % rounds:
            raise InputError(f"{schedule.value} runs the micro-batches in {rounds} equal rounds "
                             f"(--microbatches // --pp); --microbatches {microbatches} does not "
                             f"divide by {rounds}: use a multiple of {pp}")


_SHORTER = re.compile(r"(first|last)-(\d+)")


@dataclass(frozen=True)
class StageLayers:
    """How many blocks each pipeline stage holds, as given (``--stage-layers``).

    Either every stage's count, in order (``7,8,...,8,7``: ``...`` repeats the count before it
    until there is one per stage), or the first and last stage shorter than the others by
    ``k`` blocks (``first-1,last-1``, as torchtitan's ``*_stage_less_layers`` options: they
    hold the embeddings and the head), the rest even.  Resolved against a model's layers and
    stage count by :meth:`counts`.
    """

    given: tuple[int | None, ...] = ()  # counts in order, None for "..."
    first_less: int = 0
    last_less: int = 0

    @classmethod
    def parse(cls, text: str) -> StageLayers:
        """Read ``--stage-layers``.

        >>> StageLayers.parse("last-2").last_less
        2
        """
        parts = [part.strip().lower() for part in str(text).split(",")]
        if not parts or not all(parts):
            raise InputError(f"--stage-layers is a comma list, got {text!r}")
        shorter = [_SHORTER.fullmatch(part) for part in parts]
        if all(shorter):
            less = {match.group(1): int(match.group(2)) for match in shorter if match}
            if len(less) != len(parts):
                raise InputError(f"--stage-layers names first and last once each, got {text!r}")
            return cls(first_less=less.get("first", 0), last_less=less.get("last", 0))
        given: list[int | None] = []
        for part in parts:
            if part == "...":
                if not given or given[-1] is None:
                    raise InputError(f"--stage-layers: '...' repeats the count before it; got "
                                     f"{text!r}")
                given.append(None)
            elif part.isdigit() and int(part) >= 1:
                given.append(int(part))
            else:
                raise InputError(f"--stage-layers takes block counts of 1 or more, '...', or "
                                 f"first-K,last-K; got {part!r} in {text!r}")
        return cls(given=tuple(given))

    def counts(self, layers: int, stages: int) -> tuple[int, ...]:
        """The blocks of each of ``stages`` stages of a model of ``layers`` blocks."""
        if self.given:
            counts = self._expanded(stages)
        else:
            cut = shorter_ends_cut(layers, stages, self.first_less, self.last_less)
            if cut is None:
                raise InputError(f"{layers} layers do not split into {stages} stages with the "
                                 f"first {self.first_less} and the last {self.last_less} "
                                 f"shorter; give the counts (--stage-layers 7,8,...,8,7)")
            counts = list(cut)
            if min(counts) < 1:
                raise InputError(f"--stage-layers leaves a stage with no block: "
                                 f"{_listed(counts)}")
        if sum(counts) != layers:
            raise InputError(f"--stage-layers {_listed(counts)} add up to {sum(counts)} blocks, "
                             f"not the model's {layers}")
        return tuple(counts)

    def _expanded(self, stages: int) -> list[int]:
        fixed = [count for count in self.given if count is not None]
        gaps = len(self.given) - len(fixed)
        missing = stages - len(fixed)
        if (missing != 0 and not gaps) or missing < 0 or (gaps and missing % gaps):
            raise InputError(f"--stage-layers gives {len(fixed)} counts for {stages} stages "
                             "(--pp × chunks); give one a stage, '...' repeating one")
        counts: list[int] = []
        for count in self.given:
            counts.extend([counts[-1]] * (missing // gaps) if count is None else [count])
        return counts

    def describe(self) -> str:
        if self.given:
            return ",".join("..." if count is None else str(count) for count in self.given)
        return ",".join(part for part in (f"first-{self.first_less}" if self.first_less else "",
                                          f"last-{self.last_less}" if self.last_less else "")
                        if part) or "even"


def _listed(counts: list[int] | tuple[int, ...]) -> str:
    return ",".join(map(str, counts))
