"""Context parallelism's closed form pinned field by field (mutation, issue 42), on a model
where every size differs: 6 query heads, 2 key/value heads, head 10 (q_dim 60 ≠ d_model 48),
3 layers, batch 3, sequence 24."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.napkin.activations import activation_memory
from tensorledger.napkin.context import context_parallel_rank
from tensorledger.napkin.transformer import TransformerConfig

MODEL = TransformerConfig(name="cp", vocab_size=100, context_length=64, d_model=48,
                          n_layers=3, n_heads=6, n_kv_heads=2, head_dim=10, d_ff=40,
                          mlp="swiglu", norm="rmsnorm", positions="rope",
                          tied_embeddings=False, bias=False)


def test_every_field_of_a_rank_under_tensor_parallelism() -> None:
    ring = context_parallel_rank(MODEL, batch=3, seq_len=24, cp=2, dtype_bytes=2, tp=2,
                                 autocast=True, sequence_parallel=True)
    assert ring.cp == 2
    assert ring.tokens_per_rank == 36  # 3 · 24 / 2
    assert ring.exchanged_heads == 1  # 2 kv heads / tp 2
    assert ring.kv_buffer_bytes == 1440  # 2 · 3 · 1 · 12 · 10 · 2
    assert ring.grad_buffer_bytes == 2880  # 2 · 3 · 1 · 12 · 10 · 4 (fp32)
    assert ring.forward_sent_bytes == 4320  # 3 layers · (2 − 1) · 1440
    assert ring.backward_sent_bytes == 21600  # 3 · ((2 − 1) · 1440 + 2 · 2880)
    assert ring.sent_bytes == 25920  # 4320 + 21600
    # c = 24 / (2 · 2) = 6: 3 layers · 2 blocks · 8 · 3 · (6 / 2 heads) · 6² · 10
    assert ring.attention_flops == 155520
    acts = activation_memory(MODEL, 3, 12, 2, False, tp=2, sequence_parallel=True,
                             autocast=True)
    assert ring.activations == acts
    assert ring.ring_copy_bytes == 6480  # 3 layers · 36 tokens · (60 / 2) · 2
    assert ring.targets_kept_bytes == 288  # 8 · 3 · (24 − 12)
    assert ring.saved_activation_bytes == acts.total_bytes + 6480 + 288


def test_the_defaults_are_bf16_one_way_tp_no_autocast_kv_heads_not_checkpointed() -> None:
    plain = context_parallel_rank(MODEL, batch=3, seq_len=24, cp=3)
    assert plain == context_parallel_rank(MODEL, batch=3, seq_len=24, cp=3, dtype_bytes=2,
                                          tp=1, autocast=False, repeated_kv=False,
                                          checkpointed=False, sequence_parallel=False)
    assert plain.exchanged_heads == 2  # the kv heads
    assert plain.kv_buffer_bytes == 1920  # 2 · 3 · 2 · 8 · 10 · 2
    assert plain.activations == activation_memory(MODEL, 3, 8, 2, False)
    assert plain.ring_copy_bytes == 8640  # 3 layers · 24 tokens · 60 · 2


def test_repeated_kv_exchanges_the_query_heads() -> None:
    ring = context_parallel_rank(MODEL, batch=1, seq_len=8, cp=2, dtype_bytes=4,
                                 repeated_kv=True)
    assert ring.exchanged_heads == 6
    assert ring.kv_buffer_bytes == 1920  # 2 · 1 · 6 · 4 · 10 · 4


def test_checkpointed_blocks_save_no_copy() -> None:
    ring = context_parallel_rank(MODEL, batch=3, seq_len=24, cp=2, checkpointed=True)
    acts = activation_memory(MODEL, 3, 12, 2, True)
    assert ring.activations == acts
    assert ring.ring_copy_bytes == 0
    assert ring.saved_activation_bytes == acts.total_bytes + 288  # targets 8 · 3 · 12


def test_one_rank_sends_nothing_forward_and_copies_nothing() -> None:
    ring = context_parallel_rank(MODEL, batch=1, seq_len=4, cp=1, dtype_bytes=2)
    assert ring.forward_sent_bytes == 0  # (1 − 1) · K
    assert ring.backward_sent_bytes == 3 * 1 * ring.grad_buffer_bytes  # layers · cp · G
    assert ring.ring_copy_bytes == 0
    assert ring.targets_kept_bytes == 0  # 8 · 1 · (4 − 4)


@pytest.mark.parametrize(("change", "message"), [
    ({"batch": 0}, "batch must be a whole number >= 1, got 0"),
    ({"batch": True}, "batch must be a whole number >= 1, got True"),
    ({"seq_len": 0}, "seq_len must be a whole number >= 1, got 0"),
    ({"cp": 0}, "cp must be a whole number >= 1, got 0"),
    ({"tp": 0}, "tp must be a whole number >= 1, got 0"),
    # 10 tokens do not cut into 2 · cp = 4 chunks
    ({"seq_len": 10}, "context parallelism of 2 cuts the sequence into 4 chunks; 10 does not "
                      "divide by 4"),
])
def test_a_refused_rank_names_its_input(change: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"batch": 1, "seq_len": 8, "cp": 2, "tp": 1, **change}
    with pytest.raises(InputError, match=f"^{message}$"):
        context_parallel_rank(MODEL, **args)  # type: ignore[arg-type]


def test_counts_stay_whole_and_sequence_parallelism_is_off_by_default() -> None:
    ring = context_parallel_rank(MODEL, batch=3, seq_len=24, cp=2, tp=2)
    assert ring == context_parallel_rank(MODEL, batch=3, seq_len=24, cp=2, tp=2,
                                         sequence_parallel=False)
    assert ring.activations == activation_memory(MODEL, 3, 12, 2, False, tp=2)
    # whole numbers of FLOPs and bytes, as every formula here returns
    assert type(ring.attention_flops) is int
    assert type(ring.ring_copy_bytes) is int
