"""The one place that builds a workload's module and runs its step, on any device.

:func:`placement` enters what a device needs (FakeTensorMode for ``fake``) and yields the
torch device to build on (:func:`routed` fixes a mixture of experts' routing inside it);
:func:`prepare` builds the module under the precision recipe, its inputs, its loss and its
optimizer; :meth:`PreparedStep.run` runs one step — forward (and
loss, backward, optimizer step, gradients dropped) — and can run again and again.
Everything here must be entered inside :func:`placement` of the workload's device.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from tensorledger.devices import resolve_device
from tensorledger.errors import ConfigError, ModelError
from tensorledger.models.build import build_model
from tensorledger.trace.kernels import target_program
from tensorledger.workload.factory import FactoryFile, load_factory_file, user_code
from tensorledger.workload.float8 import AppliedFloat8, apply_float8
from tensorledger.workload.layout import Layout
from tensorledger.workload.lora import AppliedLora, apply_lora, trainable
from tensorledger.workload.offload import ActivationOffload
from tensorledger.workload.param_offload import ParamOffload
from tensorledger.workload.precision import RecipeOptimizer, param_dtype
from tensorledger.workload.recompute import (
    CheckpointedBlock,
    checkpoint_blocks,
    checkpoint_hf_layers,
)
from tensorledger.workload.spec import Workload

if TYPE_CHECKING:
    from tensorledger.workload.inference import InferencePath

__all__ = ["CheckpointedBlock", "PreparedStep", "build_module", "check_host_memory",
           "checkpoint_blocks", "laid_out", "lm_loss", "placement", "prepare",
           "routed", "zero1_optimizer"]


def lm_loss(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of the logits against ``targets``."""
    logits = model(tokens)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def check_host_memory(work: Workload) -> None:
    """Before a step runs on real CPU tensors: its parameters, gradients and optimizer state
    (napkin's bytes per parameter under the recipe) must fit in this machine's memory, so a
    model too large for it is refused with both figures instead of being killed mid-step."""
    if work.device != "cpu":
        return
    from tensorledger.hostmemory import check_fits_in_memory
    from tensorledger.napkin.recipes import bytes_per_param
    from tensorledger.workload.params import model_params

    params = model_params(work.source).params
    per_param = bytes_per_param(work.precision, work.optimizer)
    state = per_param.params_bytes_per_param + (
        per_param.grads_bytes_per_param if work.step.backward else 0) + (
        per_param.master_bytes_per_param + per_param.optimizer_bytes_per_param
        if work.step.optimizer else 0)
    check_fits_in_memory(params * state, f"a {work.step.name} step of {work.model} on real "
                         f"CPU tensors ({params:,} parameters, {state:g} bytes each)",
                         "use --device fake (nothing allocated) or a smaller model")


@contextmanager
def placement(device: str) -> Iterator[str]:
    """Enter the mode ``device`` needs and yield the torch device to build on."""
    from tensorledger.trace.grouped import GroupedMMMode

    if device == "fake":
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(), GroupedMMMode():
            yield "cpu"
        return
    resolve_device(device, ("cpu", "cuda", "meta"))
    if device == "meta":
        with GroupedMMMode():
            yield device
        return
    yield device


def routed(work: Workload) -> AbstractContextManager[object]:
    """The routing of ``work``'s mixture of experts (:class:`.routed.RoutedMode`), entered
    inside :func:`placement` and before a recorder; nothing for a model without experts."""
    experts = work.experts
    if experts is None:
        return nullcontext()
    from tensorledger.workload.routed import RoutedMode

    return RoutedMode(*experts, work.routing)


