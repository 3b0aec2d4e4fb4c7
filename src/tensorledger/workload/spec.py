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

import importlib.util
import re
from dataclasses import dataclass, replace

from tensorledger.errors import InputError, UnknownNameError
from tensorledger.hardware.target import CPU, OPTIMIZER_KERNELS, Target
from tensorledger.napkin.recipes import Optimizer, Precision, resolve_optimizer, resolve_precision
from tensorledger.summary import summary
from tensorledger.workload.layout import (
    SINGLE,
    Layout,
    check_expert_width,
    check_experts,
    check_layout,
)
from tensorledger.workload.routing import BALANCED, Routing
from tensorledger.workload.routing import routing as routed_experts
from tensorledger.workload.source import ModelSource, resolve_source

__all__ = ["DEFAULTS", "DEVICES", "FOREACH_OPTIMIZERS", "FUSED_OPTIMIZERS", "MAX_BATCH",
           "MAX_LORA_RANK", "MAX_SEQ", "OFFLOADS", "STEPS", "Lora", "Step", "Workload",
           "WorkloadDefaults", "check_float8", "check_lora_layout", "check_param_offload",
           "peft_available",
           "resolve_lora", "resolve_offload", "resolve_step", "resolve_workload",
           "torchao_available"]

#: Where a step runs: ``auto`` picks meta or fake (see :func:`resolve_workload`).
DEVICES = ("auto", "meta", "fake", "cpu", "cuda")

#: The optimizers torch.optim runs as one fused kernel (``fused=True``) on a GPU.
FUSED_OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
#: The optimizers that are torch.optim's own, with foreach kernels; the others (lion, adam8bit)
#: are written here as per-parameter loops.
FOREACH_OPTIMIZERS = ("sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw")

#: Largest batch and sequence a workload accepts: far past any real run, and small enough that
#: batch × seq × vocabulary stays a number every library down the line can hold.
MAX_BATCH = 1 << 20
MAX_SEQ = 1 << 24
#: Largest LoRA rank accepted: far past any adapter in use (8 to 256), a bound on a typo.
MAX_LORA_RANK = 1 << 16


@dataclass(frozen=True)
class Step:
    """What one step runs: the forward only, forward and backward, or a whole training step."""

    name: str
    backward: bool
    optimizer: bool
    description: str
    # inference with the model's own KV cache: ``prefill`` fills an empty one with the prompt,
    # ``decode`` adds one token per sequence to one of ``--context`` tokens
    cached: bool = False

    @property
    def decodes(self) -> bool:
        """True for ``decode``: one new token per sequence against a cache of the context."""
        return self.cached and self.name == "decode"


STEPS: dict[str, Step] = {s.name: s for s in (
    Step("forward", False, False, "the forward pass only, under no_grad"),
    Step("forward-backward", True, False, "forward, loss and backward; no optimizer"),
    Step("train", True, True, "forward, loss, backward and the optimizer step (steady state)"),
    Step("prefill", False, False, "the forward over the prompt (--seq tokens) that fills the "
         "model's own KV cache, logits of the last token only", cached=True),
    Step("decode", False, False, "one new token per sequence against a KV cache of --context "
         "tokens (the steady state: the cache filled before the step)", cached=True),
)}

@dataclass(frozen=True)
class Lora:
    """Low-rank adapters on the named linear modules, by peft's ``LoraConfig``: every weight
    of the model frozen, and an ``A`` (r × d_in) and ``B`` (d_out × r) trained beside each
    targeted linear: r · (d_in + d_out) parameters apiece.

    >>> resolve_lora(8, "q_proj, v_proj")
    Lora(rank=8, alpha=8, targets=('q_proj', 'v_proj'), dropout=0.0, nf4=False)
    """

    rank: int
    alpha: int  # peft's lora_alpha: the update is scaled by alpha / rank, which costs nothing
    targets: tuple[str, ...] = ()  # module names (a name, or a dotted tail); (): the defaults
    dropout: float = 0.0  # no dropout on the adapters' input: a dropout's mask is a cost apart
    nf4: bool = False  # QLoRA: the frozen linears stored in torchao's 4-bit NF4 (workload.qlora)

    def describe(self) -> str:
        on = ", ".join(self.targets) if self.targets else "the model's default targets"
        base = " over a 4-bit NF4 base (QLoRA)" if self.nf4 else ""
        return f"LoRA r={self.rank} on {on}{base}"


