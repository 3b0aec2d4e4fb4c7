"""``tensorledger plan`` (search the layouts of a cluster) and ``tensorledger accumulate``
(split a global batch into micro-batches), in closed form.  No torch for a preset unless the
search holds a pipeline (its schedules are priced from torch's own action lists); any other
model source (a config.json, a factory) is profiled first by tracing it on fake tensors
(:func:`tensorledger.ledger.profile.measure_profile`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Annotated

import typer

from tensorledger.cli.common import (
    JSON_HELP,
    emit,
    emit_with_plot,
    integer_parser,
    progress,
    real_parser,
)
from tensorledger.cli.workload import LoraRank, LoraTargets, Qlora
from tensorledger.errors import InputError
from tensorledger.hardware import Hardware, get_hardware
from tensorledger.napkin.adapters import LoraShape, lora_shape
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.plan import (
    ATTENTIONS,
    CHECKPOINTS,
    FixedDims,
    LayoutPlan,
    Verified,
    plan_accumulation,
    plan_layouts,
)
from tensorledger.plan.layouts import LARGEST_COUNT, plan_setup
from tensorledger.plan.pipeline import MULTI_STAGE, SchedulePricer
from tensorledger.plan.profile import ModelProfile
from tensorledger.report.plan import accumulation_view, layout_plan_view, write_plan_plot
from tensorledger.report.plots import check_figure_path
from tensorledger.units import parse_bytes, parse_count
from tensorledger.workload.schedules import StageLayers, resolve_schedule
from tensorledger.workload.source import resolve_source
from tensorledger.workload.spec import resolve_lora

__all__ = ["fixed_dims", "global_batch_seqs", "register"]

#: The largest global batch taken, in sequences (2^32).
LARGEST_BATCH_SEQS = 1 << 32
_SEQUENCES = re.compile(r"^\s*(.+?)\s*(seqs|seq|sequences)\s*$")
#: A token count with a prefix papers read in powers of two ("a 4M-token batch": 4·2²⁰).
_BINARY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KkMmGgBb])\s*$")
_BINARY_POWER = {"k": 10, "m": 20, "g": 30, "b": 30}
#: Where ``plan --help`` lists the options that fix a dimension of the layout.
_FIXED = "Fix a dimension (the search fills the rest)"
#: The names of an earlier planner: interleaved (-V chunks) is torch's interleaved 1F1B.
_INTERLEAVED = re.compile(r"^interleaved(?:-(\d+))?$")


def global_batch_seqs(text: str, seq_len: int) -> tuple[int, str | None]:
    """Sequences per step from ``--global-batch``: tokens (``4M``) or sequences (``512seq``);
    with a note whenever the tokens were read or rounded.

    Papers give batches in binary prefixes ("4M tokens" at 8,192 a sequence is 4·2²⁰ =
    4,194,304 tokens, 512 sequences): a count with K, M or G (B) whose decimal reading is no
    whole number of sequences but whose binary one is, is read in binary; otherwise it is
    rounded to whole sequences.  The note says which.

    >>> global_batch_seqs("4M", 8192)[0], global_batch_seqs("512seq", 8192)
    (512, (512, None))
    >>> global_batch_seqs("4M", 1000)   # 4,000,000 tokens are 4,000 sequences of 1,000
    (4000, None)
    """
    match = _SEQUENCES.match(text)
    if match:
        value = parse_count(match.group(1))
        if value != int(value) or not 1 <= value <= LARGEST_BATCH_SEQS:
            raise InputError(f"--global-batch {text!r}: a whole number of sequences from 1 to "
                             f"{LARGEST_BATCH_SEQS:,} was expected")
        return int(value), None
    tokens = parse_count(text)
    if not tokens >= seq_len or tokens / seq_len > LARGEST_BATCH_SEQS:
        raise InputError(f"--global-batch {text!r} tokens is not at least one sequence of "
                         f"{seq_len:,} tokens (or past {LARGEST_BATCH_SEQS:,} sequences); give "
                         "tokens such as 4M or sequences such as 512seq")
    seqs = round(tokens / seq_len)
    if seqs * seq_len == tokens:
        return seqs, None
    binary = _BINARY.match(text)
    if binary:
        value = float(binary.group(1)) * 2 ** _BINARY_POWER[binary.group(2).lower()]
        if value == int(value) and int(value) % seq_len == 0:
            whole = int(value) // seq_len
            return whole, (f"--global-batch {text.strip()}: read as papers write it, in "
                           f"powers of two: {int(value):,} tokens = {whole:,} sequences of "
                           f"{seq_len:,} ({tokens:,.0f} tokens in decimal are no whole number "
                           "of them)")
    return seqs, (f"--global-batch {text}: {tokens:,.0f} tokens are {tokens / seq_len:,.2f} "
                  f"sequences of {seq_len:,}; rounded to {seqs:,} ({seqs * seq_len:,} tokens). "
                  f"Give {seqs}seq or a token count that divides to say it exactly")


def _checked_for(config: TransformerConfig, hardware: str, attention: str, seq: int,
                 global_batch: str) -> tuple[TransformerConfig, Hardware, int, str | None]:
    chip = get_hardware(hardware)
    if attention.strip().lower() not in ATTENTIONS:
        raise InputError(f"unknown --attention {attention!r}; known: {', '.join(ATTENTIONS)}")
    if seq > config.context_length:
        raise InputError(f"--seq {seq:,} is longer than {config.name}'s context of "
                         f"{config.context_length:,} tokens")
    seqs, note = global_batch_seqs(global_batch, seq)
    return config, chip, seqs, note


def _model_for(model: str, hardware: str, attention: str, seq: int, global_batch: str,
               precision: str, optimizer: str, as_json: bool
               ) -> tuple[TransformerConfig | ModelProfile, Hardware, int, str | None]:
    """What ``plan`` and ``accumulate`` price, from any model source: a preset's closed form,
    or the profile of any other source (a config.json, a factory), traced on fake tensors at
    one and two blocks; with the chip, the global batch in sequences and its note."""
    source = resolve_source(model)  # a bad source: its one line, before any work
    if source.config is not None and source.kind == "preset":
        return _checked_for(source.config, hardware, attention, seq, global_batch)
    chip = get_hardware(hardware)
    chosen = resolve_precision(precision).name  # bad names refused before the trace
    resolve_optimizer(optimizer)
    if source.max_seq is not None and seq > source.max_seq:
        raise InputError(f"--seq {seq:,} is longer than {source.name}'s context of "
                         f"{source.max_seq:,} tokens")
    if attention.strip().lower() != "flash":
        raise InputError(f"--attention: {source.name} is planned from a trace of its own "
                         "attention; drop --attention")
    seqs, note = global_batch_seqs(global_batch, seq)
    from tensorledger.ledger.profile import measure_profile  # imports torch

    with progress(False, as_json) as say:
        profile = measure_profile(source, seq_len=seq, precision=chosen, progress=say)
    return profile, chip, seqs, note


def plan_command(
    model: Annotated[str, typer.Option("--model", "-m", help=(
        "A preset (llama-3-70b, llama-3-405b, ...: its closed form), a config.json of any "
        "architecture or a factory file.py:function (profiled first: traced on fake tensors "
        "at 1 and 2 blocks, seconds).")
    )],
    global_batch: Annotated[str, typer.Option("--global-batch", "-g", help=(
        "Tokens per optimizer step (4M; rounded to whole sequences) or sequences (512seq)."))],
    hardware: Annotated[str, typer.Option("--hardware", "-H", help=(
        "Catalog chip (h100, a100, ...) or a TOML file; its devices per node and links "
        "price the communication."))] = "h100",
    count: Annotated[int, typer.Option("--count", "-n", parser=integer_parser(
        1, LARGEST_COUNT), help=f"Devices, 1 to {LARGEST_COUNT:,}.")] = 8,
    seq: Annotated[int, typer.Option("--seq", "-s", parser=integer_parser(1, 1 << 24), help=(
        "Sequence length (at most the model's context)."))] = 4096,
    tokens: Annotated[str | None, typer.Option(help=(
        "Training tokens (15T): adds the days each layout takes."))] = None,
    budget: Annotated[str | None, typer.Option(help=(
        "Memory one rank may use (70GB), at most the device's; default: all of it."))] = None,
    precision: Annotated[str, typer.Option("--precision", "-p", help=(
        "bf16-master (bf16 weights and gradients, fp32 master and AdamW state: the ZeRO "
        "paper's 16 bytes per parameter), mixed-bf16, bf16, fp32, lecture."))] = "bf16-master",
    optimizer: Annotated[str, typer.Option("--optimizer", "-o", help=(
        "adamw, adam, sgd, momentum, lion, adam8bit, ..."))] = "adamw",
    efficiency: Annotated[float | None, typer.Option(
        parser=real_parser(0.0, 1.0, minimum_open=True), help=(
            "Share of the dense peak the matmuls reach, in (0, 1]; default: the chip's "
            "published fraction at each layout's largest matmul (1: the ideal bound)."))
    ] = None,
    attention: Annotated[str, typer.Option(help=(
        "flash (no s² scores kept) or eager (scores kept; selective checkpointing searched)."))
    ] = "flash",
    top: Annotated[int, typer.Option("--top", "-k", parser=integer_parser(1, 10_000),
                                     help="Layouts shown, fastest first.")] = 10,
    max_pp: Annotated[int | None, typer.Option("--max-pp", parser=integer_parser(1, 1 << 20),
                                               help="The most pipeline stages searched; 1 "
                                               "searches no pipeline.")] = None,
    verify: Annotated[int, typer.Option("--verify", parser=integer_parser(0, 10), help=(
        "Trace the fastest N layouts the tracer can lay out (one micro-batch step of the real "
        "parallel code on fake ranks; minutes for a large model) and show their bytes beside "
        "the closed form's. 0 (the default) traces nothing."))] = 0,
    plot: Annotated[str | None, typer.Option(help=(
        "Write the frontier (memory per rank against step time) to a .png, .svg or .pdf."))
    ] = None,
    dp: Annotated[int | None, typer.Option("--dp", parser=integer_parser(1, LARGEST_COUNT),
                                           help=(
        "Fix the data-parallel degree: replicas × the --fsdp group (the table's 'DP N'); "
        "DP · TP · PP = --count."), rich_help_panel=_FIXED)] = None,
    fsdp: Annotated[int | None, typer.Option("--fsdp", parser=integer_parser(
        1, LARGEST_COUNT), help=(
        "Fix the ranks one sharded copy spans (ZeRO-3 unless --zero says otherwise; 1: no "
        "sharding)."), rich_help_panel=_FIXED)] = None,
    zero: Annotated[int | None, typer.Option("--zero", parser=integer_parser(0, 3), help=(
        "Fix the ZeRO stage: 0 (plain data parallelism) to 3 (FSDP)."),
        rich_help_panel=_FIXED)] = None,
    tp: Annotated[int | None, typer.Option("--tp", parser=integer_parser(1, LARGEST_COUNT),
                                           help="Fix the tensor-parallel degree.",
                                           rich_help_panel=_FIXED)] = None,
    sp: Annotated[bool | None, typer.Option("--sp/--no-sp", help=(
        "Fix sequence parallelism beside TP on (--sp) or off (--no-sp)."),
        rich_help_panel=_FIXED)] = None,
    pp: Annotated[int | None, typer.Option("--pp", parser=integer_parser(1, LARGEST_COUNT),
                                           help=(
        "Fix the pipeline ranks (they need not divide the layers: the stages are cut as "
        "evenly as they go, or as --stage-layers says)."), rich_help_panel=_FIXED)] = None,
    cp: Annotated[int | None, typer.Option("--cp", parser=integer_parser(1, LARGEST_COUNT),
                                           help=(
        "Fix the context-parallel ranks (ring attention over each sequence; --seq must "
        "divide by 2·cp; they shard the parameters with the ZeRO-2/3 group). Searched "
        "while a rank keeps 8,192 tokens or more."), rich_help_panel=_FIXED)] = None,
    ep: Annotated[int | None, typer.Option("--ep", parser=integer_parser(1, LARGEST_COUNT),
                                           help=(
        "Fix the expert-parallel ranks of a mixture of experts (taken from the data-parallel "
        "ones: --ep divides DP and the routed experts; each rank holds E/ep of them, whole on "
        "each TP rank). Beside it --fsdp N is trace's: the other parameters sharded over "
        "N·ep ranks, the experts over N. Searched at every such divisor; 1: none."),
        rich_help_panel=_FIXED)] = None,
    microbatches: Annotated[int | None, typer.Option("--microbatches", parser=integer_parser(
        1, LARGEST_BATCH_SEQS), help=(
        "Fix the micro-batches per step (gradient accumulation; a pipeline's micro-batches)."),
        rich_help_panel=_FIXED)] = None,
    schedule: Annotated[str | None, typer.Option("--schedule", help=(
        "Fix the pipeline schedule (torch's, priced from its own action lists): gpipe, 1f1b, "
        "interleaved-1f1b, looped-bfs, interleaved-zb, zbv (interleaved-V: interleaved-1f1b "
        "with V chunks)."), rich_help_panel=_FIXED)] = None,
    chunks: Annotated[int | None, typer.Option("--chunks", parser=integer_parser(
        1, LARGEST_COUNT), help=(
        "Fix the stages a pipeline rank holds (interleaved-1f1b, looped-bfs and "
        "interleaved-zb take any; zbv 2; 2 and 4 are searched)."), rich_help_panel=_FIXED)
    ] = None,
    stage_layers: Annotated[str | None, typer.Option("--stage-layers", help=(
        "Fix the blocks of each pipeline stage (--pp × chunks of them, --pp given): "
        "7,8,...,8,7 ('...' repeats the count before it), or first-K,last-K (the first/last "
        "stage K blocks shorter: they hold the embedding and the head)."),
        rich_help_panel=_FIXED)] = None,
    checkpoint: Annotated[str | None, typer.Option("--checkpoint", help=(
        "Fix activation checkpointing: none, selective (with --attention eager) or full."),
        rich_help_panel=_FIXED)] = None,
    lora: LoraRank = None,  # account's own options (cli.workload): one spelling, one help
    lora_targets: LoraTargets = None,
    qlora: Qlora = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Search every layout (DP, ZeRO, CP, TP/SP, PP with every torch schedule and stage cut,
    micro-batches, checkpointing) in closed form (a config.json or a factory: from its
    profile, traced first on fake tensors at 1 and 2 blocks); rank the ones that fit by step
    time and count the rejected ones by their binding constraint.  Pipeline schedules are
    priced from torch's own action lists (imports torch: a second or two).
    Any of --dp, --fsdp, --zero, --cp, --ep, --tp, --sp, --pp, --microbatches, --schedule,
    --chunks, --stage-layers, --checkpoint fixes that dimension and the search fills the
    rest; all of them fixed, one layout is evaluated.
    With --lora R (and --lora-targets, --qlora, as account takes them) the step is a LoRA
    (QLoRA) fine-tune of a preset: the base frozen in its stored dtype (or 4-bit NF4), the
    adapters alone trained, no frozen weight's gradient computed or reduced; --verify traces
    its layouts under FSDP or DDP with peft's adapters."""
    if plot is not None:
        check_figure_path(plot)  # refuse a bad path before the work, not after
    fixed = fixed_dims(dp=dp, fsdp=fsdp, zero=zero, tp=tp, sp=sp, pp=pp,
                       microbatches=microbatches, schedule=schedule, checkpoint=checkpoint,
                       cp=cp, chunks=chunks, ep=ep)
    cut = None if stage_layers is None else StageLayers.parse(stage_layers)
    if cut is not None and pp is None:
        raise InputError("--stage-layers cuts a pipeline: give --pp with it")
    adapters = _adapters(model, lora, lora_targets, qlora)
    config, chip, seqs, note = _model_for(model, hardware, attention, seq, global_batch,
                                          precision, optimizer, as_json)
    train_tokens = None
    if tokens is not None:
        train_tokens = parse_count(tokens)
        if not train_tokens >= 1:
            raise InputError(f"--tokens must be at least 1 token, got {tokens!r}")
    budget_bytes = None if budget is None else parse_bytes(budget)
    if cut is not None:
        fixed = dataclasses.replace(fixed, stage_layers=_stage_counts(cut, config, fixed))
    pricer = _pricer(fixed, max_pp)
    shape = _shape(config, adapters)
    result = plan_layouts(config, chip, count, seq_len=seq, global_batch_seqs=seqs,
                          precision=precision, optimizer=optimizer, budget_bytes=budget_bytes,
                          efficiency=efficiency, attention=attention.strip().lower(),
                          tokens=train_tokens, top=top, max_pp=max_pp, fixed=fixed,
                          schedules=pricer,
                          lora=shape)
    if note is not None:
        result = dataclasses.replace(result, notes=(note,))
    if verify:
        with progress(False, as_json) as say:
            result = _verified(result, config, model, chip, count, seq, seqs, precision,
                               optimizer, budget_bytes, efficiency, attention.strip().lower(),
                               verify, say, pricer, shape)
    emit_with_plot("plan", result, as_json, layout_plan_view(result), plot, write_plan_plot)


