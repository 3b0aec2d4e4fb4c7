"""Routing of a mixture of experts, stated (issue 38, item 1): the tokens each expert receives
are fixed by ``--routing`` (balanced, skew=S or a histogram), on fake tensors as on real ones.

Tiny HF Mixtral and Qwen2-MoE with transformers' ``eager`` experts (a loop over the experts
that ``nonzero`` finds, one linear each) trace on fake tensors; their FLOPs equal a closed
form written out below, torch's FlopCounterMode on a real CPU step routed alike, and the
tool's own trace of that real step op by op; a skewed histogram shows in each expert's rows;
memory on fake equals MemTracker on the real step.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.errors import InputError
from tensorledger.memory import build_timeline
from tensorledger.workload import (
    BALANCED,
    Routing,
    StepTrace,
    placement,
    prepare,
    resolve_routing,
    resolve_workload,
    trace_workload,
)
from tensorledger.workload.routed import RoutedMode, assignment
from tensorledger.workload.spec import Workload
from tensorledger.workload.step import routed

pytest.importorskip("transformers")

B, S = 2, 12
T = B * S  # 24 tokens
K = 2  # experts per token
E = 4
SLOTS = T * K  # 48 token-slots

#: Tiny configs, transformers' per-expert loop: hidden 40, 2 layers, 4 experts, top-2.
MOE: dict[str, dict[str, Any]] = {
    "mixtral": {"model_type": "mixtral", "vocab_size": 97, "hidden_size": 40,
                "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 12, "num_local_experts": E,
                "num_experts_per_tok": K, "max_position_embeddings": 64,
                "experts_implementation": "eager"},
    "qwen2_moe": {"model_type": "qwen2_moe", "vocab_size": 97, "hidden_size": 40,
                  "intermediate_size": 72, "moe_intermediate_size": 16,
                  "shared_expert_intermediate_size": 56, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": E,
                  "num_experts_per_tok": K, "decoder_sparse_step": 1,
                  "max_position_embeddings": 64, "tie_word_embeddings": False,
                  "experts_implementation": "eager"},
}

# The forward's products, per layer, T = 24 tokens, H = 40, 48 token-slots:
#   mixtral:  q 2·24·40·48 = 92,160; k, v 2·24·40·24 = 46,080 each; o 92,160;
#             router 2·24·40·4 = 7,680; experts 2·48·40·48 + 2·48·24·40 = 276,480
#             → 560,640; 2 layers 1,121,280 + lm_head 2·24·40·97 = 186,240 → 1,307,520
#   qwen2_moe (head 10): q 2·24·40·40 = 76,800; k, v 2·24·40·20 = 38,400 each; o 76,800;
#             router 7,680; experts 2·48·40·32 + 2·48·16·40 = 184,320; shared expert
#             3 · 2·24·40·56 = 322,560 and its gate 2·24·40·1 = 1,920 → 746,880;
#             2 layers 1,493,760 + lm_head 186,240 → 1,680,000
# Backward: two products of each forward one's size (the first layer's input gradient too:
# the embeddings are trained) → the step is 3 × the forward.
HAND_FORWARD = {
    "mixtral": 2 * (2 * T * 40 * 48 + 2 * 2 * T * 40 * 24 + 2 * T * 48 * 40 + 2 * T * 40 * E
                    + 2 * SLOTS * 40 * 48 + 2 * SLOTS * 24 * 40) + 2 * T * 40 * 97,
    "qwen2_moe": 2 * (2 * T * 40 * 40 + 2 * 2 * T * 40 * 20 + 2 * T * 40 * 40 + 2 * T * 40 * E
                      + 2 * SLOTS * 40 * 32 + 2 * SLOTS * 16 * 40 + 3 * 2 * T * 40 * 56
                      + 2 * T * 40 * 1) + 2 * T * 40 * 97,
}
assert HAND_FORWARD == {"mixtral": 1_307_520, "qwen2_moe": 1_680_000}

SKEWED = [20, 12, 10, 6]  # 48 token-slots, none above the 24 tokens


def _config(tmp_path: Path, family: str, **changes: Any) -> Path:
    path = tmp_path / family / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(MOE[family] | changes))
    return path


def _histogram(tmp_path: Path, counts: list[int]) -> Routing:
    path = tmp_path / "routing.json"
    path.write_text(json.dumps(counts))
    return resolve_routing(str(path))


def _work(path: Path, step: str = "forward-backward", routing: Routing = BALANCED,
          device: str = "fake", **options: Any) -> Workload:
    return resolve_workload(str(path), batch=B, seq=S, step=step, precision="fp32",
                            device=device, routing=routing, **options)


def _matmul_flops(run: StepTrace, phase: str | None = None) -> int:
    return sum(r.flops for r in run.trace.records
               if r.category == "matmul" and (phase is None or r.phase == phase))


def _expert_rows(run: StepTrace) -> list[int]:
    """Rows of each expert's first product (gate and up) in the forward, layer by layer."""
    return [r.input_shapes[0][0] for r in run.trace.records
            if r.phase == "forward" and r.module.endswith(".mlp.experts")
            and r.op == "aten.mm.default" and r.input_shapes[1][1] != 40]