_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.\w+)*")


def peft_available() -> bool:
    """True when the optional ``peft`` package is installed (it is not imported)."""
    return importlib.util.find_spec("peft") is not None


def torchao_available() -> bool:
    """True when the optional ``torchao`` package is installed (it is not imported)."""
    return importlib.util.find_spec("torchao") is not None


def resolve_lora(rank: int | None, targets: str | None = None, qlora: bool = False
                 ) -> Lora | None:
    """``--lora R``, ``--lora-targets a,b`` and ``--qlora`` checked: None without ``--lora``.

    >>> resolve_lora(0)
    Traceback (most recent call last):
    ...
    tensorledger.errors.InputError: --lora must be between 1 and 65,536, got 0
    """
    if rank is None:
        if targets is not None:
            raise InputError("--lora-targets names the modules that get adapters; give the "
                             "adapters' rank with --lora R too")
        if qlora:
            raise InputError("--qlora stores the frozen base in 4-bit NF4 under LoRA "
                             "adapters; give the adapters' rank with --lora R too")
        return None
    rank = _whole("lora", rank, MAX_LORA_RANK)
    names: tuple[str, ...] = ()
    if targets is not None:
        pieces = [piece.strip() for piece in targets.split(",")]
        bad = [piece for piece in pieces if not _MODULE_NAME.fullmatch(piece)]
        if bad:
            raise InputError(f"--lora-targets takes module names separated by commas "
                             f"(q_proj,v_proj), got {bad[0]!r} in {targets!r}")
        names = tuple(dict.fromkeys(pieces))
    if not peft_available():
        raise InputError("--lora builds its adapters with peft, which is not installed: "
                         "pip install 'tensorledger[lora]'")
    if qlora and not torchao_available():
        raise InputError("--qlora stores the base in torchao's NF4 tensors, and torchao is "
                         "not installed: pip install 'tensorledger[ao]'")
    return Lora(rank=rank, alpha=rank, targets=names, nf4=bool(qlora))


#: What ``--offload`` moves to the host: the activations autograd saves, through torch's
#: ``torch.autograd.graph.save_on_cpu`` (copied to the host in forward, back in backward);
#: the parameters, through FSDP2's ``CPUOffloadPolicy`` (shards, gradients and optimizer
#: state on the host, the optimizer step on the CPU).
OFFLOADS = ("activations", "params")


def resolve_offload(text: str | None) -> tuple[str, ...]:
    """``--offload activations``, ``params`` or both checked: what is offloaded, () without
    the option.

    >>> resolve_offload("activations"), resolve_offload("params,activations"), resolve_offload(None)
    (('activations',), ('params', 'activations'), ())
    """
    if text is None:
        return ()
    pieces = tuple(dict.fromkeys(piece.strip().lower() for piece in text.split(",")))
    for piece in pieces:
        if piece not in OFFLOADS:
            raise UnknownNameError("offload", piece or text, OFFLOADS)
    return pieces


