"""Layouts torch-free (issue 42's mutation run of ``tensorledger.workload.layout``): each
property's product or name, the description of every dimension, and each refusal of
:func:`resolve_layout`, the expert checks and :func:`check_layout` at its boundary, the
degrees all different so a swapped dimension changes the answer."""

from __future__ import annotations

import re

import pytest

from tensorledger.errors import InputError
from tensorledger.napkin.transformer import TransformerConfig, get_preset
from tensorledger.workload import layout as lo
from tensorledger.workload.layout import Layout, resolve_layout
from tensorledger.workload.schedules import StageLayers

TINY = get_preset("tiny")  # d 64, 2 layers, 4 heads (2 kv), vocab 128, d_ff 128
# 8 heads (and 8 kv), d_ff 4 · 64 = 256, vocab 128: every one divides by 4
EIGHT = TransformerConfig(vocab_size=128, context_length=64, d_model=64, n_layers=2, n_heads=8)


def _refused(says: str, **options: object) -> None:
    with pytest.raises(InputError, match="^" + re.escape(says)):
        resolve_layout(**options)  # type: ignore[arg-type]


def test_the_tables() -> None:
    assert lo.LARGEST_DEGREE == 1048576  # 2^20
    assert lo.SCHEDULES == ("gpipe", "1f1b", "interleaved-1f1b", "looped-bfs",
                            "interleaved-zb", "zbv")  # Schedule's values in order
    assert lo.CP_ROTATIONS == ("allgather", "alltoall")
    assert sorted(lo.ZERO_STAGES) == [1, 2, 3]
    assert Layout() == lo.SINGLE and lo.SINGLE.single


def test_a_layouts_defaults_are_one_device() -> None:
    layout = Layout()
    assert (layout.dp, layout.fsdp, layout.zero, layout.tp, layout.sp, layout.pp,
            layout.microbatches, layout.schedule, layout.chunks, layout.stage_layers,
            layout.cp, layout.cp_rotate, layout.ep, layout.etp) == (
        1, 1, 3, 1, False, 1, 1, "1f1b", 1, None, 1, "allgather", 1, 1)


def test_products_of_the_degrees() -> None:
    layout = Layout(dp=2, fsdp=3, ep=5, cp=7, tp=11, pp=13)
    assert layout.count == 2 * 3 * 5 * 7 * 11 * 13  # every degree once
    assert layout.data_parallel == 2 * 3 * 5  # replicas × shards × expert ranks
    assert layout.shard_ranks == 3 * 7  # fsdp × cp
    assert not layout.single
    assert Layout(pp=2).count == 2 and not Layout(pp=2).single


def test_mesh_dims_outermost_first_and_only_above_one() -> None:
    layout = Layout(dp=2, fsdp=3, ep=5, cp=7, tp=11, pp=13)
    assert layout.mesh_dims == (("pp", 13), ("dp", 2), ("fsdp", 3), ("cp", 7), ("ep", 5),
                                ("tp", 11))
    assert Layout(fsdp=3, tp=2).mesh_dims == (("fsdp", 3), ("tp", 2))
    assert Layout().mesh_dims == ()


def test_dim_strides_multiply_from_the_innermost() -> None:
    # tp 1 apart; ep 2 apart (tp); cp 2 · 5 = 10; fsdp 10 · 7 = 70; dp 70 · 3 = 210
    assert Layout(dp=2, fsdp=3, ep=5, cp=7, tp=2).dim_strides == {
        1: "tp", 2: "ep", 10: "cp", 70: "fsdp", 210: "dp"}
    assert Layout().dim_strides == {}


def test_group_names_add_the_flattened_fsdp_groups() -> None:
    # fsdp 3 beside ep 5 (stride 2) and cp 7 (stride 10): (2, 15) fsdp·ep, (10, 21) fsdp·cp
    assert Layout(fsdp=3, ep=5, cp=7, tp=2).group_names == {
        1: "tp", 2: "ep", 10: "cp", 70: "fsdp", (2, 15): "fsdp·ep", (10, 21): "fsdp·cp"}
    # without fsdp, nothing flattened
    assert Layout(ep=5, tp=2).group_names == {1: "tp", 2: "ep"}
    # fsdp without ep or cp: nothing flattened either
    assert Layout(fsdp=3, tp=2).group_names == {1: "tp", 2: "fsdp"}


