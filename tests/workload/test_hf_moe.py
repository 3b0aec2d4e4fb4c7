"""Mixture-of-experts models with transformers' default experts (``grouped_mm``: one
``aten._grouped_mm`` per projection) traced on fake tensors in every precision recipe.

The grouped products are counted by hand (2 · routed rows · K · N per projection, routed rows =
tokens · top-k whatever the routing) and by torch's FlopCounterMode on real CPU tensors with
transformers' ``eager`` experts (a loop of one linear per expert), which it counts as ``mm``.

The pipeline does not enter :class:`GroupedMMMode` yet: the fixture enters it where a step is
placed, beside ``FakeTensorMode``, as ``workload.step.placement`` is to.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.trace.grouped import GroupedMMMode
from tensorledger.workload import StepTrace, placement, prepare, resolve_workload, trace_workload

pytest.importorskip("transformers")

B, S = 2, 12
TOKENS = B * S  # 24
TOP_K = 2
ROUTED = TOKENS * TOP_K  # 48 rows: every token's two slots, each to exactly one expert

#: Tiny configs (no hub, no weights): hidden 40, 2 layers, 4 experts, top-2; the experts'
#: widths are multiples of 8, as the grouped kernel's 16-byte strides want in bf16.
MOE: dict[str, dict[str, Any]] = {
    "mixtral": {"model_type": "mixtral", "vocab_size": 97, "hidden_size": 40,
                "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 12, "num_local_experts": 4,
                "num_experts_per_tok": TOP_K, "max_position_embeddings": 64},
    "qwen2_moe": {"model_type": "qwen2_moe", "vocab_size": 97, "hidden_size": 40,
                  "intermediate_size": 72, "moe_intermediate_size": 16,
                  "shared_expert_intermediate_size": 56, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4,
                  "num_experts_per_tok": TOP_K, "decoder_sparse_step": 1,
                  "max_position_embeddings": 64, "tie_word_embeddings": False},
}

# Forward, per layer: gate and up fused in one (E, 2·I, H) weight, then down (E, H, I):
#   2 · rows · H · 2I  +  2 · rows · I · H
# mixtral   (I = 24): 2·48·40·48 = 184,320 + 2·48·24·40 = 92,160 → 276,480; 2 layers 552,960
# qwen2_moe (I = 16): 2·48·40·32 = 122,880 + 2·48·16·40 = 61,440 → 184,320; 2 layers 368,640
HAND_FORWARD = {
    "mixtral": 2 * (2 * ROUTED * 40 * (2 * 24) + 2 * ROUTED * 24 * 40),
    "qwen2_moe": 2 * (2 * ROUTED * 40 * (2 * 16) + 2 * ROUTED * 16 * 40),
}
assert HAND_FORWARD == {"mixtral": 552_960, "qwen2_moe": 368_640}

#: the dtype an H100 runs the experts in (trace.grouped): transformers casts the input to the
#: weights' dtype and autocast leaves ``_grouped_mm`` alone, so mixed-bf16's are fp32
EXPERT_DTYPE = {"fp32": "fp32", "mixed-bf16": "fp32", "bf16": "bf16", "bf16-master": "bf16",
                "bf16-fp32-states": "bf16"}


@pytest.fixture(autouse=True)
def grouped_on_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.step as step_module

    placed = step_module.placement

    @contextmanager
    def with_grouped(device: str) -> Iterator[str]:
        with placed(device) as target, GroupedMMMode():
            yield target

    monkeypatch.setattr(step_module, "placement", with_grouped)


def _config(tmp_path: Path, family: str) -> Path:
    path = tmp_path / family / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(MOE[family]))
    return path


def _grouped(run: StepTrace, phase: str) -> list[Any]:
    return [r for r in run.trace.records
            if r.op == "aten._grouped_mm.default" and r.phase == phase]


@pytest.mark.parametrize("recipe", sorted(EXPERT_DTYPE))
@pytest.mark.parametrize("family", sorted(MOE))
def test_every_recipe_traces_on_fake_and_counts_the_experts_by_hand(
        tmp_path: Path, family: str, recipe: str) -> None:
    work = resolve_workload(str(_config(tmp_path, family)), batch=B, seq=S, step="train",
                            precision=recipe, device="fake")
    run = trace_workload(work)
    forward, backward = _grouped(run, "forward"), _grouped(run, "backward")
    # two projections per layer forward; backward, each one's input and weight gradients
    assert (len(forward), len(backward)) == (4, 8)
    assert sum(r.flops for r in forward) == HAND_FORWARD[family]
    assert sum(r.flops for r in backward) == 2 * HAND_FORWARD[family]
    assert all(r.module.endswith(".mlp.experts") for r in forward + backward)
    dtype = EXPERT_DTYPE[recipe]
    assert {r.output_dtypes for r in forward + backward} == {(dtype,)}
    assert "aten._grouped_mm.default" not in run.trace.uncovered


@pytest.mark.parametrize("family", sorted(MOE))
def test_grouped_experts_equal_flop_counter_on_eager_experts(tmp_path: Path,
                                                             family: str) -> None:
    path = _config(tmp_path, family)

    def work(step: str, device: str) -> Any:
        return resolve_workload(str(path), batch=B, seq=S, step=step, precision="fp32",
                                device=device)

    def eager_on_cpu(step: str) -> dict[str, dict[str, int]]:
        with placement("cpu") as target:
            prepared = prepare(work(step, "cpu"), target)
            model: Any = prepared.module  # a transformers PreTrainedModel
            model.set_experts_implementation("eager")  # a loop of linears
            with FlopCounterMode(display=False) as oracle:
                prepared.run()
        return {module: {str(op): n for op, n in counts.items()}
                for module, counts in oracle.get_flop_counts().items()}

    # Forward: the experts modules alone (FlopCounterMode's forward attribution is exact)
    theirs = eager_on_cpu("forward")
    experts = sum(counts["aten.mm"] for module, counts in theirs.items()
                  if module.endswith(".mlp.experts"))
    fake = trace_workload(work("forward", "fake"))
    assert sum(r.flops for r in _grouped(fake, "forward")) == experts == HAND_FORWARD[family]
    # Forward and backward: the whole model's products.  FlopCounterMode's module tracker
    # puts part of the router's backward under the experts, so the totals are compared.
    theirs = eager_on_cpu("forward-backward")
    fake = trace_workload(work("forward-backward", "fake"))
    ours: Counter[str] = Counter()
    for r in fake.trace.records:
        if r.category == "matmul":
            ours[r.op.rsplit(".", 1)[0]] += r.flops
    assert ours["aten._grouped_mm"] == 3 * HAND_FORWARD[family]
    # eager's experts are mm calls: one mm per expert for each grouped product here
    ours["aten.mm"] += ours.pop("aten._grouped_mm")
    assert dict(ours) == theirs["Global"]  # qwen2_moe's biased q/k/v projections: addmm
