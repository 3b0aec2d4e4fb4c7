"""Every field of the parallel closed forms pinned: the whole result of each rule is compared
with one written out by hand (the working's ``steps`` apart, which are presentation), so a
dropped echo of an input, a swapped phase or a wrong layout name fails as surely as a wrong
byte count.  A custom recipe with 2-byte parameters and 4-byte gradients keeps the two apart.
"""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.napkin import (
    ddp_comm_volume,
    fsdp_comm_volume,
    pipeline_bubble,
    tp_activation_bytes,
    tp_comm_volume,
    zero_bytes,
    zero_comm_volume,
    zero_summary,
    zero_table,
)
from tensorledger.napkin.parallel import (
    CollectiveVolume,
    CommVolume,
    PipelineBubble,
    torch_zero_bytes,
    tp_indivisible,
)
from tensorledger.napkin.recipes import Precision, bytes_per_param
from tensorledger.napkin.transformer import get_preset

# parameters in 2 bytes, gradients in 4: a swapped size shows
SPLIT = Precision("split", "2-byte parameters, 4-byte gradients", 2.0, 4.0, 0.0, 4.0)


def _without_steps(comm: CommVolume) -> CommVolume:
    # the working adds up to the total, and has one line per collective and one for the sum
    assert len(comm.steps) == len(comm.collectives) + 1
    assert comm.steps[-1].value == comm.sent_bytes_per_rank
    assert [s.value for s in comm.steps[:-1]] == [c.sent_bytes_per_rank for c in comm.collectives]
    return dataclasses.replace(comm, steps=())


def test_ddp_all_reduces_every_gradient_once() -> None:
    # 1000 params · 4 B = 4000 B of gradients; all-reduce on 5 ranks: 2 · 4/5 · 4000 = 6400
    grads = CollectiveVolume("all-reduce", "backward", "gradients", 5, 1, 4000, 6400.0)
    assert _without_steps(ddp_comm_volume(1000, 5, SPLIT)) == CommVolume(
        "ddp", 5, (grads,), 6400.0, ())


def test_zero_1_and_2_reduce_scatter_gradients_and_gather_parameters() -> None:
    # gradients 1000 · 4 = 4000 B, parameters 1000 · 2 = 2000 B; on 5 ranks each (N−1)/N = 4/5:
    # 3200 + 1600 = 4800
    for stage in (1, 2):
        expected = CommVolume(f"zero-{stage}", 5, (
            CollectiveVolume("reduce-scatter", "backward", "gradients", 5, 1, 4000, 3200.0),
            CollectiveVolume("all-gather", "optimizer", "updated parameters", 5, 1, 2000,
                             1600.0)), 4800.0, ())
        assert _without_steps(zero_comm_volume(1000, 5, stage, SPLIT)) == expected


def test_zero_0_is_ddp_and_zero_3_is_fsdp() -> None:
    assert zero_comm_volume(1000, 5, 0, SPLIT) == ddp_comm_volume(1000, 5, SPLIT)
    assert zero_comm_volume(1000, 5, 3, SPLIT) == fsdp_comm_volume(1000, 5, SPLIT)


def test_fsdp_gathers_parameters_twice_and_scatters_gradients() -> None:
    # parameters 2000 B gathered in forward and in backward: 4/5 · 2000 = 1600 each; gradients
    # 4000 B reduce-scattered: 3200; 1600 + 1600 + 3200 = 6400
    expected = CommVolume("fsdp", 5, (
        CollectiveVolume("all-gather", "forward", "parameters", 5, 1, 2000, 1600.0),
        CollectiveVolume("all-gather", "backward", "parameters", 5, 1, 2000, 1600.0),
        CollectiveVolume("reduce-scatter", "backward", "gradients", 5, 1, 4000, 3200.0)),
        6400.0, ())
    assert _without_steps(fsdp_comm_volume(1000, 5, SPLIT)) == expected


def test_tp_all_reduces_block_outputs_in_forward_and_backward() -> None:
    # b·s·h·bytes = 2 · 3 · 7 · 2 = 84 B; 4 layers × 2 all-reduces = 8 per phase, on 5 ranks
    # 8 · 2 · 4/5 · 84 = 1075.2 per phase, 2150.4 in all
    per_phase = 8 * 2 * 4 / 5 * 84
    expected = CommVolume("tp", 5, tuple(
        CollectiveVolume("all-reduce", phase, "block outputs, 4 layers × 2", 5, 8, 84, per_phase)
        for phase in ("forward", "backward")), 2 * per_phase, ())
    assert _without_steps(tp_comm_volume(2, 3, 7, 4, 5)) == expected


