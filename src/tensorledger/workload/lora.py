"""LoRA adapters on a built module, by peft's own ``LoraConfig`` and ``get_peft_model``.

peft freezes every weight of the model and puts an ``A`` (r × d_in) and a ``B`` (d_out × r)
beside each targeted linear; the optimizer gets those alone (:func:`trainable`).

Under FakeTensorMode peft's moves of each new adapter to its base layer's device and dtype
(``Module.to``, in ``_move_adapter_to_device_of_base_layer`` and ``_replace_module``) are
refused: ``to`` swaps a fake parameter for its copy, and the fake mode's converter holds a
weak reference to every parameter made under it.  Its ``low_cpu_mem_usage`` (adapters made
on meta) fails the same way, copying a fake tensor's attributes, its device among them.  So
while peft injects on fake tensors, ``Module.to`` is :func:`_to_in_place`: it casts floating
parameters and buffers by ``.data``, as ``Module.to`` does for real ones; the device is
already the base's (every fake tensor here is on the CPU).  Everything else is peft's own;
on real tensors nothing is replaced.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tensorledger.errors import InputError
from tensorledger.workload.qlora import NF4Base, quantize_base, quiet_torchao
from tensorledger.workload.spec import Lora, Workload

__all__ = ["REFERENCE_TARGETS", "AppliedLora", "apply_lora", "linear_names", "trainable"]

#: The reference Transformer's counterparts of peft's usual q_proj, v_proj
#: (:mod:`tensorledger.models.transformer`'s Attention).
REFERENCE_TARGETS = ("query", "value")


@dataclass(frozen=True)
class AppliedLora:
    """What peft did: the targets taken (and where they came from), the counts it reports."""

    targets: tuple[str, ...]
    targets_from: str  # "--lora-targets", peft's defaults for <model_type>, ...
    trainable_params: int  # peft's get_nb_trainable_parameters()
    all_params: int
    peft_version: str
    base: NF4Base | None = None  # QLoRA: the linears stored in 4-bit NF4

    def describe(self) -> str:
        share = self.trainable_params / self.all_params if self.all_params else 0.0
        frozen = "the rest frozen in their stored dtype" if self.base is None else \
            f"the rest frozen: {self.base.describe()}"
        return (f"{'QLoRA' if self.base else 'LoRA'} through peft {self.peft_version} on "
                f"{', '.join(self.targets)} ({self.targets_from}): {self.trainable_params:,} "
                f"trainable parameters of {self.all_params:,} ({share:.2%}); {frozen}")


def trainable(parameters: list[nn.Parameter]) -> list[nn.Parameter]:
    """The parameters that get gradients and optimizer state."""
    return [p for p in parameters if p.requires_grad]


def linear_names(module: nn.Module) -> list[str]:
    """The last names of ``module``'s linear layers, once each, in model order."""
    names = (name.rsplit(".", 1)[-1] for name, sub in module.named_modules()
             if isinstance(sub, nn.Linear) and name)
    return list(dict.fromkeys(names))


def _targets(work: Workload, module: nn.Module, lora: Lora) -> tuple[tuple[str, ...], str]:
    if lora.targets:
        return lora.targets, "--lora-targets"
    source = work.source
    if source.builder == "reference":
        return REFERENCE_TARGETS, "the reference attention's query and value: peft's q_proj, v_proj"
    have = ", ".join(linear_names(module))
    if source.builder == "transformers" and source.hf_config is not None:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

        model_type = str(source.hf_config.get("model_type"))
        defaults = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type)
        if defaults:
            return tuple(defaults), f"peft's defaults for {model_type}"
        raise InputError(f"peft has no default LoRA targets for {model_type}; name them with "
                         f"--lora-targets (its linear modules: {have})")
    raise InputError(f"--lora on {source.label} needs --lora-targets (its linear modules: "
                     f"{have})")


def _check_targets(module: nn.Module, targets: tuple[str, ...]) -> None:
    """Each target names a linear of the model, as peft matches it: the whole name or its
    dotted tail."""
    modules = dict(module.named_modules())
    for target in targets:
        found = [sub for name, sub in modules.items()
                 if name == target or name.endswith("." + target)]
        if not found:
            raise InputError(f"--lora-targets: {type(module).__name__} has no module "
                             f"{target!r}; its linear modules: {', '.join(linear_names(module))}")
        if not any(isinstance(sub, nn.Linear) for sub in found):
            raise InputError(f"--lora-targets: {target!r} names a {type(found[0]).__name__}, not "
                             f"a linear layer; its linear modules: "
                             f"{', '.join(linear_names(module))}")


def _to_in_place(module: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
    """``module.to(...)`` on fake CPU tensors: floating tensors cast in place (see above)."""
    _, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    if dtype is None or not dtype.is_floating_point:
        return module
    with torch.no_grad():
        for param in module.parameters():
            if param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
        for sub in module.modules():
            for name, buffer in sub._buffers.items():
                if buffer is not None and buffer.is_floating_point() and buffer.dtype != dtype:
                    sub._buffers[name] = buffer.to(dtype)
    return module


@contextmanager
def _fake_safe_moves() -> Iterator[None]:
    own = nn.Module.to
    nn.Module.to = _to_in_place  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        nn.Module.to = own  # type: ignore[method-assign]


def apply_lora(work: Workload, module: nn.Module) -> tuple[nn.Module, AppliedLora]:
    """``module`` wrapped by peft with ``work.lora``'s adapters (inside
    :func:`~tensorledger.workload.step.placement` of the workload's device: the adapters are
    made where their base layers are)."""
    lora = work.lora
    assert lora is not None
    try:
        with quiet_torchao():  # peft imports torchao when it is there
            import peft
    except ImportError:
        raise InputError("--lora builds its adapters with peft, which is not installed: "
                         "pip install 'tensorledger[lora]'") from None
    targets, taken_from = _targets(work, module, lora)
    _check_targets(module, targets)
    base = quantize_base(module) if lora.nf4 else None
    config = peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                             target_modules=list(targets), bias="none")
    try:
        with _fake_safe_moves() if work.device == "fake" else nullcontext(), \
                warnings.catch_warnings(), quiet_torchao():
            # peft asks a transformers model a question transformers 5 renamed; not ours to say
            warnings.filterwarnings("ignore", ".*is_gradient_checkpointing.* is deprecated",
                                    FutureWarning)
            model = peft.get_peft_model(module, config)
    except ValueError as error:
        raise InputError(f"peft refused the adapters: {str(error).splitlines()[0]}") from None
    trainable_count, all_count = model.get_nb_trainable_parameters()
    return model, AppliedLora(targets=targets, targets_from=taken_from,
                              trainable_params=trainable_count, all_params=all_count,
                              peft_version=peft.__version__, base=base)
