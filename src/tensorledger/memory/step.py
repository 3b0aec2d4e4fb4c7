"""One training step of a model, run for its memory: forward, loss, backward, optimizer step.

The step runs on real tensors (``cpu``, ``cuda``), on the ``meta`` device, or on ``fake``
tensors (``FakeTensorMode`` over CPU tensors): meta and fake allocate nothing, so llama-3-70b
is accounted on a laptop.  The two differ in one way that matters for activations: on meta,
``scaled_dot_product_attention`` takes the math path, which saves the s×s attention weights;
fake CPU tensors choose the fused (flash) kernel, which saves only q, k, v, the output and a
log-sum-exp per row, the way a GPU does.  ``fake`` is the default.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from tensorledger.devices import resolve_device
from tensorledger.errors import InputError
from tensorledger.memory.precision import RecipeOptimizer, param_dtype
from tensorledger.memory.saved import SavedActivations, saved_activations
from tensorledger.memory.state import StateBytes, measure_state
from tensorledger.models.build import build_model
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["DEVICES", "CheckpointedBlock", "StepMemory", "check_step", "checkpoint_blocks",
           "lm_loss", "prepare_step", "step_device", "transformer_step_memory"]

DEVICES = ("fake", "meta", "cpu", "cuda")


class CheckpointedBlock(nn.Module):
    """A block whose insides are recomputed in backward (``torch.utils.checkpoint``,
    non-reentrant): only its input is kept."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, checkpoint(self.block, x, use_reentrant=False))


def checkpoint_blocks(model: nn.Module) -> nn.Module:
    """Wrap every entry of ``model.blocks`` in :class:`CheckpointedBlock`, in place."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise InputError(f"{type(model).__name__} has no .blocks list to checkpoint")
    for i, block in enumerate(blocks):
        blocks[i] = CheckpointedBlock(block)
    return model


def lm_loss(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of the logits against ``targets``."""
    logits = model(tokens)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def check_step(batch: int, seq_len: int, optimizer: str, precision: str) -> tuple[str, str]:
    """Refuse bad sizes and names before anything is built; the canonical names back."""
    for key, value in (("batch", batch), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{key} must be a whole number >= 1, got {value!r}")
    return resolve_optimizer(optimizer).name, resolve_precision(precision).name


def prepare_step(config: TransformerConfig, batch: int, seq_len: int, optimizer: str,
                 precision: str, target: str, checkpointed: bool
                 ) -> tuple[nn.Module, RecipeOptimizer, torch.Tensor, torch.Tensor]:
    """The model under the recipe on ``target``, its optimizer, and a batch of tokens and
    targets: everything one step needs."""
    model = build_model(config, target, param_dtype(precision))
    if checkpointed:
        checkpoint_blocks(model)
    recipe = RecipeOptimizer(model.parameters(), optimizer, precision)
    tokens = torch.zeros(batch, seq_len, dtype=torch.long, device=target)
    targets = torch.zeros(batch, seq_len, dtype=torch.long, device=target)
    return model, recipe, tokens, targets


@contextmanager
def step_device(device: str) -> Iterator[str]:
    """Enter the mode ``device`` needs and yield the torch device to build on."""
    if device not in DEVICES:
        raise InputError(f"unknown device {device!r} for a memory step; known: "
                         f"{', '.join(DEVICES)}")
    if device == "cuda":
        resolve_device(device, DEVICES)
    if device != "fake":
        yield device
        return
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        yield "cpu"


@dataclass(frozen=True)
class StepMemory:
    """The memory of one measured training step of a Transformer LM."""

    model: str
    batch: int
    seq_len: int
    device: str
    precision: str
    optimizer: str
    checkpointed: bool
    state: StateBytes
    saved: SavedActivations


def transformer_step_memory(config: TransformerConfig, batch: int, seq_len: int,
                            optimizer: str = "adamw", precision: str = "fp32",
                            device: str = "fake", checkpointed: bool = False) -> StepMemory:
    """Run one full training step of ``config`` and measure its state and saved activations.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> m = transformer_step_memory(get_preset("tiny"), 2, 16, "sgd", "fp32", "meta")
    >>> m.state.params_bytes == m.state.grads_bytes == 4 * m.state.n_params
    True
    """
    optimizer, precision = check_step(batch, seq_len, optimizer, precision)
    with step_device(device) as target:
        model, recipe, tokens, targets = prepare_step(config, batch, seq_len, optimizer,
                                                      precision, target, checkpointed)
        device_type = torch.device(target).type
        with recipe.autocast(device_type):
            saved, loss = saved_activations(model, lambda: lm_loss(model, tokens, targets))
        loss.backward()  # type: ignore[no-untyped-call]
    # Outside the fake mode: optimizers keep their step counters as real CPU scalars.
    recipe.step()
    state = measure_state(model, recipe)
    return StepMemory(model=config.name, batch=batch, seq_len=seq_len, device=device,
                      precision=precision, optimizer=optimizer, checkpointed=checkpointed,
                      state=state, saved=saved)
