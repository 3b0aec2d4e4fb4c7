"""The memory ledger's closed forms and host figures pinned on hand-made steps (no model is
traced): the activations' closed form of a context-parallel rank and of a tensor-parallel one,
the adapters' (LoRA/QLoRA) state, activations offloaded to the host and parameters offloaded
with FSDP2's ``CPUOffloadPolicy`` priced on the chip's host link, the KV cache of an inference
step, and :meth:`MemoryLedger.parts` for each kind of step.  Every expected figure is worked
out beside it.

The model of the closed forms (every dimension different: heads × head_dim = 12 ≠ d_model = 8):
vocabulary V = 11, d = 8, 2 layers, 2 heads (and 2 key/value heads) of 6, so q_dim = kv_dim
= 12, a GELU MLP of d_ff = 20, LayerNorm, learned positions; batch b = 3, sequence s = 4.
"""

from __future__ import annotations

import dataclasses

from tensorledger.hardware import get_hardware
from tensorledger.memory.ledger import (
    KvCacheFacts,
    MemoryLedger,
    MemoryPart,
    Offload,
    ParamOffload,
    StepFacts,
    memory_ledger,
)
from tensorledger.napkin.recipes import recipe_bytes, resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.trace.records import OpRecord, Trace

CONFIG = TransformerConfig(vocab_size=11, context_length=16, d_model=8, n_layers=2, n_heads=2,
                           head_dim=6, d_ff=20)


def _record(i: int, op: str, phase: str, created: tuple[tuple[int, int], ...] = (),
            freed: tuple[int, ...] = (), flops: int = 0, read: int = 0, written: int = 0
            ) -> OpRecord:
    return OpRecord(i, op, "layer", phase, "elementwise", (), (), (), (), flops, read, written,
                    True, flops, created, freed)


# A training step: 1000 B of parameters before it; forward saves 300 B and makes a 40-byte
# temporary; backward frees them and makes 200 B of gradients; the optimizer 80 B of state.
STEP = Trace(records=(
    _record(0, "aten.mm", "forward", ((1, 300), (2, 40))),
    _record(1, "aten.mm", "backward", ((4, 200),), (1, 2)),
    _record(2, "aten.add_", "optimizer", ((5, 80),)),
), uncovered={}, device="meta", storages_preexisting=((0, 1000),))
TAGS = {0: "parameter", 1: "saved_activation", 4: "gradient", 5: "optimizer_state"}


def _facts(step: str = "train", precision: str = "fp32", config: TransformerConfig | None = None,
           **changes: object) -> StepFacts:
    facts = StepFacts(model="handmade", step=step, batch=3, seq_len=4,
                      precision=resolve_precision(precision),
                      optimizer=resolve_optimizer("adamw"), device="meta", checkpointed=False,
                      param_numels=[250], config=config)
    return dataclasses.replace(facts, **changes)  # type: ignore[arg-type]


def _ledger(facts: StepFacts, **kwargs: object) -> MemoryLedger:
    return memory_ledger(STEP, TAGS, facts, **kwargs)  # type: ignore[arg-type]


# ---- the activations' closed form: a context-parallel rank, a tensor-parallel one

