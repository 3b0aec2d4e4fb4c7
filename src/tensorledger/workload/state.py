"""The per-parameter state of a training step, measured on the real tensors.

After ``backward`` and ``optimizer.step()`` (before gradients are dropped) a step holds four
kinds of per-parameter tensors: the parameters, their gradients, the master copy of 16-bit
weights, and the optimizer state.  Each storage is counted once, in that order of precedence,
so a tied embedding/head weight counts once as a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from tensorledger.trace.storage import storage_bytes, storage_key
from tensorledger.workload.precision import RecipeOptimizer

__all__ = ["STATE_CATEGORIES", "StateBytes", "classify_state", "measure_state", "state_after_step"]

STATE_CATEGORIES = ("parameter", "gradient", "master", "optimizer_state")


@dataclass(frozen=True)
class StateBytes:
    """Bytes of the tensors that live across steps, by kind, measured on a model."""

    precision: str
    optimizer: str
    n_params: int
    n_tensors: int
    params_bytes: int
    grads_bytes: int
    master_bytes: int
    optimizer_bytes: int
    total_bytes: int


def classify_state(model: nn.Module, optimizer: RecipeOptimizer
                   ) -> dict[int, tuple[str, int]]:
    """Storage key → (category, bytes) for every parameter, gradient, master copy and
    optimizer state tensor; each storage under its first category in STATE_CATEGORIES."""
    groups: tuple[tuple[str, Iterable[torch.Tensor]], ...] = (
        ("parameter", (p for p in model.parameters())),
        ("gradient", (p.grad for p in model.parameters() if p.grad is not None)),
        ("master", optimizer.master_tensors()),
        ("optimizer_state", optimizer.state_tensors()),
    )
    found: dict[int, tuple[str, int]] = {}
    for category, tensors in groups:
        for tensor in tensors:
            found.setdefault(storage_key(tensor), (category, storage_bytes(tensor)))
    return found


def measure_state(model: nn.Module, optimizer: RecipeOptimizer) -> StateBytes:
    """Parameters, gradients, master and optimizer state of ``model`` as they are now."""
    totals = dict.fromkeys(STATE_CATEGORIES, 0)
    for category, nbytes in classify_state(model, optimizer).values():
        totals[category] += nbytes
    params = list(dict.fromkeys(model.parameters()))
    return StateBytes(precision=optimizer.precision.name, optimizer=optimizer.optimizer_name,
                      n_params=sum(p.numel() for p in params), n_tensors=len(params),
                      params_bytes=totals["parameter"], grads_bytes=totals["gradient"],
                      master_bytes=totals["master"], optimizer_bytes=totals["optimizer_state"],
                      total_bytes=sum(totals.values()))


def state_after_step(model: nn.Module, optimizer: str, precision: str) -> StateBytes:
    """Give every parameter of ``model`` a gradient of its own dtype (as backward would), run
    one real optimizer step under ``precision`` and measure the state; no forward is needed
    for the per-parameter tensors, so this is quick on the meta device."""
    recipe = RecipeOptimizer(model.parameters(), optimizer, precision)
    for p in recipe.params:
        p.grad = torch.zeros_like(p)
    recipe.step()
    state = measure_state(model, recipe)
    recipe.zero_grad()
    return state