@pytest.mark.parametrize(("layout", "strategy"), [
    (Layout(), ""),
    (Layout(tp=2), ""),
    (Layout(dp=2), "ddp"),
    (Layout(ep=2), "ddp"),  # expert ranks run their own batches under DDP
    (Layout(fsdp=2), "fsdp"),
    (Layout(cp=2), "fsdp"),  # context-parallel ranks shard the parameters as FSDP's
    (Layout(fsdp=2, dp=2), "hsdp"),
    (Layout(cp=2, dp=2), "hsdp"),
    (Layout(fsdp=2, zero=1), "zero1"),
    (Layout(fsdp=2, zero=2), "fsdp"),
])
def test_strategy_names_the_data_parallel_part(layout: Layout, strategy: str) -> None:
    assert layout.strategy == strategy


@pytest.mark.parametrize(("layout", "says"), [
    (Layout(fsdp=4), "FSDP ZeRO-3 × 4"),
    (Layout(fsdp=4, zero=2), "FSDP ZeRO-2 × 4"),
    (Layout(fsdp=4, zero=1), "DDP + ZeRO-1 × 4"),
    (Layout(dp=2), "DDP × 2"),
    (Layout(dp=2, fsdp=4), "FSDP ZeRO-3 × 4 · replicas × 2"),
    (Layout(dp=2, fsdp=4, zero=1), "DDP + ZeRO-1 × 4 · DDP × 2"),  # ZeRO-1 shards no params
    (Layout(dp=2, cp=2), "replicas × 2 · CP × 2 (ring attention, allgather; FSDP ZeRO-3 over "
                         "fsdp·cp = 2 ranks)"),
    (Layout(fsdp=3, cp=2, cp_rotate="alltoall", zero=2),
     "FSDP ZeRO-2 × 3 · CP × 2 (ring attention, alltoall; FSDP ZeRO-2 over fsdp·cp = 6 ranks)"),
    (Layout(ep=4), "EP × 4 (experts sharded, tokens by all-to-all)"),
    (Layout(ep=2), "EP × 2 (experts sharded, tokens by all-to-all)"),
    (Layout(ep=2, fsdp=3, tp=2, etp=2),
     "FSDP ZeRO-3 × 3 · EP × 2 (experts sharded, tokens by all-to-all; FSDP of the experts over "
     "fsdp = 3 ranks; each expert's hidden width split over tp (ETP 2)) · TP × 2"),
    (Layout(ep=2, fsdp=3, tp=2),
     "FSDP ZeRO-3 × 3 · EP × 2 (experts sharded, tokens by all-to-all; FSDP of the experts over "
     "fsdp = 3 ranks; experts whole on each tp rank) · TP × 2"),
    (Layout(pp=2, microbatches=4, schedule="looped-bfs", chunks=2),
     "PP × 2 (looped-bfs × 2 chunks, 4 micro-batches)"),
    (Layout(ep=4, fsdp=2), "FSDP ZeRO-3 × 2 · EP × 4 (experts sharded, tokens by all-to-all; "
                           "FSDP of the experts over fsdp = 2 ranks)"),
    (Layout(ep=4, tp=2), "EP × 4 (experts sharded, tokens by all-to-all; experts whole on each "
                         "tp rank) · TP × 2"),
    (Layout(ep=4, tp=2, etp=2), "EP × 4 (experts sharded, tokens by all-to-all; each expert's "
                                "hidden width split over tp (ETP 2)) · TP × 2"),
    (Layout(tp=8, sp=True), "TP + SP × 8"),
    (Layout(pp=2, microbatches=4), "PP × 2 (1f1b, 4 micro-batches)"),
    (Layout(pp=2, microbatches=4, schedule="interleaved-1f1b", chunks=3,
            stage_layers=StageLayers.parse("first-1,last-1")),
     "PP × 2 (interleaved-1f1b × 3 chunks, 4 micro-batches, stage layers first-1,last-1)"),
])
def test_describe_names_every_dimension(layout: Layout, says: str) -> None:
    assert layout.describe() == says


def test_repr_is_the_description_and_the_ranks() -> None:
    assert repr(Layout()) == "Layout(single device)"
    assert repr(Layout(fsdp=2, tp=3)) == "Layout(FSDP ZeRO-3 × 2 · TP × 3, 6 ranks)"