def check_param_offload(layout: Layout, device: str, precision: Precision) -> None:
    """``--offload params`` is FSDP2's ``CPUOffloadPolicy``: over the ``--fsdp`` shards (HSDP
    too), or on one device as a 1-rank FSDP2 mesh; traced on a fake process group.  Beside
    ZeRO-1, DDP alone, tensor, context or pipeline parallelism, and fp8, it is refused."""
    if device not in ("auto", "fake"):
        raise InputError(f"--offload params runs FSDP2's CPUOffloadPolicy on a fake process "
                         f"group, on fake tensors; drop --device {device} (or use --device "
                         "fake)")
    if layout.tp > 1 or layout.cp > 1 or layout.pp > 1:
        raise InputError(f"--offload params is traced under --fsdp (or on one device), not "
                         f"beside --tp, --cp or --pp yet: drop them ({layout.describe()}) or "
                         "--offload params")
    if layout.strategy in ("ddp", "zero1"):
        raise InputError(f"--offload params is FSDP2's CPUOffloadPolicy, which offloads FSDP's "
                         f"shards; {layout.describe()} has none: use --fsdp N (--zero 2 or 3)")
    if precision.float8:
        raise InputError(f"--offload params copies plain shards to the device; --precision "
                         f"{precision.name} gathers torchao's fp8 weights: use one of them")


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
    optimizer_kernel: str = "auto"  # the target's: foreach on a GPU, the loop on a CPU
    # prefill and decode serve bf16 weights: autocast over fp32 master weights is training's
    inference_precision: str = "bf16"


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
    target: Target = CPU  # the chip whose program the trace records (hardware.target)
    optimizer_kernel: str = "for-loop"  # for-loop, foreach or fused (OPTIMIZER_KERNELS)
    lora: Lora | None = None  # adapters trained on a frozen model (peft's LoRA)
    offload: tuple[str, ...] = ()  # what lives on the host (OFFLOADS): activations, params
    routing: Routing = BALANCED  # a mixture of experts' tokens per expert (workload.routing)
    context: int | None = None  # decode: tokens already in each sequence's KV cache

    @property
    def tokens(self) -> int:
        """Tokens the step runs: a decode step's one per sequence (``seq`` is 1 there)."""
        return self.batch * self.seq

    @property
    def experts(self) -> tuple[int, int] | None:
        """(routed experts, experts per token) of a mixture of experts, else None."""
        return routed_experts(self.source)

    @property
    def routing_note(self) -> str:
        """The routing the step assumes, in words ('' for a model without routed experts)."""
        experts = self.experts
        if experts is None:
            return ""
        return "routing: " + self.routing.describe(self.tokens, *experts)

    @property
    def model(self) -> str:
        """The model's label: the text the user gave."""
        return self.source.label

    @property
    def autocast(self) -> bool:
        """True when the forward runs under bf16 autocast (``mixed-bf16``, the fp8 recipes)."""
        return self.precision.autocast

    def on_device(self, device: str) -> Workload:
        """This workload run for real on ``device`` (``cpu`` or ``cuda``): that device's own
        program, the optimizer kernel torch picks there (unless one was asked for).

        >>> resolve_workload("tiny").on_device("cpu").optimizer_kernel
        'for-loop'
        """
        if device == self.device:
            return self
        target, kernel = _program(device, None, "auto", self.optimizer.name)
        if self.optimizer_kernel == "fused":
            kernel = "fused"
        return replace(self, device=device, target=target, optimizer_kernel=kernel)

    def __repr__(self) -> str:
        return summary("Workload", f"{self.model}: {self.step.name}",
                       f"batch {self.batch} × seq {self.seq}",
                       f"context {self.context:,}" if self.context is not None else "",
                       self.precision.name,
                       f"{self.optimizer.name} ({self.optimizer_kernel})"
                       if self.step.optimizer else "",
                       "checkpointed" if self.checkpoint else "",
                       self.lora.describe() if self.lora else "",
                       f"{', '.join(self.offload)} offloaded" if self.offload else "",
                       f"on {self.device}",
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
                     precision: str | None = None, optimizer: str = DEFAULTS.optimizer,
                     device: str = DEFAULTS.device, checkpoint: bool = DEFAULTS.checkpoint,
                     layout: Layout = SINGLE, target: Target | None = None,
                     optimizer_kernel: str = DEFAULTS.optimizer_kernel,
                     lora: Lora | None = None, offload: tuple[str, ...] = (),
                     routing: Routing = BALANCED, context: int | None = None) -> Workload:
    """Check every option and look every name up once; nothing is built or imported.

    ``device="auto"`` chooses ``meta`` for the reference presets (exact, fastest) unless the
    recipe autocasts (PyTorch has no autocast on meta), and ``fake`` (FakeTensorMode over CPU
    tensors) for everything else: Hugging Face models and factories often ask a tensor for a
    value (``.item()``), which fake tensors answer and meta tensors cannot.

    ``target`` is the chip whose program is traced (default: this machine's CPU, whose
    program PyTorch chooses; the commands pass their ``--hardware``'s, an H100 when none is
    named: :func:`~tensorledger.hardware.target.default_target`); on real tensors
    (``cpu``, ``cuda``) the device's own program is, whatever the target.  ``optimizer_kernel``
    ``auto`` is the target's default (``foreach`` on a GPU, ``for-loop`` on a CPU); ``fused``
    runs torch's fused kernel (SGD, Adam, AdamW), traced on fake tensors.
    ``lora`` (:func:`resolve_lora`) trains adapters beside a frozen model, on one device or
    under ``--fsdp`` / ``--dp`` (:func:`check_lora_layout`).
    ``offload`` (:func:`resolve_offload`) keeps the saved activations on the host (a step
    with a backward, on fake tensors: meta tensors cannot be copied to the host), and the
    parameters, gradients and optimizer state (FSDP2's ``CPUOffloadPolicy``: under ``--fsdp``,
    or a 1-rank FSDP2 mesh on one device; :func:`check_param_offload`).
    ``routing`` (:func:`~tensorledger.workload.routing.resolve_routing`): the tokens each
    routed expert of a mixture of experts receives, checked against the model's experts.
    ``precision`` None is the step's default: ``mixed-bf16`` for training steps, ``bf16`` for
    ``prefill`` and ``decode``.  ``context`` (decode only, and needed there): the tokens each
    sequence's cache holds before the step; a decode step runs one token per sequence.
    """
    source = model if isinstance(model, ModelSource) else resolve_source(model)
    batch = _whole("batch", batch, MAX_BATCH)
    seq = _whole("seq", seq, MAX_SEQ)
    chosen_step = resolve_step(step)
    if precision is None:
        precision = DEFAULTS.inference_precision if chosen_step.cached else DEFAULTS.precision
    chosen_precision = resolve_precision(precision)
    if chosen_step.cached:
        seq, context = _inference(source, chosen_step, seq, context, layout, checkpoint, lora)
    elif context is not None:
        raise InputError(f"--context is the cache a decode step reads; the {chosen_step.name} "
                         "step has none: use --step decode, or drop --context")
    chosen_optimizer = resolve_optimizer(optimizer)
    key = device.strip().lower()
    if key not in DEVICES:
        raise UnknownNameError("device", device, DEVICES)
    if not layout.single and key not in ("auto", "fake"):
        raise InputError(f"a layout of {layout.count} devices is traced as one rank of a fake "
                         f"process group, on fake tensors; drop --device {key} (or use --device "
                         "fake), and run it for real under torchrun")
    chosen_target, kernel = _program(key, target, optimizer_kernel, chosen_optimizer.name)
    if "params" in offload:
        check_param_offload(layout, key, chosen_precision)
    activations = "activations" in offload
    if activations and not chosen_step.backward:
        raise InputError("--offload activations moves what autograd saves for backward to the "
                         "host; a forward step saves nothing: drop --offload or --step")
    if activations and layout.pp > 1:
        raise InputError("--offload activations is traced for one step of a module, not yet "
                         "through a pipeline schedule; drop --pp or --offload")
    if offload and lora is not None and lora.nf4:
        raise InputError(f"--offload {','.join(offload)} copies plain tensors to the host, and "
                         "torchao's NF4 weight of each QLoRA linear cannot be copied into one; "
                         "drop --offload or --qlora")
    if activations and key == "meta":
        raise InputError("--offload activations copies each saved tensor to the host, which a "
                         "meta tensor (no data) cannot be copied to; use --device fake")
    if key == "auto":
        exact_on_meta = (source.kind == "preset" and not chosen_precision.autocast
                         and not checkpoint and layout.single and kernel != "fused"
                         and not offload)
        key = "meta" if exact_on_meta else "fake"
    if key == "meta" and kernel == "fused":
        raise InputError("the fused optimizer checks that its parameters are on a GPU or the "
                         "CPU, which meta tensors are not; use --device fake (no memory either)")
    if key == "meta" and chosen_precision.autocast:
        raise InputError(f"{chosen_precision.name} runs the forward under bf16 autocast, which "
                         "PyTorch does not offer on the meta device; use --device fake (no "
                         "memory either) or another --precision")
    if chosen_precision.float8:
        check_float8(chosen_precision, layout, lora)
    if checkpoint and source.config is None:
        raise InputError(f"--checkpoint wraps the blocks of a reference model; {source.label!r}"
                         " is not one (apply torch.utils.checkpoint in your factory instead)")
    config = source.config
    if source.max_seq is not None and seq > source.max_seq:
        raise InputError(f"--seq {seq} is longer than {source.name}'s context of "
                         f"{source.max_seq} (learned positions); use --seq "
                         f"{source.max_seq} or less")
    if lora is not None and not layout.single:
        check_lora_layout(lora, layout)
    check_layout(layout, config, batch=batch, seq=seq)
    check_experts(layout, routed_experts(source), source.label)
    if layout.ep > 1 and layout.tp > 1 and source.builder != "reference":
        raise InputError(f"--ep {layout.ep} beside --tp {layout.tp} is planned for the reference "
                         "mixture-of-experts models (tiny-moe, mixtral-8x7b, qwen3-30b-a3b); "
                         f"{source.label!r} is not one: drop --tp or --ep")
    if layout.etp > 1 and config is not None and config.moe is not None:
        check_expert_width(layout, config.moe.d_expert, config.name)
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
    if routing != BALANCED:
        experts = routed_experts(source)
        if experts is None:
            raise InputError(f"--routing sets the tokens each routed expert receives; "
                             f"{source.label!r} has no routed experts: drop --routing")
        routing.check(batch * seq, *experts)
    return Workload(source=source, batch=batch, seq=seq, step=chosen_step,
                    precision=chosen_precision, optimizer=chosen_optimizer,
                    checkpoint=checkpoint, device=key, layout=layout, target=chosen_target,
                    optimizer_kernel=kernel, lora=lora, offload=offload,
                    routing=routing, context=context)


