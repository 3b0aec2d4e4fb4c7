"""Layouts: resolved and refused torch-free, in one line naming the dimension; traced as one
rank of a fake process group, whose memory and communication are checked against the hand
arithmetic beside each expectation and napkin's closed forms (a second code path)."""

from __future__ import annotations

import re

import pytest

from tensorledger.errors import InputError
from tensorledger.ledger.memory import memory_report
from tensorledger.ledger.trace import trace_report
from tensorledger.models import get_preset
from tensorledger.napkin.parallel import fsdp_comm_volume, zero_bytes
from tensorledger.napkin.transformer import parameter_count
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import Layout, check_layout, resolve_layout

TINY = get_preset("tiny")  # d 64, 2 layers, 4 heads (2 kv), vocab 128, d_ff 128
TINY_PARAMS = parameter_count(TINY).total_params


def test_degrees_multiply_and_name_their_mesh() -> None:
    layout = resolve_layout(dp=2, fsdp=4, tp=8)
    assert layout.count == 2 * 4 * 8
    assert layout.data_parallel == 2 * 4
    assert layout.mesh_dims == (("dp", 2), ("fsdp", 4), ("tp", 8))
    assert layout.strategy == "hsdp" and layout.zero == 3
    assert resolve_layout(dp=4).strategy == "ddp"
    assert resolve_layout(fsdp=4, zero=1).strategy == "zero1"
    assert resolve_layout(count=8).single  # --count alone is no layout (closed-form sharding)
    assert resolve_layout(fsdp=4, tp=2, count=8).count == 8
    assert Layout().single and Layout().describe() == ""


@pytest.mark.parametrize(("options", "says"), [
    ({"fsdp": 0}, "--fsdp must be between 1"),
    ({"tp": True}, "--tp must be a whole number"),
    ({"dp": 2**21}, "--dp must be between 1 and 1,048,576"),
    ({"zero": 2}, "--zero 2 shards optimizer state and gradients over the ranks of --fsdp"),
    ({"fsdp": 2, "zero": 4}, "--zero is a ZeRO stage, 1, 2 or 3"),
    ({"fsdp": 2, "dp": 2, "zero": 1}, "give them all as --fsdp N"),
    ({"sp": True}, "--sp splits the sequence over the tensor-parallel ranks"),
    ({"fsdp": 4, "tp": 2, "count": 6}, "--count 6 is not the layout's 4 (fsdp) × 2 (tp) = 8"),
])
def test_refusals_name_the_option(options: dict[str, int], says: str) -> None:
    with pytest.raises(InputError, match=re.escape(says)) as raised:
        resolve_layout(**options)  # type: ignore[arg-type]
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(("model", "tp", "what"), [
    ("tiny", 3, "4 attention heads"),  # 4 heads: 3 does not divide
    ("tiny", 8, "4 attention heads"),
    ("tiny", 4, "2 key/value heads"),  # 4 query heads divide by 4, its 2 kv heads do not
    ("llama-3-8b", 16, "8 key/value heads"),  # 32 query heads divide by 16, 8 kv heads do not
    ("gpt2", 4, "50,257 vocabulary"),  # 12 heads and 3072 divide by 4; 50257 is odd
])
def test_tensor_parallel_degree_must_divide_the_model(model: str, tp: int, what: str) -> None:
    with pytest.raises(InputError, match=f"--tp {tp} does not divide .*'s {what}"):
        check_layout(resolve_layout(tp=tp), get_preset(model), batch=1, seq=16)


def test_sequence_parallel_needs_the_sequence_to_divide() -> None:
    with pytest.raises(InputError, match="--seq 9 does not divide by 2"):
        check_layout(resolve_layout(tp=2, sp=True), TINY, batch=1, seq=9)
    check_layout(resolve_layout(tp=2, sp=True), TINY, batch=1, seq=10)  # 10 = 5 · 2


def test_a_layout_runs_on_fake_tensors_only() -> None:
    layout = resolve_layout(fsdp=2)
    assert resolve_workload("tiny", precision="fp32", layout=layout).device == "fake"
    for device in ("meta", "cpu", "cuda"):
        with pytest.raises(InputError, match=f"drop --device {device}"):
            resolve_workload("tiny", device=device, layout=layout)


@pytest.mark.parametrize("ranks", [2, 4])
def test_fsdp_rank_memory_is_the_zero3_closed_form(ranks: int) -> None:
    work = resolve_workload("tiny", batch=2, seq=16, precision="fp32",
                            layout=resolve_layout(fsdp=ranks))
    ledger = memory_report(work)
    # every tensor's first dimension divides by 2 and 4: no padding, P/N parameters each
    shard = TINY_PARAMS // ranks
    closed = zero_bytes(TINY_PARAMS, ranks, 3, "fp32", "adamw")
    assert ledger.params_bytes == 4 * shard == closed.params_bytes
    assert ledger.grads_bytes == 4 * shard == closed.grads_bytes
    # AdamW: two fp32 moments per parameter, plus one 4-byte step counter per tensor: the
    # tiny model has 21 tensors (embedding, head, final norm; 9 per block: 4 attention and 3
    # MLP projections and 2 norms)
    tensors = 3 + 2 * 9
    assert ledger.optimizer_state_bytes == 8 * shard + 4 * tensors
    assert closed.optimizer_bytes == 8 * shard
    assert ledger.ranks == ranks and ledger.layout == f"FSDP ZeRO-3 × {ranks}"


