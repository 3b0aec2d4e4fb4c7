"""SearchModel pinned: the counts a search reads (a block's matrices and norms, the
embedding, the head, the final norm; a mixture of experts' leading dense block; a profile's
parts), the FLOPs a token, the states remembered per (parameters, shard, stage), and the
activations asked of napkin's closed forms with the recipe's width (4 bytes in fp32, 2 under
autocast or a 16-bit recipe), the ring's under context parallelism, a LoRA step's, a
profile's, and a mixture of experts' MLP in place of the dense one."""

from __future__ import annotations

import dataclasses

from tensorledger.hardware import get_hardware
from tensorledger.napkin.activations import activation_memory
from tensorledger.napkin.adapters import lora_activation_memory, lora_shape
from tensorledger.napkin.context import context_parallel_rank
from tensorledger.napkin.parallel import zero_bytes
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import (
    TransformerConfig,
    forward_flops_per_token,
    get_preset,
    transformer_training_flops,
)
from tensorledger.plan.estimate import PlanSetup
from tensorledger.plan.experts import moe_layer_saved_bytes
from tensorledger.plan.model import search_model
from tensorledger.plan.profile import ModelProfile, Split, profile_activations
from tests.plan.made_up import made_up_profile

H100 = get_hardware("h100")
TINY = get_preset("tiny")  # d 64, q 64, kv 32, d_ff 128 (SwiGLU), RMSNorm, V 128, untied
MOE = get_preset("tiny-moe")  # tiny's attention, 6 experts of d 32 top 2, a shared one


def _setup(config: TransformerConfig | ModelProfile, precision: str = "fp32",
           **change: object) -> PlanSetup:
    return PlanSetup(config, H100, 4, 16, 8, resolve_precision(precision),  # type: ignore[arg-type]
                     resolve_optimizer("adamw"), 1e12, **change)


def test_tinys_counts_and_flops() -> None:
    setup = _setup(TINY)
    model = search_model(setup)
    # two RMSNorm scales of 64 a block; q 64·64 + k 64·32 + v 64·32 + o 64·64 + 3 · 64·128
    assert model.layer_norms == 2 * 64
    assert model.layer_matrices == 4096 + 2048 + 2048 + 4096 + 3 * 64 * 128 == 36_864
    assert (model.embeddings, model.head, model.final_norm) == (128 * 64, 128 * 64, 64)
    assert (model.embedding_whole, model.dense_layers, model.dense_layer_matrices) == (0, 0, 0)
    assert model.flops_per_token == transformer_training_flops(TINY, 1.0, 16).flops_per_token
    forward = forward_flops_per_token(TINY, 16)
    assert model.forward_per_token == forward.total_flops
    assert model.attention_forward_per_token == (forward.attention_scores_flops
                                                 + forward.attention_values_flops) > 0
    assert model.head_flops_per_token == 6.0 * 64 * 128
    assert model.adapters is None and model.dequantize_flops_per_use == 0.0


def test_a_layernorm_with_biases_counts_twice_the_width_a_norm() -> None:
    # gpt2: LayerNorm with a bias (2 · 768 a norm), a tied head (no parameters of its own)
    gpt2 = get_preset("gpt2")
    model = search_model(_setup(gpt2))
    assert model.layer_norms == 2 * 2 * 768
    # 4 · 768² + 4 · 768 attention, 2 · 768 · 3,072 + 3,072 + 768 MLP
    assert model.layer_matrices == 4 * 768 * 768 + 4 * 768 + 2 * 768 * 3072 + 3072 + 768
    assert (model.head, model.final_norm) == (0, 2 * 768)


def test_a_mixture_of_experts_leading_dense_block() -> None:
    # tiny-moe of 3 blocks, the first dense: its MLP is a dense one of d_ff 128
    assert MOE.moe is not None
    moe3 = dataclasses.replace(MOE, n_layers=3,
                               moe=dataclasses.replace(MOE.moe, first_dense_layers=1))
    model = search_model(_setup(moe3))
    assert model.dense_layers == 1
    assert model.dense_layer_matrices == 4096 + 2048 + 2048 + 4096 + 3 * 64 * 128
    assert model.layer_matrices > model.dense_layer_matrices
    # a multi-token prediction depth is not planned: the dense block is the same beside it
    mtp = search_model(_setup(dataclasses.replace(moe3, mtp_depth=1)))
    assert mtp.dense_layer_matrices == model.dense_layer_matrices


