"""What to account, resolved once: a :class:`Workload` of objects, not strings.

Everything here is torch-free, so a command can check every option (and refuse a bad one in
one line) before torch is imported, a model is built or a factory file is run.

>>> w = resolve_workload("tiny", batch=2, seq=16)
>>> w.source.kind, w.step.name, w.precision.name, w.optimizer.name, w.device
('preset', 'train', 'mixed-bf16', 'adamw', 'fake')
>>> resolve_workload("tiny", precision="fp32").device      # no autocast: meta is exact
'meta'
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.errors import InputError, UnknownNameError
from tensorledger.napkin.recipes import Optimizer, Precision, resolve_optimizer, resolve_precision
from tensorledger.summary import summary
from tensorledger.workload.layout import SINGLE, Layout, check_layout
from tensorledger.workload.source import ModelSource, resolve_source

__all__ = ["DEFAULTS", "DEVICES", "MAX_BATCH", "MAX_SEQ", "STEPS", "Step", "Workload",
           "WorkloadDefaults",
           "resolve_step", "resolve_workload"]

#: Where a step runs: ``auto`` picks meta or fake (see :func:`resolve_workload`).
DEVICES = ("auto", "meta", "fake", "cpu", "cuda")

#: Largest batch and sequence a workload accepts: far past any real run, and small enough that
#: batch × seq × vocabulary stays a number every library down the line can hold.
MAX_BATCH = 1 << 20
MAX_SEQ = 1 << 24


@dataclass(frozen=True)
class Step:
    """What one step runs: the forward only, forward and backward, or a whole training step."""

    name: str
    backward: bool
    optimizer: bool
    description: str


STEPS: dict[str, Step] = {s.name: s for s in (
    Step("forward", False, False, "the forward pass only, under no_grad"),
    Step("forward-backward", True, False, "forward, loss and backward; no optimizer"),
    Step("train", True, True, "forward, loss, backward and the optimizer step (steady state)"),
)}

@dataclass(frozen=True)
class WorkloadDefaults:
    """The defaults every workload command shares (the CLI reads them from here)."""

    batch: int = 1
    seq: int = 1024
    step: str = "train"
    precision: str = "mixed-bf16"  # language models train in bf16
    optimizer: str = "adamw"
    device: str = "auto"
    checkpoint: bool = False


DEFAULTS = WorkloadDefaults()


def resolve_step(name: str) -> Step:
    """A step kind by name.

    >>> resolve_step("forward").backward
    False
    """
    key = name.strip().lower()
    if key not in STEPS:
        raise UnknownNameError("step", name, STEPS)
    return STEPS[key]


@dataclass(frozen=True)
class Workload:
    """One step of one model, fully resolved: the source, the sizes, and the recipe."""

    source: ModelSource
    batch: int
    seq: int
    step: Step
    precision: Precision
    optimizer: Optimizer
    checkpoint: bool  # every block of a reference model recomputed in backward
    device: str  # meta, fake, cpu or cuda (``auto`` already decided)
    layout: Layout = SINGLE  # how the step is spread over devices; traced as one rank

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def model(self) -> str:
        """The model's label: the text the user gave."""
        return self.source.label

    @property
    def autocast(self) -> bool:
        """True when the forward runs under bf16 autocast (``mixed-bf16``)."""
        return self.precision.name == "mixed-bf16"

    def __repr__(self) -> str:
        return summary("Workload", f"{self.model}: {self.step.name}",
                       f"batch {self.batch} × seq {self.seq}", self.precision.name,
                       self.optimizer.name if self.step.optimizer else "",
                       "checkpointed" if self.checkpoint else "", f"on {self.device}",
                       "" if self.layout.single else
                       f"one rank of {self.layout.describe()}")


def _whole(name: str, value: int, largest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"--{name} must be a whole number, got {value!r}")
    if not 1 <= value <= largest:
        raise InputError(f"--{name} must be between 1 and {largest:,}, got {value:,}")
    return value


def resolve_workload(model: str | ModelSource, *, batch: int = DEFAULTS.batch,
                     seq: int = DEFAULTS.seq, step: str = DEFAULTS.step,
                     precision: str = DEFAULTS.precision, optimizer: str = DEFAULTS.optimizer,
                     device: str = DEFAULTS.device, checkpoint: bool = DEFAULTS.checkpoint,
                     layout: Layout = SINGLE) -> Workload:
    """Check every option and look every name up once; nothing is built or imported.

    ``device="auto"`` chooses ``meta`` for the reference presets (exact, fastest) unless the
    recipe autocasts (PyTorch has no autocast on meta), and ``fake`` (FakeTensorMode over CPU
    tensors) for everything else: Hugging Face models and factories often ask a tensor for a
    value (``.item()``), which fake tensors answer and meta tensors cannot.
    """
    source = model if isinstance(model, ModelSource) else resolve_source(model)
    batch = _whole("batch", batch, MAX_BATCH)
    seq = _whole("seq", seq, MAX_SEQ)
    chosen_step = resolve_step(step)
    chosen_precision = resolve_precision(precision)
    chosen_optimizer = resolve_optimizer(optimizer)
    key = device.strip().lower()
    if key not in DEVICES:
        raise UnknownNameError("device", device, DEVICES)
    if not layout.single and key not in ("auto", "fake"):
        raise InputError(f"a layout of {layout.count} devices is traced as one rank of a fake "
                         f"process group, on fake tensors; drop --device {key} (or use --device "
                         "fake), and run it for real under torchrun")
    if key == "auto":
        exact_on_meta = (source.kind == "preset" and chosen_precision.name != "mixed-bf16"
                         and not checkpoint and layout.single)
        key = "meta" if exact_on_meta else "fake"
    if key == "meta" and chosen_precision.name == "mixed-bf16":
        raise InputError("mixed-bf16 runs the forward under bf16 autocast, which PyTorch does "
                         "not offer on the meta device; use --device fake (no memory either) "
                         "or another --precision")
    if checkpoint and source.config is None:
        raise InputError(f"--checkpoint wraps the blocks of a reference model; {source.label!r}"
                         " is not one (apply torch.utils.checkpoint in your factory instead)")
    config = source.config
    if source.max_seq is not None and seq > source.max_seq:
        raise InputError(f"--seq {seq} is longer than {source.name}'s context of "
                         f"{source.max_seq} (learned positions); use --seq "
                         f"{source.max_seq} or less")
    check_layout(layout, config, batch=batch, seq=seq)
    if layout.pp > 1:
        if config is None:
            raise InputError(f"--pp cuts a reference model into stages; {source.label!r} is "
                             "not one")
        if not chosen_step.optimizer:
            raise InputError("a pipeline is traced as a whole training step (its schedule "
                             "runs forward and backward together); drop --step")
    if layout.strategy == "zero1" and chosen_precision.name in ("bf16-master",
                                                                "bf16-fp32-states"):
        raise InputError(f"--zero 1 shards the optimizer of the parameters themselves; "
                         f"{chosen_precision.name} keeps fp32 copies beside them, which "
                         "ZeroRedundancyOptimizer does not shard: use --zero 2 or 3, or "
                         "--precision fp32, bf16 or mixed-bf16")
    return Workload(source=source, batch=batch, seq=seq, step=chosen_step,
                    precision=chosen_precision, optimizer=chosen_optimizer,
                    checkpoint=checkpoint, device=key, layout=layout)