@contextmanager
def laid_out(work: Workload, notes: list[str] | None = None) -> Iterator[tuple[str, Any]]:
    """:func:`placement` of ``work``'s device, and the device mesh of its layout: for a layout
    of more than one device, rank 0 of a fake process group of that many ranks, its mesh built
    before fake tensors are entered (building it reads the rank map as numbers); else None.
    ``--offload params`` on one device is a fake group of one rank (a 1-rank FSDP2 mesh).
    Inside, the step runs the target's program (:func:`target_program`); on fake or meta
    tensors a Hugging Face padding mask is decided as a real one without padding
    (:func:`.hf_masks.padding_as_given`), the assumption appended to ``notes``."""
    masks: AbstractContextManager[None] = nullcontext()
    if work.device in ("fake", "meta") and work.source.builder != "reference":
        from tensorledger.workload.hf_masks import padding_as_given

        masks = padding_as_given([] if notes is None else notes)
    if work.layout.single and "params" not in work.offload:
        with placement(work.device) as target, routed(work), target_program(work.target), \
                masks:
            yield target, None
        return
    from tensorledger.workload.parallel import build_mesh, fake_process_group

    with fake_process_group(work.layout.count), warnings.catch_warnings():
        if work.source.kind != "factory":
            # FSDP2 warns that the root returns a view which an in-place op would cut from
            # its backward hook; the step's own loss reads it out of place
            warnings.filterwarnings("ignore", "FSDP2-wrapped module .* returned a view tensor",
                                    UserWarning)
        mesh = build_mesh(work.layout)
        with placement("fake") as target, routed(work), target_program(work.target), masks:
            yield target, mesh


def _logits(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, tuple | list) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    raise ModelError(f"the model returned {type(output).__name__}, with no logits to score; "
                     "define loss(output, inputs) in the factory file")


def default_loss(output: Any, targets: torch.Tensor) -> torch.Tensor:
    """The model's own ``.loss`` when it computed one, else cross-entropy of its logits."""
    own = getattr(output, "loss", None)
    if isinstance(own, torch.Tensor):
        return own
    logits = _logits(output)
    if logits.dim() < 2 or logits.shape[:-1].numel() != targets.numel():
        raise ModelError(f"the model's logits have shape {tuple(logits.shape)}, which does not "
                         f"score {tuple(targets.shape)} token ids; define loss(output, inputs) "
                         "in the factory file")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _vocabulary(module: nn.Module) -> int:
    """The number of token ids the module takes: its config's, or its first embedding's."""
    config = getattr(module, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int) and vocab > 0:
        return vocab
    for sub in module.modules():
        if isinstance(sub, nn.Embedding):
            return sub.num_embeddings
    raise ModelError(f"{type(module).__name__} has no embedding to feed token ids to; define "
                     "make_inputs(batch, seq) in the factory file")


#: The head a config's ``architectures`` asks for → the transformers auto class that builds it.
_AUTO_CLASSES = {"causal-lm": "AutoModelForCausalLM", "masked-lm": "AutoModelForMaskedLM",
                 "sequence-classification": "AutoModelForSequenceClassification"}


