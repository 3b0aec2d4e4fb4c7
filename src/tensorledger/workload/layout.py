"""How a step is spread over devices: a :class:`Layout` of data, sharded-data and tensor
parallelism, checked against the model once, before anything is built.

Torch-free, like :mod:`.spec`: a command refuses a layout that does not divide the model in
one line saying which dimension, before torch is imported.

The degrees multiply: ``--dp 2 --fsdp 4 --tp 8`` is 64 devices, a mesh of 2 replicas (HSDP's
replicate dimension when ``--fsdp`` is given too, else DDP) × 4 shards (FSDP2, ZeRO stage
``--zero``) × 8 tensor-parallel ranks (DTensor, ``--sp`` for sequence parallelism).  Every
rank of a layout runs the same step, so one traced rank stands for all of them.

>>> layout = resolve_layout(fsdp=8, tp=8)
>>> layout.count, layout.zero, layout.mesh_dims
(64, 3, (('fsdp', 8), ('tp', 8)))
>>> layout
Layout(FSDP ZeRO-3 × 8 · TP × 8, 64 ranks)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.napkin.parallel import tp_indivisible
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.summary import summary
from tensorledger.workload.schedules import Schedule, StageLayers, check_schedule, resolve_schedule

__all__ = ["CP_ROTATIONS", "LARGEST_DEGREE", "SCHEDULES", "SINGLE", "ZERO_STAGES", "Layout",
           "check_expert_width", "check_experts", "check_layout", "resolve_layout"]

#: The largest degree of any one dimension: far past any cluster, small enough to stay exact.
LARGEST_DEGREE = 1 << 20

#: Pipeline schedules by name (torch.distributed.pipelining's GPipe, 1F1B, interleaved 1F1B,
#: looped BFS, interleaved zero bubble, ZBV).
SCHEDULES = tuple(schedule.value for schedule in Schedule)

#: torch's ways of rotating keys and values round the context-parallel ring.
CP_ROTATIONS = ("allgather", "alltoall")

#: ZeRO stages and what each shards over the data-parallel ranks.
ZERO_STAGES = {1: "optimizer state", 2: "optimizer state and gradients",
               3: "optimizer state, gradients and parameters"}


@dataclass(frozen=True)
class Layout:
    """Degrees of parallelism of one step; all 1 is a single device.

    ``dp`` replicas (DDP, or HSDP's replicate dimension beside ``fsdp``), ``fsdp`` shards of
    the ZeRO stage ``zero`` (1: ``ZeroRedundancyOptimizer`` under DDP; 2: FSDP2 keeping the
    parameters gathered from forward to backward; 3: FSDP2 resharding after forward), ``tp``
    tensor-parallel ranks, with ``sp`` sequence parallelism for the norms between them;
    ``pp`` pipeline stages running ``microbatches`` micro-batches by ``schedule``, outermost
    (each stage laid out over the other degrees' ranks), each rank holding ``chunks`` stages
    (the multi-stage schedules) of ``stage_layers`` blocks (even when None).
    """

    dp: int = 1
    fsdp: int = 1
    zero: int = 3
    tp: int = 1
    sp: bool = False
    pp: int = 1
    microbatches: int = 1
    schedule: str = "1f1b"
    chunks: int = 1  # stages per pipeline rank
    stage_layers: StageLayers | None = None
    # context parallelism: ranks that split each sequence (torch's ring attention, the
    # sequence load-balanced for causal masks); they share a batch and shard the parameters
    # with the fsdp ranks (torchtitan's dp_shard_cp)
    cp: int = 1
    # how the ring moves keys and values forward (torch's set_rotate_method): one all-gather
    # per layer (torch's default), or an all-to-all permutation per ring step
    cp_rotate: str = "allgather"
    # expert parallelism: ranks that each hold 1/ep of every routed-expert block and run their
    # own batch; token-slots travel to their experts' ranks by all-to-all (.expert_parallel)
    ep: int = 1
    # expert tensor parallelism: 1 (each tp rank holds its ep rank's experts whole) or tp
    # (each keeps 1/tp of every local expert's hidden width; the experts' output all-reduced
    # over tp: torchtitan's ETP = TP)
    etp: int = 1

    @property
    def count(self) -> int:
        """Devices in all: the product of the degrees."""
        return self.dp * self.fsdp * self.ep * self.cp * self.tp * self.pp

    def stage_counts(self, layers: int, model: str = "the model") -> tuple[int, ...]:
        """The blocks of each of the ``pp × chunks`` stages of a model of ``layers`` blocks;
        refused in one line when they do not add up (or an even split does not divide).

        >>> uneven = StageLayers.parse("first-1,last-1")
        >>> Layout(pp=2, chunks=2, stage_layers=uneven).stage_counts(6)
        (1, 2, 2, 1)
        """
        stages = self.pp * self.chunks
        if self.stage_layers is not None:
            return self.stage_layers.counts(layers, stages)
        if layers % stages:
            what = f"--pp {self.pp}" + (f" × {self.chunks} chunks" if self.chunks > 1 else "")
            raise InputError(f"{what} does not divide {model}'s {layers} layers; use a stage "
                             f"count that divides {layers}, or --stage-layers (e.g. "
                             "first-1,last-1)")
        return (layers // stages,) * stages

    @property
    def single(self) -> bool:
        return self.count == 1

    @property
    def data_parallel(self) -> int:
        """Ranks that each run their own batch (replicas × shards × expert-parallel ranks)."""
        return self.dp * self.fsdp * self.ep

    @property
    def mesh_dims(self) -> tuple[tuple[str, int], ...]:
        """The device mesh's named dimensions, outermost first (those of degree > 1)."""
        dims = (("pp", self.pp), ("dp", self.dp), ("fsdp", self.fsdp), ("cp", self.cp),
                ("ep", self.ep), ("tp", self.tp))
        return tuple((name, size) for name, size in dims if size > 1)

    @property
    def dim_strides(self) -> dict[int, str]:
        """Each mesh dimension by how far apart its ranks lie in the world (the innermost, tp,
        is 1 apart; fsdp, tp apart; dp, fsdp · tp apart): how a collective's group is named.

        >>> Layout(dp=2, fsdp=4, tp=8).dim_strides
        {1: 'tp', 8: 'fsdp', 32: 'dp'}
        """
        strides: dict[int, str] = {}
        stride = 1
        for name, size in reversed(self.mesh_dims):
            strides[stride] = name
            stride *= size
        return strides

    @property
    def group_names(self) -> dict[int | tuple[int, int], str]:
        """:attr:`dim_strides`, and the flattened groups FSDP shards over by (stride, ranks):
        fsdp·ep beside expert parallelism, fsdp·cp beside context parallelism (each would
        otherwise be named by its stride alone, as its innermost dimension).

        >>> Layout(fsdp=2, ep=4, tp=2).group_names
        {1: 'tp', 2: 'ep', 8: 'fsdp', (2, 8): 'fsdp·ep'}
        """
        names: dict[int | tuple[int, int], str] = {}
        names.update(self.dim_strides.items())
        inner = {name: stride for stride, name in self.dim_strides.items()}
        for flat in ("ep", "cp"):
            if self.fsdp > 1 and flat in inner:
                names[(inner[flat], self.fsdp * getattr(self, flat))] = f"fsdp·{flat}"
        return names

    @property
    def shard_ranks(self) -> int:
        """The ranks FSDP shards the parameters over: fsdp × cp."""
        return self.fsdp * self.cp

    @property
    def strategy(self) -> str:
        """A short name of the data-parallel part: ``ddp``, ``zero1``, ``fsdp``, ``hsdp``.
        Context-parallel ranks hold the same parameters and see different tokens, so they
        shard the parameters as FSDP ranks do: ``cp`` > 1 makes it ``fsdp`` (``hsdp`` with
        ``dp``)."""
        if self.fsdp > 1 or self.cp > 1:
            if self.zero == 1:
                return "zero1"
            return "hsdp" if self.dp > 1 else "fsdp"
        return "ddp" if self.dp > 1 or self.ep > 1 else ""

    def describe(self) -> str:
        """``FSDP ZeRO-3 × 8 · TP × 8`` (empty on a single device); context parallelism says
        over how many ranks FSDP shards (``CP × 2 (ring attention; FSDP ZeRO-3 over fsdp·cp =
        8 ranks)``)."""
        parts = []
        if self.fsdp > 1:
            name = "DDP + ZeRO-1" if self.zero == 1 else "FSDP"
            if self.zero != 1:
                name += f" ZeRO-{self.zero}"
            parts.append(f"{name} × {self.fsdp}")
        if self.dp > 1:
            sharded = self.shard_ranks > 1 and self.zero != 1
            parts.append(f"{'replicas' if sharded else 'DDP'} × {self.dp}")
        if self.cp > 1:
            parts.append(f"CP × {self.cp} (ring attention, {self.cp_rotate}; FSDP "
                         f"ZeRO-{self.zero} over fsdp·cp = {self.shard_ranks} ranks)")
        if self.ep > 1:
            over = (f"; FSDP of the experts over fsdp = {self.fsdp} ranks" if self.fsdp > 1
                    else "")
            if self.etp > 1:
                over += f"; each expert's hidden width split over tp (ETP {self.etp})"
            elif self.tp > 1:
                over += "; experts whole on each tp rank"
            parts.append(f"EP × {self.ep} (experts sharded, tokens by all-to-all{over})")
        if self.tp > 1:
            parts.append(f"TP{' + SP' if self.sp else ''} × {self.tp}")
        if self.pp > 1:
            chunks = f" × {self.chunks} chunks" if self.chunks > 1 else ""
            stages = ("" if self.stage_layers is None
                      else f", stage layers {self.stage_layers.describe()}")
            parts.append(f"PP × {self.pp} ({self.schedule}{chunks}, {self.microbatches} "
                         f"micro-batches{stages})")
        return " · ".join(parts)

    def __repr__(self) -> str:
        if self.single:
            return "Layout(single device)"
        return summary("Layout", self.describe(), f"{self.count} ranks")


SINGLE = Layout()


def _degree(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"--{name} must be a whole number of ranks, got {value!r}")
    if not 1 <= value <= LARGEST_DEGREE:
        raise InputError(f"--{name} must be between 1 and {LARGEST_DEGREE:,}, got {value:,}")
    return value


def resolve_layout(*, dp: int = 1, fsdp: int = 1, zero: int | None = None, tp: int = 1,
                   sp: bool = False, pp: int = 1, microbatches: int | None = None,
                   schedule: str | None = None, count: int | None = None,
                   chunks: int | None = None, stage_layers: str | None = None, cp: int = 1,
                   cp_rotate: str | None = None, ep: int = 1, etp: int = 1) -> Layout:
    """Check the degrees against each other (not yet against a model: :func:`check_layout`).

    ``zero`` defaults to 3 and needs ``fsdp`` > 1; ``sp`` needs ``tp`` > 1; ``count``, when
    given beside any degree, must equal their product.

    >>> resolve_layout(fsdp=4, zero=1).strategy
    'zero1'
    >>> try:
    ...     resolve_layout(dp=2, tp=2, count=8)
    ... except InputError as error:
    ...     print(error)
    --count 8 is not the layout's 2 (dp) × 2 (tp) = 4 devices; drop --count
    """
    layout = Layout(dp=_degree("dp", dp), fsdp=_degree("fsdp", fsdp), tp=_degree("tp", tp),
                    zero=3 if zero is None else zero, sp=bool(sp), pp=_degree("pp", pp),
                    microbatches=1 if microbatches is None else _degree("microbatches",
                                                                        microbatches),
                    schedule=resolve_schedule("1f1b" if schedule is None else schedule).value,
                    cp=_degree("cp", cp),
                    cp_rotate="allgather" if cp_rotate is None else cp_rotate.strip().lower(),
                    ep=_degree("ep", ep), etp=_degree("etp", etp))
    _check_expert_parallel(layout, zero)
    _check_expert_tensor_parallel(layout)
    if cp_rotate is not None and layout.cp == 1:
        raise InputError("--cp-rotate moves keys and values round the context-parallel ring; "
                         "give --cp N (N > 1) with it")
    if layout.cp_rotate not in CP_ROTATIONS:
        raise InputError(f"unknown --cp-rotate {cp_rotate!r}; known: {', '.join(CP_ROTATIONS)}")
    if layout.pp == 1 and (microbatches is not None or schedule is not None
                           or chunks is not None or stage_layers is not None):
        raise InputError("--microbatches, --schedule, --chunks and --stage-layers run a "
                         "pipeline; give --pp N (N > 1)")
    if layout.pp > 1:
        kind = resolve_schedule(layout.schedule)
        layout = dataclasses.replace(
            layout, chunks=kind.default_chunks() if chunks is None else _degree("chunks", chunks),
            stage_layers=None if stage_layers is None else StageLayers.parse(stage_layers))
        check_schedule(kind, layout.pp, layout.microbatches, layout.chunks)
    if zero is not None:
        if isinstance(zero, bool) or zero not in ZERO_STAGES:
            raise InputError(f"--zero is a ZeRO stage, 1, 2 or 3, got {zero!r}")
        if layout.fsdp == 1 and not (layout.cp > 1 and zero != 1):
            raise InputError(f"--zero {zero} shards {ZERO_STAGES[zero]} over the ranks of "
                             "--fsdp; give --fsdp N (N > 1) with it")
        if zero == 1 and layout.cp > 1:
            raise InputError("--zero 1 runs DDP, which would all-reduce whole gradients over "
                             "the --cp ranks too; use --zero 2 or 3 with --cp")
        if zero == 1 and layout.dp > 1:
            raise InputError("--zero 1 shards the optimizer over every data-parallel rank; "
                             "give them all as --fsdp N, without --dp")
    if sp and layout.tp == 1:
        raise InputError("--sp splits the sequence over the tensor-parallel ranks; give --tp N "
                         "(N > 1) with it")
    if count is not None and not layout.single and count != layout.count:
        dims = " × ".join(f"{size} ({name})" for name, size in layout.mesh_dims)
        raise InputError(f"--count {count} is not the layout's {dims} = {layout.count} devices; "
                         "drop --count")
    return layout


def _check_expert_parallel(layout: Layout, zero: int | None) -> None:
    """Refuse, in one line, a dimension beside ``--ep`` that is not laid out with it yet.

    Each pipeline stage lays its own experts out over its ep ranks (``ep`` inside ``pp``);
    the stages' other parameters are sharded by FSDP2 over fsdp·ep, as without stages (DDP,
    which ``--ep`` alone runs them under, is not traced within a pipeline's stages).  Beside
    ``--tp`` the experts are whole on each tp rank (ETP = 1), which runs them on the whole
    sequence its tp peers hold too: sequence parallelism would hand each its own shard.
    """
    if layout.ep == 1:
        return
    # --dp beside --fsdp is HSDP, over fsdp·ep ranks (the experts over fsdp), replicated
    dp = layout.dp if layout.fsdp == 1 else 1
    beside = [f"--{name} {size}" for name, size in (("dp", dp), ("cp", layout.cp)) if size > 1]
    if zero == 1:
        beside.append("--zero 1")
    if layout.sp:
        beside.append("--sp")
    if beside:
        raise InputError(f"--ep {layout.ep} beside {', '.join(beside)} is not laid out yet; "
                         "--ep runs alone or beside --fsdp (ZeRO 2 or 3, with --dp: HSDP), "
                         "--tp and --pp")
    if layout.pp > 1 and layout.fsdp == 1:
        raise InputError(f"--ep {layout.ep} beside --pp {layout.pp} shards each stage's "
                         "other parameters over fsdp·ep with FSDP2 (DDP is not traced within "
                         "pipeline stages); give --fsdp N (N > 1) too")


def _check_expert_tensor_parallel(layout: Layout) -> None:
    """Refuse, in one line, an ``--etp`` other than 1 or the ``--tp`` degree, or one without
    both expert and tensor parallelism to split.

    >>> try:
    ...     resolve_layout(ep=2, tp=4, etp=2)
    ... except InputError as error:
    ...     print(error)
    --etp takes 1 (experts whole on each tp rank) or the --tp degree 4, got 2
    """
    etp = layout.etp
    if etp == 1:
        return
    if layout.ep == 1 or layout.tp == 1:
        raise InputError(f"--etp {etp} splits each expert-parallel rank's experts over the "
                         "tensor-parallel ranks; give --ep N and --tp N (N > 1) with it")
    if etp != layout.tp:
        raise InputError(f"--etp takes 1 (experts whole on each tp rank) or the --tp degree "
                         f"{layout.tp}, got {etp}")


def check_experts(layout: Layout, experts: tuple[int, int] | None, model: str) -> None:
    """Refuse ``--ep`` for a model without routed experts, or one that does not divide them
    (``experts``: (routed experts, experts per token), None without).

    >>> try:
    ...     check_experts(Layout(ep=3), (8, 2), "mixtral")
    ... except InputError as error:
    ...     print(error)
    --ep 3 does not divide mixtral's 8 routed experts; use an --ep that divides 8
    """
    if layout.ep == 1:
        return
    if experts is None:
        raise InputError(f"--ep {layout.ep} shards routed experts; {model!r} has none (a "
                         "mixture-of-experts config.json has them): drop --ep")
    if experts[0] % layout.ep:
        raise InputError(f"--ep {layout.ep} does not divide {model}'s {experts[0]} routed "
                         f"experts; use an --ep that divides {experts[0]}")


def check_expert_width(layout: Layout, width: int, model: str) -> None:
    """Refuse an ``--etp`` that does not divide the routed experts' hidden ``width``.

    >>> try:
    ...     check_expert_width(Layout(ep=2, tp=3, etp=3), 32, "tiny-moe")
    ... except InputError as error:
    ...     print(error)
    --etp 3 does not divide tiny-moe's expert width 32; use --etp 1 or a --tp dividing 32
    """
    if layout.etp > 1 and width % layout.etp:
        raise InputError(f"--etp {layout.etp} does not divide {model}'s expert width "
                         f"{width:,}; use --etp 1 or a --tp dividing {width:,}")


def check_layout(layout: Layout, config: TransformerConfig | None, *, batch: int,
                 seq: int) -> None:
    """Refuse, in one line naming the dimension, a layout the model does not divide into.

    Tensor parallelism splits the attention heads (query and key/value), the MLP's hidden
    width and the vocabulary (embedding rows and head outputs) over ``tp``; sequence
    parallelism splits the sequence too.  FSDP pads a shard that does not divide, so it asks
    nothing of the model.  ``config`` is None for a model whose shape is not known in advance
    (a factory): then torch's own checks speak when the step runs.

    >>> from tensorledger.models import get_preset
    >>> try:
    ...     check_layout(resolve_layout(tp=3), get_preset("tiny"), batch=1, seq=16)
    ... except InputError as error:
    ...     print(error)
    --tp 3 does not divide tiny's 4 attention heads; use a --tp that divides 4
    """
    if layout.pp > 1 and config is not None:
        layout.stage_counts(config.n_layers, config.name)
    if layout.pp > 1 and batch % layout.microbatches:
        raise InputError(f"--batch {batch} does not split into {layout.microbatches} "
                         f"micro-batches; use a batch that divides by {layout.microbatches}")
    cp = layout.cp
    if cp > 1 and config is None:
        raise InputError(f"--cp {cp} cuts the token ids of a reference model (a preset or a "
                         "GPT-2 / Llama config.json) along the sequence; this model is not one")
    if cp > 1 and seq % (2 * cp):
        raise InputError(f"--cp {cp} splits each sequence into 2 × {cp} chunks (two per rank, "
                         f"balancing the causal mask); --seq {seq:,} does not divide by "
                         f"{2 * cp}")
    tp = layout.tp
    if tp > 1 and layout.sp and seq % (tp * cp):
        raise InputError(f"--sp splits the sequence over --tp {tp} ranks; --seq {seq} does not "
                         f"divide by {tp * cp}")
    if tp == 1 or config is None:
        return
    bad = tp_indivisible(config, tp)
    if bad is not None:
        what, size = bad
        raise InputError(f"--tp {tp} does not divide {config.name}'s {size:,} {what}; use a "
                         f"--tp that divides {size:,}")