def _adapters(model: str, rank: int | None, targets: str | None, qlora: bool
              ) -> tuple[int, tuple[str, ...], bool] | None:
    """``--lora``, ``--lora-targets`` and ``--qlora`` checked as ``account`` checks them
    (:func:`tensorledger.workload.spec.resolve_lora`), for a preset (the adapters' closed
    form is the reference model's): (rank, targets, NF4), or None without ``--lora``."""
    lora = resolve_lora(rank, targets, qlora)
    if lora is None:
        return None
    source = resolve_source(model)
    if source.config is None or source.kind != "preset":
        raise InputError(f"--lora is priced on a preset's closed form (llama-3-8b, ...); "
                         f"{source.name} would be planned from a traced profile, which has no "
                         "adapters yet")
    return lora.rank, lora.targets, lora.nf4


def _shape(config: TransformerConfig | ModelProfile,
           adapters: tuple[int, tuple[str, ...], bool] | None) -> LoraShape | None:
    """The adapters on the preset's reference model (a profile never gets here)."""
    if adapters is None:
        return None
    assert isinstance(config, TransformerConfig)
    return lora_shape(config, *adapters)


def fixed_dims(*, dp: int | None = None, fsdp: int | None = None, zero: int | None = None,
               tp: int | None = None, sp: bool | None = None, pp: int | None = None,
               microbatches: int | None = None, schedule: str | None = None,
               checkpoint: str | None = None, cp: int | None = None,
               chunks: int | None = None, ep: int | None = None) -> FixedDims:
    """``plan``'s layout options in the planner's terms: ``--fsdp N`` is the shard group, at
    ZeRO-3 unless ``--zero`` says otherwise (``--fsdp 1``: none, ZeRO-0); ``--microbatches``
    the accumulation; ``--schedule`` one of torch's (``interleaved-4``: interleaved 1F1B with
    4 chunks); beside ``--ep`` the trace's ``--fsdp``: the shard group is fsdp · ep ranks.

    >>> fixed_dims(tp=8, pp=16).describe()
    'TP 8, PP 16'
    >>> fixed_dims(fsdp=64, schedule="interleaved-4", checkpoint="FULL").describe()
    'ZeRO-3, shard 64, interleaved-1f1b × 4, checkpoint full'
    >>> fixed_dims(cp=16, schedule="ZBV").describe()
    'CP 16, zbv × 2'
    >>> fixed_dims(ep=2, fsdp=2).describe()
    'EP 2, ZeRO-3, shard 4'
    """
    if fsdp is not None and zero is None:
        zero = 3 if fsdp > 1 else 0
    if schedule is not None:
        name = schedule.strip().lower()
        old = _INTERLEAVED.match(name)
        if old:  # an earlier planner's names
            name = "interleaved-1f1b"
            if old.group(1) is not None:
                given = int(old.group(1))
                if chunks is not None and chunks != given:
                    raise InputError(f"--schedule {schedule} runs {given} chunks, not "
                                     f"--chunks {chunks}")
                chunks = given
        schedule = resolve_schedule(name).value
        if schedule not in MULTI_STAGE and chunks not in (None, 1):
            raise InputError(f"{schedule} runs one stage per rank; --chunks {chunks} needs "
                             "interleaved-1f1b, looped-bfs, interleaved-zb or zbv")
        if schedule == "zbv":
            if chunks not in (None, 2):
                raise InputError(f"zbv runs exactly 2 stages per rank (a V); got --chunks "
                                 f"{chunks}")
            chunks = 2
        elif schedule in MULTI_STAGE and chunks == 1:
            raise InputError(f"{schedule} holds several stages a rank; --chunks 1 is 1f1b's")
    if checkpoint is not None:
        checkpoint = checkpoint.strip().lower()
        if checkpoint not in CHECKPOINTS:
            raise InputError(f"unknown --checkpoint {checkpoint!r}; known: "
                             f"{', '.join(CHECKPOINTS)}")
    if ep is not None and fsdp is not None and fsdp > 1:
        fsdp *= ep  # the trace's fsdp · ep: the ranks sharding the other parameters
    return FixedDims(dp=dp, tp=tp, pp=pp, zero=zero, shard=fsdp, sp=sp,
                     accumulation=microbatches, schedule=schedule, chunks=chunks,
                     checkpoint=checkpoint, cp=cp, ep=ep)


