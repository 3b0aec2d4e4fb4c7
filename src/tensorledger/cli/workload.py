"""The workload options every command that runs a model shares: one name, one help text and
one default each (``trace``, ``memory`` and ``roofline`` declare them from here)."""

from __future__ import annotations

from typing import Annotated

import typer

from tensorledger.errors import InputError
from tensorledger.workload.layout import Layout, resolve_layout
from tensorledger.workload.spec import Workload, resolve_workload

__all__ = [
    "LAYOUT_OPTIONS",
    "WORKLOAD_OPTIONS",
    "Batch",
    "Checkpoint",
    "Depth",
    "Device",
    "Dp",
    "Fsdp",
    "Microbatches",
    "Model",
    "Optimizer",
    "Pp",
    "Precision",
    "Schedule",
    "Seq",
    "Sp",
    "Step",
    "Tp",
    "Zero",
    "check_depth",
    "layout",
    "workload",
]

Model = Annotated[str, typer.Option("--model", "-m", help=(
    "A preset (tiny, gpt2, llama-3-8b, ...), a Hugging Face config.json (or a folder holding "
    "one), or your own factory path/to/file.py:make_model."))]
Batch = Annotated[int, typer.Option("--batch", "-b", help="Sequences per step.")]
Seq = Annotated[int, typer.Option("--seq", "-s", help="Tokens per sequence.")]
Step = Annotated[str, typer.Option("--step", help=(
    "forward, forward-backward, or train (forward, backward and the optimizer step; the "
    "steady-state step, after a warm-up step)."))]
Precision = Annotated[str, typer.Option("--precision", help=(
    "fp32, bf16, mixed-bf16 (bf16 autocast over fp32 weights), bf16-master, bf16-fp32-states "
    "(alias lecture)."))]
Optimizer = Annotated[str, typer.Option("--optimizer", help=(
    "For --step train: sgd, momentum, adagrad, rmsprop, adam, adamw, lion, adam8bit."))]
Device = Annotated[str, typer.Option("--device", help=(
    "Where the step runs: auto (meta for presets without autocast, else fake), meta (no "
    "memory), fake (FakeTensorMode: no memory, runs any model), cpu or cuda (real tensors)."))]
Checkpoint = Annotated[bool, typer.Option("--checkpoint", help=(
    "Recompute every block of a reference model in backward (activation checkpointing)."))]

Depth = Annotated[int | None, typer.Option("--depth", help=(
    "Module rows cut to this many path components (1: the model itself, 2: its top modules, "
    "...); repeated modules are summed into one row either way: blocks.{0..11}.mlp ×12."))]

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


Pp = Annotated[int, typer.Option("--pp", help=(
    "Pipeline stages (torch.distributed.pipelining; reference models, fp32, alone): the "
    "first stage's rank is traced."))]
Microbatches = Annotated[int | None, typer.Option("--microbatches", help=(
    "Micro-batches the --batch is split into for --pp (default 1)."))]
Schedule = Annotated[str | None, typer.Option("--schedule", help=(
    "Pipeline schedule for --pp: gpipe, 1f1b (default) or interleaved-1f1b."))]


def layout(dp: int, fsdp: int, zero: int | None, tp: int, sp: bool, count: int | None = None,
           pp: int = 1, microbatches: int | None = None, schedule: str | None = None
           ) -> Layout:
    """The layout the options describe, ``--count`` (if given) checked to be its product; the
    model's dimensions are checked by :func:`workload`."""
    return resolve_layout(dp=dp, fsdp=fsdp, zero=zero, tp=tp, sp=sp, pp=pp,
                          microbatches=microbatches, schedule=schedule, count=count)


def check_depth(depth: int | None) -> None:
    """Refuse a negative ``--depth``."""
    if depth is not None and depth < 0:
        raise InputError(f"--depth must be 0 or more, got {depth}")


#: The options above, by parameter name, with their shared defaults (tests compare commands).
WORKLOAD_OPTIONS = ("model", "batch", "seq", "step", "precision", "optimizer", "device",
                    "checkpoint")


#: The layout options of ``trace`` and ``memory``, by parameter name.
LAYOUT_OPTIONS = ("dp", "fsdp", "zero", "tp", "sp", "pp", "microbatches", "schedule")


def workload(model: str, batch: int, seq: int, step: str, precision: str, optimizer: str,
             device: str, checkpoint: bool, laid_out: Layout | None = None) -> Workload:
    """Resolve the options once; every name becomes an object here."""
    return resolve_workload(model, batch=batch, seq=seq, step=step, precision=precision,
                            optimizer=optimizer, device=device, checkpoint=checkpoint,
                            **({} if laid_out is None else {"layout": laid_out}))