def test_a_layernorm_without_biases_counts_its_scale_alone() -> None:
    plain = dataclasses.replace(TINY, norm="layernorm", bias=False)
    model = search_model(_setup(plain))
    assert (model.layer_norms, model.final_norm) == (2 * 64, 64)


def test_a_profiles_parts() -> None:
    profile = made_up_profile(embedding=Split(7.0, 1000.0), head=Split(3.0, 500.0))
    model = search_model(_setup(profile))
    assert (model.layer_norms, model.layer_matrices) == (20, 280)
    assert (model.embeddings, model.embedding_whole) == (1000, 7)
    assert (model.head, model.final_norm) == (500, 3)
    assert model.flops_per_token == 4 * 1800.0 + 3000.0
    assert model.forward_per_token == 4 * 600.0 + 1000.0
    assert model.attention_forward_per_token == 0.0
    assert model.head_flops_per_token == 6.0 * 500


def test_states_are_zero_bytes_and_remembered() -> None:
    setup = _setup(TINY)
    model = search_model(setup)
    # 1,000 parameters over 4 at ZeRO-2: 4 · 1,000 + 4 · 250 + 8 · 250 bytes, 1,000 of them
    # gradients
    assert model.states_bytes(setup, 1000, 4, 2) == (7000.0, 1000.0)
    assert model.states[(1000, 4, 2)] == (7000.0, 1000.0)
    model.states[(1000, 4, 2)] = (1.0, 2.0)  # read back, not worked out again
    assert model.states_bytes(setup, 1000, 4, 2) == (1.0, 2.0)
    z = zero_bytes(999, 1, 0, "fp32", "adamw")
    assert model.states_bytes(setup, 999, 1, 0) == (z.total_bytes, z.grads_bytes)


def test_activations_are_the_closed_form_at_the_recipes_width() -> None:
    for precision, width, autocast in (("fp32", 4, False), ("mixed-bf16", 2, True),
                                       ("bf16", 2, False)):
        setup = _setup(TINY, precision)
        closed, loss = search_model(setup).activations(setup, 2, 2, True, False)
        expected = activation_memory(TINY, 2, 16, width, False, tp=2, sequence_parallel=True,
                                     autocast=autocast)
        assert closed == expected
        assert loss == expected.final_norm_bytes + expected.loss_bytes > 0
        checkpointed, _ = search_model(setup).activations(setup, 2, 2, False, True)
        assert checkpointed == activation_memory(TINY, 2, 16, width, True, tp=2,
                                                 sequence_parallel=False, autocast=autocast)
    setup = _setup(TINY)
    model = search_model(setup)
    held = model.activations(setup, 1, 1, False, False)
    assert model.saved[(1, 1, False, False, 1, 1)] == held  # remembered by its key
    assert model.activations(setup, 1, 1, False, False) is held


def test_activations_under_context_parallelism_are_the_rings() -> None:
    setup = _setup(TINY, "mixed-bf16")
    closed, loss = search_model(setup).activations(setup, 2, 2, True, False, 2)
    ring = context_parallel_rank(TINY, 2, 16, 2, dtype_bytes=2, tp=2, autocast=True,
                                 checkpointed=False, sequence_parallel=True)
    assert closed == ring.activations
    assert loss == (ring.activations.final_norm_bytes + ring.activations.loss_bytes
                    + ring.targets_kept_bytes)
    assert ring.targets_kept_bytes > 0


def test_a_lora_steps_activations_and_what_its_first_block_saves_less() -> None:
    lora = lora_shape(TINY, 8, ("query", "value"))
    setup = _setup(TINY, "mixed-bf16", lora=lora)
    model = search_model(setup)
    closed, loss = model.activations(setup, 2, 2, True, True)
    expected = lora_activation_memory(TINY, lora, 2, 16, 2, True, tp=2,
                                      sequence_parallel=True, autocast=True)
    assert closed == expected.activations
    assert loss == expected.activations.final_norm_bytes + expected.activations.loss_bytes
    assert model.first_layer_less[(2, 2, True, True, 1, 1)] == expected.first_layer_less_bytes