def _stage_counts(cut: StageLayers, config: TransformerConfig | ModelProfile,
                  fixed: FixedDims) -> tuple[int, ...]:
    """``--stage-layers`` as the blocks of each of --pp × chunks stages (chunks: --chunks,
    the schedule's, or 1 when neither is given)."""
    assert fixed.pp is not None
    chunks = fixed.chunks or (2 if fixed.schedule in MULTI_STAGE else 1)
    try:
        return cut.counts(config.n_layers, fixed.pp * chunks)
    except InputError as error:
        raise InputError(f"{error} ({config.name}, --pp {fixed.pp} × {chunks} chunks)"
                         ) from None


def _pricer(fixed: FixedDims, max_pp: int | None) -> SchedulePricer:
    """torch's action lists for every schedule when the search can hold a pipeline (imports
    torch); the closed-form pricer (no schedule priced) when it cannot."""
    if fixed.pp == 1 or max_pp == 1:
        return SchedulePricer()
    from tensorledger.ledger.schedules import ActionListPricer  # imports torch when pricing

    return ActionListPricer()


def _verified(result: LayoutPlan, config: TransformerConfig | ModelProfile, model: str,
              chip: Hardware, count: int, seq: int, seqs: int, precision: str, optimizer: str,
              budget_bytes: float | None, efficiency: float | None, attention: str,
              wanted: int, say: Callable[[str], None],
              pricer: SchedulePricer | None = None, lora: LoraShape | None = None
              ) -> LayoutPlan:
    """Trace the fastest ``wanted`` layouts the tracer lays out; note the ones it cannot."""
    from tensorledger.ledger.plan import traceable_layout, verify_choice  # imports torch

    setup = plan_setup(config, chip, count, seq_len=seq, global_batch_seqs=seqs,
                       precision=precision, optimizer=optimizer, budget_bytes=budget_bytes,
                       efficiency=efficiency, attention=attention, max_pp=result.max_pp,
                       schedules=pricer, lora=lora)
    verified: list[Verified] = []
    skipped: list[str] = []
    for row in result.ranked:
        if len(verified) == wanted:
            break
        reason = traceable_layout(row.choice, lora)
        if isinstance(reason, str):
            skipped.append(f"{row.layout}: {reason}")
            continue
        try:
            verified.append(verify_choice(setup, row.choice, model, progress=say))
        except InputError as refusal:  # the workload refuses the layout (ZeRO-1 with masters)
            skipped.append(f"{row.layout}: {refusal}")
    notes = tuple(f"not traced: {line}" for line in dict.fromkeys(skipped))
    if not verified:
        notes += (f"--verify {wanted}: none of the {len(result.ranked)} layouts shown can be "
                  "traced yet; show more with --top",)
    return dataclasses.replace(result, verified=tuple(verified), notes=result.notes + notes)