def test_stage_counts_split_evenly_or_as_given() -> None:
    assert Layout(pp=2).stage_counts(6) == (3, 3)
    assert all(type(n) is int for n in Layout(pp=2).stage_counts(6))  # whole blocks, not 3.0
    assert Layout(pp=2, chunks=3).stage_counts(12) == (2,) * 6  # 12 over 2 · 3 stages
    # first-1,last-1 over 4 stages of 6 layers: 1, the middle 4 over 2, 1
    assert Layout(pp=2, chunks=2, stage_layers=StageLayers.parse("first-1,last-1")
                  ).stage_counts(6) == (1, 2, 2, 1)
    with pytest.raises(InputError, match=r"^--pp 4 does not divide m's 6 layers; use a stage "
                                         r"count that divides 6, or --stage-layers \(e\.g\. "
                                         r"first-1,last-1\)$"):
        Layout(pp=4).stage_counts(6, "m")
    with pytest.raises(InputError, match=r"^--pp 2 × 2 chunks does not divide the model's 6 "):
        Layout(pp=2, chunks=2).stage_counts(6)


def test_degree_is_a_whole_number_from_one_to_the_largest() -> None:
    assert lo._degree("tp", 1) == 1
    assert lo._degree("tp", lo.LARGEST_DEGREE) == lo.LARGEST_DEGREE
    with pytest.raises(InputError, match=r"^--tp must be between 1 and 1,048,576, got "
                                         r"1,048,577$"):
        lo._degree("tp", lo.LARGEST_DEGREE + 1)
    with pytest.raises(InputError, match=r"^--tp must be between 1 and 1,048,576, got 0$"):
        lo._degree("tp", 0)
    with pytest.raises(InputError, match=r"^--dp must be a whole number of ranks, got True$"):
        lo._degree("dp", True)
    with pytest.raises(InputError, match=r"^--dp must be a whole number of ranks, got 2\.0$"):
        lo._degree("dp", 2.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["dp", "fsdp", "tp", "pp", "cp", "ep", "etp", "microbatches"])
def test_every_degree_is_checked_under_its_own_name(name: str) -> None:
    _refused(f"--{name} must be between 1 and 1,048,576, got 0", **{name: 0})


def test_resolve_layout_keeps_every_degree_and_fills_the_defaults() -> None:
    layout = resolve_layout(dp=2, fsdp=3, tp=5, sp=True, pp=7, microbatches=14,
                            schedule="GPipe")
    assert (layout.dp, layout.fsdp, layout.tp, layout.sp, layout.pp, layout.microbatches,
            layout.schedule, layout.zero, layout.chunks) == (
        2, 3, 5, True, 7, 14, "gpipe", 3, 1)
    assert resolve_layout().schedule == "1f1b" and resolve_layout().microbatches == 1
    assert resolve_layout(tp=2, sp=1).sp is True  # type: ignore[arg-type]  # made a bool
    cp = resolve_layout(cp=2, cp_rotate=" AllToAll ")
    assert (cp.cp, cp.cp_rotate, cp.zero) == (2, "alltoall", 3)  # named in any case
    assert resolve_layout(cp=2).cp_rotate == "allgather"
    ep = resolve_layout(ep=2, tp=4, etp=4)
    assert (ep.ep, ep.tp, ep.etp) == (2, 4, 4)
    assert resolve_layout(fsdp=2, zero=2).zero == 2


def test_a_pipeline_takes_its_chunks_and_stage_layers() -> None:
    assert resolve_layout(pp=2, microbatches=4, schedule="interleaved-1f1b").chunks == 2
    assert resolve_layout(pp=2, microbatches=4, schedule="interleaved-1f1b",
                          chunks=3).chunks == 3
    assert resolve_layout(pp=2, microbatches=2).chunks == 1  # 1f1b: one stage per rank
    staged = resolve_layout(pp=2, microbatches=2, stage_layers="first-1,last-1")
    assert staged.stage_layers == StageLayers.parse("first-1,last-1")
    assert resolve_layout(pp=2, microbatches=2).stage_layers is None
    # the schedule's own check: 1f1b needs a micro-batch per stage
    _refused("1f1b needs a micro-batch per stage at least; --microbatches 1 < 2", pp=2)
    _refused("--chunks must be between 1", pp=2, microbatches=4, schedule="interleaved-1f1b",
             chunks=0)


@pytest.mark.parametrize("option", [{"microbatches": 2}, {"schedule": "gpipe"}, {"chunks": 2},
                                    {"stage_layers": "first-1"}])
def test_pipeline_options_without_a_pipeline_are_refused(option: dict[str, object]) -> None:
    _refused("--microbatches, --schedule, --chunks and --stage-layers run a pipeline; give "
             "--pp N (N > 1)", **option)


def test_context_parallel_rotation_refusals() -> None:
    _refused("--cp-rotate moves keys and values round the context-parallel ring; give --cp N "
             "(N > 1) with it", cp_rotate="alltoall")
    _refused("unknown --cp-rotate 'ring'; known: allgather, alltoall", cp=2, cp_rotate="ring")