def _classification_labels(model: nn.Module, config: Any) -> None:
    """A sequence classifier scores one label per sequence, not a token per position: while
    gradients are on (a step with a loss) it is handed zero labels of its problem's shape and
    computes its own loss, which :func:`default_loss` takes; a forward-only step runs none."""
    problem = config.problem_type or ("regression" if config.num_labels == 1
                                      else "single_label_classification")

    def add_labels(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        if not torch.is_grad_enabled() or "labels" in kwargs:
            return None
        ids = args[0] if args else kwargs["input_ids"]
        batch = ids.shape[0]
        if problem == "multi_label_classification":
            labels = torch.zeros(batch, config.num_labels, device=ids.device)
        elif problem == "regression":
            labels = torch.zeros(batch, device=ids.device)
        else:
            labels = torch.zeros(batch, dtype=torch.long, device=ids.device)
        return args, {**kwargs, "labels": labels}

    model.register_forward_pre_hook(add_labels, with_kwargs=True)


def _hf_model(work: Workload, dtype: torch.dtype) -> nn.Module:
    """The config's model, built by transformers with the head its ``architectures`` asks
    for (:attr:`ModelSource.head`, checked before torch loaded)."""
    import transformers

    from tensorledger.workload.quiet import quiet_import, quiet_torch

    raw = dict(work.source.hf_config or {})
    model_type = str(raw.pop("model_type"))
    where = work.source.path
    head = work.source.head or "causal-lm"
    try:
        config_class = transformers.CONFIG_MAPPING[model_type]
    except KeyError:
        raise ConfigError(f"{where}: model_type {model_type!r} is not known to the installed "
                          f"transformers {transformers.__version__}") from None
    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # its advice on configs is not ours to print
    try:
        config = config_class.from_dict(raw)
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        raise ConfigError(f"{where}: transformers cannot read it as a {model_type} config "
                          f"({type(error).__name__}: {error})") from None
    if head == "sequence-classification" and config.pad_token_id is None:
        # decoders find each sequence's last token by its padding; which id pads changes no cost
        config.pad_token_id = 0
    auto = getattr(transformers, _AUTO_CLASSES[head])
    try:
        # transformers imports torchao, when installed, while it builds a model
        with quiet_torch(), quiet_import():
            model = auto.from_config(config, dtype=dtype)
    except ValueError as error:
        raise ConfigError(f"{where}: model_type {model_type!r} has no {head} class in "
                          f"transformers ({str(error).splitlines()[0]})") from None
    if head == "sequence-classification":
        _classification_labels(model, config)
    return cast(nn.Module, model)


@dataclass
class PreparedStep:
    """A built module and one step of it, ready to run (and run again: gradients reset)."""

    work: Workload
    module: nn.Module
    parameters: list[nn.Parameter]
    optimizer: RecipeOptimizer | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    targets: torch.Tensor | None
    user_loss: Callable[[Any, Any], Any] | None
    user_inputs: Any
    device_type: str
    lora: AppliedLora | None = None  # the adapters peft put on the module, if any
    float8: AppliedFloat8 | None = None  # the linears torchao runs in fp8, if any
    offloaded: ActivationOffload | None = None  # the last step's activation offload, if any
    # --offload params: FSDP2's CPUOffloadPolicy copies, counted for the last step
    params_offloaded: ParamOffload | None = None

    def params_moved(self, on_host: Callable[[torch.Tensor], None] | None = None
                     ) -> AbstractContextManager[None]:
        """With ``--offload params``, FSDP2's copies of the shards to the device and of the
        gradient shards to the host counted afresh for one step (``on_host`` sees each host
        copy of a gradient); else nothing."""
        moved = self.params_offloaded
        if moved is None:
            return nullcontext()
        moved.reset()
        moved.on_host = on_host
        return moved.watching()

    def saved_hooks(self, on_saved: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    on_host: Callable[[torch.Tensor], None] | None = None
                    ) -> AbstractContextManager[None]:
        """What autograd does with the tensors it saves in :meth:`loss`: ``on_saved`` sees
        each (the trace tags them); with ``--offload activations`` torch's ``save_on_cpu``
        moves them to the host instead (``on_host`` sees each host copy)."""
        if "activations" in self.work.offload:
            self.offloaded = ActivationOffload(stand_in=self.device_type != "cuda"
                                               and self.work.target.kind != "cpu",
                                               on_host=on_host)
            return self.offloaded.hooks()
        if on_saved is None:
            return nullcontext()
        return torch.autograd.graph.saved_tensors_hooks(on_saved, lambda t: t)
    inference: InferencePath | None = None  # prefill and decode: the model and its KV cache

    cp_mesh: Any = None  # the context-parallel mesh the sequence is split over, if any

    def sequence_sharded(self) -> AbstractContextManager[None]:
        """Under context parallelism, the inputs cut to this rank's chunks of the sequence
        and attention run as torch's ring (:mod:`.context_parallel`); else nothing."""
        if self.cp_mesh is None:
            return nullcontext()
        from tensorledger.workload.context_parallel import sequence_sharded

        return sequence_sharded(self.cp_mesh, [*self.args, *self.kwargs.values(),
                                               self.targets], self.work.layout.cp_rotate)

    def guard(self) -> AbstractContextManager[None]:
        """Errors of the module's own code become one line naming what and where."""
        from tensorledger.workload.quiet import quiet_torch

        source = self.work.source
        files = (source.path,) if source.kind == "factory" and source.path else ()
        return quiet_torch(user_code(f"a step of {source.label}", files))

    def autocast(self) -> AbstractContextManager[object]:
        """bf16 autocast for ``mixed-bf16`` (PyTorch has none on meta: fp32 there)."""
        if self.work.autocast and self.device_type != "meta":
            return torch.autocast(device_type=self.device_type, dtype=torch.bfloat16)
        return nullcontext()

    def loss(self) -> torch.Tensor:
        """Forward and loss, under the recipe's autocast."""
        with self.autocast():
            output = self.module(*self.args, **self.kwargs)
            if self.user_loss is not None:
                value = self.user_loss(output, self.user_inputs)
                if not isinstance(value, torch.Tensor) or value.numel() != 1:
                    raise ModelError(f"loss(output, inputs) in {self.work.source.path} "
                                     f"returned {type(value).__name__}, not a scalar tensor")
                return value
            assert self.targets is not None
            return default_loss(output, self.targets)

    def forward(self, own_cache: bool = False) -> None:
        """The forward under no_grad; a prefill or decode step with the model's KV cache (the
        primed cache handed to the step itself with ``own_cache``: see
        :mod:`.inference`)."""
        with torch.no_grad(), self.autocast():
            if self.inference is not None:
                self.inference.step(self.args[0], own=own_cache)
                return
            self.module(*self.args, **self.kwargs)

    def cache_before(self) -> list[torch.Tensor]:
        """The KV cache the next step starts from (a decode step's, primed here the first
        time; none for a prefill or a step without a cache)."""
        if self.inference is None:
            return []
        with self.guard(), torch.no_grad(), self.autocast():
            return self.inference.before()

    def run(self) -> None:
        """One step of the workload's kind."""
        with self.guard(), self.sequence_sharded():
            if not self.work.step.backward:
                self.forward()
                return
            with self.params_moved():
                with self.saved_hooks():
                    loss = self.loss()
                loss.backward()  # type: ignore[no-untyped-call]
                if self.optimizer is not None:
                    self.optimizer.step()
                    self.after_optimizer_step()
                self.drop_gradients()

    def after_optimizer_step(self) -> None:
        """With FSDP2 gathering fp8 weights: torchao's ``precompute_float8_dynamic_scale_for_
        fsdp``, as torchtitan runs it after each optimizer step: the amax of every such weight
        in one all-reduce, so that the next step's all-gathers need none of their own."""
        if self.float8 is not None and self.float8.fsdp_float8_all_gather:
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            precompute_float8_dynamic_scale_for_fsdp(self.module)

    def warm_without_sync(self) -> None:
        """A forward and backward under DDP's ``no_sync`` (it records no gradient order, so
        its next step is still its first), gradients dropped: DTensor's sharding cache is
        filled, whose misses rerun ops on fake tensors that a real rank never runs."""
        with self.guard(), cast(Any, self.module).no_sync():
            self.loss().backward()  # type: ignore[no-untyped-call]
        self.drop_gradients()

    def prime_optimizer(self) -> None:
        """One optimizer step on zero gradients, outside any trace: the state every later
        step holds exists (for a layout whose first step is the one traced: DDP's second
        step rebuilds its buckets from real memory, which fake tensors do not have)."""
        if self.optimizer is None:
            return
        with self.guard(), torch.no_grad():
            for p in self.parameters:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
            self.optimizer.step()
            self.drop_gradients()

    def drop_gradients(self) -> None:
        for p in self.parameters:
            p.grad = None


def _build_module(work: Workload, target: str, dtype: torch.dtype,
                  factory: FactoryFile | None) -> nn.Module:
    source = work.source
    if source.builder == "reference":
        assert source.config is not None
        model: nn.Module = build_model(source.config, target, dtype)
        # a laid-out model is checkpointed by :func:`prepare`, after tensor parallelism
        return checkpoint_blocks(model) if work.checkpoint and work.layout.single else model
    if source.builder == "transformers":
        with torch.device(target), user_code(f"building {source.label} with transformers"):
            built = _hf_model(work, dtype)
            # transformers' own activation checkpointing of every layer
            return checkpoint_hf_layers(built) if work.checkpoint else built
    assert factory is not None
    with torch.device(target), user_code(f"the factory {source.label}", (factory.path,)):
        made = factory.factory()
    if not isinstance(made, nn.Module):
        raise ModelError(f"the factory {source.label} returned {type(made).__name__}, not a "
                         "torch.nn.Module")
    with user_code(f"casting the module of {source.label} to {dtype}", (factory.path,)):
        _cast_floating(made, dtype)
    return made


def _cast_floating(module: nn.Module, dtype: torch.dtype) -> None:
    """Cast ``module``'s floating parameters and buffers to ``dtype`` in place, as
    ``module.to(dtype=dtype)`` would on real tensors, and under FakeTensorMode too.

    ``Module.to`` swaps a fake parameter for its cast (``torch.utils.swap_tensors``, forced
    for every FakeTensor whatever ``torch.__future__`` says), and the swap is refused: the fake
    mode's MetaConverter holds a weak reference to every Parameter made under it.  Setting
    ``.data`` instead is what ``Module.to`` itself does to a real parameter: the Parameter
    object stays (ties between modules, references the user kept, attributes set on it), and
    its storage becomes the cast one.  Integer and complex tensors stay what they are.
    """
    with torch.no_grad():
        # parameters() yields a Parameter shared by several modules once
        for param in module.parameters():
            if param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
                if param.grad is not None:
                    param.grad = param.grad.to(dtype)
        cast: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id → (buffer, its cast)
        for sub in module.modules():
            for name, buffer in sub._buffers.items():
                if buffer is None or not buffer.is_floating_point() or buffer.dtype == dtype:
                    continue
                # a buffer shared by several modules stays shared (the old one is kept
                # alive in ``cast`` so that its id is not reused meanwhile)
                if id(buffer) not in cast:
                    cast[id(buffer)] = (buffer, buffer.to(dtype))
                sub._buffers[name] = cast[id(buffer)][1]


def _inputs(work: Workload, module: nn.Module, target: str, factory: FactoryFile | None
            ) -> tuple[tuple[Any, ...], dict[str, Any], torch.Tensor | None, Any]:
    """Positional and keyword inputs, the default loss's targets, and what ``loss`` gets."""
    if factory is not None and factory.make_inputs is not None:
        with torch.device(target), user_code("make_inputs(batch, seq)", (factory.path,)):
            made = factory.make_inputs(work.batch, work.seq)
        if isinstance(made, dict):
            args: tuple[Any, ...] = ()
            kwargs = dict(made)
        elif isinstance(made, tuple | list):
            args, kwargs = tuple(made), {}
        elif isinstance(made, torch.Tensor):
            args, kwargs = (made,), {}
        else:
            raise ModelError(f"make_inputs in {factory.path} returned {type(made).__name__}; "
                             "return a dict of keyword inputs, a tuple, or a tensor")
        targets = next((t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)
                        and not t.is_floating_point()), None)
        if factory.loss is None and targets is None:
            raise ModelError(f"make_inputs in {factory.path} gives no token ids to score; "
                             "define loss(output, inputs) there too")
        return args, kwargs, targets, made
    if work.source.config is None:
        _vocabulary(module)  # refuses a module that takes no token ids, in one line
    # zeros are valid ids of every vocabulary; the values do not change what a step costs
    tokens = torch.zeros(work.batch, work.seq, dtype=torch.long, device=target)
    return (tokens,), {}, tokens, tokens


