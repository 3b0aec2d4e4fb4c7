"""The per-block profile's arithmetic pinned by hand (issue 42's mutation run of
``tensorledger.ledger.profile``): ``measure_profile`` over made-up traced points (its tracing
replaced, so every figure below is worked from the points), and its helpers on small inputs."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from tensorledger.errors import ModelError
from tensorledger.ledger import profile as profile_module
from tensorledger.ledger.profile import (
    _block_module,
    _derive_checkpointed,
    _forward_excess,
    _Point,
    _tp_sizes,
    _width,
    layer_count,
    measure_profile,
    with_layers,
)
from tensorledger.plan.profile import Split
from tensorledger.workload.source import ModelSource, resolve_source

TINY = resolve_source("tiny")  # the reference preset: 2 blocks, d 64, 4 heads, 2 KV heads,
# MLP 128, vocabulary 128, rotary positions (no longest sequence)

# Each traced point is other + k · block at k blocks, by (tp, sp, checkpointed):
# saved bytes a token (other, block); bytes sent a token (other, block); collectives (other,
# block)
SAVED = {(1, False, False): (10.0, 40.0), (2, False, False): (6.0, 24.0),
         (1, False, True): (10.0, 8.0), (2, False, True): (6.0, 5.0),
         (2, True, False): (3.0, 12.0), (2, True, True): (3.0, 2.0)}
SENT = {(1, False, False): (0.0, 0.0), (1, False, True): (0.0, 0.0),
        (2, False, False): (30.0, 100.0), (2, False, True): (31.0, 125.0),
        (2, True, False): (20.0, 90.0), (2, True, True): (21.0, 110.0)}
CALLS = {(1, False, False): (0.0, 0.0), (1, False, True): (0.0, 0.0),
         (2, False, False): (1.0, 4.0), (2, False, True): (1.0, 5.0),
         (2, True, False): (1.0, 6.0), (2, True, True): (1.0, 7.0)}


PRECISIONS: list[str] = []  # the recipe each fake trace was asked for


def _fake_trace(refuse: Any = lambda tp, sp, checkpoint: False,
                embedding: float = 50.0, rest: tuple[float, float] = (60.0, 40.0)) -> Any:
    PRECISIONS.clear()

    def trace(source: ModelSource, seq_len: int, precision: str, tp: int, sp: bool,
              checkpoint: bool) -> _Point:
        PRECISIONS.append(precision)
        if refuse(tp, sp, checkpoint):
            raise ModelError("no such layout")
        k = (source.config.n_layers if source.config is not None
             else (source.hf_config or {}).get("num_hidden_layers", 1))
        key = (tp, sp, checkpoint)
        return _Point(
            # parameters: other 60 + 40/t (``rest``), each block 20 + 80/t
            params=rest[0] + rest[1] / tp + k * (20 + 80 / tp), embedding_params=embedding,
            flops=1000.0 + k * 500.0, forward_flops=300.0 + k * 200.0,
            largest_matmul=7.0 * k, saved=SAVED[key][0] + k * SAVED[key][1], temporary=3.0,
            sent=SENT[key][0] + k * SENT[key][1],
            collectives=CALLS[key][0] + k * CALLS[key][1])
    return trace


def test_a_preset_profile_from_its_points_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_module, "_trace", _fake_trace())
    said: list[str] = []
    profile = measure_profile(TINY, seq_len=32, precision="fp32", progress=said.append)
    assert said == [f"profiling tiny: {k} block{'s' if k > 1 else ''}, TP {tp}{extra}"
                    for tp, extra in ((1, ""), (1, ", checkpointed"), (2, ""),
                                      (2, ", checkpointed"), (2, " + SP"),
                                      (2, " + SP, checkpointed"))
                    for k in (1, 2)]
    assert profile.name == "tiny" and profile.precision == "fp32" and profile.seq_len == 32
    assert profile.source == ("traced (1 and 2 blocks, fake tensors, seq 32, fp32); "
                              "per block scaled to 2 blocks")
    assert profile.n_layers == 2 and profile.d_model == 64 and profile.vocab_size == 128
    assert profile.context_length == 1 << 24  # rotary positions: no longest sequence
    # a block: 100 parameters at one rank (20 + 80), 60 at two (20 + 40): whole 20, split 80;
    # the rest: 100 at one rank (60 + 40) and 80 at two: whole 60, split 40
    assert profile.block == Split(20.0, 80.0)
    # of the rest's 100 at one rank, 50 are embeddings: half of each part is the embedding's
    assert profile.embedding == Split(30.0, 20.0)
    assert profile.head == Split(30.0, 20.0)
    # FLOPs: 1,500 at one block, 2,000 at two: 500 a block, 1,000 the rest; forward 200, 300
    assert profile.block_flops_per_token == 500.0
    assert profile.other_flops_per_token == 1000.0
    assert profile.block_forward_flops_per_token == 200.0
    assert profile.other_forward_flops_per_token == 300.0
    assert profile.largest_matmul_flops_per_token == 7.0  # the one-block step's
    # saved, by (sequence parallel, checkpointed): Split.measured(one rank, two ranks), whole
    # = one − 2·(one − two), split = 2·(one − two)
    assert profile.block_saved == {
        (False, False): Split(8.0, 32.0),  # 40 and 24: split 32, whole 8
        (False, True): Split(2.0, 6.0),  # 8 and 5
        (True, False): Split(-16.0, 56.0),  # 40 (no SP at one rank) and 12
        (True, True): Split(-4.0, 12.0),  # 8 and 2
    }
    assert profile.other_saved == {False: Split(2.0, 8.0),  # 10 and 6
                                   True: Split(-4.0, 14.0)}  # 10 and 3
    # sent and collectives a block at two ranks, and the rest's sent without checkpointing
    assert profile.tp_sent_per_token == {(False, False): 100.0, (False, True): 125.0,
                                         (True, False): 90.0, (True, True): 110.0}
    assert profile.tp_collectives == {(False, False): 4.0, (False, True): 5.0,
                                      (True, False): 6.0, (True, True): 7.0}
    assert profile.other_tp_sent_per_token == {False: 30.0, True: 20.0}
    assert profile.loss_temporaries == {}  # a preset's loss is priced from its vocabulary
    assert profile.tp_sizes == (("attention heads", 4), ("key/value heads", 2),
                                ("MLP hidden width", 128), ("vocabulary", 128))
    assert profile.tensor_parallel and profile.sequence_parallel and not profile.whole
    assert profile.checkpoints == ("none", "full") and profile.notes == ()
    assert PRECISIONS == ["fp32"] * 12  # every point traced in the recipe asked for


def test_layouts_the_model_refuses_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # no tensor parallelism and no checkpointing traced: the checkpointed block is derived
    monkeypatch.setattr(profile_module, "_trace",
                        _fake_trace(lambda tp, sp, checkpoint: tp > 1 or checkpoint))
    said: list[str] = []
    profile = measure_profile(TINY, seq_len=32, precision="fp32", progress=said.append)
    # one and two blocks: plain, checkpointed (refused), TP 2 (refused); nothing more tried
    assert said == [f"profiling tiny: {k} block{'s' if k > 1 else ''}, TP {tp}{extra}"
                    for tp, extra in ((1, ""), (1, ", checkpointed"), (2, ""))
                    for k in (1, 2)]
    assert profile.block == Split(100.0)  # 100 a block at one rank, nothing measured split
    assert not profile.tensor_parallel and not profile.sequence_parallel
    assert profile.tp_sizes == () and profile.tp_sent_per_token == {}
    # derived: a block keeps its input, d = 64 values of 4 bytes (fp32) a token
    assert profile.block_saved == {(False, False): Split(40.0), (False, True): Split(256.0)}
    assert profile.checkpoints == ("none", "full")
    assert profile.notes == (
        "checkpoint full derived, not traced (the workload checkpoints the reference model's "
        "blocks only): a block keeps its input, d values a token in the stream's dtype, and "
        "recomputes its first tensor-parallel all-reduce",)


def test_tensor_parallel_but_no_checkpointing_derives_its_traffic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_module, "_trace",
                        _fake_trace(lambda tp, sp, checkpoint: checkpoint))
    profile = measure_profile(TINY, seq_len=32, precision="fp32")
    # the recomputed forward redoes one of its two all-reduces: 5/4 of 100 B and of 4 calls
    assert profile.tp_sent_per_token == {(False, False): 100.0, (False, True): 125.0,
                                         (True, False): 90.0}
    assert profile.tp_collectives == {(False, False): 4.0, (False, True): 5.0,
                                      (True, False): 6.0}
    assert (True, True) not in profile.block_saved
    assert profile.sequence_parallel


def test_no_tensor_parallelism_tries_no_checkpointed_or_sequence_parallel_ranks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_module, "_trace", _fake_trace(lambda tp, sp, checkpoint: tp > 1))
    said: list[str] = []
    profile = measure_profile(TINY, seq_len=32, precision="fp32", progress=said.append)
    # plain and checkpointed at one rank, TP 2 tried and refused: nothing beyond it
    assert said == [f"profiling tiny: {k} block{'s' if k > 1 else ''}, TP {tp}{extra}"
                    for tp, extra in ((1, ""), (1, ", checkpointed"), (2, ""))
                    for k in (1, 2)]
    assert set(profile.block_saved) == {(False, False), (False, True)}


def test_a_layout_the_model_refuses_at_one_rank_speaks(monkeypatch: pytest.MonkeyPatch) -> None:
    # the model's own step (one rank, no checkpointing) is not a layout to leave out
    monkeypatch.setattr(profile_module, "_trace",
                        _fake_trace(lambda tp, sp, checkpoint: tp == 1 and not checkpoint))
    with pytest.raises(ModelError):
        measure_profile(TINY, seq_len=32, precision="fp32")


def test_a_factory_is_profiled_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_module, "_trace", _fake_trace())
    factory = ModelSource(label="own.py:make", kind="factory", builder="factory", name="make")
    said: list[str] = []
    profile = measure_profile(factory, seq_len=32, precision="fp32", progress=said.append)
    assert said == ["profiling make: 1 block, TP 1"]  # as built, nothing else tried
    assert profile.tp_sent_per_token == {} and profile.tp_collectives == {}
    assert profile.block_saved == {(False, False): Split(50.0)}  # 10 + 1 · 40, built as is
    assert profile.other_tp_sent_per_token == {} and not profile.sequence_parallel
    # one point, at one block: the whole model is "a block" (200 parameters: 100 + 100)
    assert profile.block == Split(200.0) and profile.embedding == Split(0.0, 0.0)
    assert profile.head == Split(0.0, 0.0)
    assert profile.block_flops_per_token == 1500.0 and profile.other_flops_per_token == 0.0
    assert profile.loss_temporaries == {False: Split(3.0)}  # its own loss's, as traced
    assert profile.n_layers == 1 and profile.whole and profile.checkpoints == ("none",)
    assert profile.d_model == 0 and profile.vocab_size == 0  # no config to read them from
    assert profile.source == "traced (as built, fake tensors, seq 32, fp32)"
    assert profile.notes == ("make is profiled whole (a factory builds its own layer count): "
                             "one part, no pipeline, no tensor parallelism",)


def test_a_derived_checkpoint_keeps_the_blocks_input() -> None:
    # mixed-bf16 streams fp32 under autocast: 8 values × 4 B = 32 B a token; the recomputed
    # forward sends 5/4: 400 → 500 B, 8 → 10 calls
    saved: dict[tuple[bool, bool], Split] = {}
    sent = {(False, False): 400.0}
    calls = {(False, False): 8.0}
    _derive_checkpointed(saved, sent, calls, 8, "mixed-bf16")
    assert saved == {(False, True): Split(32.0)}
    assert sent == {(False, False): 400.0, (False, True): 500.0}
    assert calls == {(False, False): 8.0, (False, True): 10.0}
    # bf16-master streams its parameters' 2 B; no tensor parallelism: nothing sent
    saved, sent, calls = {}, {}, {}
    _derive_checkpointed(saved, sent, calls, 8, "bf16-master")
    assert saved == {(False, True): Split(16.0)} and sent == {} and calls == {}


def test_the_forwards_excess_over_its_saved_tensors() -> None:
    def point(phase: str, saved: int, temporary: int) -> Any:
        return SimpleNamespace(phase=phase, saved_activation_bytes=saved,
                               temporary_bytes=temporary)

    # forward highs: 10 + 5 = 15 and 30 + 2 = 32; it ends with 30 saved: 2 beyond; the
    # backward's 200 is not the forward's
    points = [point("forward", 10, 5), point("forward", 30, 2), point("backward", 100, 100)]
    assert _forward_excess(points) == 2.0
    assert _forward_excess([point("backward", 100, 100)]) == 0.0


def test_a_block_module_is_one_with_an_index() -> None:
    assert _block_module("transformer.h.0.attn")
    assert not _block_module("transformer.wte") and not _block_module("lm_head")


def _hf(raw: dict[str, Any], builder: str = "transformers", config: Any = None) -> ModelSource:
    return ModelSource(label="config.json", kind="config", builder=builder,  # type: ignore[arg-type]
                       name="m", config=config, hf_config=raw)


def test_layer_count_of_each_source() -> None:
    assert layer_count(TINY) == 2
    # built by the reference model, its own config's count, whatever a config.json beside it
    assert layer_count(_hf({"n_layer": 5}, builder="reference", config=TINY.config)) == 2
    assert layer_count(_hf({"n_layer": 6})) == 6
    # a bool is no count; the reference config's count then
    assert layer_count(_hf({"num_hidden_layers": True}, config=TINY.config)) == 2
    assert layer_count(_hf({"num_hidden_layers": True})) is None
    # a config.json built by transformers with a reference config beside it: the file's
    assert layer_count(_hf({"num_layers": 5}, config=TINY.config)) == 5
    assert layer_count(ModelSource(label="f", kind="factory", builder="factory",
                                   name="f")) is None


def test_with_layers_cuts_only_longer_layer_lists() -> None:
    source = _hf({"n_layers": 4, "layer_types": ["a", "b", "c", "d"], "layer_x": ["a"],
                  "other": [1, 2, 3, 4]})
    built = with_layers(source, 2)
    assert built.hf_config == {"n_layers": 2, "layer_types": ["a", "b"], "layer_x": ["a"],
                               "other": [1, 2, 3, 4]}
    assert source.hf_config is not None and source.hf_config["n_layers"] == 4  # a copy
    assert with_layers(TINY, 1).config is not None
    assert with_layers(TINY, 1).hf_config is None  # a preset has no config.json
    assert dataclasses.replace(TINY.config, n_layers=1) == with_layers(TINY, 1).config
    with pytest.raises(ModelError, match="no layer count field"):
        with_layers(_hf({"hidden_size": 8}), 1)
    # a factory's config without a count is left as it is
    assert with_layers(_hf({"hidden_size": 8}, builder="factory"), 1).hf_config == {
        "hidden_size": 8}


def test_tensor_parallel_sizes_and_widths_of_a_config_json() -> None:
    qwen = _hf({"num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 352,
                "vocab_size": 520, "hidden_size": 96})
    assert _tp_sizes(qwen) == (("attention heads", 8), ("key/value heads", 2),
                               ("MLP hidden width", 352), ("vocabulary", 520))
    # GPT-2's names; n_inner None (not a number) is left out, as are missing fields
    gpt2 = _hf({"n_head": 12, "n_inner": None, "vocab_size": 100, "n_embd": 48})
    assert _tp_sizes(gpt2) == (("attention heads", 12), ("vocabulary", 100))
    # the MLP's width by GPT-2's and OPT's names
    assert _tp_sizes(_hf({"n_inner": 3072})) == (("MLP hidden width", 3072),)
    assert _tp_sizes(_hf({"ffn_dim": 2048})) == (("MLP hidden width", 2048),)
    assert _width(qwen, "hidden", 0) == 96 and _width(qwen, "vocab", 0) == 520
    assert _width(gpt2, "hidden", 0) == 48
    assert _width(_hf({"d_model": 32}), "hidden", 0) == 32  # T5's and OPT's name
    assert _width(_hf({"d_model": "wide"}), "hidden", 7) == 7  # not a number: the fallback
    assert _width(TINY, "hidden", 0) == 64 and _width(TINY, "vocab", 0) == 128


def test_a_checkpointed_sequence_parallel_step_refused_is_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_module, "_trace",
                        _fake_trace(lambda tp, sp, checkpoint: sp and checkpoint))
    profile = measure_profile(TINY, seq_len=32, precision="fp32")
    assert set(profile.block_saved) == {(False, False), (False, True), (True, False)}
    assert (True, True) not in profile.tp_sent_per_token


def test_embeddings_beyond_the_rest_are_the_whole_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    # 150 parameters named as embeddings beside a rest of 100 at one rank: the share is 1
    monkeypatch.setattr(profile_module, "_trace", _fake_trace(embedding=150.0))
    profile = measure_profile(TINY, seq_len=32, precision="fp32")
    assert profile.embedding == Split(60.0, 40.0) and profile.head == Split(0.0, 0.0)


def test_a_rest_of_no_parameters_at_one_rank_holds_no_embedding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the rest: 40 − 40/t, 0 at one rank and 20 at two: Split.measured(0, 20) is whole 40,
    # split −40.  With no parameters at one rank to share out, none are the embedding's, however
    # the two ranks split them (50 named as embeddings or not)
    monkeypatch.setattr(profile_module, "_trace", _fake_trace(rest=(40.0, -40.0)))
    profile = measure_profile(TINY, seq_len=32, precision="fp32")
    assert profile.embedding == Split(0.0, 0.0)
    assert profile.head == Split(40.0, -40.0)


def test_a_config_json_without_a_width_derives_no_checkpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # no reference config (no checkpointed trace) and no hidden size: nothing to derive from
    monkeypatch.setattr(profile_module, "_trace", _fake_trace())
    profile = measure_profile(_hf({"num_hidden_layers": 2}), seq_len=32, precision="fp32")
    assert profile.checkpoints == ("none",) and profile.notes == ()
    assert profile.d_model == 0 and profile.vocab_size == 0 and not profile.sequence_parallel
