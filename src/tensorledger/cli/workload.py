"""The options every command that runs a model shares, declared once: one name, one help text
and one default each.

They come in two groups, each a frozen dataclass whose fields are the options:
:class:`WorkloadOptions` (``--model`` ... ``--checkpoint``: what one step runs) and
:class:`LayoutOptions` (``--dp`` ... ``--schedule``: how it is split over ranks). A command
takes a group by declaring a parameter of its type (keyword-only, so that it may stand after
options with defaults) and wearing :func:`shared_options`::

    @shared_options
    def trace_command(*, options: WorkloadOptions, layout_options: LayoutOptions,
                      depth: ... = 4) -> None:
        work = options.resolve(layout_options.resolve())

The decorator writes the group's fields into the signature typer reads, where that parameter
stands (but an option without a default, the required ``--model``, leads all the command's
options), and gathers their values back into one object when the command runs.

To add an option to every command that takes a group: declare its ``Annotated`` type below with
its ``typer.Option``, add a field of that type and its default to the group, and pass it on in
the group's ``resolve``. The commands, their ``--help`` and the test that compares them
(tests/cli/test_workload_options.py) follow the fields; nothing else is written again.

A command that needs one option its own way declares a parameter of that name (``checkpoint``'s
``--model`` is optional): it keeps its place and help, and its value still fills the field.
``shared_options(leave_out=(...))`` names options a command does not offer; their fields keep
their defaults.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Iterator
from typing import Annotated, Any, overload

import typer

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.hardware.target import default_target, target_of
from tensorledger.workload.layout import SINGLE, Layout, resolve_layout
from tensorledger.workload.routing import resolve_routing
from tensorledger.workload.source import resolve_source
from tensorledger.workload.spec import (
    DEFAULTS,
    Workload,
    resolve_lora,
    resolve_offload,
    resolve_workload,
)

__all__ = ["LAYOUT_OPTIONS", "WORKLOAD_OPTIONS", "Chip", "Depth", "FillDefaults",
           "LayoutOptions",
           "MemoryBudget", "WorkloadOptions", "check_depth", "memory_budget", "shared_options"]

# The workload group's options (fields of WorkloadOptions below).
Model = Annotated[str, typer.Option("--model", "-m", help=(
    "A preset (tiny, gpt2, llama-3-8b, ...), a Hugging Face config.json (or a folder holding "
    "one), or your own factory path/to/file.py:make_model."))]
Batch = Annotated[int, typer.Option("--batch", "-b", help="Sequences per step.")]
Seq = Annotated[int, typer.Option("--seq", "-s", help=(
    "Tokens per sequence (prefill: the prompt; decode runs one token and ignores it)."))]
Step = Annotated[str, typer.Option("--step", help=(
    "forward, forward-backward, train (forward, backward and the optimizer step; the "
    "steady-state step, after a warm-up step), prefill (the prompt fills the model's own KV "
    "cache) or decode (one token per sequence against a cache of --context tokens)."))]
Precision = Annotated[str | None, typer.Option("--precision", help=(
    "fp32, bf16, mixed-bf16 (bf16 autocast over fp32 weights), bf16-master, bf16-fp32-states "
    "(alias lecture), fp8-tensorwise or fp8-rowwise (mixed-bf16 with the linear layers' "
    "matmuls in fp8 by torchao: pip install 'tensorledger[ao]'). Default: mixed-bf16; bf16 "
    "for prefill and decode."))]
Context = Annotated[int | None, typer.Option("--context", help=(
    "For --step decode: tokens each sequence's KV cache holds before the step (the model's "
    "own cache: transformers' for a config.json)."))]
Optimizer = Annotated[str, typer.Option("--optimizer", help=(
    "For --step train: sgd, momentum, adagrad, rmsprop, adam, adamw, lion, adam8bit."))]
Device = Annotated[str, typer.Option("--device", help=(
    "Where the step runs: auto (meta for presets without autocast, else fake), meta (no "
    "memory), fake (FakeTensorMode: no memory, runs any model), cpu or cuda (real tensors)."))]
Checkpoint = Annotated[bool, typer.Option("--checkpoint", help=(
    "Recompute every block of a reference model in backward (activation checkpointing)."))]
FillDefaults = Annotated[bool, typer.Option("--fill-defaults", help=(
    "A config.json that leaves sizes out (layers, heads, ...) is refused; with this flag "
    "transformers' defaults fill them, and the output names each one taken."))]
OptimizerKernel = Annotated[str, typer.Option("--optimizer-kernel", help=(
    "How torch.optim runs the step: auto (the target's default: foreach on a GPU, the "
    "per-parameter for-loop on a CPU), for-loop, foreach, or fused (sgd, momentum, adam, "
    "adamw)."))]
LoraRank = Annotated[int | None, typer.Option("--lora", help=(
    "Train LoRA adapters of this rank (peft) on a frozen model: gradients and optimizer state "
    "for the adapters only. Needs the lora extra (pip install 'tensorledger[lora]')."))]
LoraTargets = Annotated[str | None, typer.Option("--lora-targets", help=(
    "The modules --lora adapts, by name: q_proj,v_proj,... (default: peft's for the model "
    "type; query,value for the reference presets)."))]
Qlora = Annotated[bool, typer.Option("--qlora", help=(
    "QLoRA: the frozen linears under the --lora adapters stored in 4-bit NF4 (torchao's "
    "NF4Tensor, blocks of 64, double-quantised scales), dequantised at each use. Needs the ao "
    "extra (pip install 'tensorledger[ao]')."))]
Offload = Annotated[str | None, typer.Option("--offload", help=(
    "Keep on the host what a device would hold: activations (torch's save_on_cpu: what "
    "autograd saves copied to the host in forward and back in backward, the bytes priced on "
    "the chip's host link), params (FSDP2's CPUOffloadPolicy: parameter shards, gradients "
    "and optimizer state on the host, copied in for each all-gather and out after each "
    "reduce-scatter, the optimizer step on the CPU; over the --fsdp N shards, or on one "
    "device as a 1-rank FSDP2 mesh), or both: activations,params."))]
AttentionOption = Annotated[str, typer.Option("--attention", help=(
    "The attention kernel the target runs: auto (the one PyTorch picks on the --hardware chip), "
    "flash, efficient (memory-efficient), math (PyTorch's math kernel: the scores materialised, "
    "half inputs computed in fp32), or eager (the scores materialised in the inputs' dtype, as "
    "attention written out by hand: Megatron-LM 2021, Hugging Face eager); a forced kernel the "
    "inputs do not admit is refused."))]
RoutingOption = Annotated[str | None, typer.Option("--routing", help=(
    "A mixture of experts' tokens per expert, which fake tensors cannot decide: balanced "
    "(default: tokens·k/E each), skew=S (expert 0 gets 1+S times the balanced share, the "
    "others the rest evenly), or a JSON file listing each expert's token-slots "
    "([30, 10, 4, 4], summing to batch·seq·k)."))]

# The layout group's options (fields of LayoutOptions below).
Dp = Annotated[int, typer.Option("--dp", help=(
    "Data-parallel replicas: DDP, or HSDP's replicate dimension beside --fsdp."))]
Fsdp = Annotated[int, typer.Option("--fsdp", help=(
    "Ranks the model is sharded over (FSDP2, ZeRO stage --zero); the step is traced as one of "
    "them on a fake process group."))]
Zero = Annotated[int | None, typer.Option("--zero", help=(
    "ZeRO stage over the --fsdp ranks: 1 optimizer state (DDP + ZeroRedundancyOptimizer), 2 "
    "and gradients (parameters kept gathered from forward to backward), 3 and parameters "
    "(default)."))]
Tp = Annotated[int, typer.Option("--tp", help=(
    "Tensor-parallel ranks (DTensor, Megatron plan): heads, MLP width and vocabulary split."))]
Sp = Annotated[bool, typer.Option("--sp", help=(
    "Sequence parallelism beside --tp: norms and dropout on a slice of the sequence."))]
Cp = Annotated[int, typer.Option("--cp", help=(
    "Context-parallel ranks: each sequence split over them (torch's context_parallel ring "
    "attention, load-balanced for the causal mask: --seq must divide by 2·cp); they shard "
    "the parameters with --fsdp's ranks; under --pp, the ring runs inside each stage."))]
CpRotate = Annotated[str | None, typer.Option("--cp-rotate", help=(
    "How --cp's ring moves keys and values forward: allgather (one all-gather a layer, "
    "torch's default) or alltoall (a permutation a ring step)."))]
Ep = Annotated[int, typer.Option("--ep", help=(
    "Expert-parallel ranks: each holds 1/EP of every mixture of experts' routed experts (EP "
    "must divide them) and runs its own batch; token-slots go to their experts' ranks and "
    "back by all-to-all, split as --routing says. Alone or beside --fsdp (non-experts sharded "
    "over fsdp·ep ranks, experts over fsdp; with --dp: HSDP)."))]
Etp = Annotated[int, typer.Option("--etp", help=(
    "Expert tensor parallelism beside --ep and --tp: 1 (default) keeps each rank's experts "
    "whole on every tp rank; the --tp degree splits each expert's hidden width over the tp "
    "ranks (gate and up by column, down by row), its output slots all-reduced over tp "
    "(torchtitan's ETP = TP; the width must divide by it)."))]
Pp = Annotated[int, typer.Option("--pp", help=(
    "Pipeline ranks (torch.distributed.pipelining, beside every other layout option, any "
    "recipe; models with a reference config: presets, GPT-2 and Llama config.json): a rank "
    "of the first stage is traced."))]
Microbatches = Annotated[int | None, typer.Option("--microbatches", help=(
    "Micro-batches the --batch is split into for --pp (default 1)."))]
Schedule = Annotated[str | None, typer.Option("--schedule", help=(
    "Pipeline schedule for --pp (torch's): gpipe, 1f1b (default), interleaved-1f1b, "
    "looped-bfs, interleaved-zb (zero bubble) or zbv; the bubble is its own action lists'."))]
Chunks = Annotated[int | None, typer.Option("--chunks", help=(
    "Stages per pipeline rank for interleaved-1f1b, looped-bfs and interleaved-zb (default "
    "2; zbv runs 2)."))]
StageLayersOption = Annotated[str | None, typer.Option("--stage-layers", help=(
    "Blocks per pipeline stage (--pp × --chunks of them): 7,8,...,8,7 ('...' repeats the "
    "count before it), or first-K,last-K: the first/last stage K blocks shorter than the "
    "rest (they hold the embeddings and the head). Default: even."))]

# Not in a group: commands cut their module rows to a depth of their own default.
Depth = Annotated[int | None, typer.Option("--depth", help=(
    "Module rows cut to this many path components (1: the model itself, 2: its top modules, "
    "...); repeated modules are summed into one row either way: blocks.{0..11}.mlp ×12."))]


#: The chip a workload command predicts for (and whose program it traces).
Chip = Annotated[str, typer.Option("--hardware", "-H", help=(
    "Catalog chip, a TOML file, or `local` (this machine, as probed); the step is traced as "
    "it runs there."))]

MemoryBudget = Annotated[str | None, typer.Option("--budget", help=(
    "Usable memory of one device (80GB, 75GiB, ...), in place of its memory less the reserve "
    "it keeps (CUDA context, NCCL buffers, allocator fragmentation; printed with the fit)."))]


def memory_budget(budget: str | None) -> float | None:
    """``--budget`` in bytes, or None."""
    if budget is None:
        return None
    from tensorledger.units import parse_bytes

    try:
        return float(parse_bytes(budget))
    except InputError as error:
        raise InputError(f"--budget: {error}") from None


def check_depth(depth: int | None) -> None:
    """Refuse a negative ``--depth``."""
    if depth is not None and depth < 0:
        raise InputError(f"--depth must be 0 or more, got {depth}")


@dataclasses.dataclass(frozen=True)
class WorkloadOptions:
    """What one step runs, as given on the command line: its options, in ``--help`` order."""

    model: Model
    batch: Batch = DEFAULTS.batch
    seq: Seq = DEFAULTS.seq
    step: Step = DEFAULTS.step
    precision: Precision = None
    optimizer: Optimizer = DEFAULTS.optimizer
    device: Device = DEFAULTS.device
    checkpoint: Checkpoint = DEFAULTS.checkpoint
    optimizer_kernel: OptimizerKernel = DEFAULTS.optimizer_kernel
    fill_defaults: FillDefaults = False
    lora: LoraRank = None
    lora_targets: LoraTargets = None
    qlora: Qlora = False
    offload: Offload = None
    routing: RoutingOption = None
    context: Context = None
    attention: AttentionOption = "auto"

    def resolve(self, laid_out: Layout | None = None, chip: Hardware | None = None
                ) -> Workload:
        """Check the options once and look every name up: every name becomes an object here.
        The trace records ``chip``'s program (the ``--hardware`` of the command; an H100 when
        the command names none)."""
        source = resolve_source(self.model, fill_defaults=self.fill_defaults)
        lora = resolve_lora(self.lora, self.lora_targets, self.qlora)
        target = default_target() if chip is None else target_of(chip)
        return resolve_workload(source, batch=self.batch, seq=self.seq, step=self.step,
                                precision=self.precision, optimizer=self.optimizer,
                                device=self.device, checkpoint=self.checkpoint,
                                layout=SINGLE if laid_out is None else laid_out,
                                target=target.forcing(self.attention),
                                optimizer_kernel=self.optimizer_kernel, lora=lora,
                                offload=resolve_offload(self.offload),
                                routing=resolve_routing(self.routing),
                                context=self.context)


@dataclasses.dataclass(frozen=True)
class LayoutOptions:
    """How the step is split over ranks, as given on the command line; all ones: one device."""

    dp: Dp = 1
    fsdp: Fsdp = 1
    zero: Zero = None
    tp: Tp = 1
    sp: Sp = False
    cp: Cp = 1
    cp_rotate: CpRotate = None
    pp: Pp = 1
    microbatches: Microbatches = None
    schedule: Schedule = None
    chunks: Chunks = None
    stage_layers: StageLayersOption = None
    ep: Ep = 1
    etp: Etp = 1

    def resolve(self, count: int | None = None) -> Layout:
        """The layout the options describe, ``--count`` (if given) checked to be its product;
        the model's dimensions are checked when the workload is resolved."""
        return resolve_layout(dp=self.dp, fsdp=self.fsdp, zero=self.zero, tp=self.tp,
                              sp=self.sp, pp=self.pp, microbatches=self.microbatches,
                              schedule=self.schedule, count=count, chunks=self.chunks,
                              stage_layers=self.stage_layers, cp=self.cp,
                              cp_rotate=self.cp_rotate, ep=self.ep, etp=self.etp)