def test_a_context_parallel_rank_keeps_its_share_and_what_the_ring_adds() -> None:
    # mixed-bf16 (bf16 autocast over fp32 weights: 2-byte activations), cp 2 × tp 2 with
    # sequence parallelism, not checkpointed.  The rank holds s/cp = 2 tokens of each
    # sequence: n = 3·2 = 6 tokens, of which each norm sees n/tp = 3.
    #   a norm (autocast: fp32 input, mean and rstd)  4·3·8 + 2·4·3          =  120, two: 240
    #   attention  (6·(12 + 2·12)·2 + 6·12·2)/2 + 4·3·(2/2)·2  = 288 + 24      =  312
    #              + autocast's casts of the q, k, v input 3·6·8·2 = 288       =  600
    #   MLP        2·6·(20/2)·2 = 240, + the up projection's cast 6·8·2 = 96   =  336
    #   weights' bf16 copies  2·(2·8·12 + 2·8·12 + 2·8·20)/2 = 2·704/2         =  704
    #   a layer    240 + 600 + 336 + 704 = 1880; two layers                    = 3760
    #   token ids 8·6 and the position index 8·2                               =   64
    #   the final norm                                                          =  120
    #   loss: fp32 log-softmax 6·11·4 = 264, targets 8·6 = 48, 4, the head's
    #         cast input 6·8·2 = 96 and weight 2·11·8/2 = 88                    =  500
    #   activation_memory at s/cp: 3760 + 64 + 120 + 500                       = 4444
    # the ring adds the merged outputs' copies, 2 layers · 6 tokens · 12/2 · 2 = 144, and
    # the targets' whole storage beyond their share, 8·3·(4 − 2) = 48:  4444 + 144 + 48 = 4636
    facts = _facts(precision="mixed-bf16", config=CONFIG, context_parallel=2, tensor_parallel=2,
                   sequence_parallel=True)
    closed = _ledger(facts).activations_closed_form
    assert closed is not None
    assert (closed.seq_len, closed.dtype_bytes, closed.autocast, closed.checkpointed) == (
        2, 2, True, False)
    assert (closed.norms_bytes_per_layer, closed.attention_bytes_per_layer,
            closed.mlp_bytes_per_layer, closed.per_layer_bytes) == (240, 600, 336, 1880)
    assert closed.total_bytes == 4444 + 144 + 48 == 4636


def test_a_checkpointed_context_parallel_rank_keeps_no_copy_of_the_merged_output() -> None:
    # fp32 (4-byte activations), cp 2, checkpointed: n = 3·2 = 6 tokens a rank
    #   the layers keep their inputs: 2 · 6·8·4                                =  384
    #   token ids and positions 8·6 + 8·2                                       =   64
    #   the final LayerNorm: input 6·8·4, mean and rstd 2·4·6, output 6·8·4     =  432
    #   loss: log-softmax 6·11·4 = 264, targets 48, 4                           =  316
    #   activation_memory at s/cp: 384 + 64 + 432 + 316                         = 1196
    # no copy of the merged output (the recomputation's is a temporary); the targets 48
    facts = _facts(config=CONFIG, context_parallel=2, checkpointed=True)
    closed = _ledger(facts).activations_closed_form
    assert closed is not None and (closed.seq_len, closed.checkpointed) == (2, True)
    assert closed.layers_bytes == 384
    assert closed.total_bytes == 1196 + 48 == 1244


def test_a_tensor_parallel_rank_with_sequence_parallelism_has_its_closed_form() -> None:
    # bf16 (2-byte activations), tp 2 with sequence parallelism, no context parallelism:
    # n = 3·4 = 12 tokens, each norm on 12/2 = 6 of them
    #   a norm: input 6·8·2 = 96, mean and rstd 2·4·6 = 48, the gathered output
    #           12·8·2 = 192                                          = 336, two:  672
    #   attention  (12·36·2 + 12·12·2)/2 + 4·3·1·4 = 576 + 48                     =  624
    #   MLP        2·12·10·2                                                      =  480
    #   a layer    672 + 624 + 480 = 1776; two layers                             = 3552
    #   token ids 8·12 and positions 8·4                                          =  128
    #   the final norm                                                            =  336
    #   loss: log-softmax 12·11·2 = 264, targets 8·12 = 96, 4                     =  364
    #   3552 + 128 + 336 + 364                                                    = 4380
    facts = _facts(precision="bf16", config=CONFIG, tensor_parallel=2, sequence_parallel=True)
    closed = _ledger(facts).activations_closed_form
    assert closed is not None and (closed.seq_len, closed.dtype_bytes) == (4, 2)
    assert (closed.norms_bytes_per_layer, closed.attention_bytes_per_layer,
            closed.mlp_bytes_per_layer) == (672, 624, 480)
    assert closed.total_bytes == 4380