def test_tp_with_sequence_parallelism_gathers_and_scatters_the_same_bytes() -> None:
    # 4-byte activations: 2 · 3 · 7 · 4 = 168 B; each all-gather and reduce-scatter 8 · 4/5 · 168
    one = 8 * 4 / 5 * 168
    expected = CommVolume("tp+sp", 5, tuple(
        CollectiveVolume(kind, phase, "b·s·h, 4 layers × 2", 5, 8, 168, one)
        for phase in ("forward", "backward") for kind in ("all-gather", "reduce-scatter")),
        4 * one, ())
    got = tp_comm_volume(2, 3, 7, 4, 5, activation_bytes=4, sequence_parallel=True)
    assert _without_steps(got) == expected
    # the defaults: 2-byte activations, no sequence parallelism
    assert tp_comm_volume(2, 3, 7, 4, 5) == tp_comm_volume(2, 3, 7, 4, 5, 2, False)


def test_zero_bytes_echoes_its_inputs_and_its_working_adds_up() -> None:
    z = zero_bytes(1000, 8, 2, "mixed-bf16", "adamw")
    b = bytes_per_param("mixed-bf16", "adamw")
    assert (z.stage, z.ranks, z.params, z.precision, z.optimizer) == (
        2, 8, 1000, "mixed-bf16", "adamw")
    assert z.breakdown == b
    # shard ⌈1000/8⌉ = 125; the working lists params, shard, the four terms and their sum
    assert [s.value for s in z.steps] == [1000, 125, z.params_bytes, z.grads_bytes,
                                         z.master_bytes, z.optimizer_bytes, z.total_bytes]


def test_zero_summary_is_the_table_beside_each_stage_s_communication() -> None:
    # a second path: zero_table and zero_comm_volume called one by one
    s = zero_summary(1000, 5, "bf16-master", "adam")
    assert s.stages == zero_table(1000, 5, "bf16-master", "adam")
    assert s.comm == tuple(zero_comm_volume(1000, 5, stage, "bf16-master")
                           for stage in (0, 1, 2, 3))
    assert (s.params, s.ranks, s.precision, s.optimizer) == (1000, 5, "bf16-master", "adam")


def test_tp_activations_echo_their_inputs_and_name_their_formula() -> None:
    # s=16, b=3, h=8, a=2, t=4: s·b·h = 384, scores 5·a·s·s·b = 5·2·16·16·3 = 7680
    tp = tp_activation_bytes(16, 3, 8, 2, 4)
    assert (tp.seq_len, tp.batch, tp.d_model, tp.n_heads, tp.tp, tp.sequence_parallel) == (
        16, 3, 8, 2, 4, False)
    # replicated 10 · 384 = 3840; split (24 · 384 + 7680) / 4 = 16896 / 4 = 4224
    assert (tp.replicated_bytes, tp.split_bytes, tp.bytes_per_layer) == (3840.0, 4224.0, 8064.0)
    assert tp.formula == "s·b·h · (10 + 24/t + 5·a·s/(h·t))"
    sp = tp_activation_bytes(16, 3, 8, 2, 4, sequence_parallel=True)
    # (34 · 384 + 7680) / 4 = 20736 / 4 = 5184, nothing replicated
    assert (sp.replicated_bytes, sp.split_bytes, sp.bytes_per_layer) == (0.0, 5184.0, 5184.0)
    assert sp.sequence_parallel is True
    assert sp.formula == "s·b·h/t · (34 + 5·a·s/h)"


def test_pipeline_bubble_echoes_its_schedule() -> None:
    # p = 3, m = 6, v = 2 (m a multiple of p): idle 2 of 2·6 + 2 = 14 slots, 2/12 of the compute
    assert pipeline_bubble(3, 6, 2) == PipelineBubble(3, 6, 2, 2 / 14, 2 / 12)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: ddp_comm_volume(-1, 4, "fp32"), "params"),
    (lambda: ddp_comm_volume(10, 0, "fp32"), "ranks"),
    (lambda: zero_comm_volume(-1, 4, 1, "fp32"), "params"),
    (lambda: zero_comm_volume(10, 0, 2, "fp32"), "ranks"),
    (lambda: fsdp_comm_volume(-1, 4, "fp32"), "params"),
    (lambda: fsdp_comm_volume(10, 0, "fp32"), "ranks"),
    (lambda: zero_bytes(-1, 4, 1, "fp32", "adam"), "params"),
    (lambda: tp_comm_volume(0, 3, 7, 4, 5), "batch"),
    (lambda: tp_comm_volume(2, 0, 7, 4, 5), "seq_len"),
    (lambda: tp_comm_volume(2, 3, 0, 4, 5), "d_model"),
    (lambda: tp_comm_volume(2, 3, 7, 0, 5), "n_layers"),
    (lambda: tp_comm_volume(2, 3, 7, 4, 5, activation_bytes=0), "activation_bytes"),
    (lambda: tp_comm_volume(2, 3, 7, 4, 0), "tp"),
    (lambda: tp_activation_bytes(0, 3, 8, 2), "seq_len"),
    (lambda: tp_activation_bytes(16, 0, 8, 2), "batch"),
    (lambda: tp_activation_bytes(16, 3, 0, 2), "d_model"),
    (lambda: tp_activation_bytes(16, 3, 8, 0), "n_heads"),
    (lambda: tp_activation_bytes(16, 3, 8, 2, 0), "tp"),
    (lambda: pipeline_bubble(0, 6), "stages"),
    (lambda: pipeline_bubble(4, 0), "microbatches"),
    (lambda: pipeline_bubble(4, 8, 0), "chunks"),
])
def test_a_refusal_names_the_input_that_was_wrong(call: object, name: str) -> None:
    with pytest.raises(InputError, match=rf"^{name} must be a whole number"):
        call()  # type: ignore[operator]


