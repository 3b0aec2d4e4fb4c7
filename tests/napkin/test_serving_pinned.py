"""Serving on a napkin pinned by hand on a made-up chip (mutation, issue 42): flat efficiencies
(matmuls at the peak, attention at half of it, streaming at 0.8 of the bandwidth) so every
figure is a few products.  Model: d 20, 4 heads of 6 (q 24), 2 KV heads (kv 12), d_ff 36
SwiGLU, vocab 50 untied, 3 layers, RoPE; 4 chips in groups of tp 2; context 10."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware.chip import Efficiency, Hardware
from tensorledger.napkin.kvcache import kv_layout, resolve_cache_dtype
from tensorledger.napkin.serving import _attention_rate, serving
from tensorledger.napkin.transformer import TransformerConfig

CONFIG = TransformerConfig(vocab_size=50, context_length=16, d_model=20, n_layers=3, n_heads=4,
                           n_kv_heads=2, head_dim=6, d_ff=36, mlp="swiglu", norm="rmsnorm",
                           positions="rope", tied_embeddings=False, bias=False, name="made-up")
CHIP = Hardware(id="napkin-chip", name="napkin chip", memory_bytes=60_000,
                memory_bandwidth_bytes_per_s=1e10, dense_flop_per_s={"bf16": 1e11},
                efficiency=Efficiency(matmul={}, attention=0.5, memory_bandwidth=0.8,
                                      op_overhead_s=0.0))


def _serve(**kwargs: object):  # type: ignore[no-untyped-def]
    return serving(CONFIG, kv_layout(CONFIG), CHIP, count=4, tp=2, context=10,  # type: ignore[arg-type]
                   memory_utilization=0.5, block_size=4, **kwargs)


def test_weights_budget_and_the_largest_batch() -> None:
    s = _serve()
    # embedding 50·20 = 1,000; a layer 20·24 + 2·20·12 + 24·20 + 3·20·36 + 2·20 = 3,640;
    # the final norm 20, the head 1,000: 1,000 + 3·3,640 + 20 + 1,000
    assert s.params == 12_940
    assert s.matmul_params == 11_800  # 3·(20·48 + 24·20 + 3·20·36) + 50·20 = 3·3,600 + 1,000
    assert s.weights_bytes == 25_880  # 12,940 · 2 B
    assert s.weights_bytes_per_chip == 12_940  # / tp 2
    assert s.streamed_weights_bytes_per_chip == 11_940  # (12,940 − the table 1,000)·2 / 2
    assert s.usable_bytes_per_chip == 30_000  # 60,000 · 0.5
    # 10 tokens (the context, under the 8,192 chunk) · (20 + 24 + 2·12 + 2·36) · 2 B / 2
    assert s.activation_reserve_bytes == 1_400
    assert s.kv_budget_bytes_per_chip == 15_660  # 30,000 − 12,940 − 1,400
    assert s.kv_bytes_per_token == 144  # K and V · 3 layers · 2 heads · 6 · 2 B
    # 10 tokens in 3 pages of 4 = 12 tokens · 144 = 1,728, one of the two KV heads a chip
    assert s.kv_bytes_per_sequence_per_chip == 864
    assert s.max_batch == 18  # 15,660 // 864 (18·864 = 15,552)
    assert s.max_sequences == 36  # 18 · 2 replicas
    assert type(s.replicas) is int and type(s.max_sequences) is int  # whole groups
    assert (s.model, s.hardware, s.count, s.tp, s.replicas) == ("made-up", "napkin-chip", 4, 2, 2)
    assert (s.weights_format, s.weights_description) == ("bf16", "bf16")
    assert s.kv_dtype == resolve_cache_dtype("bf16").name
    assert s.attention == kv_layout(CONFIG).attention
    assert (s.context, s.memory_utilization, s.block_size) == (10, 0.5, 4)
    assert (s.peak_flop_per_s, s.bandwidth_bytes_per_s) == (1e11, 1e10)
    assert s.expected_bandwidth_bytes_per_s == pytest.approx(8e9)  # 1e10 · 0.8


def test_ridges_and_the_batches_drawn() -> None:
    s = _serve()
    # streamed 11,940 · peak 1e11 / (2·11,800 / 2 FLOPs a token · 1e10)
    assert s.ridge_batch == pytest.approx(11_940 / 1_180)
    # a sequence: 11,800 + attention 3 layers · 4·24·10 / 2 = 1,440 FLOPs, which hide
    # 13,240 · 0.1 = 1,324 bytes, less its 1,440 · 1/2 = 720 read: 604 a sequence
    assert s.ridge_batch_at_context == pytest.approx(11_940 / 604)
    # to 2 · max(18, ⌈10.1⌉) = 36: the powers of two to 32, and the largest batch
    assert [row.batch for row in s.rows] == [1, 2, 4, 8, 16, 18, 32]
    assert [row.fits for row in s.rows] == [True] * 6 + [False]


def test_decode_and_prefill_rows() -> None:
    s = _serve()
    one, last = s.row(1), s.row(32)
    assert one.decode_bytes == 12_660  # 11,940 + 720
    assert one.decode_flops == 13_240  # 11,800 + 1,440
    assert one.decode_memory_s == pytest.approx(12_660 / 8e9)
    assert one.decode_compute_s == pytest.approx(11_800 / 1e11 + 1_440 / 5e10)  # 1.468e-7
    assert one.tpot_s == one.decode_memory_s
    assert one.bound == "memory"
    assert one.tokens_per_s_per_chip == pytest.approx(8e9 / 12_660 / 2)
    assert one.tokens_per_s_per_user == pytest.approx(8e9 / 12_660)
    # prefill of 10 tokens: 118,000 / 1e11 + 3 layers · 4·24·(10²/2) / 2 / 5e10 = 1.324e-6,
    # under the bytes' 12,660 / 8e9
    assert one.ttft_s == pytest.approx(12_660 / 8e9)
    assert last.decode_bytes == 34_980  # 11,940 + 32·720
    assert last.decode_flops == 32 * 13_240
    assert last.decode_memory_s == pytest.approx(34_980 / 8e9)  # 4.3725e-6
    assert last.decode_compute_s == pytest.approx(32 * 1.468e-7)  # 4.6976e-6
    assert last.bound == "compute"
    assert last.tpot_s == last.decode_compute_s
    assert last.tokens_per_s_per_chip == pytest.approx(32 / (32 * 1.468e-7) / 2)
    assert last.ttft_s == pytest.approx(32 * (1.18e-6 + 1.44e-7))  # compute-bound: 4.2368e-5
    assert [step.value for step in s.steps] == pytest.approx(
        [12_940, 30_000, 1_400, 15_660, 864, 18, 12_660, 12_660 / 8e9, 11_940 / 1_180])
    assert s.notes[0] == "weights: bf16"
    assert s.notes[1].startswith("left out: tensor-parallel communication, scheduling and "
                                 "sampling, the framework's own memory (CUDA context, graphs), "
                                 "a quantized format's error (the precision lab's "
                                 "`tensorledger quantize` measures it)")
    assert s.notes[2] == ("activation reserve assumed: one prefill chunk of 10 tokens through "
                          "the widest layer (a serving engine profiles its own)")


def test_attention_rate_by_what_the_chip_knows() -> None:
    assert _attention_rate(CHIP, "bf16", 1e6) == pytest.approx(5e10)  # half the peak
    bare = dataclasses.replace(CHIP, efficiency=None)
    assert _attention_rate(bare, "bf16", 1e6) == 1e11  # the peak
    no_fraction = dataclasses.replace(CHIP, efficiency=dataclasses.replace(
        CHIP.efficiency, attention=None))  # type: ignore[type-var]
    assert _attention_rate(no_fraction, "bf16", 1e6) == 1e11  # the matmul fraction, 1 here
    probed = dataclasses.replace(CHIP, curves={"attention.bf16": ((1.0, 3e10), (1e12, 3e10))})
    assert _attention_rate(probed, "bf16", 1e6) == pytest.approx(3e10)  # the probed curve


# GPT-2's kind (TransformerConfig's defaults): GELU, LayerNorm, 16 learned positions, the head
# tied to the embedding; the same widths as CONFIG
LEARNED = TransformerConfig(vocab_size=50, context_length=16, d_model=20, n_layers=3, n_heads=4,
                            n_kv_heads=2, head_dim=6, d_ff=36, bias=False, name="learned")


def test_a_tied_gelu_model_streams_its_head_and_gathers_its_positions() -> None:
    s = serving(LEARNED, kv_layout(LEARNED), CHIP, count=4, tp=2, context=16,
                memory_utilization=0.5, block_size=4)
    # tables 50·20 + 16·20 = 1,320; a layer 1,440 + 2·20·36 + 2·20 = 2,920; final norm 20
    assert s.params == 10_100  # 1,320 + 3·2,920 + 20
    assert s.matmul_params == 9_640  # 3·(960 + 480 + 2·720) + the tied head 1,000
    assert s.streamed_weights_bytes_per_chip == 9_780  # (10,100 − positions 320)·2 / 2


def test_defaults_one_chip_bf16_the_whole_context_in_pages_of_16() -> None:
    s = serving(CONFIG, kv_layout(CONFIG), CHIP)
    assert (s.count, s.tp, s.replicas, s.context, s.block_size) == (1, 1, 1, 16, 16)
    assert (s.weights_format, s.kv_dtype, s.memory_utilization) == (
        "bf16", resolve_cache_dtype("bf16").name, 0.9)
    # 54,000 − 25,880 − 16·140·2 = 23,640; a sequence 16 tokens · 144 = 2,304
    assert s.kv_budget_bytes_per_chip == pytest.approx(23_640)
    assert s.max_batch == 10  # 23,640 // 2,304
    assert s.max_sequences == 10


def test_edges_that_are_allowed() -> None:
    whole = serving(CONFIG, kv_layout(CONFIG), CHIP, context=10, memory_utilization=1.0)
    assert whole.usable_bytes_per_chip == 60_000
    one = serving(CONFIG, kv_layout(CONFIG), CHIP, context=1, block_size=1)
    assert one.kv_bytes_per_sequence_per_chip == 144  # one token, one page
    full = serving(LEARNED, kv_layout(LEARNED), CHIP, context=16)  # the whole table
    assert full.context == 16


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"count": 1, "tp": 2}, r"--tp must be from 1 to --count \(1\), got 2"),
    ({"tp": 0}, r"--tp must be from 1 to --count \(1\), got 0"),
    ({"memory_utilization": 1.5}, r"--memory-utilization must be in \(0, 1\], got 1.5"),
    ({"memory_utilization": 0.0}, r"--memory-utilization must be in \(0, 1\], got 0.0"),
    ({"block_size": 0}, "--block-size must be from 1 to 1048576, got 0"),
    ({"block_size": (1 << 20) + 1}, "--block-size must be from 1 to 1048576, got 1048577"),
    # allowed, but one page is 144 MiB
    ({"block_size": 1 << 20}, "a context of 16 tokens fits no batch"),
    ({"context": 0}, "--context must be 1 or more tokens, got 0"),
])
def test_refusals_name_what_was_wrong(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=f"^{message}"):
        serving(CONFIG, kv_layout(CONFIG), CHIP, **kwargs)  # type: ignore[arg-type]


def test_a_learned_table_caps_the_context() -> None:
    with pytest.raises(InputError, match=r"^--context 17 is longer than learned's table of 16 "
                                         "learned positions$"):
        serving(LEARNED, kv_layout(LEARNED), CHIP, context=17)


def test_a_chip_without_the_arithmetic_is_refused_by_name() -> None:
    with pytest.raises(InputError, match=r"^napkin-chip has no fp8 arithmetic for fp8 "
                                         "weights; it lists: bf16$"):
        serving(CONFIG, kv_layout(CONFIG), CHIP, weights_dtype="fp8", context=10)
    fp8_only = dataclasses.replace(CHIP, dense_flop_per_s={"fp8": 1e11})
    with pytest.raises(InputError, match=r"^napkin-chip has no bf16 arithmetic for bf16 "
                                         "activations and attention; it lists: fp8$"):
        serving(CONFIG, kv_layout(CONFIG), fp8_only, weights_dtype="fp8", kv_dtype="fp8",
                context=10)


def _on(memory: float = 60_000, bandwidth: float = 1e10, peak: float = 1e11,
        efficiency: bool = True):  # type: ignore[no-untyped-def]
    chip = dataclasses.replace(CHIP, memory_bytes=memory, memory_bandwidth_bytes_per_s=bandwidth,
                               dense_flop_per_s={"bf16": peak},
                               efficiency=CHIP.efficiency if efficiency else None)
    return serving(CONFIG, kv_layout(CONFIG), chip, count=4, tp=2, context=10,
                   memory_utilization=0.5, block_size=4)


def test_the_budget_at_its_edges() -> None:
    # 28,680 · 0.5 = 14,340 = weights 12,940 + reserve 1,400: nothing left
    with pytest.raises(InputError, match="leave no room for a KV cache"):
        _on(memory=28_680)
    with pytest.raises(InputError, match="fits no batch"):  # half a byte left
        _on(memory=28_681)
    assert _on(memory=30_408).max_batch == 1  # 15,204 − 14,340 = 864: one sequence exactly
    # 56,328 · 0.5 − 14,340 = 13,824 = 16 sequences; reach 2·max(16, ⌈10.1⌉) = 32, drawn
    assert [row.batch for row in _on(memory=56_328).rows] == [1, 2, 4, 8, 16, 32]


def test_the_ridge_at_context_at_its_edges() -> None:
    # a sequence's 13,240 FLOPs hide 13,240 · 720 / 13,240 = 720 bytes, all it reads: never
    assert _on(bandwidth=720, peak=13_240).ridge_batch_at_context is None
    # 720.5 hide half a byte more: 11,940 / 0.5
    assert _on(bandwidth=720.5, peak=13_240).ridge_batch_at_context == pytest.approx(23_880)


def test_a_tie_is_memory_bound() -> None:
    # no efficiencies: 12,660 B / 12,660 B/s = 1 s and (11,800 + 1,440) / 13,240 = 1 s
    row = _on(bandwidth=12_660, peak=13_240, efficiency=False).row(1)
    assert row.decode_memory_s == row.decode_compute_s == 1.0
    assert row.bound == "memory"


def _probed(points: tuple[tuple[float, float], ...]) -> Hardware:
    """Matmul rates probed by size (log-log between the points, flat beyond), attention at a
    flat 5e10, streaming at a flat 8e9: a size off a point gets another rate."""
    return dataclasses.replace(CHIP, curves={"matmul.bf16": points,
                                             "attention.bf16": ((1.0, 5e10),),
                                             "bandwidth": ((1.0, 8e9),)})


def test_matmul_rates_are_read_at_the_widest_matmuls_size() -> None:
    chip = _probed(((360, 1e9), (720, 1e10), (7_200, 2e10), (72_000, 1e11)))
    s = serving(CONFIG, kv_layout(CONFIG), chip, count=4, tp=2, context=10,
                memory_utilization=0.5, block_size=4)
    assert s.expected_bandwidth_bytes_per_s == 8e9
    one = s.row(1)
    # decode: the SwiGLU projections, 2·1·20·36 / 2 = 720 FLOPs, at 1e10; attention at 5e10
    assert one.decode_compute_s == pytest.approx(11_800 / 1e10 + 1_440 / 5e10)
    assert one.decode_memory_s == pytest.approx(12_660 / 8e9)
    # prefill: 2·10·20·36 / 2 = 7,200 at 2e10: 118,000 / 2e10 + 7,200 / 5e10
    assert one.ttft_s == pytest.approx(5.9e-6 + 1.44e-7)
    # batch 2: 1,440 FLOPs, log-log between 720 (1e10) and 7,200 (2e10): 1e10·2^(log 2/log 10)
    rate = 1e10 * 2 ** (math.log(2) / math.log(10))
    assert s.row(2).decode_compute_s == pytest.approx(2 * 11_800 / rate + 2 * 1_440 / 5e10)


def test_a_gelu_models_widest_matmul_is_twice_d_ff() -> None:
    chip = _probed(((720, 1e9), (1_440, 1e10), (14_400, 2e10), (144_000, 1e11)))
    s = serving(LEARNED, kv_layout(LEARNED), chip, count=4, tp=2, context=10,
                memory_utilization=0.5, block_size=4)
    one = s.row(1)
    # 2·1·20·(2·36) / 2 = 1,440 at 1e10: 9,640 / 1e10 + 1,440 / 5e10
    assert one.decode_compute_s == pytest.approx(9.64e-7 + 2.88e-8)
    # 2·10·20·72 / 2 = 14,400 at 2e10: 96,400 / 2e10 + 7,200 / 5e10
    assert one.ttft_s == pytest.approx(4.82e-6 + 1.44e-7)
    # GELU's one hidden width: 10 tokens · (20 + 24 + 24 + 36) · 2 B / 2
    assert s.activation_reserve_bytes == 1_040


def test_kv_heads_split_by_whole_heads() -> None:
    s = serving(CONFIG, kv_layout(CONFIG), CHIP, count=4, tp=4, context=10,
                memory_utilization=0.5, block_size=4)
    # 2 KV heads on 4 chips: each holds one whole head, half of 1,728
    assert s.kv_bytes_per_sequence_per_chip == 864
    assert s.row(1).decode_bytes == pytest.approx(11_940 / 2 + 720)  # half the weights


def test_an_fp8_cache_reads_half_the_bytes() -> None:
    chip = dataclasses.replace(CHIP, dense_flop_per_s={"bf16": 1e11, "fp8": 2e11})
    s = serving(CONFIG, kv_layout(CONFIG), chip, count=4, tp=2, context=10,
                memory_utilization=0.5, block_size=4, kv_dtype="fp8")
    assert s.row(1).decode_bytes == 12_300  # 11,940 + 10 tokens · 72 B / 2


def test_one_sequence_draws_to_twice_the_ridge() -> None:
    # max_batch 1, ridge ⌈10.1⌉ = 11: to 22
    assert [row.batch for row in _on(memory=30_408).rows] == [1, 2, 4, 8, 16]


def test_every_chip_holds_and_reads_the_whole_mla_latent() -> None:
    from tensorledger.napkin import get_kv_layout, get_preset

    chip = dataclasses.replace(CHIP, memory_bytes=1e13, dense_flop_per_s={"bf16": 1e15})
    s = serving(get_preset("deepseek-v3"), get_kv_layout("deepseek-v3"), chip, count=8, tp=8,
                context=128)
    assert s.attention == "mla"
    # 61 layers · (latent 512 + RoPE key 64) · 2 B = 70,272 a token, 128 tokens (8 pages)
    assert s.kv_bytes_per_sequence_per_chip == 128 * 70_272
    assert s.row(1).decode_bytes == pytest.approx(s.streamed_weights_bytes_per_chip
                                                  + 128 * 70_272)


def test_sliding_layers_prefill_within_their_window() -> None:
    layout = dataclasses.replace(kv_layout(CONFIG), windows=(4, None, 4))
    s = serving(CONFIG, layout, CHIP, count=4, tp=2, context=10, memory_utilization=0.5,
                block_size=4)
    # pairs: a window of 4 over 10 tokens 4²/2 + 6·4 = 32, full 10²/2 = 50: 32 + 50 + 32 = 114;
    # attention 4·24·114 / 2 = 5,472 FLOPs a prompt; 32 prompts, compute-bound:
    # 32·(118,000 / 1e11 + 5,472 / 5e10) = 32·(1.18e-6 + 1.0944e-7)
    assert s.row(32).ttft_s == pytest.approx(32 * 1.28944e-6)


def test_a_chips_share_of_an_odd_byte_count_rounds_up_to_whole_bytes() -> None:
    # 6 heads (TP 2 divides them) over 3 KV heads of width 3, one layer, an fp6 cache:
    # K and V are 2 · 3 · 3 = 18 elements a token, 18 · 6 bits = 13.5 bytes → 14 a sequence
    # of one token; a chip holds ⌈3 / 2⌉ = 2 of the 3 KV heads: ⌈14 · 2 / 3⌉ = ⌈9.33⌉ = 10
    odd = TransformerConfig(vocab_size=50, context_length=16, d_model=20, n_layers=1,
                            n_heads=6, n_kv_heads=3, head_dim=3, d_ff=36, mlp="swiglu",
                            norm="rmsnorm", positions="learned", tied_embeddings=False,
                            bias=False, name="odd")
    chip = dataclasses.replace(CHIP, dense_flop_per_s={"bf16": 1e11, "fp6": 2e11})
    s = serving(odd, kv_layout(odd), chip, count=2, tp=2, context=1, block_size=1,
                kv_dtype="fp6_e3m2")
    assert s.kv_bytes_per_token == 14
    assert s.kv_bytes_per_sequence_per_chip == 10 and isinstance(
        s.kv_bytes_per_sequence_per_chip, int)
    # weights: 50·20 + 16·20 + (20·18 + 2·20·9 + 18·20 + 3·20·36 + 2·20) + 20 + 50·20
    # = 5,620 parameters, · 2 B / TP 2 = 5,620 B; the reserve 1 token · (20 + 18 + 2·9 +
    # 2·36) · 2 B / 2 = 128; the budget 60,000 · 0.9 − 5,620 − 128 = 48,252
    assert s.kv_budget_bytes_per_chip == 48_252
    assert s.max_batch == 4_825  # 48,252 // 10