def test_hsdp_shards_over_its_shard_dimension_only() -> None:
    hsdp = memory_report(resolve_workload("tiny", batch=2, seq=16, precision="fp32",
                                          layout=resolve_layout(dp=2, fsdp=2)))
    assert hsdp.params_bytes == 4 * TINY_PARAMS // 2  # 2 replicas of 2 shards: halves


def test_ddp_rank_holds_the_whole_model() -> None:
    ddp = memory_report(resolve_workload("tiny", batch=2, seq=16, precision="fp32",
                                         layout=resolve_layout(dp=2)))
    assert ddp.params_bytes == ddp.grads_bytes == 4 * TINY_PARAMS


def test_fsdp_trace_reports_the_collectives_and_whole_model_six_n_d() -> None:
    report = trace_report(resolve_workload("tiny", batch=2, seq=16, precision="fp32",
                                           layout=resolve_layout(fsdp=4)), depth=1)
    assert report.params == TINY_PARAMS and report.params_per_rank == TINY_PARAMS // 4
    assert report.ranks == 4
    rows = {(c.phase, c.kind): c for c in report.summary.communication}
    napkin = {(c.phase, c.kind): c for c in fsdp_comm_volume(TINY_PARAMS, 4, "fp32").collectives}
    weights = 4 * TINY_PARAMS
    # forward: the root unit, then each block, gathered: every parameter byte once
    assert rows["forward", "all-gather"].calls == 3
    assert rows["forward", "all-gather"].size_bytes == weights == (
        napkin["forward", "all-gather"].size_bytes)
    # each rank receives the other 3 ranks' shards: 3/4 of the bytes
    assert rows["forward", "all-gather"].bytes_received == weights * 3 // 4
    # backward: gradients reduce-scattered, every byte once
    assert rows["backward", "reduce-scatter"].size_bytes == weights
    assert rows["backward", "reduce-scatter"].bytes_sent == weights * 3 // 4
    # 6·N·D uses the whole model: every rank runs all of it on its own batch
    six = report.summary.six_n_d
    assert six is not None and six.params == TINY_PARAMS and six.tokens == 2 * 16


def _fsdp_tiny(ranks: int, zero: int = 3):  # type: ignore[no-untyped-def]
    return memory_report(resolve_workload("tiny", batch=2, seq=16, precision="fp32",
                                          layout=resolve_layout(fsdp=ranks, zero=zero)))


# tiny's FSDP units: the root (embedding and head, untied, 128 · 64 each, and the final norm's
# 64) and two blocks of (90,432 − 16,448) / 2 = 36,992 parameters each
ROOT = 2 * 128 * 64 + 64
BLOCK = (TINY_PARAMS - ROOT) // 2


def test_zero3_peak_holds_the_root_and_one_block_gathered() -> None:
    ledger = _fsdp_tiny(2)
    assert ROOT == 16_448 and BLOCK == 36_992
    # at the peak (backward): the rank's own shards (half of everything) plus the gathered
    # root unit (kept after forward) and the one block whose backward runs
    assert ledger.timeline.peak.parameter_bytes == 4 * (TINY_PARAMS // 2 + ROOT + BLOCK)
    single = memory_report(resolve_workload("tiny", batch=2, seq=16, precision="fp32"))
    # every rank saves what one device saves for its own batch (a second code path)
    assert ledger.saved_activation_bytes == single.saved_activation_bytes


def test_zero2_keeps_every_unit_gathered_from_forward_to_backward() -> None:
    ledger = _fsdp_tiny(2, zero=2)
    # the rank's shards plus the whole model gathered: 4 · (P / 2 + P) bytes
    assert ledger.timeline.peak.parameter_bytes == 4 * (TINY_PARAMS // 2 + TINY_PARAMS)
    assert ledger.params_bytes == 4 * TINY_PARAMS // 2  # resharded after backward


def test_collectives_are_named_by_their_mesh_dimension() -> None:
    layout = resolve_layout(fsdp=2, tp=2)  # ranks (fsdp, tp): tp groups 1 apart, fsdp 2 apart
    assert layout.dim_strides == {1: "tp", 2: "fsdp"}
    report = trace_report(resolve_workload("tiny", batch=2, seq=16, precision="fp32",
                                           layout=layout), depth=1)
    dims = {(row.kind, row.mesh_dim) for row in report.summary.communication}
    # FSDP gathers and reduce-scatters over its dimension; the Megatron plan all-reduces over tp
    assert {("all-gather", "fsdp"), ("reduce-scatter", "fsdp"), ("all-reduce", "tp")} <= dims
    assert not any(kind == "reduce-scatter" and dim == "tp" for kind, dim in dims)


def test_two_layouts_with_equal_meshes_trace_in_one_process() -> None:
    # the TP meshes of both layouts hold ranks 0 and 1 under the name "tp": DTensor's sharding
    # caches must not hand the second the first's (destroyed) group
    for layout in ({"dp": 2, "fsdp": 2, "tp": 2, "sp": True}, {"fsdp": 4, "tp": 2, "sp": True}):
        run = trace_workload(resolve_workload("tiny", batch=1, seq=16, precision="fp32",
                                              layout=resolve_layout(**layout)))
        assert run.trace.records
