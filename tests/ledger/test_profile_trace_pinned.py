"""The figures ``_trace`` of ``tensorledger.ledger.profile`` takes from one traced step, pinned
by hand (issue 42's mutation run: the tests that trace a real model's profile run over 5 s).

A one-block reference model and three small factories (tests/ledger/profile_models.py), each
traced once at a few tokens: the parameters and products counted from the widths, the saved
bytes from the napkin closed form (:func:`~tensorledger.napkin.activations.activation_memory`),
the tensor-parallel traffic from the collectives the Megatron plan makes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tensorledger.ledger.profile import _trace
from tensorledger.napkin.activations import activation_memory
from tensorledger.workload.source import ModelSource, resolve_source

TINY = resolve_source("tiny")
assert TINY.config is not None
# one block; every width differs: d 16, 4 heads of 6 (24 ≠ d), 2 KV heads (12), SwiGLU's 20,
# vocabulary 40, rotary positions; untied, no biases, RMSNorm
CONFIG = dataclasses.replace(TINY.config, n_layers=1, d_model=16, n_heads=4, n_kv_heads=2,
                             head_dim=6, d_ff=20, vocab_size=40)
ONE_BLOCK = dataclasses.replace(TINY, config=CONFIG)
SEQ = 10  # one sequence of 10 tokens (a reference model's batch is 1)
FACTORIES = Path(__file__).resolve().parent / "profile_models.py"


def _factory(name: str) -> ModelSource:
    return resolve_source(f"{FACTORIES}:{name}")


def test_a_one_block_reference_point_by_hand() -> None:
    point = _trace(ONE_BLOCK, SEQ, "fp32", 1, False, False)
    # parameters: embedding 40·16 = 640; q 16·24 = 384, k and v 16·12 = 192 each, output 384
    # (attention 1,152); gate, up and down 16·20 = 320 each (960); head 640; three norms 3·16
    assert 640 + 1_152 + 960 + 640 + 48 == 3_440
    assert point.params == 3_440.0
    assert point.embedding_params == 640.0  # the part named "embeddings"
    # forward products a token: 2 · (1,152 + 960 + 640) = 5,504; attention's two (q·kᵀ and
    # a·v) of 2 · 10 positions · 24 each: 960 a token, halved (causal): 480
    assert point.forward_flops == 5_504 + 480 == 5_984
    # the backward's products twice the forward's, and attention's backward twice its forward
    # (3 · 480): 3 · 5,504 + 1,440
    assert point.flops == 3 * 5_504 + 3 * 480 == 17_952
    # the block's largest product: q and the output, 2·16·24 = 768 a token (the head's 2·16·40
    # = 1,280 is outside the block; the attention's 960 a token is no product)
    assert point.largest_matmul == 768.0
    # the closed form's saved bytes less its 8-byte token ids (the step's input, which the
    # trace does not count as saved): one sequence, its 4-byte loss weight spread over 10
    closed = activation_memory(CONFIG, 1, SEQ, 4)
    assert point.saved == (closed.total_bytes - 8 * SEQ) / SEQ
    # beyond them at the forward's highest, at the loss: the head's logits, 10·40·4 = 1,600 B
    # (the log-softmax saves its own output, not its input), and the 4-byte loss
    assert point.temporary == (SEQ * 40 * 4 + 4) / SEQ
    assert point.sent == 0.0 and point.collectives == 0.0  # one rank


def test_a_sequence_parallel_checkpointed_rank_by_hand() -> None:
    point = _trace(ONE_BLOCK, SEQ, "fp32", 2, True, True)
    # every matrix split in two, the three norms' 48 whole on each rank: (3,440 − 48)/2 + 48
    assert point.params == 1_744.0
    assert point.embedding_params == 640.0  # the whole model's, as at one rank
    closed = activation_memory(CONFIG, 1, SEQ, 4, True, tp=2, sequence_parallel=True)
    assert point.saved == (closed.total_bytes - 8 * SEQ) / SEQ
    # each all-gather or reduce-scatter of the stream, 10·16·4 = 640 B whole, sends half: 320 B.
    # Forward: the embedding's reduce-scatter, attention's and the MLP's gather and scatter, the
    # head's gather (6), and the vocabulary-split logits gathered, 10·40·4 = 1,600 B (800 B
    # sent); backward: the six stream collectives' twins, and the recomputed forward's
    # attention gather and scatter and MLP gather (it stops before the MLP's scatter, whose
    # output no backward needs): 16 calls, 15·320 + 800 = 5,600 B, 560 a token
    assert point.collectives == 7 + 6 + 3 == 16.0
    assert point.sent == (15 * 320 + 800) / SEQ == 560.0


def test_gpt2_names_count_and_products_outside_blocks() -> None:
    point = _trace(_factory("make_gpt2_names"), 5, "fp32", 1, False, False)
    # a factory runs two sequences: 10 tokens.  Parameters: wte and transformer.wte 8·7 = 56,
    # wpe and transformer.wpe 11·7 = 77, the head 7·8 = 56; all but the head embeddings
    assert point.params == 2 * 56 + 2 * 77 + 56 == 322.0
    assert point.embedding_params == 2 * 56 + 2 * 77 == 266.0
    # products: the buffers' table 2·11·9·7 = 1,386 a step (no gradient: no backward, and as
    # many FLOPs at any batch); the head 2·10·7·8 = 1,120, its backward twice that; attention
    # of the 7-wide stream with itself, not causal: two products (q·kᵀ and a·v) of 2·5·5·7
    # for each of 2 sequences, 1,400, its backward twice that
    assert point.forward_flops == (1_386 + 1_120 + 1_400) / 10
    assert point.flops == (1_386 + 3 * 1_120 + 3 * 1_400) / 10
    # no numbered module: the largest forward product of the model, the table's (larger than
    # the head's, and smaller than the attention's 1,400, which is no product)
    assert point.largest_matmul == 1_386 / 10
    assert point.sent == 0.0 and point.collectives == 0.0


def test_a_block_product_without_gradient_is_the_blocks_largest() -> None:
    point = _trace(_factory("make_numbered_block"), 5, "fp32", 1, False, False)
    assert point.params == 56 + 56 and point.embedding_params == 56.0  # embed 8·7, head 7·8
    # blocks.0's one product, of two buffers, 2·11·3·7 = 462, has no backward; the head's
    # 2·10·7·8 = 1,120 is larger but outside the block
    assert point.largest_matmul == 462 / 10
    assert point.forward_flops == (462 + 1_120) / 10
    assert point.flops == (462 + 3 * 1_120) / 10


def test_a_model_without_products_has_a_largest_of_zero() -> None:
    point = _trace(_factory("make_no_product"), 5, "fp32", 1, False, False)
    # an embedding whose rows are the logits: 8·8 parameters, named "weight" at the root (no
    # part named as an embedding), and no product at all
    assert point.params == 64.0 and point.embedding_params == 0.0
    assert point.largest_matmul == 0.0 and point.flops == 0.0
    # beyond the saved tensors at the loss: the logits, 10 tokens · 8 · 4 = 320 B, and the
    # 4-byte loss
    assert point.temporary == (10 * 8 * 4 + 4) / 10