def check_float8(precision: Precision, layout: Layout, lora: Lora | None) -> None:
    """An fp8 recipe needs torchao, and is traced on one device or under FSDP2 (data
    parallel too); tensor parallelism, pipelines and adapters are refused in one line."""
    if not torchao_available():
        raise InputError(f"--precision {precision.name} converts the linear layers with "
                         "torchao's float8 training, which is not installed: pip install "
                         "'tensorledger[ao]'")
    if layout.tp > 1 or layout.pp > 1:
        raise InputError(f"--precision {precision.name} is traced on one device, under "
                         "--fsdp or --dp; drop --tp/--pp or use --precision mixed-bf16")
    if lora is not None:
        raise InputError(f"--lora trains adapters beside frozen weights; --precision "
                         f"{precision.name} converts the linears they adapt: use one of them")


def check_lora_layout(lora: Lora, layout: Layout) -> None:
    """Adapters are traced under FSDP2 (HSDP too) and DDP: the frozen base sharded or
    replicated, the adapters alone trained; tensor, context and pipeline parallelism and a
    4-bit base under a layout are refused in one line."""
    if layout.tp > 1 or layout.cp > 1 or layout.pp > 1:
        raise InputError(f"--lora is traced on one device, under --fsdp or --dp; peft's "
                         f"adapters are not laid out over --tp, --cp or --pp yet: drop them "
                         f"({layout.describe()}) or --lora")
    if lora.nf4:
        raise InputError(f"--qlora is traced on one device; its NF4 base is not sharded "
                         f"here yet: drop the layout ({layout.describe()}) or --qlora")
    if layout.strategy == "zero1":
        raise InputError("--lora under --zero 1: ZeroRedundancyOptimizer over the adapters "
                         "alone is not traced yet; use --zero 2 or 3, or --dp")