def test_zero_stage_refusals() -> None:
    _refused("--zero is a ZeRO stage, 1, 2 or 3, got True", fsdp=2, zero=True)
    _refused("--zero is a ZeRO stage, 1, 2 or 3, got 0", fsdp=2, zero=0)
    _refused("--zero 3 shards optimizer state, gradients and parameters over the ranks of "
             "--fsdp; give --fsdp N (N > 1) with it", zero=3)
    # beside context parallelism ZeRO 2 and 3 shard over the cp ranks: no --fsdp needed
    assert resolve_layout(cp=2, zero=2).zero == 2
    _refused("--zero 1 runs DDP, which would all-reduce whole gradients over the --cp ranks "
             "too; use --zero 2 or 3 with --cp", cp=2, fsdp=2, zero=1)
    # ZeRO 1 beside cp alone still needs --fsdp (it shards over the fsdp ranks only)
    _refused("--zero 1 shards optimizer state over the ranks of --fsdp", cp=2, zero=1)
    _refused("--zero 1 shards the optimizer over every data-parallel rank; give them all as "
             "--fsdp N, without --dp", fsdp=2, dp=2, zero=1)
    assert resolve_layout(fsdp=2, zero=1).strategy == "zero1"


def test_sequence_parallel_and_count_refusals() -> None:
    _refused("--sp splits the sequence over the tensor-parallel ranks; give --tp N (N > 1) "
             "with it", sp=True)
    _refused("--count 6 is not the layout's 2 (fsdp) × 2 (tp) = 4 devices; drop --count",
             fsdp=2, tp=2, count=6)
    assert resolve_layout(fsdp=2, tp=2, count=4).count == 4  # the product: accepted
    assert resolve_layout(count=6).single  # alone: no layout to compare with


def test_expert_parallelism_beside_what_it_is_not_laid_out_with() -> None:
    _refused("--ep 2 beside --dp 3 is not laid out yet; --ep runs alone or beside --fsdp "
             "(ZeRO 2 or 3, with --dp: HSDP), --tp and --pp", ep=2, dp=3)
    _refused("--ep 2 beside --cp 3 is not laid out yet", ep=2, cp=3)
    _refused("--ep 2 beside --dp 3, --cp 5, --zero 1, --sp is not laid out yet", ep=2, dp=3,
             cp=5, zero=1, sp=True, tp=2)
    _refused("--ep 2 beside --dp 2 is not laid out yet", ep=2, dp=2)  # the least degree
    _refused("--ep 2 beside --cp 2 is not laid out yet", ep=2, cp=2)
    _refused("--ep 2 beside --pp 2 shards each stage's", ep=2, pp=2, microbatches=2)
    # --dp beside --fsdp is HSDP: allowed
    assert resolve_layout(ep=2, dp=3, fsdp=5).count == 30
    _refused("--ep 2 beside --pp 3 shards each stage's other parameters over fsdp·ep with "
             "FSDP2 (DDP is not traced within pipeline stages); give --fsdp N (N > 1) too",
             ep=2, pp=3, microbatches=3)
    assert resolve_layout(ep=2, pp=3, microbatches=3, fsdp=2).count == 12
    assert resolve_layout(ep=2, tp=3).count == 6


def test_expert_tensor_parallelism_is_one_or_the_tp_degree() -> None:
    _refused("--etp 2 splits each expert-parallel rank's experts over the tensor-parallel "
             "ranks; give --ep N and --tp N (N > 1) with it", etp=2, tp=2)
    _refused("--etp 2 splits each expert-parallel", etp=2, ep=2)
    _refused("--etp takes 1 (experts whole on each tp rank) or the --tp degree 4, got 2",
             ep=2, tp=4, etp=2)


def test_check_experts() -> None:
    lo.check_experts(Layout(), None, "m")  # no ep: nothing asked
    lo.check_experts(Layout(ep=4), (8, 2), "m")  # 8 % 4 = 0
    with pytest.raises(InputError, match=r"^--ep 2 shards routed experts; 'm' has none \(a "
                                         r"mixture-of-experts config\.json has them\): drop "
                                         r"--ep$"):
        lo.check_experts(Layout(ep=2), None, "m")
    with pytest.raises(InputError, match=r"^--ep 3 does not divide m's 8 routed experts; use an "
                                         r"--ep that divides 8$"):
        lo.check_experts(Layout(ep=3), (8, 3), "m")  # 8 % 3 = 2 (k 3 divides nothing here)