# ---- parts() of a forward-backward step

def test_a_forward_backward_step_has_no_optimizer_row() -> None:
    # fp32 on 250 parameters: 4·250 = 1000 B of parameters and of gradients; no checkpoint:
    # n = 12 tokens, a = 4
    #   a norm: input 12·8·4 = 384, mean and rstd 2·4·12 = 96, output 384   = 864, two: 1728
    #   attention 12·36·4 + 12·12·4 + 4·3·2·4 = 1728 + 576 + 96                       = 2400
    #   MLP 2·12·20·4                                                                 = 1920
    #   two layers 2·(1728 + 2400 + 1920)                                             = 12096
    #   ids and positions 96 + 32 = 128; final norm 864; loss 12·11·4 + 96 + 4 = 628
    #   12096 + 128 + 864 + 628                                                       = 13716
    ledger = _ledger(_facts(step="forward-backward", config=CONFIG))
    assert ledger.parts() == (MemoryPart("parameter", 1000, 1000),
                              MemoryPart("gradient", 200, 1000),
                              MemoryPart("saved_activation", 300, 13716))


def test_a_forward_backward_step_without_a_config_has_no_activation_form() -> None:
    ledger = _ledger(_facts(step="forward-backward"))
    assert ledger.activations_closed_form is None
    assert ledger.parts()[-1] == MemoryPart("saved_activation", 300, None)


def test_offloaded_activations_have_no_closed_form_beside_them() -> None:
    # the closed form counts what stays on the device without offloading: none is set beside
    # the device's share, in a forward-backward step as in a training step
    for step in ("forward-backward", "train"):
        ledger = _ledger(_facts(step=step, config=CONFIG, offloaded_bytes=(640, 320)))
        assert ledger.activations_closed_form is not None  # computed, but not set beside
        assert ledger.parts()[-1] == MemoryPart("saved_activation", 300, None)


# ---- adapters (LoRA, QLoRA)

# the frozen base: one NF4 weight of 16,384 bf16 values (the 4-bit codes 16,384/2 = 8,192,
# the int8 scales 16,384/64 = 256, one factor block kept as its whole row of 256 values
# with the mean and the 16-value code book: (256 + 1 + 16)·2 = 546), and a bf16 tensor of
# 100: 8,192 + 256 + 546 + 100·2 = 9,194 B
FROZEN = ((16_384, 2, True), (100, 2, False))
# two bf16 adapters of 24 and 40 under bf16-master and AdamW, 64 parameters: 2·64 = 128 B of
# parameters and of gradients, a master copy 4·64 = 256, the moments 8·64 = 512 with a
# 4-byte step counter for each tensor: 520
TRAINED = ((24, 2), (40, 2))


def test_adapters_have_their_own_closed_form_of_the_state() -> None:
    facts = _facts(precision="bf16-master", config=CONFIG, adapters=True, frozen_tensors=FROZEN,
                   trained_tensors=TRAINED)
    ledger = _ledger(facts)
    assert ledger.adapters is True
    assert ledger.adapter_closed_form is not None
    frozen, adapters = ledger.adapter_closed_form
    assert frozen == 9194
    assert (adapters.params_bytes, adapters.grads_bytes, adapters.master_bytes,
            adapters.optimizer_bytes) == (128, 128, 256, 520)
    assert adapters == recipe_bytes("bf16-master", "adamw", [24, 40])
    # the base and the adapters 9,194 + 128; the adapters' gradients; their moments and
    # master copy 520 + 256; a frozen linear saves no input for its weight's gradient, so
    # napkin's activations do not apply
    assert ledger.parts() == (MemoryPart("parameter", 1000, 9194 + 128),
                              MemoryPart("gradient", 200, 128),
                              MemoryPart("optimizer_state", 80, 776),
                              MemoryPart("saved_activation", 300, None))
    backward = _ledger(dataclasses.replace(facts, step="forward-backward"))
    assert backward.parts() == (MemoryPart("parameter", 1000, 9322),
                                MemoryPart("gradient", 200, 128),
                                MemoryPart("saved_activation", 300, None))


