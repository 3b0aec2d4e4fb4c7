"""Prefill and decode with a model's own cache, on stand-ins (issue 42's mutation run of
``tensorledger.workload.inference``): a reference-like model that writes a
:class:`~tensorledger.models.cache.KVCache` with shapes that all differ, and a
transformers-like cache of layers, so each count below is worked out by hand."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from tensorledger.models.cache import KVCache
from tensorledger.workload import inference
from tensorledger.workload.inference import CacheLayerFacts, InferencePath, TracedCache

BATCH = 2
KEY_HEADS, KEY_DIM = 2, 3  # keys (b, 2, n, 3)
VALUE_HEADS, VALUE_DIM = 1, 5  # values (b, 1, n, 5): keys and values differ in every size


def _work(builder: str = "reference", decodes: bool = True, context: int | None = 3,
          seq: int = 4) -> Any:
    return SimpleNamespace(source=SimpleNamespace(builder=builder), batch=BATCH, seq=seq,
                           context=context, step=SimpleNamespace(decodes=decodes))


class _Reference(nn.Module):
    """Writes two layers (1 first, then 0) of the cache it is given and records each call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[int, ...], int, int]] = []

    def forward(self, tokens: torch.Tensor, cache: KVCache) -> None:
        self.calls.append((tuple(tokens.shape), int(tokens.abs().sum()), cache.length))
        n = tokens.shape[1]
        for index in (1, 0):
            cache.layer(index).update(torch.ones(BATCH, KEY_HEADS, n, KEY_DIM),
                                      torch.ones(BATCH, VALUE_HEADS, n, VALUE_DIM))
        cache.advance(n)


# ---- priming and starting a reference cache ---------------------------------------------------
def test_priming_writes_context_minus_one_tokens_then_one() -> None:
    model = _Reference()
    path = InferencePath(_work(context=3), model, "cpu")
    assert path.reference
    path.prime()
    # (b, 2) zeros at length 0, then (b, 1) zeros at length 2
    assert model.calls == [((BATCH, 2), 0, 0), ((BATCH, 1), 0, 2)]
    assert isinstance(path.primed, KVCache)
    assert path.primed.length == 3 and path.primed.capacity == 4  # context + 1
    assert path._tokens(5).dtype == torch.long


def test_a_context_of_one_is_primed_by_one_token_alone() -> None:
    model = _Reference()
    path = InferencePath(_work(context=1), model, "cpu")
    path.prime()
    assert model.calls == [((BATCH, 1), 0, 0)]  # no empty prompt before it


def test_a_context_of_two_is_primed_by_one_token_then_one() -> None:
    model = _Reference()
    path = InferencePath(_work(context=2), model, "cpu")
    path.prime()
    assert model.calls == [((BATCH, 1), 0, 0), ((BATCH, 1), 0, 1)]  # context − 1 = 1, then 1


def test_a_new_path_has_no_cache_yet_and_makes_tokens_on_its_device() -> None:
    path = InferencePath(_work(), _Reference(), "meta")
    assert path.cache is None and path.primed is None  # no step has run
    tokens = path._tokens(5)
    assert tokens.device.type == "meta" and tokens.shape == (BATCH, 5)


def test_a_decode_step_starts_from_the_primed_cache_rewound() -> None:
    model = _Reference()
    path = InferencePath(_work(context=3), model, "cpu")
    path.step(torch.zeros(BATCH, 1, dtype=torch.long))  # primes first
    primed = path.primed
    assert path.cache is primed and primed.length == 4  # 3 + the step's 1
    path.step(torch.zeros(BATCH, 1, dtype=torch.long), own=True)
    # the reference cache is rewound to 3 and written again (own changes nothing here)
    assert model.calls[-1] == ((BATCH, 1), 0, 3) and path.primed is primed
    assert len(model.calls) == 4  # primed once (2 calls), then 2 steps
    assert primed.length == 4


