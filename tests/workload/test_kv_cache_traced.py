"""Issue 39: the KV cache of a prefill and a decode step, traced on fake tensors, equals the bytes
of transformers' own cache tensors after a real CPU run of the same model, exactly — after the
prompt and after 16 decode steps — for full attention with GQA (Llama), sliding-window layers
(Mistral), hybrid layers (Gemma 2: local and global alternate) and DeepSeek-V3's MLA.

The oracle is a second code path: transformers' model and ``DynamicCache`` driven directly on
real CPU tensors (a generation loop: the prompt, then one token at a time), the bytes read off
the tensors it left.  B = 2 sequences, a prompt of S = 9 tokens, a window of W = 5, bf16 (the
inference steps' default precision): every per-token figure below is written out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorledger.memory.timeline import build_timeline
from tensorledger.napkin.kvcache import kv_cache, kv_layout_from_hf
from tensorledger.workload import StepTrace, resolve_workload, trace_workload
from tests.workload.hf_configs import MORE, TINY

pytest.importorskip("transformers")

B, S, W = 2, 9, 5
DECODED = 16  # tokens decoded after the prompt

#: A DeepSeek-V3-shaped config (MLA with a compressed query, routed and shared experts, the
#: first layer dense): kv_lora_rank 24, qk_rope_head_dim 8, every other width different.
DEEPSEEK_V3: dict[str, Any] = {
    "model_type": "deepseek_v3", "vocab_size": 97, "hidden_size": 40, "intermediate_size": 72,
    "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_routed_experts": 4, "n_shared_experts": 1,
    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
    "kv_lora_rank": 24, "q_lora_rank": 20, "qk_rope_head_dim": 8, "qk_nope_head_dim": 12,
    "v_head_dim": 10, "max_position_embeddings": 64, "tie_word_embeddings": False}

CONFIGS: dict[str, dict[str, Any]] = {
    "llama": TINY["llama"],
    "mistral": {**TINY["mistral"], "sliding_window": W},
    "gemma2": {**MORE["gemma2"], "sliding_window": W},  # layer 0 slides, layer 1 is global
    "deepseek_v3": DEEPSEEK_V3,
}

# Bytes one token adds to one layer of one sequence, bf16 (2 bytes):
#   llama, mistral, gemma2: key and value, 2 KV heads × head_dim 12: 2 · 2 · 12 · 2 = 96
#   deepseek_v3: the latent (24) as "keys" and the RoPE key (8) as "values": (24 + 8) · 2 = 64
PER_TOKEN_LAYER = {"llama": 96, "mistral": 96, "gemma2": 96, "deepseek_v3": 64}

# Tokens each layer's *storages* hold, and its *tensors* show, per sequence:
#   after the prompt: a sliding layer's tensors are the last W − 1 = 4 tokens, a view of the
#   torch.cat of the whole prompt (9), which it keeps alive;
#   after 16 decode steps (25 tokens seen): the view's storage is the last cat, W − 1 + 1 = 5.
STORAGE_TOKENS = {
    "llama": ((S, S), (S + DECODED,) * 2),
    "mistral": ((S, S), (W, W)),
    "gemma2": ((S, S), (W, S + DECODED)),
    "deepseek_v3": ((S, S), (S + DECODED,) * 2),
}
TENSOR_TOKENS = {
    "llama": ((S, S), (S + DECODED,) * 2),
    "mistral": ((W - 1, W - 1), (W - 1, W - 1)),
    "gemma2": ((W - 1, S), (W - 1, S + DECODED)),
    "deepseek_v3": ((S, S), (S + DECODED,) * 2),
}


def _hand(family: str, tokens: tuple[int, int]) -> int:
    return B * PER_TOKEN_LAYER[family] * sum(tokens)


# the hand figures, once: llama after the prompt 2 · 96 · 18 = 3,456; after 16 more
# 2 · 96 · 50 = 9,600; mistral 2 · 96 · 10 = 1,920 after 16 (8 tensors' tokens: 1,536);
# gemma2 2 · 96 · 30 = 5,760; deepseek_v3 2 · 64 · 50 = 6,400
assert _hand("llama", STORAGE_TOKENS["llama"][0]) == 3_456
assert _hand("llama", STORAGE_TOKENS["llama"][1]) == 9_600
assert _hand("mistral", STORAGE_TOKENS["mistral"][1]) == 1_920
assert _hand("mistral", TENSOR_TOKENS["mistral"][1]) == 1_536
assert _hand("gemma2", STORAGE_TOKENS["gemma2"][1]) == 5_760
assert _hand("deepseek_v3", STORAGE_TOKENS["deepseek_v3"][1]) == 6_400


def _config_file(folder: Path, family: str) -> Path:
    path = folder / family / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(CONFIGS[family]))
    return path


def _real_generation(family: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """transformers itself, real CPU tensors: the prompt, then DECODED tokens one at a time.
    (storage bytes, tensor bytes) of its cache after the prompt and after the last token."""
    import transformers

    raw = dict(CONFIGS[family])
    config = transformers.CONFIG_MAPPING[raw.pop("model_type")].from_dict(raw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    cache = transformers.DynamicCache(config=config)

    def held() -> tuple[int, int]:
        storages: dict[int, int] = {}
        shown = 0
        for layer in cache.layers:
            for tensor in (layer.keys, layer.values):
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
                shown += tensor.numel() * tensor.element_size()
        return sum(storages.values()), shown

    with torch.no_grad():
        model(torch.zeros(B, S, dtype=torch.long), cache=cache, use_cache=True)
        after_prompt = held()
        for _ in range(DECODED):
            model(torch.zeros(B, 1, dtype=torch.long), cache=cache, use_cache=True)
    return after_prompt, held()


def _traced(path: Path, step: str, **sizes: int) -> StepTrace:
    return trace_workload(resolve_workload(str(path), batch=B, step=step, **sizes))


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_traced_cache_equals_transformers_cache_after_prompt_and_16_tokens(
        tmp_path: Path, family: str) -> None:
    path = _config_file(tmp_path, family)
    prompt = _traced(path, "prefill", seq=S)
    # the step that brings the cache to S + 16 tokens: 24 cached, the 25th decoded
    decode = _traced(path, "decode", context=S + DECODED - 1)
    real_prompt, real_decoded = _real_generation(family)
    for run, real, at in ((prompt, real_prompt, 0), (decode, real_decoded, 1)):
        cache = run.cache
        assert cache is not None and run.work.device == "fake"
        storage, shown = real
        assert cache.storage_bytes == storage == _hand(family, STORAGE_TOKENS[family][at])
        assert cache.tensor_bytes == shown == _hand(family, TENSOR_TOKENS[family][at])
        # the memory ledger's category is the same storages, replayed from the trace
        end = build_timeline(run.trace, run.tags).points[-1]
        assert end.kv_cache_bytes == storage
        assert cache.dtype == "bf16"
    assert prompt.cache is not None and decode.cache is not None
    assert (prompt.cache.context, prompt.cache.tokens_after) == (0, S)
    assert (decode.cache.context, decode.cache.tokens_after) == (S + DECODED - 1, S + DECODED)


def test_layers_are_the_architectures_own(tmp_path: Path) -> None:
    kinds = {family: _traced(_config_file(tmp_path, family), "decode", context=12).cache
             for family in CONFIGS}
    assert {family: cache.kinds for family, cache in kinds.items() if cache} == {
        "llama": {"DynamicLayer": 2},
        "mistral": {"DynamicSlidingWindowLayer": 2},
        "gemma2": {"DynamicSlidingWindowLayer": 1, "DynamicLayer": 1},
        "deepseek_v3": {"DynamicLayer": 2},
    }
    # transformers 5 caches MLA compressed: the latent (kv_lora_rank 24) and the RoPE key (8),
    # one "head" shared by all four; not the decompressed keys (4 × (12 + 8)) and values (4 × 10)
    mla = kinds["deepseek_v3"]
    assert mla is not None
    assert [(layer.key_shape, layer.value_shape) for layer in mla.layers] == [
        ((B, 1, 13, 24), (B, 1, 13, 8))] * 2


def test_napkin_closed_form_equals_the_traced_cache(tmp_path: Path) -> None:
    """napkin.kvcache from the same config.json, for the tokens the cache holds after a decode
    step; after a prefill longer than the window transformers keeps the whole prompt's storage
    alive behind each sliding layer's view: napkin counts the window (W tokens), the trace the
    prompt (S)."""
    for family, raw in CONFIGS.items():
        run = _traced(_config_file(tmp_path, family), "decode", context=S + DECODED - 1)
        assert run.cache is not None
        layout = kv_layout_from_hf(raw, family)
        closed = kv_cache(layout, B, S + DECODED, "bf16").total_bytes
        assert closed == run.cache.storage_bytes, family
    mistral = _traced(tmp_path / "mistral" / "config.json", "prefill", seq=S)
    assert mistral.cache is not None
    layout = kv_layout_from_hf(CONFIGS["mistral"], "mistral")
    # 2 · 96 · (5 + 5) = 1,920 in napkin; the trace's storages 2 · 96 · (9 + 9) = 3,456
    assert kv_cache(layout, B, S, "bf16").total_bytes == 1_920
    assert mistral.cache.storage_bytes == 3_456


@pytest.mark.parametrize("preset", ["tiny", "gpt2"])
def test_reference_cache_equals_napkin_on_meta_and_real_cpu(preset: str) -> None:
    """The reference model's cache holds context + 1 tokens a layer from before the decode step
    (written in place): napkin's kv_cache of the same tokens, on meta and on real tensors;
    gpt2 (learned positions, MHA) beside tiny (RoPE, GQA)."""
    from tensorledger.napkin.kvcache import kv_layout
    from tensorledger.napkin.transformer import get_preset

    config = get_preset(preset)
    layout = kv_layout(config)
    for device in ("meta", "cpu") if preset == "tiny" else ("meta",):  # gpt2: 124M real weights
        decode = trace_workload(resolve_workload(preset, batch=3, step="decode", context=20,
                                                 device=device))
        prefill = trace_workload(resolve_workload(preset, batch=3, seq=21, step="prefill",
                                                  device=device))
        assert decode.cache is not None and prefill.cache is not None
        # both caches hold 21 tokens a sequence: 3 · 21 · 2 · n_layers · kv_dim · 2 bytes
        hand = 3 * 21 * 2 * config.n_layers * config.kv_dim * 2
        assert decode.cache.storage_bytes == prefill.cache.storage_bytes == hand
        assert kv_cache(layout, 3, 21, "bf16").total_bytes == hand
        # decode found its cache before the step, and writes the new token in place
        assert decode.cache.bytes_before == hand
        timeline = build_timeline(decode.trace, decode.tags)
        assert timeline.start.kv_cache_bytes == timeline.points[-1].kv_cache_bytes == hand


def test_reference_decode_attends_to_every_cached_token() -> None:
    """A decode step's attention reads the whole cache once: query 1 token, keys context + 1."""
    run = trace_workload(resolve_workload("tiny", batch=2, step="decode", context=30))
    attention = [r for r in run.trace.records if r.category == "attention"]
    assert attention and all(shape[2] == 31 for r in attention for shape in r.input_shapes[1:3])
    assert all(r.input_shapes[0][2] == 1 for r in attention)
    assert all(r.flops == r.flops_causal_halved for r in attention)  # not causal: all visible
