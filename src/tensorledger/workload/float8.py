"""FP8 training by torchao's own ``convert_to_float8_training``: every eligible ``nn.Linear``
of the built module becomes a ``Float8Linear`` whose matmuls run as ``torch._scaled_mm`` on
fp8 casts made on the fly (an amax, a scale and a cast per operand, in forward and again in
backward), the rest of the step as ``mixed-bf16``.

What torchao keeps, read from its ``matmul_with_hp_or_float8_args``: the forward saves the
*high-precision* input (bf16 under autocast) and the fp32 weight, not their fp8 casts; the
backward casts them again.  So the step holds what ``mixed-bf16`` holds less the bf16 weight
copies autocast saves for each linear, and fp8 temporaries while a matmul runs.

Two details of tracing it on fake CPU tensors for a GPU target:

- ``Float8Linear.forward`` casts its input to the autocast dtype only under *CUDA* autocast
  (``torch.is_autocast_enabled()`` with no device); the fake step runs CPU autocast, so a
  forward pre-hook does that cast on the autocast of the input's device, as torchao does on
  a GPU.  Without it the input would be cast from fp32 (and kept in fp32 for backward).
- ``torch._scaled_mm`` has a meta kernel in PyTorch (``torch/_meta_registrations.py``), which
  FakeTensorMode runs: nothing is registered here.  The recorder dispatches through torchao's
  ``Float8TrainingTensor`` (a traceable wrapper subclass, like DTensor), so the trace holds
  ``_scaled_mm`` on the fp8 data and scales, not an ``mm`` of the wrappers.

Under FSDP2 a tensorwise recipe all-gathers the weights in fp8 (``enable_fsdp_float8_all_gather``)
and :meth:`~tensorledger.workload.step.PreparedStep.after_optimizer_step` runs torchao's
``precompute_float8_dynamic_scale_for_fsdp`` after each optimizer step, as torchtitan does.

``_scaled_mm`` needs both matmul dimensions divisible by 16: a linear whose ``in_features`` or
``out_features`` is not stays in bf16 (torchtitan's filter does the same); the skipped names
are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from tensorledger.errors import InputError
from tensorledger.napkin.recipes import Precision
from tensorledger.workload.quiet import quiet_import

__all__ = ["FP8_ALIGNMENT", "AppliedFloat8", "apply_float8"]

#: ``torch._scaled_mm`` takes matrices whose dimensions are multiples of 16.
FP8_ALIGNMENT = 16


@dataclass(frozen=True)
class AppliedFloat8:
    """What torchao converted: the recipe, the linears now ``Float8Linear`` and those left in
    high precision because a dimension is not a multiple of :data:`FP8_ALIGNMENT`."""

    recipe: str
    converted: tuple[str, ...]
    skipped: tuple[str, ...]
    fsdp_float8_all_gather: bool

    def describe(self, lab: bool = True) -> str:
        """What was converted, and (``lab``) the precision lab's error of the recipe's casts
        beside its format (computed here on real CPU tensors, outside any fake mode)."""
        text = (f"torchao float8 ({self.recipe} scales): {len(self.converted)} linear layers "
                "run _scaled_mm")
        if self.fsdp_float8_all_gather:
            text += ", FSDP2 all-gathers their weights in fp8"
        if self.skipped:
            shown = ", ".join(self.skipped[:3]) + (", ..." if len(self.skipped) > 3 else "")
            text += (f"; {len(self.skipped)} left in bf16 (a dimension not a multiple of "
                     f"{FP8_ALIGNMENT}: {shown})")
        if lab:
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            from tensorledger.formats.training import fp8_recipe_error

            with unset_fake_temporarily():
                text += f"; {fp8_recipe_error(self.recipe).describe()}"
        return text


def _eligible(module: nn.Module) -> bool:
    return (isinstance(module, nn.Linear) and module.in_features % FP8_ALIGNMENT == 0
            and module.out_features % FP8_ALIGNMENT == 0)


def _cast_input(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The input cast ``Float8Linear.forward`` makes under CUDA autocast, made under the
    autocast of the input's own device."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    kind = args[0].device.type
    if kind == "cuda" or not torch.is_autocast_enabled(kind):
        return None  # on CUDA torchao casts it itself
    dtype = torch.get_autocast_dtype(kind)
    return (args[0].to(dtype), *args[1:])


def apply_float8(module: nn.Module, precision: Precision, *, sharded: bool = False
                 ) -> tuple[nn.Module, AppliedFloat8]:
    """Convert ``module``'s linear layers in place with torchao's
    ``convert_to_float8_training`` under ``precision``'s float8 recipe.  ``sharded``: the
    module is laid out by FSDP2 next, and a tensorwise recipe all-gathers its weights in fp8
    (``enable_fsdp_float8_all_gather``)."""
    recipe = precision.float8
    if not recipe:
        raise InputError(f"--precision {precision.name} runs no fp8 matmuls")
    with quiet_import():
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        from torchao.float8.float8_linear import Float8Linear

    config = Float8LinearConfig.from_recipe_name(recipe)
    gather = sharded and recipe == "tensorwise"
    if gather:
        # the field of torchao's config that torchtitan sets under FSDP2
        config = replace(config, enable_fsdp_float8_all_gather=True)
    converted: list[str] = []
    skipped: list[str] = []
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Linear):
            (converted if _eligible(sub) else skipped).append(name)

    def keep(sub: nn.Module, name: str) -> bool:
        return _eligible(sub)

    module = convert_to_float8_training(module, module_filter_fn=keep, config=config)
    for sub in module.modules():
        if isinstance(sub, Float8Linear):
            sub.register_forward_pre_hook(_cast_input)
    return module, AppliedFloat8(recipe=recipe, converted=tuple(converted),
                                 skipped=tuple(skipped), fsdp_float8_all_gather=gather)