def test_adapters_of_two_widths_or_none_named_have_no_closed_form() -> None:
    # adapter_recipe prices adapters of one width; mixed widths have none, nor do adapters
    # with no trained tensors named: every row but the measured one is then empty
    mixed = _facts(precision="bf16-master", adapters=True, frozen_tensors=FROZEN,
                   trained_tensors=((24, 2), (40, 4)))
    unnamed = _facts(precision="bf16-master", adapters=True)
    for facts in (mixed, unnamed):
        ledger = _ledger(facts)
        assert ledger.adapter_closed_form is None
        assert ledger.parts() == (MemoryPart("parameter", 1000, None),
                                  MemoryPart("gradient", 200, None),
                                  MemoryPart("optimizer_state", 80, None),
                                  MemoryPart("saved_activation", 300, None))


def test_trained_tensors_without_adapters_set_no_adapter_form() -> None:
    # the whole model trained: the recipe's closed form (fp32 AdamW on 250: 1000 B of
    # parameters and gradients, moments 8·250 = 2000 + a step counter 4), though the
    # tensors named are of the recipe's width (fp32), which adapters would price
    fp32 = tuple((n, 4) for n, _ in TRAINED)
    ledger = _ledger(_facts(trained_tensors=fp32, frozen_tensors=FROZEN))
    assert ledger.adapters is False and ledger.adapter_closed_form is None
    assert ledger.parts()[:3] == (MemoryPart("parameter", 1000, 1000),
                                  MemoryPart("gradient", 200, 1000),
                                  MemoryPart("optimizer_state", 80, 2004))


# ---- the host link: activations and parameters offloaded

CHIP = dataclasses.replace(get_hardware("h100"), host_link_bytes_per_s=400.0,
                           host_link_kind="a test link")


def test_offloaded_activations_are_priced_on_the_chip_host_link() -> None:
    ledger = _ledger(_facts(offloaded_bytes=(640, 320)), hardware=CHIP)
    # 640 B to the host and 320 B back at 400 B/s each way: 1.6 s and 0.8 s
    assert ledger.offload == Offload(640, 320, 400.0, "a test link of h100-sxm")
    assert (ledger.offload.to_host_s, ledger.offload.to_device_s) == (1.6, 0.8)


def test_without_a_host_link_the_offload_says_why() -> None:
    silent = dataclasses.replace(CHIP, host_link_bytes_per_s=None)
    ledger = _ledger(_facts(offloaded_bytes=(640, 320)), hardware=silent)
    assert ledger.offload == Offload(640, 320, None, "h100-sxm states no host link")
    assert (ledger.offload.to_host_s, ledger.offload.to_device_s) == (None, None)
    unnamed = _ledger(_facts(offloaded_bytes=(640, 320)))
    assert unnamed.offload == Offload(640, 320, None, "no chip named")


def test_no_offload_no_host_figures() -> None:
    ledger = _ledger(_facts(), hardware=CHIP)
    assert (ledger.offload, ledger.param_offload, ledger.host_peak_bytes) == (None, None, 0)
    assert ledger.routing == "" and ledger.kv_cache is None and ledger.kv_cache_bytes == 0


