"""Trace a model named by ``--model`` on one step: forward, forward-backward or a training step.

The model is built on the meta device by default (no memory, the same counts as real tensors),
or under FakeTensorMode (``fake``), or for real on the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from tensorledger.devices import resolve_device
from tensorledger.dtypes import resolve_dtype
from tensorledger.errors import InputError, UnknownNameError
from tensorledger.trace.aggregate import TraceSummary, summarize
from tensorledger.trace.recorder import trace
from tensorledger.trace.records import Trace

__all__ = ["DEVICES", "OPTIMIZERS", "STEPS", "ModelTrace", "TraceReport", "Workload",
           "build_workload", "trace_model"]

STEPS = ("forward", "forward-backward", "train")
DEVICES = ("meta", "fake", "cpu")
OPTIMIZERS: dict[str, Callable[[list[nn.Parameter]], torch.optim.Optimizer]] = {
    # the single-tensor implementations: the ones every device (meta included) runs
    "sgd": lambda p: torch.optim.SGD(p, lr=1e-3, foreach=False),
    "momentum": lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9, foreach=False),
    "adagrad": lambda p: torch.optim.Adagrad(p, foreach=False),
    "rmsprop": lambda p: torch.optim.RMSprop(p, foreach=False),
    "adam": lambda p: torch.optim.Adam(p, foreach=False),
    "adamw": lambda p: torch.optim.AdamW(p, foreach=False),
}


@dataclass(frozen=True)
class TraceReport:
    """What ``tensorledger trace`` prints: the run and its totals (not every op record)."""

    model: str
    step: str
    batch: int
    seq: int
    device: str
    dtype: str
    optimizer: str | None
    params: int
    tokens: int
    summary: TraceSummary

    @classmethod
    def of(cls, run: ModelTrace, depth: int | None) -> TraceReport:
        backward = run.step != "forward"
        summary = summarize(run.trace, depth, params=run.params if backward else None,
                            tokens=run.tokens if backward else None)
        return cls(run.model, run.step, run.batch, run.seq, run.device, run.dtype,
                   run.optimizer, run.params, run.tokens, summary)


@contextlib.contextmanager
def _where(device: str) -> Iterator[str]:
    if device == "fake":
        with FakeTensorMode():
            yield "cpu"
    else:
        yield device


@dataclass(frozen=True)
class Workload:
    """A built model and a step that can run again and again (gradients reset each time)."""

    model: str
    step: str
    batch: int
    seq: int
    device: str
    dtype: str
    optimizer: str | None
    params: int
    run: Callable[[], None]

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


@dataclass(frozen=True)
class ModelTrace(Workload):
    """A workload and the trace of one run of its step (``device`` names where it was traced:
    ``meta``, ``fake`` or ``cpu``)."""

    trace: Trace = field(default_factory=lambda: Trace(records=(), uncovered={}, device="none"))


def build_workload(model: str, batch: int = 1, seq: int = 128, step: str = "train",
                   optimizer: str = "adamw", device: str = "cpu", dtype: str = "fp32",
                   ) -> Workload:
    """Build ``model`` (a preset, a config.json or ``file.py:factory``) on a real device
    (``cpu``, ``cuda``, ``meta``) and return its step, ready to be traced or timed."""
    from tensorledger.models import load_model_spec  # the models package is large

    if step not in STEPS:
        raise UnknownNameError("step", step, STEPS)
    if step == "train" and optimizer not in OPTIMIZERS:
        raise UnknownNameError("optimizer", optimizer, OPTIMIZERS)
    for name, value in (("batch", batch), ("seq", seq)):
        if value < 1:
            raise InputError(f"--{name} must be at least 1, got {value}")
    resolve_device(device)
    spec = load_model_spec(model)
    config = spec.config
    if config is not None and config.positions == "learned" and seq > config.context_length:
        raise InputError(f"--seq {seq} is longer than {spec.name}'s context of "
                         f"{config.context_length} (learned positions)")
    torch_dtype = getattr(torch, resolve_dtype(dtype).torch_name or "float32")
    network = spec.build(device, torch_dtype)
    vocab = config.vocab_size if config is not None else 2
    tokens = torch.zeros(batch, seq, dtype=torch.long, device=device)
    parameters = list(network.parameters())
    chosen = OPTIMIZERS[optimizer](parameters) if step == "train" else None

    def run() -> None:
        if step == "forward":
            with torch.no_grad():
                network(tokens)
            return
        logits = network(tokens)
        if config is None:  # a factory's module: no vocabulary to score against
            loss = logits.sum()
        else:
            loss = F.cross_entropy(logits.reshape(-1, vocab), tokens.reshape(-1))
        loss.backward()
        if chosen is not None:
            chosen.step()
            chosen.zero_grad(set_to_none=True)
        else:  # the next run starts from no gradients, as the first one did
            for parameter in parameters:
                parameter.grad = None

    return Workload(spec.name, step, batch, seq, device, resolve_dtype(dtype).name,
                    optimizer if step == "train" else None,
                    sum(p.numel() for p in parameters), run)


def trace_model(model: str, batch: int = 1, seq: int = 128, step: str = "train",
                optimizer: str = "adamw", device: str = "meta", dtype: str = "fp32"
                ) -> ModelTrace:
    """Build ``model`` (a preset, a config.json or ``file.py:factory``) and trace one step.

    >>> run = trace_model("tiny", batch=1, seq=8, step="forward")
    >>> run.trace.uncovered, run.tokens
    ({}, 8)
    """
    if device not in DEVICES:
        raise UnknownNameError("device", device, DEVICES)
    with _where(device) as placed:
        work = build_workload(model, batch, seq, step, optimizer, placed, dtype)
        result = trace(work.run)
    return ModelTrace(**{**vars(work), "device": device, "trace": result})