def test_zero_parameters_are_allowed() -> None:
    # params >= 0: an empty model sends and holds nothing
    assert ddp_comm_volume(0, 4, "fp32").sent_bytes_per_rank == 0.0
    assert zero_comm_volume(0, 4, 1, "fp32").sent_bytes_per_rank == 0.0
    assert fsdp_comm_volume(0, 4, "fp32").sent_bytes_per_rank == 0.0
    assert zero_bytes(0, 4, 3, "fp32", "adam").total_bytes == 0
    with pytest.raises(InputError, match=r"^params must"):
        ddp_comm_volume(True, 4, "fp32")  # a bool is not a count


def test_tp_indivisible_refuses_a_degree_by_name() -> None:
    with pytest.raises(InputError, match=r"^tp must be a whole number from 1 to 2\^63 - 1, got 0$"):
        tp_indivisible(get_preset("tiny"), 0)


# two tensors of 8 × 4 and 3: 35 parameters; bf16 with an fp32 master, AdamW: 2 + 2 + 4 + 8
# bytes a parameter
SHAPES = [(8, 4), (3,)]


def test_torch_zero_0_shards_nothing_and_counts_the_master_whole() -> None:
    z = torch_zero_bytes(SHAPES, 2, 0, "bf16-master", "adamw")
    assert z.shard_params == 18  # ⌈35 / 2⌉, the even share it would be
    assert z.master_bytes == 140  # 4 · 35: not sharded at stage 0
    assert z.total_bytes == 560  # 16 · 35
    assert z.steps[1].formula == "nothing sharded"


def test_torch_zero_names_each_stages_rule() -> None:
    one = torch_zero_bytes(SHAPES, 2, 1, "bf16-master", "adamw")
    assert one.shard_params == 32  # the 8 × 4 tensor goes to rank 0 whole
    assert one.steps[1].formula == "whole tensors, largest first to the least-loaded rank"
    three = torch_zero_bytes(SHAPES, 2, 3, "bf16-master", "adamw")
    assert three.shard_params == 18  # 4 · 4 rows + ⌈3 / 2⌉
    assert three.steps[1].formula == "each tensor's ⌈rows / N⌉ rows"


@pytest.mark.parametrize(("shapes", "ranks", "message"), [
    (SHAPES, 0, r"ranks must be a whole number from 1 to 2\^63 - 1, got 0"),
    ([(8, -1)], 2, "a dimension must be a whole number >= 0, got -1"),
])
def test_torch_zero_refuses_by_name(shapes: list[tuple[int, ...]], ranks: int,
                                    message: str) -> None:
    with pytest.raises(InputError, match=f"^{message}$"):
        torch_zero_bytes(shapes, ranks, 3, "fp32", "sgd")


def test_torch_zero_2_carries_its_inputs_and_the_unsharded_bytes() -> None:
    z = torch_zero_bytes(SHAPES, 2, 2, "bf16-master", "adamw")
    assert (z.stage, z.ranks, z.params) == (2, 2, 35)
    assert (z.precision, z.optimizer) == ("bf16-master", "adamw")
    assert z.breakdown == bytes_per_param("bf16-master", "adamw")
    assert z.unsharded_bytes == 560  # one device holds everything: 16 · 35
    assert z.steps[1].formula == "each tensor's ⌈rows / N⌉ rows"
    # the working names each part
    assert [s.label for s in z.steps[2:6]] == ["parameters", "gradients", "master copy",
                                               "optimizer state"]