# A step under --offload params: 1000 B of device parameters (the all-gathered copy), and on
# the host 3000 B of parameter shards and 6000 B of optimizer state before it.  Forward saves
# 300 B; backward makes 200 B of gradients on the device, then frees them for a 500-byte host
# copy; the optimizer step runs on the host: op 3 (1000 FLOPs, 300 B read, 200 written) makes
# a 70-byte host temporary, op 4 (11 FLOPs, 7 read, 5 written) frees it and makes one of 30.
OFFLOADED = Trace(records=(
    _record(0, "aten.mm", "forward", ((1, 300),)),
    _record(1, "aten.mm", "backward", ((4, 200),), (1,)),
    _record(2, "aten._to_copy", "backward", ((3, 500),), (4,)),
    _record(3, "aten.add_", "optimizer", ((9, 70),), flops=1000, read=300, written=200),
    _record(4, "aten.mul_", "optimizer", ((10, 30),), (9,), flops=11, read=7, written=5),
), uncovered={}, device="meta", storages_preexisting=((0, 1000), (7, 3000), (8, 6000)))
OFFLOADED_TAGS = {0: "parameter", 1: "saved_activation", 4: "gradient", 7: "host_parameter",
                  8: "host_optimizer_state", 3: "host_gradient", 9: "host_temporary",
                  10: "host_temporary"}


def test_offloaded_parameters_count_the_host_state_and_the_host_optimizer_step() -> None:
    facts = _facts(params_offloaded_bytes=(1200, 800), routing="top-2 of 4 experts")
    ledger = memory_ledger(OFFLOADED, OFFLOADED_TAGS, facts, hardware=CHIP)
    # each host category's high point: parameters 3000, gradients 500, state 6000, and the
    # temporaries 70 (op 4 frees the 70 before making the 30); the optimizer's two ops:
    # 1000 + 11 = 1011 FLOPs, 300 + 200 + 7 + 5 = 512 B moved.  1200 B to the device and
    # 800 B to the host at 400 B/s: 3 s and 2 s
    assert ledger.param_offload == ParamOffload(
        to_device_bytes=1200, to_host_bytes=800, host_link_bytes_per_s=400.0,
        host_link="a test link of h100-sxm", host_parameter_bytes=3000,
        host_gradient_bytes=500, host_optimizer_state_bytes=6000, host_temporary_bytes=70,
        optimizer_ops=2, optimizer_flops=1011, optimizer_bytes=512)
    assert (ledger.param_offload.to_device_s, ledger.param_offload.to_host_s) == (3.0, 2.0)
    # the state is the host's (the device's would be 1000, 200 and 0)
    assert (ledger.params_bytes, ledger.grads_bytes, ledger.optimizer_state_bytes) == (
        3000, 500, 6000)
    # the host's most at once: 9000 before, + 500 (op 2), + 70 (op 3) = 9570
    assert ledger.host_peak_bytes == 9570
    # the device's peak leaves the host out: 1000 + 300 (op 0)
    assert ledger.peak_bytes == 1300
    assert ledger.routing == "top-2 of 4 experts"


# ---- an inference step's KV cache

def test_an_inference_step_has_a_kv_cache_row() -> None:
    # a prefill: 1000 B of parameters; op 0 makes the cache (768 B) and 50 B of logits
    prefill = Trace(records=(_record(0, "aten.cat", "forward", ((1, 768), (2, 50))),),
                    uncovered={}, device="meta", storages_preexisting=((0, 1000),))
    cache = KvCacheFacts(cache_class="KVCache", layers="2 full", dtype="bfloat16", context=0,
                         tokens_after=4, bytes_before=0, storage_bytes=768, tensor_bytes=768,
                         closed_form_bytes=700)
    facts = _facts(step="prefill", precision="bf16", kv_cache=cache)
    ledger = memory_ledger(prefill, {0: "parameter", 1: "kv_cache"}, facts)
    assert ledger.kv_cache is cache
    assert ledger.kv_cache_bytes == 768
    # bf16 on 250 parameters: 2·250 = 500 B in the closed form; the cache's 700 beside 768
    assert ledger.parts() == (MemoryPart("parameter", 1000, 500),
                              MemoryPart("kv_cache", 768, 700))
