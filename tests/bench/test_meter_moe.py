"""The live meter on a mixture of experts (issue 38, item 6): a tiny Hugging Face Mixtral built
from its config on the CPU (transformers' default ``grouped_mm`` experts, one
``aten._grouped_mm`` per expert matrix) trains under the meter, whose recorded step counts the
FLOPs of the routing it ran and reports that routing.

Oracles: the matrix FLOPs by hand (the experts' from the routing the gates chose, read by a
forward hook on each gate, not by the meter), and torch's FlopCounterMode over the same step of
the same weights with transformers' ``eager`` experts — one ``mm`` per expert hit, so a count
that follows the routing expert by expert (FlopCounterMode has no rule for ``_grouped_mm``).
Dimensions all differ: hidden 40, expert width 28, 4 heads of 12 (48 ≠ 40), 2 key/value heads,
4 experts (top 2), vocabulary 97, batch 3 × sequence 8 (24 tokens, 48 token-slots).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.bench.meter import Meter
from tensorledger.report.meter import summary_text
from tests.bench.meter_helpers import TEST_CPU, FakeClock

transformers = pytest.importorskip("transformers")

D, FF, H, DH, KV, E, K, V = 40, 28, 4, 12, 2, 4, 2, 97
B, S = 3, 8
T = B * S  # 24 tokens
LAYERS = 2
CONFIG: dict[str, Any] = {
    "vocab_size": V, "hidden_size": D, "intermediate_size": FF, "num_hidden_layers": LAYERS,
    "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": DH,
    "num_local_experts": E, "num_experts_per_tok": K, "max_position_embeddings": 64,
    "attn_implementation": "eager"}  # attention as two bmm, which FlopCounterMode counts


def mixtral(experts: str = "grouped_mm") -> torch.nn.Module:
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)  # the same weights whichever experts run them
    config = transformers.MixtralConfig(**CONFIG, experts_implementation=experts)
    model: torch.nn.Module = transformers.MixtralForCausalLM(config)
    return model


def batch(seed: int) -> torch.Tensor:
    return torch.randint(0, V, (B, S), generator=torch.Generator().manual_seed(seed))


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               tokens: torch.Tensor) -> None:
    logits = model(tokens).logits
    loss = F.cross_entropy(logits.float().reshape(-1, V), tokens.reshape(-1))
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


class GateHistograms:
    """Each forward of each gate: the token-slots per expert its top-k chose."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seen: list[tuple[int, ...]] = []
        gates = [layer.mlp.gate for layer in model.model.layers]  # type: ignore[union-attr]
        self.handles = [g.register_forward_hook(self._hook) for g in gates]

    def _hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        indices = output[-1]
        self.seen.append(tuple(torch.bincount(indices.flatten(), minlength=E).tolist()))


