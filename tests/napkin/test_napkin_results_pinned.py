"""What the napkin answers echo and refuse: every field of the result, the argument an error
names, rounding noise that must not add a device, and the deep network's kept tensors."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin import (
    bytes_per_param,
    devices_for_duration,
    devices_needed,
    flop_budget,
    largest_model,
    resolve_optimizer,
    resolve_precision,
    tensor_memory,
    training_time,
)
from tensorledger.napkin.activations import deep_network_activations

H100 = get_hardware("h100")
PEAK = 989.5e12


def test_results_echo_their_inputs() -> None:
    t = training_time(H100, 3, 0.4, params=2e9, tokens=5e9)
    assert (t.hardware, t.dtype, t.count, t.mfu, t.params, t.tokens) == (
        "h100-sxm", "bf16", 3, 0.4, 2e9, 5e9)
    assert t.flops == 6 * 2e9 * 5e9  # 6.0e19
    d = devices_for_duration(H100, 1000.0, 0.4, params=2e9, tokens=5e9)
    assert (d.hardware, d.dtype, d.mfu, d.duration_s, d.peak_flop_per_s) == (
        "h100-sxm", "bf16", 0.4, 1000.0, PEAK)
    assert d.flops == 6e19  # from params and tokens: 6 · 2e9 · 5e9
    b = flop_budget(H100, 3, 1000.0, 0.4)
    assert (b.hardware, b.dtype, b.count, b.duration_s, b.peak_flop_per_s) == (
        "h100-sxm", "bf16", 3, 1000.0, PEAK)
    n = devices_needed(H100, 15e9, "mixed-bf16", "adamw")
    assert (n.hardware, n.params, n.breakdown.total_bytes_per_param) == ("h100-sxm", 15e9, 16.0)
    assert "activations are excluded" in n.caveat
    assert [s.unit for s in n.steps] == ["bytes_per_param", "bytes", "devices"]


@pytest.mark.parametrize(("call", "name"), [
    (lambda: training_time(H100, 0, 0.5, flops=1e20), "count"),
    (lambda: training_time(H100, 1, 1.5, flops=1e20), "mfu"),
    (lambda: flop_budget(H100, 0, 10.0), "count"),
    (lambda: flop_budget(H100, 1, -1.0), "duration"),
    (lambda: flop_budget(H100, 1, 10.0, mfu=0.0), "mfu"),
    (lambda: devices_for_duration(H100, 0.0, 0.5, flops=1e20), "duration"),
    (lambda: devices_for_duration(H100, 10.0, 2.0, flops=1e20), "mfu"),
    (lambda: devices_needed(H100, -5.0, "fp32", "sgd"), "params"),
])
def test_errors_name_the_argument(call, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=f"^{name} must be"):
        call()


def test_flops_or_params_with_tokens_but_not_both() -> None:
    with pytest.raises(InputError, match="not both"):
        training_time(H100, 1, 0.5, flops=1e20, params=1e9)  # flops and half a pair
    with pytest.raises(InputError, match="not both"):
        training_time(H100, 1, 0.5, flops=1e20, tokens=1e9)
    with pytest.raises(InputError, match="give flops, or params and tokens"):
        training_time(H100, 1, 0.5, params=1e9)  # params without tokens
    with pytest.raises(InputError, match="give flops, or params and tokens"):
        devices_for_duration(H100, 10.0, 0.5, tokens=1e9)


def test_rounding_noise_does_not_add_a_device() -> None:
    # a million devices' worth plus one part in 1e12 (float noise, not work): 1e6 devices
    per_device = PEAK * 0.5 * 1000.0
    d = devices_for_duration(H100, 1000.0, 0.5, flops=1e6 * per_device * (1 + 1e-12))
    assert d.devices == 1_000_000
    # one part in 1e6 more is real work: one device more
    d = devices_for_duration(H100, 1000.0, 0.5, flops=1e6 * per_device * (1 + 1e-6))
    assert d.devices == 1_000_001
    n = devices_needed(H100, 5e15 * (1 + 1e-12), "mixed-bf16", "adamw")  # 16 B · 5e15 / 80e9
    assert n.devices == 1_000_000


@pytest.mark.parametrize(("activation", "checkpointed", "tensors"), [
    ("relu", False, 7 + 1),   # matmul inputs are the ReLU outputs, plus the last: L + 1
    ("gelu", False, 2 * 7),   # GELU keeps its own input too: 2·L
    ("relu", True, 7),        # each checkpointed block keeps its input: L
    ("gelu", True, 7),
])
def test_deep_network_kept_tensors(activation: str, checkpointed: bool, tensors: int) -> None:
    # L 7 blocks of D 5, batch 3: one tensor is B·D = 15 values
    kept = deep_network_activations(5, 7, 3, activation, checkpointed)
    assert (kept.activation, kept.checkpointed, kept.batch, kept.d_model, kept.n_layers) == (
        activation, checkpointed, 3, 5, 7)
    assert kept.kept_tensors == tensors
    assert kept.kept_values == tensors * 15
    assert kept.napkin_values == 7 * 15 == 105
    assert kept.kept_bytes == 4 * tensors * 15  # fp32 by default
    assert kept.napkin_bytes == 4 * 105
    assert kept.explanation
    half = deep_network_activations(5, 7, 3, activation, checkpointed, dtype_bytes=2)
    assert (half.kept_bytes, half.napkin_bytes) == (2 * tensors * 15, 2 * 105)


@pytest.mark.parametrize("name", ["d_model", "n_layers", "batch", "dtype_bytes"])
def test_deep_network_refuses_non_positive_sizes(name: str) -> None:
    sizes = {"d_model": 5, "n_layers": 7, "batch": 3, "dtype_bytes": 4} | {name: 0}
    with pytest.raises(InputError, match=f"^{name} must be"):
        deep_network_activations(sizes["d_model"], sizes["n_layers"], sizes["batch"], "relu",
                                 dtype_bytes=sizes["dtype_bytes"])
    with pytest.raises(InputError, match="unknown activation 'tanh'; known: relu, gelu"):
        deep_network_activations(5, 7, 3, "tanh")


def test_largest_model_tensor_memory_and_resolved_names() -> None:
    big = largest_model(H100, 3, "mixed-bf16", "adamw")
    assert (big.hardware, big.count, big.memory_bytes) == ("h100-sxm", 3, 3 * 80e9)
    assert big.params == 3 * 80e9 / 16  # 15e9
    assert big.breakdown.total_bytes_per_param == 16.0 and len(big.steps) == 3
    t = tensor_memory((3, 5, 7), "bf16")
    assert (t.shape, t.dtype, t.bits_per_element, t.elements, t.bytes) == (
        (3, 5, 7), "bf16", 16, 105, 210)
    # objects are taken as they are, names are resolved
    b = bytes_per_param(resolve_precision("bf16-master"), resolve_optimizer("adam8bit"))
    assert (b.precision, b.optimizer) == ("bf16-master", "adam8bit")
    assert b.total_bytes_per_param == 2 + 2 + 4 + 2 * 1 + 2 * 4 / 2048