def test_a_prefill_starts_from_a_new_cache_of_the_prompt() -> None:
    model = _Reference()
    path = InferencePath(_work(decodes=False, context=None, seq=4), model, "cpu")
    path.cache = "the last step's"
    cache = path.start()
    assert isinstance(cache, KVCache) and cache.capacity == 4 and cache.length == 0
    assert path.cache is None and path.primed is None and model.calls == []
    assert path.before() == []  # a prefill starts from nothing


def test_before_is_the_primed_caches_tensors_layer_by_layer() -> None:
    path = InferencePath(_work(context=3), _Reference(), "cpu")
    tensors = path.before()  # primes
    primed = path.primed
    assert [t is s for t, s in zip(tensors, [primed.keys[0], primed.values[0], primed.keys[1],
                                             primed.values[1]], strict=True)] == [True] * 4
    assert path.before()[0] is tensors[0]  # not primed again


# ---- facts --------------------------------------------------------------------------------------
def test_facts_of_a_decode_step_on_the_reference_cache() -> None:
    path = InferencePath(_work(context=3), _Reference(), "cpu")
    path.step(torch.zeros(BATCH, 1, dtype=torch.long))
    facts = path.facts(bytes_before=11)
    # capacity 4 tokens: keys 2·2·4·3 = 48, values 2·1·4·5 = 40 elements; fp32: 192 + 160 = 352
    layer = CacheLayerFacts(index=0, kind="KVCache layer", key_shape=(2, 2, 4, 3),
                            value_shape=(2, 1, 4, 5), dtype="fp32", tokens=4,
                            tensor_bytes=352, storage_bytes=352)
    assert facts == TracedCache(cache_class="KVCache", context=3, tokens_after=4,
                                layers=(layer, CacheLayerFacts(**{**layer.__dict__, "index": 1})),
                                bytes_before=11)
    assert facts.storage_bytes == facts.tensor_bytes == 704  # 2 layers · 352
    assert facts.dtype == "fp32" and facts.kinds == {"KVCache layer": 2}


class _Layer:
    def __init__(self, keys: Any, values: Any) -> None:
        self.keys, self.values = keys, values


class _Dynamic:
    """transformers' DynamicCache as the path reads it: layers of keys and values."""

    def __init__(self, layers: list[Any], length: Any = 0) -> None:
        self.layers = layers
        self.length = length

    def get_seq_length(self) -> Any:
        return self.length


class _Sliding(_Layer):
    pass


def test_facts_of_a_layered_cache_count_a_shared_storage_once() -> None:
    whole = torch.zeros(2, 1, 6, 4, dtype=torch.bfloat16)  # 48 elements, 96 bytes
    keys, values = whole[:, :, :3], whole[:, :, 3:]  # views of one storage: 24 + 24 elements
    plain_k, plain_v = torch.zeros(1, 2, 3, dtype=torch.float16), torch.zeros(1, 2, 4,
                                                                               dtype=torch.float16)
    cache = _Dynamic([_Sliding(keys, values), _Layer(plain_k, plain_v), _Layer(None, plain_v),
                      SimpleNamespace(values=plain_v), SimpleNamespace(keys=plain_k)],
                     # the last two have no keys, no values at all
                     length=torch.tensor(9))
    path = InferencePath(_work(builder="transformers", context=None),
                         nn.Linear(1, 1), "cpu")
    path.cache = cache
    facts = path.facts(bytes_before=0)
    sliding, plain = facts.layers  # the layers without keys are left out
    # bf16 views: 24·2 + 24·2 = 96 tensor bytes, one storage of 96 bytes
    assert (sliding.kind, sliding.tokens, sliding.tensor_bytes, sliding.storage_bytes,
            sliding.dtype) == ("_Sliding", 3, 96, 96, "bf16")
    # fp16: 6·2 + 8·2 = 28 bytes, two storages of 12 and 16
    assert (plain.kind, plain.index, plain.tokens, plain.tensor_bytes, plain.storage_bytes,
            plain.key_shape, plain.value_shape) == ("_Layer", 1, 2, 28, 28, (1, 2, 3), (1, 2, 4))
    assert facts.cache_class == "_Dynamic" and facts.tokens_after == 9 and facts.context == 0
    assert facts.dtype == "bf16" and facts.kinds == {"_Sliding": 1, "_Layer": 1}
    assert facts.tensor_bytes == 96 + 28 and facts.storage_bytes == 96 + 28