def test_check_expert_width() -> None:
    lo.check_expert_width(Layout(ep=2, tp=3, etp=3), 33, "m")  # 33 = 3 · 11
    lo.check_expert_width(Layout(ep=2, tp=3), 32, "m")  # etp 1: nothing split
    with pytest.raises(InputError, match=r"^--etp 2 does not divide m's expert width 33"):
        lo.check_expert_width(Layout(ep=2, tp=2, etp=2), 33, "m")  # 33 is odd
    with pytest.raises(InputError, match=r"^--etp 3 does not divide m's expert width 3,200; "
                                         r"use --etp 1 or a --tp dividing 3,200$"):
        lo.check_expert_width(Layout(ep=2, tp=3, etp=3), 3200, "m")  # 3200 % 3 = 2


def test_check_layout_pipeline() -> None:
    lo.check_layout(Layout(pp=2, microbatches=3), TINY, batch=6, seq=8)  # 2 layers, 6 = 3 · 2
    with pytest.raises(InputError, match=r"^--pp 4 does not divide tiny's 2 layers"):
        lo.check_layout(Layout(pp=4, microbatches=4), TINY, batch=4, seq=8)
    lo.check_layout(Layout(pp=4, microbatches=4), None, batch=4, seq=8)  # no config: no layers
    with pytest.raises(InputError, match=r"^--batch 5 does not split into 3 micro-batches; use a "
                                         r"batch that divides by 3$"):
        lo.check_layout(Layout(pp=2, microbatches=3), TINY, batch=5, seq=8)
    lo.check_layout(Layout(microbatches=3), TINY, batch=5, seq=8)  # pp 1: no micro-batches
    with pytest.raises(InputError, match=r"^--pp 2 × 3 chunks does not divide tiny's 2 layers"):
        lo.check_layout(Layout(pp=2, chunks=3), TINY, batch=1, seq=8)  # 2 layers, 6 stages
    # pp 1: stage layers are not asked for (one stage holds them all)
    lo.check_layout(Layout(stage_layers=StageLayers.parse("first-1,last-1")), TINY, batch=1,
                    seq=8)


def test_check_layout_context_parallel() -> None:
    with pytest.raises(InputError, match=r"^--cp 2 cuts the token ids of a reference model"):
        lo.check_layout(Layout(cp=2), None, batch=1, seq=8)
    lo.check_layout(Layout(cp=3), TINY, batch=1, seq=12)  # 12 = 2 · 3 · 2
    with pytest.raises(InputError, match=r"^--cp 2 splits each sequence into 2 × 2 chunks"):
        lo.check_layout(Layout(cp=2), TINY, batch=1, seq=6)  # 6 % 4 = 2
    with pytest.raises(InputError, match=r"^--cp 3 splits each sequence into 2 × 3 chunks \(two "
                                         r"per rank, balancing the causal mask\); --seq 1,003 "
                                         r"does not divide by 6$"):
        lo.check_layout(Layout(cp=3), TINY, batch=1, seq=1003)  # 1003 = 167 · 6 + 1
    lo.check_layout(Layout(), None, batch=1, seq=7)  # nothing to ask


def test_check_layout_sequence_parallel_divides_by_tp_times_cp() -> None:
    # tp 4 · cp 3 = 12: seq 12 divides by 12 (and by the ring's 2 · 3 = 6)
    lo.check_layout(Layout(tp=4, sp=True, cp=3), EIGHT, batch=1, seq=12)
    # seq 18 divides by 6 (the ring) but not by 12
    with pytest.raises(InputError, match=r"^--sp splits the sequence over --tp 4 ranks; --seq 18 "
                                         r"does not divide by 12$"):
        lo.check_layout(Layout(tp=4, sp=True, cp=3), TINY, batch=1, seq=18)
    lo.check_layout(Layout(tp=2), TINY, batch=1, seq=7)  # no sp: the sequence is whole


def test_check_layout_tensor_parallel_names_the_dimension() -> None:
    lo.check_layout(Layout(tp=2), TINY, batch=1, seq=8)  # 4, 2, 128, 128 all divide by 2
    lo.check_layout(Layout(tp=3), None, batch=1, seq=8)  # no config: torch's checks speak
    with pytest.raises(InputError, match=r"^--tp 4 does not divide tiny's 2 key/value heads; "
                                         r"use a --tp that divides 2$"):
        lo.check_layout(Layout(tp=4), TINY, batch=1, seq=8)
    big = get_preset("gpt2")
    with pytest.raises(InputError, match=r"^--tp 2 does not divide gpt2's 50,257 vocabulary; "
                                         r"use a --tp that divides 50,257$"):
        lo.check_layout(Layout(tp=2), big, batch=1, seq=8)
