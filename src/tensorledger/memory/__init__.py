"""Memory of a training step: per-parameter state under a precision recipe, what autograd
saves for backward, and (from a trace) the live-memory timeline and its peak.

This package imports torch; the closed forms it is checked against live in
:mod:`tensorledger.napkin.recipes` and :mod:`tensorledger.napkin.activations`.
"""

from __future__ import annotations

from tensorledger.memory.optimizers import Adam8bit, Lion, make_optimizer, state_tensors
from tensorledger.memory.precision import RecipeOptimizer, param_dtype
from tensorledger.memory.saved import ModuleSaved, SavedActivations, SavedTensor, saved_activations
from tensorledger.memory.state import STATE_CATEGORIES, StateBytes, classify_state, measure_state
from tensorledger.memory.storage import storage_bytes, storage_key

__all__ = [
    "STATE_CATEGORIES",
    "Adam8bit",
    "Lion",
    "ModuleSaved",
    "RecipeOptimizer",
    "SavedActivations",
    "SavedTensor",
    "StateBytes",
    "classify_state",
    "make_optimizer",
    "measure_state",
    "param_dtype",
    "saved_activations",
    "state_tensors",
    "storage_bytes",
    "storage_key",
]
