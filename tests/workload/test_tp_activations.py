"""What a tensor-parallel rank saves for backward, traced, against napkin's closed form for
the reference model under TP and TP + SP (activation_memory(..., tp, sequence_parallel)).

The memory ledger counts the token ids (8 bytes per token) as an input, not as a saved
activation; the closed form lists them with the embeddings, so the two differ by exactly 8·n.
Everything else agrees to the byte in fp32."""

from __future__ import annotations

import pytest

from tensorledger.ledger.memory import memory_of
from tensorledger.napkin import TransformerConfig
from tensorledger.napkin.activations import activation_memory
from tensorledger.napkin.transformer import get_preset
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout
from tensorledger.workload.source import ModelSource

B, S = 2, 16
N = B * S
TINY = get_preset("tiny")
#: GPT-style (LayerNorm, GELU, biases, tied embeddings) with RoPE, so SP can split the stream
GPT_LIKE = TransformerConfig(name="gpt-like", vocab_size=64, context_length=32, d_model=32,
                             n_layers=2, n_heads=4, positions="rope")


def _saved(config: TransformerConfig, precision: str, checkpoint: bool = False,
           **layout: int) -> tuple[int, int | None]:
    source = ModelSource(label=config.name, kind="preset", builder="reference",
                         name=config.name, config=config)
    work = resolve_workload(source, batch=B, seq=S, precision=precision, device="fake",
                            checkpoint=checkpoint, layout=resolve_layout(**layout))
    ledger = memory_of(trace_workload(work))
    closed = ledger.activations_closed_form
    return ledger.saved_activation_bytes, None if closed is None else closed.total_bytes


def test_tiny_tp2_by_hand() -> None:
    # fp32 (a = 4), n = 32 tokens, d 64, q 64, kv 32, d_ff 128, 4 heads, head_dim 16, V 128
    # per layer: norms 2 × (4·n·d + 4·n + 4·n·d + n·d·a) = 2 × 24,704 = 49,408 (whole)
    #   attention (q + k + v + out: n·(64 + 64 + 64)·4 = 24,576) / 2 + log-sum-exp 4·b·(4/2)·s
    #   = 256, + RoPE's cos and sin 2·s·16·4 = 2,048 (whole): 14,592
    #   SwiGLU 4·n·(128/2)·4 = 32,768
    per_layer = 49_408 + 14_592 + 32_768
    # outside: token ids 8·n = 256, the final norm 24,704, the loss n·V·4 + 8·n + 4 = 16,644
    total = 2 * per_layer + 256 + 24_704 + 16_644
    assert total == 235_140
    assert activation_memory(TINY, B, S, 4, tp=2).total_bytes == total
    saved, closed = _saved(TINY, "fp32", tp=2)
    assert closed == total and saved == total - 8 * N


def test_tiny_tp2_sp_by_hand() -> None:
    # each norm runs on n/2 = 16 tokens (4·16·64 + 4·16 + 4·16·64 = 8,256) and the projections
    # save its all-gathered output whole (n·d·4 = 8,192): 16,448 instead of 24,704
    per_layer = 2 * 16_448 + 14_592 + 32_768
    total = 2 * per_layer + 256 + 16_448 + 16_644
    assert total == 193_860
    saved, closed = _saved(TINY, "fp32", tp=2, sp=True)
    assert closed == total and saved == total - 8 * N


@pytest.mark.parametrize(("tp", "sp"), [(2, True), (4, True)])
def test_layernorm_model_exact_in_fp32(tp: int, sp: bool) -> None:
    saved, closed = _saved(GPT_LIKE, "fp32", tp=tp, sp=sp)
    assert closed is not None and saved == closed - 8 * N


def test_bf16_within_5_percent() -> None:
    # (bf16 LayerNorm keeps one fp32 statistic per token fewer than the closed form counts)
    saved, closed = _saved(GPT_LIKE, "bf16", tp=2, sp=True)
    assert closed is not None
    assert saved == pytest.approx(closed, rel=0.05)


@pytest.mark.parametrize("sp", [False, True])
def test_checkpointed_blocks_keep_their_input_split_by_sp(sp: bool) -> None:
    # a checkpointed layer keeps its input: n·d·4 = 8,192 whole, or n/2·d·4 = 4,096 under SP
    kept = 4_096 if sp else 8_192
    final_norm = 16_448 if sp else 24_704
    total = 2 * kept + 256 + final_norm + 16_644
    saved, closed = _saved(TINY, "fp32", checkpoint=True, tp=2, sp=sp)
    assert closed == total and saved == total - 8 * N


def test_tp_must_divide_the_heads_and_sp_the_sequence() -> None:
    from tensorledger.errors import InputError

    with pytest.raises(InputError, match="key/value heads"):
        activation_memory(TINY, B, S, 4, tp=4)
    with pytest.raises(InputError, match="sequence"):
        activation_memory(TINY, B, 15, 4, tp=2, sequence_parallel=True)


def test_tiny_under_autocast_by_hand() -> None:
    # mixed-bf16: fp32 weights and stream, bf16 compute; n = 32, d 64, a = 2
    # per layer: two RMSNorms of fp32 input + statistics + normalised input, no output:
    #   2 × (4·n·d + 4·n + 4·n·d) = 2 × 16,512 = 33,024
    # attention: q, k, v cast their input apart (3·n·d·2 = 12,288); SDPA keeps q, k, v and its
    #   output (n·(64 + 32 + 32 + 64)·2 = 12,288), log-sum-exp 4·b·4·s = 512, RoPE's four
    #   16-bit tables 4·16·16·2 = 2,048: 27,136
    # MLP: gate's and up's casts 2·n·d·2 = 8,192, SwiGLU's four n·d_ff tensors 4·n·128·2 =
    #   32,768: 40,960
    # the bf16 copies of the layer's matrices: 2 × (2·64·64 + 2·64·32 + 3·64·128) = 73,728
    per_layer = 33_024 + 27_136 + 40_960 + 73_728
    # outside: token ids 256, final norm 16,512, the head's input cast n·d·2 = 4,096 and weight
    # copy 128·64·2 = 16,384, the fp32 log-softmax n·V·4 = 16,384, targets 256, the scalar 4
    total = 2 * per_layer + 256 + 16_512 + 4_096 + 16_384 + 16_384 + 256 + 4
    assert total == 403_588
    saved, closed = _saved(TINY, "mixed-bf16")
    assert closed == total and saved == total - 8 * N


@pytest.mark.parametrize(("config", "layout", "checkpoint"), [
    (TINY, {"tp": 2, "sp": True}, False),
    (TINY, {"tp": 2}, True),
    (GPT_LIKE, {"tp": 2, "sp": True}, False),
    (GPT_LIKE, {}, True),
])
def test_autocast_is_exact_under_tp_sp_and_checkpointing(config: TransformerConfig,
                                                         layout: dict[str, int],
                                                         checkpoint: bool) -> None:
    saved, closed = _saved(config, "mixed-bf16", checkpoint, **layout)
    assert closed is not None and saved == closed - 8 * N