def test_the_tensors_of_a_layered_cache_skip_what_is_not_a_tensor() -> None:
    k, v = torch.zeros(1), torch.zeros(2)
    cache = _Dynamic([_Layer(k, None), _Layer("x", v), SimpleNamespace()])
    path = InferencePath(_work(builder="transformers"), nn.Linear(1, 1), "cpu")
    found = path.tensors(cache)
    assert len(found) == 2 and found[0] is k and found[1] is v
    assert path.tensors(None) == []


def test_an_empty_cache_has_no_dtype_and_no_kinds() -> None:
    empty = TracedCache(cache_class="X", context=0, tokens_after=0, layers=(), bytes_before=0)
    assert empty.dtype == "" and empty.kinds == {} and empty.storage_bytes == 0


def test_dtype_names_are_the_houses_where_it_has_one() -> None:
    assert inference._dtype_name(torch.bfloat16) == "bf16"
    assert inference._dtype_name(torch.complex64) == "complex64"  # no house name: torch's


# ---- a transformers model's keywords and copies -----------------------------------------------
class _HFModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []

    def forward(self, input_ids: torch.Tensor, past_key_values: Any = None,
                use_cache: bool = False, logits_to_keep: int = 0) -> None:
        self.seen.append({"past_key_values": past_key_values, "use_cache": use_cache,
                          "logits_to_keep": logits_to_keep})


class _OwnCacheModel(nn.Module):
    """A model of its own cache keyword and no logits_to_keep."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []

    def forward(self, input_ids: torch.Tensor, cache: Any = None,
                use_cache: bool = False) -> None:
        self.seen.append({"cache": cache, "use_cache": use_cache})


def test_a_transformers_model_gets_its_cache_keyword_and_the_last_logits_alone() -> None:
    model = _HFModel()
    path = InferencePath(_work(builder="transformers"), model, "cpu")
    assert not path.reference
    path._forward(torch.zeros(1, 1, dtype=torch.long), "C")
    assert model.seen == [{"past_key_values": "C", "use_cache": True, "logits_to_keep": 1}]


def test_a_model_with_a_cache_keyword_and_no_logits_to_keep() -> None:
    model = _OwnCacheModel()
    path = InferencePath(_work(builder="transformers"), model, "cpu")
    path._forward(torch.zeros(1, 1, dtype=torch.long), "C")
    assert model.seen == [{"cache": "C", "use_cache": True}]


def test_a_decode_step_copies_the_primed_layers_unless_it_owns_them() -> None:
    path = InferencePath(_work(builder="transformers"), _HFModel(), "cpu")
    layer = _Layer(torch.zeros(1), torch.zeros(1))
    primed = _Dynamic([layer], length=3)
    path.primed = primed
    fresh = path.start()
    assert fresh is not primed and fresh.length == 3
    assert fresh.layers[0] is not layer and fresh.layers[0].keys is layer.keys
    assert primed.layers == [layer] and path.primed is primed  # the primed cache stays
    owned = path.start(own=True)
    assert owned is primed and path.primed is None  # primed again if run after that


def test_a_step_copies_the_primed_cache_unless_told_to_own_it() -> None:
    model = _HFModel()
    path = InferencePath(_work(builder="transformers"), model, "cpu")
    primed = _Dynamic([_Layer(torch.zeros(1), torch.zeros(1))], length=3)
    path.primed = primed
    path.step(torch.zeros(1, 1, dtype=torch.long))  # own is False unless told
    assert path.primed is primed and path.cache is not primed
    assert model.seen[-1]["past_key_values"] is path.cache