# --------------------------------------------------------------- the routing, torch-free


def test_counts_balanced_skewed_and_given() -> None:
    # 48 slots over 4 experts: 12 each; 50 slots: 13, 13, 12, 12 (the remainder to the first)
    assert BALANCED.counts(T, E, K) == (12, 12, 12, 12)
    assert BALANCED.counts(25, E, K) == (13, 13, 12, 12)
    # skew 0.5: expert 0 gets 1.5 · 12 = 18, the others (48 − 18) / 3 = 10
    assert resolve_routing("skew=0.5").counts(T, E, K) == (18, 10, 10, 10)
    given = Routing(kind="histogram", histogram=tuple(SKEWED), source="h.json")
    assert given.counts(T, E, K) == tuple(SKEWED)
    # a router that sees half the tokens (12 tokens, 24 slots) gets the same shares: 10, 6, 5, 3
    assert given.counts(12, E, K) == (10, 6, 5, 3)
    assert resolve_routing("balanced") == resolve_routing(None) == resolve_routing("skew=0")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(experts=st.integers(2, 12), data=st.data())
def test_any_accepted_routing_gives_whole_counts_within_the_tokens_at_any_size(
        experts: int, data: st.DataObject) -> None:
    chosen = data.draw(st.integers(1, experts))
    tokens = data.draw(st.integers(1, 40))
    counts = data.draw(st.lists(st.integers(0, tokens), min_size=experts, max_size=experts))
    routings = [BALANCED, Routing(kind="skew", skew=data.draw(st.floats(0, experts / chosen - 1)))]
    if sum(counts) == tokens * chosen:
        routings.append(Routing(kind="histogram", histogram=tuple(counts), source="h.json"))
    for routing in routings:
        routing.check(tokens, experts, chosen)  # accepted at the step's tokens
        # ... and a router of any other size gets whole counts, each within its tokens
        for seen in (tokens, data.draw(st.integers(1, 64))):
            got = routing.counts(seen, experts, chosen)
            assert sum(got) == seen * chosen and all(0 <= c <= seen for c in got), (routing,
                                                                                     seen, got)
            ids = assignment(got, seen, chosen)
            assert all(len(set(row)) == chosen for row in ids.tolist())


@pytest.mark.parametrize("counts", [(12, 12, 12, 12), (20, 12, 10, 6), (24, 24, 0, 0),
                                    (24, 1, 23, 0)])
def test_assignment_gives_each_expert_its_count_and_a_token_k_distinct_experts(
        counts: tuple[int, ...]) -> None:
    ids = assignment(counts, T, K)
    assert tuple(ids.shape) == (T, K)
    assert torch.bincount(ids.flatten(), minlength=E).tolist() == list(counts)
    assert all(len(set(row)) == K for row in ids.tolist())


def test_bad_routing_is_refused_with_what_would_be_right(tmp_path: Path) -> None:
    path = _config(tmp_path, "mixtral")
    with pytest.raises(InputError, match="sums to 40 token-slots; 24 tokens × top-2 of 4 "
                                         "experts is 48"):
        _work(path, routing=_histogram(tmp_path, [10, 10, 10, 10]))
    with pytest.raises(InputError, match="lists 5 experts; the model routes to 4"):
        _work(path, routing=_histogram(tmp_path, [10, 10, 10, 10, 8]))
    with pytest.raises(InputError, match="more than the 24 tokens"):
        _work(path, routing=_histogram(tmp_path, [30, 10, 4, 4]))
    with pytest.raises(InputError, match="the skew is at most 1"):  # 4 / 2 − 1
        _work(path, routing=resolve_routing("skew=1.5"))
    with pytest.raises(InputError, match="has no routed experts"):
        resolve_workload("tiny", routing=resolve_routing("skew=0.5"))
    for text in ("skew=-1", "skew=nan", "skew=x"):
        with pytest.raises(InputError, match="S ≥ 0"):
            resolve_routing(text)
    (tmp_path / "bad.json").write_text('{"experts": 4}')
    with pytest.raises(InputError, match="JSON list of whole numbers"):
        resolve_routing(str(tmp_path / "bad.json"))


