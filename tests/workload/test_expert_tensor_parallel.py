"""Expert tensor parallelism (issue 38; torchtitan's ETP = TP): beside ``--ep 2 --tp 2``,
``--etp 2`` keeps on each tp rank half the hidden width of its ep rank's experts and
all-reduces the experts' output slots over tp in forward, their input slots' gradient in
backward.

tiny-moe: d = 64, 2 layers, E = 6 routed experts of width f = 32, top-k 2, one shared expert
of width 48.  A step of batch 2 × seq 20 = 40 tokens: 80 token-slots a layer, fp32, 256 bytes
a slot; balanced routing: 14, 14, 13, 13, 13, 13 slots.  Rank 0 of ep holds experts 0, 1, 2
and receives their 14 + 14 + 13 = 41 slots from each of the 2 ep ranks: 82 slots it runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from tensorledger.errors import InputError
from tensorledger.ledger.memory import memory_of
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import check_expert_width, resolve_layout

D, E, K, WIDTH, LAYERS = 64, 6, 2, 32, 2
B, S = 2, 20
TOKENS = B * S  # 40
SLOTS = TOKENS * K  # 80
ROW = D * 4  # 256 bytes a slot, fp32
RUN = 2 * (14 + 14 + 13)  # 82 slots reach rank 0's experts, from both ep ranks
EP, TP = 2, 2
LOCAL = E // EP  # 3 experts a rank


def _trace(**layout: Any) -> Any:
    work = resolve_workload("tiny-moe", batch=B, seq=S, step="train", precision="fp32",
                            device="fake", layout=resolve_layout(**layout))
    return trace_workload(work, first_step=True)


@pytest.fixture(scope="module")
def etp() -> Any:
    return _trace(ep=EP, tp=TP, etp=TP)


@pytest.fixture(scope="module")
def whole() -> Any:  # ETP = 1: the experts whole on each tp rank
    return _trace(ep=EP, tp=TP)


def _collectives(run: Any, kind: str, phase: str, module: str = "") -> list[Any]:
    return [r.collective for r in run.trace.records if r.collective is not None
            and r.collective.kind == kind and r.phase == phase and module in r.module]


def test_experts_all_reduce_their_output_and_input_gradient_over_tp(etp: Any) -> None:
    # one all-reduce of the 82 output slots a layer in forward, of their input slots'
    # gradient in backward: 82 · 64 · 4 = 20,992 bytes each, over the tp pair (1 apart)
    size = RUN * ROW
    assert size == 20_992
    for phase in ("forward", "backward"):
        reduced = _collectives(etp, "all-reduce", phase, ".mlp.experts")
        assert [c.size_bytes for c in reduced] == [size] * LAYERS
        assert {(c.group_size, c.rank_stride) for c in reduced} == {(TP, 1)}
        # the ring sends 2 · S · (N − 1)/N = 2 · 20,992 · 1/2 = 20,992 bytes a rank
        assert [c.bytes_sent for c in reduced] == [2 * size * (TP - 1) // TP] * LAYERS
    # per MoE layer and rank, forward and backward together: 2 · 20,992 = 41,984 bytes
    per_layer = sum(c.size_bytes for phase in ("forward", "backward")
                    for c in _collectives(etp, "all-reduce", phase, ".mlp.experts")) // LAYERS
    assert per_layer == 2 * RUN * D * 4 == 41_984


def test_without_etp_the_experts_reduce_nothing_over_tp(whole: Any) -> None:
    for phase in ("forward", "backward"):
        assert _collectives(whole, "all-reduce", phase, ".mlp.experts") == []


def test_the_all_to_alls_are_those_of_etp_1(etp: Any, whole: Any) -> None:
    """The tp ranks of an ep rank route alike: ETP changes none of the token all-to-alls."""
    for phase in ("forward", "backward"):
        ours = [(c.size_bytes, c.bytes_sent, c.bytes_received)
                for c in _collectives(etp, "all-to-all", phase)]
        assert ours == [(c.size_bytes, c.bytes_sent, c.bytes_received)
                        for c in _collectives(whole, "all-to-all", phase)]
        assert (SLOTS * ROW, 39 * ROW, 41 * ROW) in ours  # 80 slots out: 39 leave, 41 stay


def test_a_rank_holds_half_of_each_of_its_experts(etp: Any, whole: Any) -> None:
    """Parameters, gradients and optimizer state (AdamW: two fp32 moments) of the routed
    experts per rank: E/EP = 3 experts × 1/ETP of each."""
    # one expert: gate, up (d × f) and down (f × d) = 3 · 64 · 32 = 6,144 values
    expert = 3 * D * WIDTH
    assert expert == 6_144
    whole_bytes = LAYERS * LOCAL * expert * 4  # 2 · 3 · 6,144 · 4 = 147,456 bytes ETP 1
    split_bytes = LAYERS * LOCAL * (expert // TP) * 4  # 73,728 bytes ETP 2
    assert (whole_bytes, split_bytes) == (147_456, 73_728)
    ours, theirs = memory_of(etp), memory_of(whole)
    saved = whole_bytes - split_bytes
    assert theirs.params_bytes - ours.params_bytes == saved
    assert theirs.grads_bytes - ours.grads_bytes == saved
    assert theirs.optimizer_state_bytes - ours.optimizer_state_bytes == 2 * saved



def test_the_experts_save_half_their_hidden_activations(etp: Any, whole: Any) -> None:
    """The experts save, of their hidden width, the gate's and up's outputs, the SiLU's and
    the product: 4 tensors of 82 slots × f, halved by ETP 2; the slots in and out are whole."""
    halved = LAYERS * 4 * RUN * (WIDTH - WIDTH // TP) * 4  # 2 · 4 · 82 · 16 · 4
    assert halved == 41_984
    assert (memory_of(whole).saved_activation_bytes - memory_of(etp).saved_activation_bytes
            == halved)


def test_each_tp_rank_keeps_its_columns_of_gate_and_up_and_rows_of_down() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tensorledger.models import build_model, get_preset
    from tensorledger.trace.storage import local_tensor
    from tensorledger.workload.parallel import build_mesh, fake_process_group, parallelize
    from tensorledger.workload.routed import RoutedMode

    layout = resolve_layout(ep=EP, tp=TP, etp=TP, fsdp=2)
    with fake_process_group(layout.count), FakeTensorMode(), RoutedMode(E, K):
        model = parallelize(build_model(get_preset("tiny-moe"), "cpu"), layout,
                            build_mesh(layout))
        shapes = {name.rpartition(".")[2]: tuple(local_tensor(p).shape)
                  for name, p in model.named_parameters() if "blocks.0.mlp.experts." in name}
    # 3 experts (ep), 32 / 2 = 16 hidden features (etp), then FSDP2 over fsdp = 2: 2 of the
    # 3 experts on fsdp rank 0 (its first dimension padded to a multiple of 2)
    assert shapes == {"gate": (2, D, WIDTH // TP), "up": (2, D, WIDTH // TP),
                      "down": (2, WIDTH // TP, D)}


def test_the_layout_names_it() -> None:
    assert "each expert's hidden width split over tp (ETP 2)" in resolve_layout(
        ep=2, tp=2, etp=2).describe()
    assert "experts whole on each tp rank" in resolve_layout(ep=2, tp=2).describe()


@pytest.mark.parametrize(("layout", "fragment"), [
    ({"etp": 2}, "--etp 2 splits each expert-parallel rank's experts over the tensor"),
    ({"ep": 2, "etp": 2}, "give --ep N and --tp N (N > 1) with it"),
    ({"tp": 2, "etp": 2}, "give --ep N and --tp N (N > 1) with it"),
    ({"ep": 2, "tp": 4, "etp": 2}, "--etp takes 1 (experts whole on each tp rank) or the --tp "
                                    "degree 4, got 2"),
    ({"ep": 2, "tp": 2, "etp": 0}, "--etp must be between 1 and"),
    ({"ep": 2, "tp": 2, "etp": True}, "--etp must be a whole number of ranks"),
])
def test_refusals(layout: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InputError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        resolve_layout(**layout)


def test_the_width_must_divide() -> None:
    with pytest.raises(InputError, match="--etp 3 does not divide tiny-moe's expert width 32"):
        check_expert_width(resolve_layout(ep=2, tp=3, etp=3), WIDTH, "tiny-moe")
    check_expert_width(resolve_layout(ep=2, tp=4, etp=4), WIDTH, "tiny-moe")  # 32 / 4 = 8
    from tensorledger.models import get_preset
    from tensorledger.models.moe import RoutedExperts
    from tensorledger.workload.expert_tensor_parallel import split_expert_width
    from tensorledger.workload.parallel import fake_process_group

    moe = get_preset("tiny-moe").moe
    assert moe is not None
    with fake_process_group(3):
        from torch.distributed.device_mesh import init_device_mesh

        with pytest.raises(InputError, match="--etp 3 does not divide the expert width 32"):
            split_expert_width(RoutedExperts(D, moe), "experts", init_device_mesh("cpu", (3,)))


def test_inside_pipeline_stages_under_autocast() -> None:
    """--pp 2 --microbatches 2 --fsdp 2 in mixed bf16: stage 0 holds one MoE layer, run once a
    micro-batch of 1 × 20 tokens, 40 slots balanced 7, 7, 7, 7, 6, 6: rank 0's experts get
    7 + 7 + 7 = 21 from each of the 2 ep ranks, 42 slots.  The experts' output is bf16 (the
    grouped GEMM runs in autocast's dtype): 42 · 64 · 2 = 5,376 bytes; the gradient of their
    input is the fp32 residual stream's (cast to bf16 inside the experts): 42 · 64 · 4 =
    10,752 bytes."""
    work = resolve_workload("tiny-moe", batch=B, seq=S, step="train", precision="mixed-bf16",
                            device="fake", layout=resolve_layout(ep=EP, tp=TP, etp=TP, fsdp=2,
                                                                 pp=2, microbatches=2))
    run = trace_workload(work)
    slots = 2 * (7 + 7 + 7)
    assert (slots * D * 2, slots * D * 4) == (5_376, 10_752)
    assert [c.size_bytes for c in _collectives(run, "all-reduce", "forward", ".mlp.experts")
            ] == [slots * D * 2] * 2
    assert [c.size_bytes for c in _collectives(run, "all-reduce", "backward", ".mlp.experts")
            ] == [slots * D * 4] * 2
    assert not run.trace.uncovered


def test_activation_checkpointing_reduces_the_recomputed_output_again() -> None:
    """--checkpoint full: backward runs each block's forward again, its experts' output
    all-reduce with it (82 · 64 · 2 = 10,496 bytes in mixed bf16), before the input-gradient
    all-reduce (82 · 64 · 4 = 20,992 bytes)."""
    work = resolve_workload("tiny-moe", batch=B, seq=S, step="train", precision="mixed-bf16",
                            device="fake", checkpoint="full",
                            layout=resolve_layout(ep=EP, tp=TP, etp=TP))
    run = trace_workload(work)
    assert [c.size_bytes for c in _collectives(run, "all-reduce", "forward", ".mlp.experts")
            ] == [RUN * D * 2] * LAYERS
    assert [c.size_bytes for c in _collectives(run, "all-reduce", "backward", ".mlp.experts")
            ] == [RUN * D * 2, RUN * D * 4] * LAYERS
    assert (RUN * D * 2, RUN * D * 4) == (10_496, 20_992)


def test_stacked_experts_of_other_kinds_are_refused() -> None:
    """transformers' grouped-GEMM experts (their own matrices' layouts) are not split: one
    line, before anything is cut."""
    import torch
    from torch import nn

    from tensorledger.workload.expert_parallel import apply_expert_parallel
    from tensorledger.workload.parallel import build_mesh, fake_process_group

    class Stacked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.num_experts = 4
            self.gate_up_proj = nn.Parameter(torch.zeros(4, 6, 8))

    layout = resolve_layout(ep=2, tp=2, etp=2)
    with fake_process_group(layout.count):
        mesh = build_mesh(layout)
        with pytest.raises(InputError, match=r"--etp 2 splits the reference models' routed "
                                             r"experts; 0 \(Stacked\) is not one: drop --etp"):
            model = nn.Sequential(Stacked())
            apply_expert_parallel(model, mesh["ep"], tp=mesh["tp"])
    assert tuple(model[0].gate_up_proj.shape) == (4, 6, 8)  # all 4 experts still there