_GROUPS: tuple[type, ...] = (WorkloadOptions, LayoutOptions)

#: The options of each group, by parameter name (tests compare the commands by them).
WORKLOAD_OPTIONS = tuple(field.name for field in dataclasses.fields(WorkloadOptions))
LAYOUT_OPTIONS = tuple(field.name for field in dataclasses.fields(LayoutOptions))

_Command = Callable[..., None]


def _options(group: type) -> Iterator[inspect.Parameter]:
    """The group's fields as keyword parameters, with their ``Annotated`` types and defaults."""
    hints = typing.get_type_hints(group, include_extras=True)
    for field in dataclasses.fields(group):
        default = inspect.Parameter.empty if field.default is dataclasses.MISSING \
            else field.default
        yield inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY,
                                annotation=hints[field.name], default=default)


@overload
def shared_options(command: _Command, /) -> _Command: ...


@overload
def shared_options(*, leave_out: tuple[str, ...] = ()) -> Callable[[_Command], _Command]: ...


def shared_options(command: _Command | None = None, /, *, leave_out: tuple[str, ...] = ()
                   ) -> _Command | Callable[[_Command], _Command]:
    """Give ``command`` the options of each group it takes a parameter of (see the module's
    docstring); those in ``leave_out`` it does not offer."""
    if command is None:
        return functools.partial(_with_options, leave_out=leave_out)
    return _with_options(command, leave_out=leave_out)