# ------------------------------------------------------------- HF MoE models, fake vs real


def real_cpu_flops(work: Workload) -> dict[str, int]:
    """FlopCounterMode over a real CPU step of ``work``, routed as it states."""
    real = work.on_device("cpu")
    torch.manual_seed(0)
    with placement("cpu") as target, routed(real):
        step = prepare(real, target)
        with FlopCounterMode(display=False) as oracle:
            step.run()
    return {str(op): n for op, n in oracle.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize("family", sorted(MOE))
def test_balanced_flops_equal_the_closed_form_and_a_real_routed_step(tmp_path: Path,
                                                                     family: str) -> None:
    work = _work(_config(tmp_path, family))
    fake = trace_workload(work)
    assert not fake.trace.uncovered  # nonzero, topk, histc, floor_divide: all counted
    assert _matmul_flops(fake, "forward") == HAND_FORWARD[family]
    assert _matmul_flops(fake) == 3 * HAND_FORWARD[family]
    # torch's counter on a real CPU step with the same routing: the same products
    ours: Counter[str] = Counter()
    for r in fake.trace.records:
        if r.category == "matmul":
            ours[r.op.rsplit(".", 1)[0]] += r.flops
    assert dict(ours) == real_cpu_flops(work)
    # the tool's own trace of the real step, every op: the same records, data-dependent
    # ones (nonzero, where, the loop over the experts hit) of the same sizes.  But torch's
    # one_hot, written two ways: with real values it checks their range (aminmax, .item())
    # and scatters ones into zeros; without (fake) it compares with an arange
    one_hot = {"aten.aminmax.default", "aten._local_scalar_dense.default",
               "aten.arange.default"}
    real = trace_workload(work.on_device("cpu"))

    def ops(run: StepTrace) -> Counter[tuple[str, str, Any, int]]:
        return Counter((r.op, r.phase, r.output_shapes, r.flops) for r in run.trace.records
                       if r.op not in one_hot and r.output_shapes != ((T, K, E + 1),))

    assert ops(fake) == ops(real)
    assert sum(ops(fake).values()) > 1000
    assert _expert_rows(fake) == 2 * [12, 12, 12, 12]  # 48 slots / 4 experts, both layers
    assert fake.assumptions[-1].startswith("routing: balanced")


@pytest.mark.parametrize("family", sorted(MOE))
def test_a_skewed_histogram_reaches_every_expert_on_fake_and_real(tmp_path: Path,
                                                                  family: str) -> None:
    work = _work(_config(tmp_path, family), routing=_histogram(tmp_path, SKEWED))
    fake, real = trace_workload(work), trace_workload(work.on_device("cpu"))
    assert _expert_rows(fake) == _expert_rows(real) == 2 * SKEWED
    # dropless: the products' FLOPs do not depend on the routing
    assert _matmul_flops(fake) == _matmul_flops(real) == 3 * HAND_FORWARD[family]
    assert "20, 12, 10, 6" in fake.assumptions[-1]


def test_an_expert_that_receives_nothing_is_skipped(tmp_path: Path) -> None:
    # eager experts loop over the experts hit: 3 of 4 per layer
    work = _work(_config(tmp_path, "mixtral"), step="forward",
                 routing=_histogram(tmp_path, [24, 14, 10, 0]))
    assert _expert_rows(trace_workload(work)) == 2 * [24, 14, 10]


def test_grouped_experts_trace_under_any_routing(tmp_path: Path) -> None:
    """transformers' default experts (one ``_grouped_mm`` per projection, offsets from
    ``sort`` and ``histc``): the routing is stated and every op has a rule."""
    path = _config(tmp_path, "mixtral", experts_implementation="grouped_mm")
    run = trace_workload(_work(path, routing=resolve_routing("skew=0.5")))
    assert not run.trace.uncovered
    assert {"aten.sort.default", "aten.histc.default", "aten.topk.default"} <= {
        r.op for r in run.trace.records}
    assert _matmul_flops(run) == 3 * HAND_FORWARD["mixtral"]
    assert "token-slots per expert 18, 10, 10, 10" in run.assumptions[-1]


# ------------------------------------------------------------------------------ memory


def test_memory_on_fake_equals_memtracker_on_a_real_routed_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed._tools.mem_tracker import _MemRefType

    import tests.workload.test_memory_oracle as oracle

    work = _work(_config(tmp_path, "mixtral"), step="train",
                 routing=_histogram(tmp_path, SKEWED))
    real = work.on_device("cpu")

    @contextmanager
    def routed_placement(device: str) -> Iterator[str]:
        with placement(device) as target, routed(real):
            yield target

    monkeypatch.setattr(oracle, "placement", routed_placement)
    theirs = oracle._memtracker_peak(work, 2)
    run = trace_workload(work)
    ours = build_timeline(run.trace, run.tags).peak
    assert ours.total_bytes == pytest.approx(theirs["Total"], rel=0.001)
    assert ours.parameter_bytes == theirs[_MemRefType.PARAM]
    assert ours.gradient_bytes == theirs[_MemRefType.GRAD]


def test_routed_mode_leaves_other_topks_of_real_tensors_alone() -> None:
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.3, 0.7]])
    with RoutedMode(4, 2):  # width 5 is not a router of 4 experts
        values, index = torch.topk(scores, 2)
    assert index.tolist() == [[1, 4]] and values[0].tolist() == pytest.approx([0.9, 0.7])