def build_module(work: Workload, target: str) -> tuple[nn.Module, FactoryFile | None]:
    """``work``'s module on ``target`` (inside :func:`placement`) in the recipe's parameter
    dtype, and the factory file it came from.  A factory file is imported here, guarded."""
    source = work.source
    factory = None
    if source.builder == "factory":
        assert source.path is not None and source.function is not None
        factory = load_factory_file(source.path, source.function)
    return _build_module(work, target, param_dtype(work.precision), factory), factory


def zero1_optimizer(layout: Layout, mesh: Any, optimizer: str, kernel: str = "for-loop"
                    ) -> Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None:
    """ZeRO-1's optimizer under ``layout`` (torch's ``ZeroRedundancyOptimizer`` over the
    named optimizer, on ``mesh``), for :class:`RecipeOptimizer`'s ``inner``; None for any
    other layout."""
    if layout.strategy != "zero1" or mesh is None:
        return None
    from tensorledger.workload.optimizers import make_optimizer
    from tensorledger.workload.parallel import make_optimizer as laid_out_optimizer

    def inner(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return laid_out_optimizer(layout, mesh, params,
                                  lambda group: make_optimizer(optimizer, cast(Any, group),
                                                               kernel=kernel))

    return inner


def prepare(work: Workload, target: str, mesh: Any = None) -> PreparedStep:
    """Build ``work``'s module on ``target`` (inside :func:`placement`), with its inputs, loss
    and optimizer; on real CPU tensors only when its state fits in memory.  With a ``mesh``
    (from :func:`laid_out`) the module is laid out over it by torch.distributed's own code
    before its optimizer is made, so the optimizer holds this rank's shards."""
    check_host_memory(work)
    source = work.source
    module, factory = build_module(work, target)
    applied = None
    if work.lora is not None:  # before any layout (none is taken with adapters yet)
        module, applied = apply_lora(work, module)
    float8 = None
    if work.precision.float8:  # before the layout: FSDP2 shards the converted weights
        with user_code(f"converting {source.label} to float8 with torchao",
                       (source.path,) if source.kind == "factory" and source.path else ()):
            module, float8 = apply_float8(module, work.precision,
                                          sharded=work.layout.strategy in ("fsdp", "hsdp"))
    if mesh is not None:
        from tensorledger.workload.parallel import parallelize

        with user_code(f"laying {source.label} out as {work.layout.describe()}",
                       (source.path,) if source.kind == "factory" and source.path else ()):
            checkpointed = work.checkpoint and source.builder == "reference"
            module = parallelize(module, work.layout, mesh,
                                 between=checkpoint_blocks if checkpointed else None,
                                 offload_params="params" in work.offload)
    parameters = list(dict.fromkeys(module.parameters()))
    if work.step.backward and not any(p.requires_grad for p in parameters):
        raise ModelError(f"{source.label} has no trainable parameters: there is nothing to "
                         "differentiate; use --step forward")
    args, kwargs, targets, user_inputs = _inputs(work, module, target, factory)
    optimizer = None
    if work.step.optimizer:
        # frozen weights (adapters' bases) get no gradient, so no state either
        optimizer = RecipeOptimizer(trainable(parameters), work.optimizer, work.precision,
                                    inner=zero1_optimizer(work.layout, mesh,
                                                          work.optimizer.name,
                                                          work.optimizer_kernel),
                                    kernel=work.optimizer_kernel)
    inference = None
    if work.step.cached:
        from tensorledger.workload.inference import InferencePath

        inference = InferencePath(work, module, target)
    return PreparedStep(work=work, module=module, parameters=parameters, optimizer=optimizer,
                        args=args, kwargs=kwargs, targets=targets,
                        user_loss=factory.loss if factory is not None else None,
                        user_inputs=user_inputs, device_type=torch.device(target).type,
                        lora=applied, float8=float8, inference=inference,
                        params_offloaded=ParamOffload(
                            stand_in=torch.device(target).type != "cuda"
                            and work.target.kind != "cpu") if "params" in work.offload
                        else None,
                        cp_mesh=mesh["cp"] if mesh is not None and work.layout.cp > 1
                        else None)