def _with_options(command: _Command, leave_out: tuple[str, ...]) -> _Command:
    own = inspect.signature(command, eval_str=True).parameters
    groups = {name: param.annotation for name, param in own.items()
              if param.annotation in _GROUPS}
    if not groups:
        raise TypeError(f"{command.__name__} takes none of the option groups")
    offered: dict[str, set[str]] = {name: set() for name in groups}
    leading: list[inspect.Parameter] = []
    placed: list[inspect.Parameter] = []
    for name, param in own.items():
        if name not in groups:
            placed.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        for option in _options(groups[name]):
            if option.name in own:
                continue  # the command declares it its own way
            if option.name in leave_out:
                if option.default is inspect.Parameter.empty:
                    raise TypeError(f"{command.__name__} cannot leave out --{option.name}: "
                                    "it has no default")
                continue
            offered[name].add(option.name)
            (leading if option.default is inspect.Parameter.empty else placed).append(option)
    parameters = leading + placed

    @functools.wraps(command)
    def run(**values: Any) -> None:
        for name, group in groups.items():
            given = {option: values.pop(option) for option in offered[name]}
            given |= {field.name: values[field.name] for field in dataclasses.fields(group)
                      if field.name in own}  # the command's own, passed to it as well
            values[name] = group(**given)
        command(**values)

    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {param.name: param.annotation for param in parameters}
    return run