#: More of transformers' mixture-of-experts types, tiny: Qwen3-MoE, DeepSeek-V3 (MLA, 8 routed
#: experts in 4 groups, one shared, the first layer dense) and gpt-oss (biased experts).
OTHERS: dict[str, dict[str, Any]] = {
    "qwen3_moe": {"model_type": "qwen3_moe", "vocab_size": 97, "hidden_size": 40,
                  "intermediate_size": 72, "moe_intermediate_size": 16,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 12, "num_experts": 4, "num_experts_per_tok": 2,
                  "decoder_sparse_step": 1, "max_position_embeddings": 64,
                  "tie_word_embeddings": False},
    "deepseek_v3": {"model_type": "deepseek_v3", "vocab_size": 97, "hidden_size": 40,
                    "intermediate_size": 72, "moe_intermediate_size": 16,
                    "num_hidden_layers": 3, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 8,
                    "kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8,
                    "v_head_dim": 8, "qk_nope_head_dim": 8, "n_group": 4, "topk_group": 2,
                    "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                    "max_position_embeddings": 64, "tie_word_embeddings": False},
    "gpt_oss": {"model_type": "gpt_oss", "vocab_size": 97, "hidden_size": 40,
                "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 12, "num_local_experts": 4,
                "num_experts_per_tok": 2, "max_position_embeddings": 64,
                "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
                "tie_word_embeddings": False},
}


@pytest.mark.parametrize("experts", ["eager", "grouped_mm"])
@pytest.mark.parametrize("family", sorted(OTHERS))
def test_more_hf_types_train_on_fake_with_the_routing_stated(tmp_path: Path, family: str,
                                                             experts: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(OTHERS[family] | {"experts_implementation": experts}))
    routing = resolve_routing("skew=0.5")
    run = trace_workload(resolve_workload(str(path), batch=B, seq=S, step="train",
                                          precision="fp32", device="fake", routing=routing))
    assert not run.trace.uncovered
    routed_experts = OTHERS[family].get("n_routed_experts", E)
    # skew 0.5: expert 0 gets 1.5 · 48 / E slots, the others the rest evenly
    first = round(1.5 * SLOTS / routed_experts)
    assert f"token-slots per expert {first}, " in run.assumptions[-1]
    if experts == "eager":  # the loop's products: expert 0's rows are its count
        mine = [r for r in run.trace.records if r.phase == "forward"
                and r.module.endswith(".mlp.experts") and r.op.startswith("aten.")
                and r.category == "matmul"]
        assert mine and mine[0].input_shapes[0][0] == first


def test_split_sizes_from_bincount_and_argsort_on_fake_tensors() -> None:
    """A router written by hand, as torchtitan-style code does: top-k, argsort of the expert
    ids, bincount, ``.tolist()`` of the split sizes, one product per expert.  On fake tensors
    every size is the histogram's."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    tokens, hidden = 12, 8  # 24 token-slots over 4 experts
    counts = (10, 6, 5, 3)
    routing = Routing(kind="histogram", histogram=counts, source="h.json")
    with FakeTensorMode(), RoutedMode(E, K, routing):
        x = torch.randn(tokens, hidden)
        scores = torch.softmax(x @ torch.randn(hidden, E), dim=-1)
        _, chosen = torch.topk(scores, K, dim=-1)
        flat = chosen.flatten()
        order = torch.argsort(flat, stable=True)
        sizes = torch.bincount(flat, minlength=E).tolist()
        rows = x[order // K]
        outs = [part @ torch.randn(hidden, 3) for part in torch.split(rows, sizes)]
        hit = torch.nonzero(torch.bincount(flat, minlength=E)).flatten().tolist()
    assert sizes == list(counts) and [tuple(o.shape) for o in outs] == [(c, 3) for c in counts]
    assert hit == [0, 1, 2, 3]