def flop_counter_step(tokens: torch.Tensor) -> tuple[int, list[tuple[int, ...]]]:
    """FlopCounterMode over one training step of the eager-experts twin, and its routing."""
    model = mixtral("eager")
    gates = GateHistograms(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with FlopCounterMode(display=False) as counter:
        train_step(model, optimizer, tokens)
    return counter.get_total_flops(), gates.seen


def hand_matrix_flops(routing: list[tuple[int, ...]]) -> int:
    """The step's matrix FLOPs: forward by hand, backward twice forward (input and weight
    gradients; the embedding is a lookup)."""
    attention = 2 * (2 * T * D * H * DH) + 2 * (2 * T * D * KV * DH)  # q, o; k, v
    attention += 2 * (2 * B * H * S * S * DH)  # scores and values: two bmm
    router = 2 * T * D * E
    forward = 2 * T * D * V  # the head
    for counts in routing:  # each expert's rows through its gate-up (D → 2·FF) and down
        forward += attention + router + sum(2 * n * (D * 2 * FF + FF * D) for n in counts)
    return 3 * forward


def test_the_meter_counts_a_moe_step_as_it_ran_and_reports_its_routing(tmp_path: Path) -> None:
    model = mixtral()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gates = GateHistograms(model)
    clock = FakeClock()
    meter = Meter(model, hardware=TEST_CPU, warmup_steps=0, every=0, quiet=True, clock=clock,
                  jsonl=tmp_path / "meter.jsonl")
    for seed in (1, 2, 3):
        with meter.step():
            train_step(model, optimizer, batch(seed))
            clock.advance(1.0)
    summary = meter.close()
    (count,) = meter.recordings  # the first step, recorded; the others reuse its count
    measured = gates.seen[:LAYERS]  # the gates of the recorded step
    assert summary.flops_per_step == count.flops
    assert summary.flops == 2 * count.flops  # steps 2 and 3, counted from step 1's recording

    # the routing it reports is the one the gates chose on the real batch, layer by layer
    assert [layer.module for layer in summary.routing] == [
        f"MixtralForCausalLM.model.layers.{i}.mlp.experts" for i in range(LAYERS)]
    assert [layer.tokens_per_expert for layer in summary.routing] == measured
    for layer in summary.routing:
        assert layer.slots == T * K == 48
        assert layer.max_over_mean == max(layer.tokens_per_expert) / (48 / E)

    # its matrix FLOPs: by hand from that routing, and by FlopCounterMode over the same step
    # of the same weights with one mm per expert (routed alike: same weights, same batch)
    oracle, oracle_routing = flop_counter_step(batch(1))
    assert oracle_routing == measured
    assert dict(count.matrix_flops) == {"fp32": hand_matrix_flops(measured)} == {"fp32": oracle}
    # 24 tokens: forward 2·24·40·97 head + per layer 2·24·40·(48 + 48 + 24 + 24) = 276,480
    # projections, 2 · 2·3·4·8·8·12 = 36,864 bmm, 2·24·40·4 = 7,680 router and 48 slots ·
    # 2 · (40·56 + 28·40) = 322,560 experts; backward twice that
    assert oracle == 3 * (186_240 + 2 * (276_480 + 36_864 + 7_680 + 322_560)) == 4_420_224
    # the rest (norms, softmax, activation, AdamW, the loss) is the trace's own count
    assert count.flops > oracle

    # its JSON summary line and its words
    lines = [json.loads(line) for line in (tmp_path / "meter.jsonl").read_text().splitlines()]
    (document,) = [line for line in lines if line["kind"] == "summary"]
    assert [(r["module"], r["tokens_per_expert"], r["max_over_mean"])
            for r in document["routing"]] == [
        (r.module, list(r.tokens_per_expert), r.max_over_mean) for r in summary.routing]
    text = summary_text(summary)
    assert "MoE routing measured on the recorded step" in text
    assert "a dropless MoE's FLOPs do not depend on routing" in text
    first = summary.routing[0]
    assert (f"{first.module}: {', '.join(map(str, first.tokens_per_expert))} (busiest / mean "
            f"{first.max_over_mean:.2f})") in text


def test_a_dropless_moe_costs_the_same_flops_however_it_routes() -> None:
    a, b = batch(1), batch(4)
    flops_a, routing_a = flop_counter_step(a)
    flops_b, routing_b = flop_counter_step(b)
    assert routing_a != routing_b  # the same weights send the two batches differently
    assert flops_a == flops_b == 4_420_224  # one mm per expert hit, summed: the same FLOPs

    # the meter's own count of each (recount: record the next step again) agrees
    model = mixtral()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    meter = Meter(model, hardware=TEST_CPU, warmup_steps=0, every=0, quiet=True,
                  clock=FakeClock())
    with meter.step():
        train_step(model, optimizer, a)
    meter.recount()
    with meter.step():
        train_step(model, optimizer, b)
    meter.close()
    first, second = meter.recordings
    assert first.routing != second.routing
    assert first.flops == second.flops
    assert dict(first.matrix_flops) == dict(second.matrix_flops) == {"fp32": flops_a}


def test_no_routing_is_reported_for_a_model_without_grouped_experts() -> None:
    model = mixtral("eager")  # a loop of one mm per expert: no offsets to read
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    meter = Meter(model, hardware=TEST_CPU, warmup_steps=0, every=0, quiet=True,
                  clock=FakeClock())
    with meter.step():
        train_step(model, optimizer, batch(1))
    summary = meter.close()
    assert summary.routing == ()
    assert "MoE routing" not in summary_text(summary)