def _inference(source: ModelSource, step: Step, seq: int, context: int | None,
               layout: Layout, checkpoint: bool, lora: Lora | None) -> tuple[int, int | None]:
    """The sequence and context of a prefill or decode step, checked: the model must have a
    KV cache path (a reference model, or a Hugging Face causal LM: transformers' caches)."""
    if source.builder == "factory":
        raise InputError(f"--step {step.name} runs the model with its own KV cache; "
                         f"{source.label!r} is a factory, which has no cache path here (use a "
                         "preset or a config.json)")
    if source.builder == "transformers" and (source.head or "causal-lm") != "causal-lm":
        raise InputError(f"--step {step.name} runs a causal LM with transformers' KV cache; "
                         f"{source.label} is a {source.head} model, which generates nothing")
    if not layout.single:
        raise InputError(f"--step {step.name} is traced on one device for now; drop the layout "
                         f"({layout.describe()})")
    if checkpoint:
        raise InputError(f"--checkpoint recomputes blocks in backward; --step {step.name} has "
                         "no backward: drop --checkpoint")
    if lora is not None:
        raise InputError(f"--lora trains adapters; --step {step.name} trains nothing: drop "
                         "--lora")
    if not step.decodes:
        if context is not None:
            raise InputError("--context is the cache a decode step reads; a prefill step "
                             "fills an empty one from its --seq prompt tokens: drop --context "
                             "or use --step decode")
        return seq, None
    if context is None:
        raise InputError("--step decode needs --context N: the tokens each sequence's KV "
                         "cache holds before the step")
    context = _whole("context", context, MAX_SEQ)
    if source.max_seq is not None and context + 1 > source.max_seq:
        raise InputError(f"--context {context:,} and the token decoded need "
                         f"{context + 1:,} positions; {source.name} has {source.max_seq:,} "
                         f"(learned positions): use --context {source.max_seq - 1:,} or less")
    return 1, context


