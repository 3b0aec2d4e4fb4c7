"""Issue 39, item 3: serving capacity on a napkin, each figure derived by hand beside it."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin import get_preset, kv_layout
from tensorledger.napkin.serving import serving

H100 = get_hardware("h100")
LLAMA3_8B = get_preset("llama-3-8b")


def _serve(model: str = "llama-3-8b", hardware: str = "h100", **kwargs: object):  # type: ignore[no-untyped-def]
    config = get_preset(model)
    return serving(config, kv_layout(config), get_hardware(hardware), **kwargs)  # type: ignore[arg-type]


def test_llama3_8b_decode_at_batch_1_is_memory_bound_at_weights_plus_cache_over_bandwidth() -> None:
    result = _serve(context=8192)
    row = result.row(1)
    assert row.bound == "memory"
    # weights streamed: every parameter but the embedding table (a gather), bf16
    params = 8_030_261_248  # Llama-3-8B, the closed form (Meta: "8B")
    table = 128256 * 4096  # 525,336,576
    weights = (params - table) * 2  # 15,009,849,344 bytes
    cache = 8192 * (2 * 32 * 8 * 128 * 2)  # 8192 tokens · 131,072 B = 1,073,741,824
    bandwidth = 3.35e12 * 0.85  # datasheet × the expected streaming fraction = 2.8475e12 B/s
    by_hand = (weights + cache) / bandwidth  # 16,083,591,168 / 2.8475e12 = 5.648 ms
    assert row.tpot_s == pytest.approx(by_hand, rel=0.05)
    assert row.tpot_s == pytest.approx(5.648e-3, rel=1e-3)
    assert row.decode_compute_s < row.decode_memory_s
    assert row.tokens_per_s_per_user == pytest.approx(1 / row.tpot_s)


def test_ridge_batch_for_bf16_weights_is_peak_over_bandwidth() -> None:
    result = _serve()
    by_hand = 989.5e12 / 3.35e12  # 295.37: bf16 2 bytes/param / 2 FLOPs/param = 1
    assert result.ridge_batch == pytest.approx(by_hand, rel=0.05)
    # fp8 weights: half the bytes at twice the peak → peak_fp8 / bw × 1/2 = the same ridge
    fp8 = _serve(weights_dtype="fp8")
    assert fp8.ridge_batch == pytest.approx(1979e12 / 3.35e12 / 2, rel=0.05)
    # int4 weight-only (bf16 matmuls): 4.125 bits → peak / bw × 0.515625 / 2 ≈ 76
    int4 = _serve(weights_dtype="int4")
    assert int4.ridge_batch == pytest.approx(989.5e12 / 3.35e12 * (4.125 / 8) / 2, rel=0.05)


def test_at_long_context_decode_never_turns_compute_bound() -> None:
    # a sequence adds 1.07 GB of cache a step and 2·N + 4·L·s·q_dim ≈ 20.3 GFLOPs, which hide
    # 20.3e9 / 295 ≈ 69 MB: the cache's bytes win at every batch
    assert _serve(context=8192).ridge_batch_at_context is None
    short = _serve(context=128)
    assert short.ridge_batch_at_context is not None
    assert short.ridge_batch < short.ridge_batch_at_context < 2 * short.ridge_batch
    assert any(row.bound == "compute" for row in short.rows if row.fits)


def test_kv_budget_and_largest_batch() -> None:
    result = _serve(context=8192)
    usable = 80e9 * 0.9  # 72 GB
    weights = 8_030_261_248 * 2  # 16.06 GB
    reserve = 8192 * (4096 + 4096 + 2 * 1024 + 2 * 14336) * 2  # 637,534,208 B
    budget = usable - weights - reserve  # 55.30 GB
    assert result.kv_budget_bytes_per_chip == pytest.approx(budget)
    per_sequence = 8192 * 131072  # 8192 is a whole number of 16-token blocks
    assert result.kv_bytes_per_sequence_per_chip == per_sequence
    assert result.max_batch == int(budget // per_sequence) == 51
    # fp8 cache: half the bytes, twice the sequences (or one more, from the remainder)
    assert _serve(context=8192, kv_dtype="fp8").max_batch == int(budget // (per_sequence / 2))


def test_tensor_parallel_splits_weights_and_kv_heads() -> None:
    result = _serve("llama-3-70b", count=8, tp=4, context=8192)
    assert result.replicas == 2
    assert result.weights_bytes_per_chip == pytest.approx(70_553_706_496 * 2 / 4)
    # 8 KV heads over 4 chips: 2 heads a chip, a quarter of 327,680 B a token
    assert result.kv_bytes_per_sequence_per_chip == 8192 * 327_680 // 4
    assert result.max_sequences == 2 * result.max_batch


def test_prefill_is_compute_bound_and_scales_with_the_batch() -> None:
    result = _serve(context=4096)
    one, two = result.row(1), result.row(2)
    # 2 · N_matmul · 4096 tokens ≈ 2 · 7.5e9 · 4096 = 6.2e13 FLOPs at 0.80 of 989.5 TFLOP/s
    assert one.ttft_s > 2 * 7.5e9 * 4096 / 989.5e12
    assert two.ttft_s == pytest.approx(2 * one.ttft_s, rel=0.05)


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"context": 1_000_000}, "fits no batch"),
    ({"kv_dtype": "fp8", "hardware": "a100"}, "no fp8 arithmetic for a fp8_e4m3fn KV cache"),
    ({"weights_dtype": "nvfp4"}, "no fp4 arithmetic"),
    ({"model": "llama-3-70b"}, "leave no room for a KV cache"),
    ({"tp": 3, "count": 3}, "does not divide"),
    ({"tp": 2, "count": 3}, "multiple of --tp"),
    ({"weights_dtype": "int3"}, "unknown weights dtype"),
    ({"kv_dtype": "bool"}, "not stored as bool"),
])
def test_refusals(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        _serve(**kwargs)  # type: ignore[arg-type]
