"""The lecture's largest model with the activations of a stated batch and sequence beside it
(``napkin.fit``), and the tensor-parallel divisibility rule, against hand arithmetic."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin import largest_model, largest_model_with_activations, tp_indivisible
from tensorledger.napkin.transformer import TransformerConfig

H100 = get_hardware("h100")


def test_tp_indivisible_names_the_first_dimension() -> None:
    # heads 12, key/value heads 4, MLP 202, vocabulary 90: every size differs
    config = TransformerConfig(name="odd", vocab_size=90, context_length=32, d_model=48,
                               n_layers=2, n_heads=12, n_kv_heads=4, d_ff=202, mlp="swiglu",
                               norm="rmsnorm", positions="rope", tied_embeddings=False,
                               bias=False)
    assert tp_indivisible(config, 2) is None  # 12, 4, 202, 90 all even
    assert tp_indivisible(config, 3) == ("key/value heads", 4)
    assert tp_indivisible(config, 4) == ("MLP hidden width", 202)
    assert tp_indivisible(config, 9) == ("attention heads", 12)
    assert tp_indivisible(config, 8) == ("attention heads", 12)
    assert tp_indivisible(config, 5) == ("attention heads", 12)
    assert tp_indivisible(config, 1) is None
    assert tp_indivisible(dataclasses.replace(config, vocab_size=91), 2) == ("vocabulary", 91)


# ------------------------------------------------ the lecture's largest model, with activations

def test_lecture_largest_model_with_and_without_activations() -> None:
    # 8 × 80 GB = 640 GB at 12 bytes per parameter (lecture): 53.3e9 without activations
    bound = largest_model(H100, 8, "lecture", "adamw")
    assert bound.params == pytest.approx(640e9 / 12)
    fit = largest_model_with_activations(H100, 8, "lecture", "adamw", batch=8, seq_len=4096)
    assert fit.params_without_activations == bound.params
    # d = 128·L, 12·12·128²·L³ + 34·4096·8·128·L² = 640e9 → L ≈ 49.64, params ≈ 24.05e9
    L = fit.n_layers
    used = 12 * 12 * 128**2 * L**3 + 34 * 4096 * 8 * 128 * L**2
    assert used == pytest.approx(640e9)
    assert fit.params == pytest.approx(12 * L * (128 * L) ** 2)
    assert fit.params / 1e9 == pytest.approx(24.05, abs=0.01)
    assert fit.states_bytes + fit.activations_bytes == pytest.approx(640e9)
    # checkpointing every block keeps 2·s·B·d per layer instead of 34: between the two
    full = largest_model_with_activations(H100, 8, "lecture", "adamw", batch=8, seq_len=4096,
                                          checkpoint="full")
    assert fit.params < full.params < bound.params


def test_largest_model_with_activations_exact_case() -> None:
    # L = 10 exactly: 12·12·128²·10³ + 34·4096·8·128·10² = 2,359,296,000 + 14,260,633,600
    chip = dataclasses.replace(H100, memory_bytes=16_619_929_600.0)
    fit = largest_model_with_activations(chip, 1, "lecture", "adamw", batch=8, seq_len=4096)
    assert fit.n_layers == pytest.approx(10)
    assert fit.params == pytest.approx(12 * 10 * 1280**2)  # 196,608,000
    assert fit.activations_bytes == pytest.approx(14_260_633_600)
    with pytest.raises(InputError, match="not even one layer fits"):
        largest_model_with_activations(chip, 1, "lecture", "adamw", batch=8,
                                       seq_len=4096 * 1000)