def _program(device: str, target: Target | None, kernel: str, optimizer: str
             ) -> tuple[Target, str]:
    """The target whose program is traced, and the optimizer's kernel there."""
    if device in ("cpu", "cuda") and target is not None and target.attention != "auto":
        raise InputError(f"--attention {target.attention} forces the kernel a target chip "
                         f"runs, traced on fake tensors; on --device {device} PyTorch chooses "
                         "its own: drop --attention or --device")
    if device == "cpu":
        chosen = CPU
    elif device == "cuda":
        chosen = Target("cuda", "cuda", native=True)
    else:
        chosen = target if target is not None else CPU
    key = kernel.strip().lower()
    if key not in (*OPTIMIZER_KERNELS, "auto"):
        raise UnknownNameError("optimizer kernel", kernel, ("auto", *OPTIMIZER_KERNELS))
    own = optimizer in FOREACH_OPTIMIZERS
    if key == "auto":
        return chosen, chosen.optimizer_kernel if own else "for-loop"
    if key == "foreach" and not own:
        raise InputError(f"{optimizer} is written here as a per-parameter loop; torch.optim "
                         "has no foreach kernels for it: drop --optimizer-kernel")
    if key == "fused":
        if optimizer not in FUSED_OPTIMIZERS:
            raise InputError(f"torch.optim has no fused kernel for {optimizer} on a GPU; "
                             f"fused: {', '.join(FUSED_OPTIMIZERS)}")
        if chosen.kind not in ("cuda", "rocm", "cpu"):
            raise InputError(f"torch.optim's fused kernels run on CUDA, ROCm and CPU, not on "
                             f"{chosen.name}")
    return chosen, key
