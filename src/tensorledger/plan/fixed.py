"""The dimensions of a layout a caller fixes (``plan --tp 8 --pp 16 ...``): the search fills the
others, and refuses in one line what no layout of the cluster can have."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from tensorledger.errors import InputError
from tensorledger.plan.estimate import CHECKPOINTS, PlanSetup
from tensorledger.plan.experts import check_ep
from tensorledger.plan.pipeline import MULTI_STAGE, SCHEDULES, describe_stages
from tensorledger.plan.profile import ModelProfile

__all__ = ["LARGEST_COUNT", "MIN_CP_TOKENS", "FixedDims"]

#: The most devices searched (2^20: past any cluster, and the divisors stay few).
LARGEST_COUNT = 1 << 20
#: Context parallelism is searched while each rank keeps at least this many tokens of a
#: sequence: Llama 3 ran CP 16 at 131,072 tokens (8,192 a rank) and none at 8,192, where the
#: ring's exchange would split attention that is a small share of the step.  A fixed ``--cp``
#: is priced at any degree that cuts the sequence.
MIN_CP_TOKENS = 8192


def _check(name: str, value: int, largest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= largest:
        raise InputError(f"{name} must be a whole number from 1 to {largest:,}, got {value!r}")
    return value


@dataclass(frozen=True)
class FixedDims:
    """Dimensions of the layout the caller fixed; the search fills the others (None).

    Every field given leaves only the layouts with that value in the search (the others are
    neither searched nor rejected, as with ``max_pp``); all of them given, one layout is
    evaluated.  ``chunks`` fixes the stages a pipeline rank holds (the multi-stage
    schedules), ``stage_layers`` the blocks of each of the pp · chunks stages, ``cp`` the
    context-parallel ranks.

    >>> FixedDims(tp=8, pp=16).describe()
    'TP 8, PP 16'
    >>> FixedDims(dp=128, zero=3, shard=128, sp=True, accumulation=16,
    ...           schedule="interleaved-1f1b", chunks=2, checkpoint="full").describe()
    'DP 128, ZeRO-3, shard 128, SP on, 16 micro-batches, interleaved-1f1b × 2, checkpoint full'
    >>> FixedDims(cp=16, pp=16, stage_layers=(7,) + (8,) * 14 + (7,)).describe()
    'CP 16, PP 16, stages 7,8×14,7'
    """

    dp: int | None = None  # data-parallel degree (replicas × shard)
    tp: int | None = None
    pp: int | None = None
    zero: int | None = None  # 0 (plain data parallelism) to 3
    shard: int | None = None  # ranks one ZeRO-sharded copy spans (FSDP's group)
    sp: bool | None = None
    accumulation: int | None = None  # micro-batches per step
    schedule: str | None = None  # one of torch's SCHEDULES (a pipeline's)
    chunks: int | None = None  # stages a pipeline rank holds
    checkpoint: str | None = None  # "none", "selective" or "full"
    cp: int | None = None  # context-parallel ranks
    stage_layers: tuple[int, ...] | None = None  # blocks of each stage, in order
    ep: int | None = None  # expert-parallel ranks (of the data-parallel ones)

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "shard", "accumulation", "chunks", "cp", "ep"):
            value = getattr(self, name)
            if value is not None:
                _check(f"fixed {name}", value, LARGEST_COUNT)
        if self.zero is not None and (isinstance(self.zero, bool) or self.zero not in (
                0, 1, 2, 3)):
            raise InputError(f"fixed ZeRO stage must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise InputError(f"unknown schedule {self.schedule!r}; the planner prices "
                             f"{', '.join(SCHEDULES)}")
        if self.chunks is not None and self.schedule is not None:
            if self.schedule not in MULTI_STAGE and self.chunks > 1:
                raise InputError(f"{self.schedule} runs one stage per rank; {self.chunks} "
                                 "chunks need one of " + ", ".join(
                                     s for s in SCHEDULES if s in MULTI_STAGE))
            if self.schedule == "zbv" and self.chunks != 2:
                raise InputError(f"zbv runs exactly 2 stages per rank (a V), not {self.chunks}")
        if self.checkpoint is not None and self.checkpoint not in CHECKPOINTS:
            raise InputError(f"unknown checkpoint {self.checkpoint!r}; known: "
                             f"{', '.join(CHECKPOINTS)}")
        if self.stage_layers is not None:
            if self.pp is None:
                raise InputError("stage layers cut a pipeline: fix its stages (--pp) too")
            stages = len(self.stage_layers)
            if not self.stage_layers or min(self.stage_layers) < 1 or stages % self.pp:
                raise InputError(f"stage layers {describe_stages(self.stage_layers)} are not "
                                 f"pp ({self.pp}) × chunks stages of 1 block or more")
            if self.chunks is not None and stages != self.pp * self.chunks:
                raise InputError(f"stage layers give {stages} stages, not pp × chunks = "
                                 f"{self.pp * self.chunks}")

    @property
    def given(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    @property
    def stage_chunks(self) -> int | None:
        """The chunks fixed, or those the fixed stage layers imply."""
        if self.chunks is not None or self.stage_layers is None or self.pp is None:
            return self.chunks
        return len(self.stage_layers) // self.pp

    def describe(self) -> str:
        """The fixed dimensions, in the order of the layout's name."""
        parts = [f"{label} {value}" for label, value in (
            ("DP", self.dp), ("CP", self.cp), ("TP", self.tp), ("PP", self.pp))
            if value is not None]
        if self.ep is not None:
            parts.append(f"EP {self.ep}")
        if self.zero is not None:
            parts.append(f"ZeRO-{self.zero}")
        if self.shard is not None:
            parts.append(f"shard {self.shard}")
        if self.sp is not None:
            parts.append(f"SP {'on' if self.sp else 'off'}")
        if self.accumulation is not None:
            parts.append(f"{self.accumulation} micro-batch"
                         f"{'' if self.accumulation == 1 else 'es'}")
        if self.schedule is not None or self.chunks is not None:
            parts.append((self.schedule or "chunks") + (
                f" × {self.chunks}" if self.chunks is not None else ""))
        if self.stage_layers is not None:
            parts.append(f"stages {describe_stages(self.stage_layers)}")
        if self.checkpoint is not None:
            parts.append(f"checkpoint {self.checkpoint}")
        return ", ".join(parts)

    def check(self, setup: PlanSetup) -> None:
        """Refuse, in one line, fixed dimensions no layout of ``setup`` can have: degrees that
        do not divide the count, a pipeline schedule without a pipeline, ZeRO without a shard
        group, selective checkpointing under flash attention, context parallelism that does
        not cut the sequence, stage layers that do not add up to the model's."""
        count, layers = setup.count, setup.config.n_layers
        where = f"{count:,} devices"
        degrees = [(label, value) for label, value in (
            ("DP", self.dp), ("CP", self.cp), ("TP", self.tp), ("PP", self.pp))
            if value is not None]
        product = math.prod(value for _, value in degrees)
        named = " · ".join(f"{label} {value}" for label, value in degrees)
        whole = self.dp is not None and self.tp is not None and self.pp is not None
        # DP, TP and PP given, the rest could only be context-parallel ranks: those the
        # search would not take are no layout
        cp = count // product if whole and self.cp is None and count % product == 0 else 1
        unsplit = cp > 1 and (setup.seq_len % (2 * cp) or setup.seq_len // cp < MIN_CP_TOKENS)
        if whole and (product != count if self.cp is not None else product > count or unsplit):
            raise InputError(f"{named} = {product:,} devices, not the {where}; DP · CP · TP · "
                             "PP must equal --count")
        if degrees and count % product:
            raise InputError(f"{named} does not divide the {where}; DP · CP · TP · PP must "
                             "equal --count")
        if self.pp is not None and self.pp > layers:
            raise InputError(f"PP {self.pp} exceeds {setup.config.name}'s {layers} layers")
        if self.pp is not None and setup.max_pp is not None and self.pp > setup.max_pp:
            raise InputError(f"PP {self.pp} is past --max-pp {setup.max_pp}")
        if self.stage_layers is not None and sum(self.stage_layers) != layers:
            raise InputError(f"stage layers {describe_stages(self.stage_layers)} add up to "
                             f"{sum(self.stage_layers)} blocks, not {setup.config.name}'s "
                             f"{layers}")
        if self.sp and self.tp == 1:
            raise InputError("SP needs tensor parallelism: TP 1 splits no sequence")
        pipelined = (self.schedule is not None or self.chunks is not None)
        if pipelined and (self.pp == 1 or setup.max_pp == 1):
            raise InputError(f"the {self.schedule or 'multi-stage'} schedule needs a pipeline "
                             "(PP above 1)")
        if self.schedule is not None and self.schedule not in setup.schedules.names:
            raise InputError(f"the {self.schedule} schedule is priced from torch's action "
                             f"lists, which this search was not given; priced: "
                             f"{', '.join(setup.schedules.names)}")
        self._check_cp(setup)
        check_ep(setup, self.ep, self.cp, self.sp, self.zero)
        if self.ep is not None and self.dp is not None and self.dp % self.ep:
            raise InputError(f"EP {self.ep} takes its ranks from the data-parallel ones: it "
                             f"does not divide DP {self.dp}")
        if self.ep is not None and self.shard is not None and self.shard > 1 \
                and self.shard % self.ep:
            raise InputError(f"EP {self.ep} does not divide the shard group of {self.shard} "
                             "(FSDP shards the other parameters over fsdp · ep)")
        shard = self.shard
        if shard is not None:
            if self.zero == 0 and shard > 1:
                raise InputError(f"a shard group of {shard} needs a ZeRO stage of 1 to 3, "
                                 "not ZeRO-0")
            if self.zero is not None and self.zero > 0 and shard == 1 and self.cp in (None, 1):
                raise InputError(f"ZeRO-{self.zero} needs a shard group above 1 rank")
            if self.dp is not None and self.dp % shard:
                raise InputError(f"a shard group of {shard} does not divide DP {self.dp}")
            left = count // product
            if self.dp is None and left % shard:
                raise InputError(f"a shard group of {shard} does not divide the {where}"
                                 if not degrees else f"a shard group of {shard} does not "
                                 f"divide the {left:,} data-parallel ranks {named} leave")
        if self.zero is not None and self.zero > 0 and self.dp == 1 and self.cp in (None, 1):
            raise InputError(f"ZeRO-{self.zero} needs a data-parallel degree above 1, not DP 1")
        if self.checkpoint == "selective" and setup.attention != "eager":
            raise InputError("checkpoint selective is priced with eager attention only (flash "
                             "keeps no scores to drop); add --attention eager")

    def _check_cp(self, setup: PlanSetup) -> None:
        cp = self.cp
        if cp is None or cp == 1:
            return
        if setup.seq_len % (2 * cp):
            raise InputError(f"CP {cp} cuts each sequence into {2 * cp} chunks (load-balanced "
                             f"for the causal mask); --seq {setup.seq_len:,} does not divide "
                             f"by {2 * cp}")
        if setup.lora is not None:
            raise InputError(f"CP {cp}: context parallelism is not priced with --lora "
                             "adapters yet; drop --cp or --lora")
        if isinstance(setup.config, ModelProfile):
            raise InputError(f"CP {cp}: context parallelism is priced from the reference "
                             f"models' closed form; {setup.config.name} is planned from its "
                             "profile")
        if setup.attention != "flash":
            raise InputError(f"CP {cp}: ring attention runs the fused kernel; drop "
                             "--attention eager")
        if self.zero is not None and self.zero < 2:
            raise InputError(f"CP {cp} shards the parameters over the context-parallel ranks "
                             f"(FSDP, ZeRO-2 or 3), not ZeRO-{self.zero}")