def accumulate_command(
    model: Annotated[str, typer.Option("--model", "-m", help=(
        "A preset (llama-3-8b, ...: its closed form), a config.json of any architecture or a "
        "factory file.py:function (profiled first: traced on fake tensors at 1 and 2 blocks, "
        "seconds)."))],
    global_batch: Annotated[str, typer.Option("--global-batch", "-g", help=(
        "Tokens per optimizer step (1M; rounded to whole sequences) or sequences (64seq)."))],
    hardware: Annotated[str, typer.Option("--hardware", "-H", help=(
        "Catalog chip (h100, a100, ...) or a TOML file."))] = "h100",
    count: Annotated[int, typer.Option("--count", "-n", parser=integer_parser(
        1, LARGEST_COUNT), help="Data-parallel ranks.")] = 1,
    seq: Annotated[int, typer.Option("--seq", "-s", parser=integer_parser(1, 1 << 24), help=(
        "Sequence length (at most the model's context)."))] = 4096,
    zero: Annotated[int, typer.Option("--zero", parser=integer_parser(0, 3), help=(
        "ZeRO stage over the ranks: 0 (DDP) to 3 (FSDP)."))] = 0,
    checkpoint: Annotated[str, typer.Option(help="none, selective or full.")] = "none",
    budget: Annotated[str | None, typer.Option(help=(
        "Memory one rank may use (70GB), at most the device's."))] = None,
    precision: Annotated[str, typer.Option("--precision", "-p", help=(
        "bf16-master, mixed-bf16, bf16, fp32, lecture."))] = "bf16-master",
    optimizer: Annotated[str, typer.Option("--optimizer", "-o", help="adamw, sgd, ...")]
    = "adamw",
    attention: Annotated[str, typer.Option(help="flash or eager.")] = "flash",
    efficiency: Annotated[float | None, typer.Option(
        parser=real_parser(0.0, 1.0, minimum_open=True), help=(
            "Share of the dense peak the matmuls reach, in (0, 1]; default: the chip's "
            "published fraction at each split's largest matmul (1: the ideal bound)."))
    ] = None,
    lora: LoraRank = None,  # account's own options (cli.workload), as plan takes them
    lora_targets: LoraTargets = None,
    qlora: Qlora = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Split a global batch into micro-batch × accumulation steps on COUNT data-parallel ranks:
    activations, memory, arithmetic intensity and step time of every split (at the chip's
    published efficiency, the ideal bound beside it); the fastest that fits is chosen.  Any
    model source: a preset's closed form, or the traced profile of a config.json or factory.
    With --lora R (--lora-targets, --qlora) a preset's LoRA fine-tune, priced as plan does."""
    adapters = _adapters(model, lora, lora_targets, qlora)
    config, chip, seqs, note = _model_for(model, hardware, attention, seq, global_batch,
                                          precision, optimizer, as_json)
    budget_bytes = None if budget is None else parse_bytes(budget)
    if budget_bytes is not None and not 0 < budget_bytes <= chip.memory_bytes:
        raise InputError(f"--budget must be above 0 and at most {chip.id}'s "
                         f"{chip.memory_bytes / 1e9:g} GB, got {budget!r}")
    result = plan_accumulation(config, chip, seq_len=seq, global_batch_seqs=seqs, count=count,
                               zero=zero, checkpoint=checkpoint.strip().lower(),
                               precision=precision, optimizer=optimizer,
                               budget_bytes=budget_bytes, efficiency=efficiency,
                               attention=attention.strip().lower(),
                               lora=_shape(config, adapters))
    emit("accumulate", result, as_json, *accumulation_view(result),
         *([f"note: {note}"] if note else []))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
    app.command("accumulate")(accumulate_command)