def test_a_profiles_activations() -> None:
    profile = made_up_profile(block_saved={(True, False): Split(10.0, 40.0)},
                              other_saved={True: Split(6.0, 2.0)})
    setup = _setup(profile, "mixed-bf16")
    closed, loss = search_model(setup).activations(setup, 2, 2, True, False)
    assert closed == profile_activations(profile, 2, 16, 2, True, False, 2, True)
    # 32 tokens × (10 + 40/2) a block; the loss end's 32 × (6 + 2/2)
    assert closed.per_layer_bytes == 32 * 30
    assert loss == 32 * 7


def test_a_mixture_of_experts_saves_its_mlp_in_place_of_the_dense_one() -> None:
    # tiny-moe under mixed-bf16 at TP 2, EP 2: 2 sequences of 16 tokens, bf16 (2 bytes)
    setup = _setup(MOE, "mixed-bf16")
    closed, _ = search_model(setup).activations(setup, 2, 2, False, False, 1, 2)
    dense = activation_memory(MOE, 2, 16, 2, False, tp=2, sequence_parallel=False,
                              autocast=True)
    moe, copies = moe_layer_saved_bytes(MOE, 32, 2, True, 2, 2)
    # the dense MLP's bf16 weight copies: 3 matrices of 64 · 128, 2 bytes, over TP 2
    dense_copies = 2 * 3 * 64 * 128 // 2
    delta = moe - dense.mlp_bytes_per_layer - dense_copies
    assert closed.mlp_bytes_per_layer == moe - copies
    assert closed.per_layer_bytes == dense.per_layer_bytes + delta
    assert closed.layers_bytes == dense.layers_bytes + 2 * delta
    assert closed.total_bytes == dense.total_bytes + 2 * delta
    assert closed.weight_copies_bytes == dense.weight_copies_bytes + 2 * (copies - dense_copies)
    # without autocast no copies; checkpointed, a block keeps its input alone, as a dense one
    fp32 = _setup(MOE)
    plain, _ = search_model(fp32).activations(fp32, 2, 2, False, False, 1, 2)
    dense = activation_memory(MOE, 2, 16, 4, False, tp=2, sequence_parallel=False,
                              autocast=False)
    moe, copies = moe_layer_saved_bytes(MOE, 32, 4, False, 2, 2)
    assert copies == 0
    assert plain.per_layer_bytes == dense.per_layer_bytes + moe - dense.mlp_bytes_per_layer
    kept, _ = search_model(fp32).activations(fp32, 2, 2, False, True, 1, 2)
    assert kept == activation_memory(MOE, 2, 16, 4, True, tp=2, sequence_parallel=False,
                                     autocast=False)
    # under context parallelism the experts see the rank's 16 / 2 tokens a sequence
    ring, _ = search_model(fp32).activations(fp32, 2, 1, False, False, 2, 2)
    cp = context_parallel_rank(MOE, 2, 16, 2, dtype_bytes=4, tp=1, autocast=False,
                               checkpointed=False, sequence_parallel=False).activations
    moe, _ = moe_layer_saved_bytes(MOE, 16, 4, False, 1, 2)
    assert ring.per_layer_bytes == cp.per_layer_bytes + moe - cp.mlp_bytes_per_layer


def test_a_recomputed_ring_rank_of_experts_keeps_its_input_alone_and_is_remembered() -> None:
    setup = _setup(MOE)
    model = search_model(setup)
    held = model.activations(setup, 2, 1, False, True, 2, 2)
    ring = context_parallel_rank(MOE, 2, 16, 2, dtype_bytes=4, tp=1, autocast=False,
                                 checkpointed=True, sequence_parallel=False)
    assert held[0] == ring.activations  # no MLP of experts saved: the block's input alone
    assert model.saved[(2, 1, False, True, 2, 2)] == held
