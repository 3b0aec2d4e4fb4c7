"""The largest model with activations: each count refused by name, and an answer between one
and √3 layers, where a search bounded by anything below the no-activation root would miss it
(mutation, issue 42)."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.fit import largest_model, largest_model_with_activations

H100 = get_hardware("h100")  # 80e9 bytes


@pytest.mark.parametrize("name", ["count", "batch", "seq_len", "aspect"])
def test_a_zero_count_is_refused_by_name(name: str) -> None:
    args: dict[str, int] = {"count": 1, "batch": 1, "seq_len": 1, "aspect": 128, name: 0}
    count = args.pop("count")
    with pytest.raises(InputError, match=f"^{name} must be a whole number from 1"):
        largest_model_with_activations(H100, count, "fp32", "adamw",
                                       **args)  # type: ignore[arg-type]


def test_an_answer_of_one_and_a_half_layers() -> None:
    # fp32 + AdamW: 16 bytes a parameter; 12·L·d² parameters with d = 11,111·L:
    # 16 · 12 · 11,111² · L³ = 80e9 → L³ = 3.37509… → L = 1.500010 without activations;
    # one token's activations only lower it, and by less than 1e-5
    got = largest_model_with_activations(H100, 1, "fp32", "adamw", batch=1, seq_len=1,
                                         aspect=11_111)
    assert 1.49999 < got.n_layers < 1.500010


def test_every_field_carries_what_was_asked() -> None:
    upper = largest_model(H100, 8, "lecture", "adamw")
    got = largest_model_with_activations(H100, 8, "lecture", "adamw", batch=3, seq_len=512,
                                         checkpoint="full", aspect=100, experts=2, top_k=1)
    assert (got.hardware, got.count, got.memory_bytes) == ("h100-sxm", 8, 8 * 80e9)
    assert got.breakdown == upper.breakdown
    assert got.params_without_activations == upper.params
    assert (got.batch, got.seq_len, got.checkpoint, got.aspect) == (3, 512, "full", 100)
    assert (got.experts, got.top_k) == (2, 1)
    assert got.d_model == 100 * got.n_layers  # aspect · L
    assert got.active_params is not None  # two experts are a mixture
    assert got.steps[0].value == 8 * 80e9
    dense = largest_model_with_activations(H100, 8, "lecture", "adamw", batch=3, seq_len=512)
    assert (dense.experts, dense.active_params) == (1, None)


@pytest.mark.parametrize("name", ["experts", "top_k"])
def test_a_zero_routing_count_is_refused_by_name(name: str) -> None:
    routing = {"experts": 2, "top_k": 1, name: 0}
    with pytest.raises(InputError, match=f"^{name} must be a whole number from 1"):
        largest_model(H100, 8, "lecture", "adamw", **routing)


def test_two_experts_are_a_mixture_and_one_is_dense() -> None:
    assert largest_model(H100, 8, "lecture", "adamw", experts=2, top_k=1).active_params
    assert largest_model(H100, 8, "lecture", "adamw").active_params is None


def test_the_top_k_is_carried() -> None:
    got = largest_model_with_activations(H100, 8, "lecture", "adamw", batch=3, seq_len=512,
                                         experts=4, top_k=2)
    assert (got.experts, got.top_k) == (4, 2)


def test_exactly_one_layer_fits_when_the_memory_is_used_to_the_byte() -> None:
    # fp32 + AdamW, 16 bytes a parameter; d = 20,000·L, 12·L·d² parameters; checkpoint full
    # keeps 2 bytes an element of the layer input: 2 · 8,000 · 10 · 20,000 · L² bytes.
    # At L = 1: 16 · 12 · 20,000² = 76.8e9 bytes of state + 3.2e9 of activations = 80e9,
    # the H100's memory to the byte (every term exact in a float), so the search ends on
    # L = 1.0 itself (used(1) <= memory), and one layer is a model, not a refusal
    got = largest_model_with_activations(H100, 1, "fp32", "adamw", batch=10, seq_len=8_000,
                                         checkpoint="full", aspect=20_000)
    assert got.n_layers == 1.0
    assert got.params == 12 * 20_000**2  # 4.8e9
