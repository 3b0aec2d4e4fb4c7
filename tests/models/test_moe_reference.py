"""The reference mixture of experts (issue 38, items 2-4): its presets' total and active
parameters by hand, its FLOPs against napkin's closed form and against torch's
FlopCounterMode on a real CPU step routed alike, both expert paths, capacity and dropping,
the balance loss, DeepSeek's expert bias, latent attention and multi-token prediction.

The tiny MoE (``tiny-moe``): d 64, 2 layers, E 6 routed experts of width 32, top-2, one shared
expert of 48, 4 heads of 16 (2 key/value heads), vocabulary 128.  Steps here are B 2 × S 12 =
24 tokens: 48 token-slots, 8 per expert when balanced.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
import torch

from tensorledger.models import build_model, parameter_parts
from tensorledger.models.moe import MoE
from tensorledger.napkin.moe import MLAConfig, moe_layer_flops
from tensorledger.napkin.transformer import (
    TransformerConfig,
    forward_flops_per_token,
    get_preset,
    parameter_count,
    preset_summaries,
)
from tensorledger.workload import (
    resolve_routing,
    resolve_workload,
    trace_workload,
)
from tensorledger.workload.params import active_params, model_params
from tensorledger.workload.routed import RoutedMode
from tensorledger.workload.routing import Routing
from tensorledger.workload.source import ModelSource
from tensorledger.workload.spec import Workload
from tests.workload.test_moe_routing import real_cpu_flops  # FlopCounterMode, routed alike

B, S = 2, 12
T = B * S  # 24 tokens
E, K, D, F_E, F_S = 6, 2, 64, 32, 48
TINY = get_preset("tiny-moe")
MOE_PRESETS = ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v3-mtp", "tiny-moe")


def _source(config: TransformerConfig) -> ModelSource:
    return ModelSource(config.name, "preset", "reference", config.name, config=config)


def _tiny(**moe: Any) -> TransformerConfig:
    assert TINY.moe is not None
    tag = "-".join(f"{k}={v}" for k, v in moe.items())
    return replace(TINY, name=f"tiny-moe[{tag}]", moe=replace(TINY.moe, **moe))


def _work(config: TransformerConfig, step: str = "forward-backward", device: str = "fake",
          routing: Routing | None = None) -> Workload:
    return resolve_workload(_source(config), batch=B, seq=S, step=step, precision="fp32",
                            device=device, routing=routing or resolve_routing(None))


def _by_part(run: Any, phase: str) -> Counter[str]:
    """Matmul FLOPs of each MoE layer's parts (router, experts, shared), summed over layers."""
    parts: Counter[str] = Counter()
    for r in run.trace.records:
        if r.category != "matmul" or r.phase != phase or ".mlp." not in r.module + ".":
            continue
        part = r.module.split(".mlp", 1)[1].lstrip(".").split(".")[0] or "mlp"
        parts[part] += r.flops
    return parts


def _matmul_by_op(run: Any) -> dict[str, int]:
    ours: Counter[str] = Counter()
    for r in run.trace.records:
        if r.category == "matmul":
            ours[r.op.rsplit(".", 1)[0]] += r.flops
    return dict(ours)


# ------------------------------------------------------------------------------ parameters


def test_mixtral_8x7b_total_and_active_exact() -> None:
    """Per layer: attention 4096·4096·2 + 4096·1024·2 = 41,943,040; 8 experts of 3·4096·14336
    = 176,160,768; router 8·4096 = 32,768; two norms 8192.  32 layers; embeddings and head
    32000·4096 each; final norm 4096.  A token runs 2 of the 8 experts."""
    attention, expert, router, norms = 41_943_040, 176_160_768, 32_768, 8192
    outside = 2 * 32_000 * 4096 + 4096
    total = 32 * (attention + 8 * expert + router + norms) + outside
    active = 32 * (attention + 2 * expert + router + norms) + outside
    assert (total, active) == (46_702_792_704, 12_879_925_248)
    count = parameter_count(get_preset("mixtral-8x7b"))
    assert (count.total_params, count.active_params) == (total, active)


def test_deepseek_v3_total_and_active_derived_from_the_config() -> None:
    """MLA per layer: q down 7168·1536 + up 1536·128·(128 + 64), kv down 7168·(512 + 64) +
    up 512·128·(128 + 128), out 128·128·7168; latent norms 1536 + 512; two norms 2·7168.
    Layers 0-2 dense 3·7168·18432; 58 MoE layers: router 256·7168, 256 routed + 1 shared
    expert of 3·7168·2048 (the expert bias is a buffer).  Embeddings and head 129280·7168
    each, final norm 7168.  Active: 8 of the 256 routed experts.  The published 671B / 37B:
    the total agrees to 0.004%, the active count is 37.55B, +1.5% (37B rounded down)."""
    c = get_preset("deepseek-v3")
    assert c.mla is not None and c.moe is not None
    h, d = c.n_heads, c.d_model
    q = d * 1536 + 1536 * h * (128 + 64)
    kv = d * (512 + 64) + 512 * h * (128 + 128)
    attention = q + kv + h * 128 * d
    norms = 1536 + 512 + 2 * d
    expert = 3 * d * 2048
    dense = 3 * (attention + norms + 3 * d * 18_432)
    moe_layer = attention + norms + 256 * d + expert  # router and the shared expert
    outside = 2 * 129_280 * d + d
    total = dense + 58 * (moe_layer + 256 * expert) + outside
    active = dense + 58 * (moe_layer + 8 * expert) + outside
    assert (total, active) == (671_026_404_352, 37_552_282_624)
    count = parameter_count(c)
    assert (count.total_params, count.active_params) == (total, active)
    assert total == pytest.approx(671e9, rel=0.0005)
    assert active / 37e9 - 1 == pytest.approx(0.0149, abs=0.0001)  # reported as is
    # one multi-token prediction depth: a MoE block, the 2d → d projection, three norms
    mtp = parameter_count(get_preset("deepseek-v3-mtp"))
    depth = moe_layer + 256 * expert + 2 * d * d + 3 * d
    assert (mtp.mtp_params, mtp.total_params) == (depth, total + depth)
    assert mtp.active_params == active + moe_layer + 8 * expert + 2 * d * d + 3 * d


def test_qwen3_and_tiny_moe_by_hand() -> None:
    # Qwen3-30B-A3B: q, o 2048·4096 each, k, v 2048·512 each, q/k norms 2·128; 128 experts of
    # 3·2048·768, router 128·2048, norms 2·2048; 48 layers; embeddings and head 151936·2048
    layer_rest = 2 * 2048 * 4096 + 2 * 2048 * 512 + 2 * 128 + 128 * 2048 + 2 * 2048
    outside = 2 * 151_936 * 2048 + 2048
    total = 48 * (layer_rest + 128 * 3 * 2048 * 768) + outside
    active = 48 * (layer_rest + 8 * 3 * 2048 * 768) + outside
    assert (total, active) == (30_532_122_624, 3_353_032_704)  # published 30.5B / 3.3B
    count = parameter_count(get_preset("qwen3-30b-a3b"))
    assert (count.total_params, count.active_params) == (total, active)
    # tiny-moe: attention 64·64·2 + 64·32·2 = 12,288; router 6·64 = 384; experts
    # 6·3·64·32 = 36,864; shared 3·64·48 = 9,216; norms 128; head, table 128·64 each
    layer = 12_288 + 384 + 36_864 + 9_216 + 128
    tiny = parameter_count(TINY)
    assert tiny.total_params == 2 * layer + 2 * 128 * 64 + 64 == 134_208
    assert tiny.active_params == 134_208 - 2 * 4 * 3 * 64 * 32 == 85_056


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_closed_form_equals_the_built_model_part_by_part(name: str) -> None:
    config = get_preset(name)
    model = build_model(config, "meta")
    parts = parameter_parts(model)
    built: Counter[str] = Counter()
    for key, p in model.named_parameters():
        built[parts[key]] += p.numel()
    count = parameter_count(config)
    assert dict(built) == count.parts()
    # active, a second way: the workload's count from parameter names and shapes
    named = {k: (p.numel(), tuple(p.shape)) for k, p in model.named_parameters()}
    assert config.moe is not None
    assert active_params(named, config.moe.n_experts, config.moe.top_k) == count.active_params
    # the expert bias chooses but is no parameter
    assert all("expert_bias" not in k for k in named)


def test_every_moe_preset_is_listed_with_total_and_active() -> None:
    rows = {s.name: s.params for s in preset_summaries()}
    for name in MOE_PRESETS:
        assert rows[name].active_params is not None
    assert rows["gpt2"].active_params is None
    used = model_params("mixtral-8x7b")
    assert (used.params, used.active_params) == (46_702_792_704, 12_879_925_248)
    assert "2 of 8 routed experts" in used.routing


# ----------------------------------------------------------------------------------- FLOPs


def test_closed_form_layer_flops_by_hand() -> None:
    f = moe_layer_flops(TINY, T)
    assert f.router_flops == 2 * T * D * E == 18_432
    assert f.experts_flops == 3 * 2 * (T * K) * D * F_E == 589_824
    assert f.shared_flops == 3 * 2 * T * D * F_S == 442_368
    # capacity factor 1.25: ⌈1.25 · 24 · 2 / 6⌉ = 10 slots an expert, the buffer 6 · 10 rows
    padded = moe_layer_flops(_tiny(capacity_factor=1.25), T)
    assert padded.routed_slots == 60 and padded.experts_flops == 3 * 2 * 60 * D * F_E


@pytest.mark.parametrize(("impl", "capacity"), [("grouped", 0.0), ("loop", 0.0),
                                                ("grouped", 1.25), ("loop", 1.0)])
def test_traced_flops_equal_the_closed_form_under_balanced_routing(impl: str,
                                                                   capacity: float) -> None:
    config = _tiny(experts_impl=impl, capacity_factor=capacity)
    run = trace_workload(_work(config))
    assert not run.trace.uncovered
    closed = moe_layer_flops(config, T)
    layers = config.n_layers
    forward = _by_part(run, "forward")
    assert forward == {"router": layers * closed.router_flops,
                       "experts": layers * closed.experts_flops,
                       "shared": layers * closed.shared_flops}
    # backward: two products of each forward one's size
    assert _by_part(run, "backward") == {k: 2 * v for k, v in forward.items()}
    # the whole forward's matmuls: napkin's per-token closed form (dropless) times the tokens
    per_token = forward_flops_per_token(config, S)
    matmuls = sum(r.flops for r in run.trace.records
                  if r.category == "matmul" and r.phase == "forward")
    padding = layers * (closed.experts_flops - moe_layer_flops(_tiny(), T).experts_flops)
    assert matmuls == T * (per_token.attention_projections_flops + per_token.mlp_flops
                           + per_token.head_flops) + padding
    assert run.assumptions[-1].startswith("routing: balanced")


@pytest.mark.parametrize(("impl", "capacity"), [("loop", 0.0), ("grouped", 1.0)])
def test_flops_equal_flopcountermode_on_a_real_step_with_the_same_histogram(
        impl: str, capacity: float, tmp_path: Any) -> None:
    """The per-expert loop (mm) and the capacity buffer's bmm: torch counts them both."""
    histogram = tmp_path / "routing.json"
    histogram.write_text("[12, 10, 8, 8, 6, 4]")  # 48 token-slots, none above 24
    work = _work(_tiny(experts_impl=impl, capacity_factor=capacity),
                 routing=resolve_routing(str(histogram)))
    fake = trace_workload(work)
    assert _matmul_by_op(fake) == real_cpu_flops(work)
    real = trace_workload(work.on_device("cpu"))
    assert _matmul_by_op(real) == _matmul_by_op(fake)


def test_grouped_gemm_on_a_real_step_records_what_fake_does() -> None:
    """torch's FlopCounterMode has no rule for ``_grouped_mm`` (it counts 0), so the grouped
    path is held to the loop's FLOPs and to its own real CPU trace."""
    grouped = _tiny(experts_impl="grouped")
    fake = trace_workload(_work(grouped))
    real = trace_workload(_work(grouped).on_device("cpu"))
    loop = trace_workload(_work(_tiny(experts_impl="loop")))
    total = sum(_matmul_by_op(fake).values())
    assert total == sum(_matmul_by_op(real).values()) == sum(_matmul_by_op(loop).values())
    assert _matmul_by_op(fake)["aten._grouped_mm"] == 3 * 2 * 3 * (T * K * D * F_E * 2)


def test_mixtral_8x7b_traces_at_a_short_sequence_as_its_closed_form() -> None:
    """The full model on meta tensors (nothing allocated), 1 × 8 tokens: the forward's
    products are napkin's per-token closed form × 8 (16 token-slots, 2 an expert)."""
    work = resolve_workload("mixtral-8x7b", batch=1, seq=8, step="forward-backward",
                            precision="fp32", device="meta")
    run = trace_workload(work)
    assert not run.trace.uncovered
    closed = forward_flops_per_token(get_preset("mixtral-8x7b"), 8, "full")
    linear = sum(r.flops for r in run.trace.records
                 if r.phase == "forward" and r.category == "matmul")
    assert linear == 8 * (closed.attention_projections_flops + closed.mlp_flops
                          + closed.head_flops)
    assert run.active_params == 12_879_925_248
    assert "token-slots per expert 2, 2, 2, 2, 2, 2, 2, 2" in run.assumptions[-1]


# --------------------------------------------------------------------- routing, numerically


def _layer_outputs(config: TransformerConfig, routing: Routing) -> torch.Tensor:
    torch.manual_seed(0)
    layer = MoE(config)
    x = torch.randn(B, S, D, generator=torch.Generator().manual_seed(1))
    with RoutedMode(E, K, routing):
        return layer(x).detach()


def test_both_expert_paths_compute_the_same_layer() -> None:
    routing = Routing(kind="histogram", histogram=(12, 10, 8, 8, 6, 4), source="h")
    grouped = _layer_outputs(_tiny(experts_impl="grouped"), routing)
    loop = _layer_outputs(_tiny(experts_impl="loop"), routing)
    torch.testing.assert_close(grouped, loop)
    # a capacity no expert reaches (⌈2 · 48 / 6⌉ = 16 ≥ 12) drops nothing
    torch.testing.assert_close(_layer_outputs(_tiny(capacity_factor=2.0), routing), loop)
    torch.testing.assert_close(
        _layer_outputs(_tiny(capacity_factor=2.0, experts_impl="loop"), routing), loop)


def test_a_capacity_drops_the_slots_past_it() -> None:
    """Expert 0 receives 16 first choices (tokens 0-15, in order), its capacity is
    ⌈1 · 48 / 6⌉ = 8: tokens 8-15 lose it and keep only their other expert, as the residual
    passes them on; every other token is computed as without a capacity."""
    routing = Routing(kind="histogram", histogram=(16, 8, 8, 8, 4, 4), source="h")
    full = _layer_outputs(_tiny(), routing).reshape(T, D)
    capped = _layer_outputs(_tiny(capacity_factor=1.0), routing).reshape(T, D)
    kept = [t for t in range(T) if not 8 <= t < 16]
    torch.testing.assert_close(capped[kept], full[kept])
    assert not torch.isclose(capped[8:16], full[8:16]).all(dim=-1).any()


def test_the_balance_loss_is_alpha_under_balanced_routing() -> None:
    """f_e = 1/E each, so α · E · Σ_e f_e · P_e = α · Σ_e P_e = α (softmax rows sum to 1)."""
    layer = MoE(TINY)
    assert TINY.moe is not None
    scores = torch.randn(T, E).softmax(-1)
    counts = torch.full((E,), T * K // E)
    assert float(layer._balance_loss(counts, scores)) == pytest.approx(TINY.moe.aux_loss_coef)


def test_the_balance_loss_reaches_the_router_gradient() -> None:
    """Under a skewed load (balanced, Σ_e P_e / E · E is 1 whatever the scores: no gradient)."""
    routing = Routing(kind="histogram", histogram=(16, 8, 8, 8, 4, 4), source="h")

    def router_grad(coef: float) -> torch.Tensor:
        torch.manual_seed(0)
        layer = MoE(_tiny(aux_loss_coef=coef))
        with RoutedMode(E, K, routing):
            layer(torch.randn(B, S, D, generator=torch.Generator().manual_seed(1))).sum(
                ).backward()
        grad = layer.router.proj.weight.grad
        assert grad is not None
        return grad

    assert not torch.allclose(router_grad(0.0), router_grad(0.5))


def test_deepseek_expert_bias_chooses_and_moves_with_the_load() -> None:
    config = _tiny(router="sigmoid", expert_bias=True, bias_update_rate=0.25,
                   routed_scale=2.5)
    layer = MoE(config)
    assert "router.expert_bias" not in dict(layer.named_parameters())
    routing = Routing(kind="histogram", histogram=(16, 8, 8, 8, 4, 4), source="h")
    with RoutedMode(E, K, routing):
        layer(torch.randn(B, S, D))
    # mean load 8: expert 0 over it (down by γ), experts 4, 5 under (up), the rest level
    bias = layer.router.expert_bias
    assert isinstance(bias, torch.Tensor)
    assert bias.tolist() == [-0.25, 0.0, 0.0, 0.0, 0.25, 0.25]


# ------------------------------------------------------------- latent attention, prediction

#: A tiny DeepSeek-V3: MLA (q rank 40, kv rank 24, nope 12, rope 8, v 10), the first layer
#: dense, a sigmoid router with bias, one multi-token prediction depth.
TINY_DS = replace(TINY, name="tiny-deepseek", n_layers=3,
                  mla=MLAConfig(q_lora_rank=40, kv_lora_rank=24, qk_nope_dim=12,
                                qk_rope_dim=8, v_head_dim=10),
                  moe=replace(TINY.moe, router="sigmoid", expert_bias=True,  # type: ignore[arg-type]
                              bias_update_rate=0.001, routed_scale=2.5, first_dense_layers=1),
                  mtp_depth=1)


def test_latent_attention_and_prediction_depth_count_by_hand() -> None:
    """Per layer MLA: 64·40 + 40·4·20 + 64·(24 + 8) + 24·4·(12 + 10) + 4·10·64 = 12,480;
    latent norms 40 + 24.  Layer 0 dense SwiGLU 3·64·128 = 24,576; layers 1-2 the tiny MoE
    (384 + 36,864 + 9,216 = 46,464).  The prediction depth: a MoE block, 2·64·64, 3·64."""
    attention = 64 * 40 + 40 * 4 * 20 + 64 * 32 + 24 * 4 * 22 + 4 * 10 * 64
    assert attention == 12_480  # 2560 + 3200 + 2048 + 2112 + 2560
    norms = 64 + 2 * 64
    moe_block = attention + norms + 46_464
    depth = moe_block + 2 * 64 * 64 + 3 * 64
    total = (attention + norms + 24_576) + 2 * moe_block + depth + 2 * 128 * 64 + 64
    count = parameter_count(TINY_DS)
    assert (count.mtp_params, count.total_params) == (depth, total)
    model = build_model(TINY_DS, "meta")
    assert sum(p.numel() for p in model.parameters()) == total


def test_latent_attention_flops_equal_the_closed_form() -> None:
    run = trace_workload(_work(replace(TINY_DS, mtp_depth=0)))
    assert not run.trace.uncovered
    per_token = forward_flops_per_token(TINY_DS, S, "full")
    projections = sum(r.flops for r in run.trace.records if r.phase == "forward"
                      and r.category == "matmul" and ".attention." in r.module)
    assert projections == T * per_token.attention_projections_flops
    # Q·Kᵀ over 4·(12 + 8) and softmax·V over 4·10, every pair counted (query and value
    # heads of different widths: the H100's program is the math path, two bmm)
    scores = sum(r.flops for r in run.trace.records if r.phase == "forward"
                 and r.module.endswith(".attention") and r.category in ("matmul", "attention"))
    assert scores == T * (per_token.attention_scores_flops + per_token.attention_values_flops)
    assert per_token.attention_scores_flops == 3 * 2 * S * 4 * 20


def test_multi_token_prediction_trains_on_fake_and_real() -> None:
    work = _work(TINY_DS, step="train")
    fake = trace_workload(work)
    assert not fake.trace.uncovered
    assert any(r.module.startswith("TransformerLM.mtp.0.block.mlp.experts")
               for r in fake.trace.records if r.phase == "backward")
    real = trace_workload(work.on_device("cpu"))
    assert _matmul_by_op(real) == _matmul_by_op(fake)


# ------------------------------------------------------------------- layouts and the CLI


def test_a_pipeline_stage_routes_its_experts_as_stated() -> None:
    """Rank 0 of --pp 2 holds block 0: 2 micro-batches of 2 × 8 = 16 tokens each."""
    from tensorledger.workload.layout import resolve_layout

    work = resolve_workload("tiny-moe", batch=4, seq=8, precision="fp32",
                            layout=resolve_layout(pp=2, microbatches=2))
    run = trace_workload(work)
    closed = moe_layer_flops(TINY, 16)
    assert _by_part(run, "forward") == {"router": 2 * closed.router_flops,
                                        "experts": 2 * closed.experts_flops,
                                        "shared": 2 * closed.shared_flops}


def test_tensor_parallelism_of_the_experts_is_refused_in_one_line(cli: Any) -> None:
    result = cli("memory", "--model", "tiny-moe", "--batch", "2", "--seq", "8", "--tp", "2")
    assert result.code == 2
    assert "no plan for the reference mixture of experts" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_models_time_fit_and_zero_report_active_counts(cli: Any) -> None:
    listed = cli("models", "--json").json()["presets"]
    rows = {row["name"]: row["params"] for row in listed}
    assert rows["mixtral-8x7b"]["active_params"] == 12_879_925_248
    assert rows["deepseek-v3"]["total_params"] == 671_026_404_352
    detail = cli("models", "mixtral-8x7b").stdout
    assert "12,879,925,248" in detail and "top-2 of 8 routed experts" in detail
    # 6·N_active·D: 6 · 12,879,925,248 · 1e12 FLOPs
    timed = cli("time", "--model", "mixtral-8x7b", "--tokens", "1T", "--json").json()
    assert timed["flops"] == pytest.approx(6 * 12_879_925_248 * 1e12)
    # fit: the same total fits; a token runs (4 + 8·2) / (4 + 8·8) = 20 / 68 of it
    dense = cli("fit", "--count", "8", "--json").json()["params"]
    moe = cli("fit", "--count", "8", "--experts", "8", "--top-k", "2", "--json").json()
    assert moe["params"] == dense
    assert moe["active_params"] == pytest.approx(dense * 20 / 68)
    noted = cli("zero", "--params", "46.7B", "--active-params", "12.9B").stdout
    assert "a token runs 12.9B of the 46.7B parameters" in noted
    for argv, words in ((["fit", "--experts", "8"], "go together"),
                        (["fit", "--experts", "2", "--top-k", "3"], "more experts"),
                        (["fit", "--params", "47B", "--experts", "8", "--top-k", "2"],
                         "drop them"),
                        (["zero", "--params", "8B", "--active-params", "9B"], "from 1 to"),
                        (["zero", "--model", "tiny-moe", "--active-params", "1K"],
                         "gives its own")):
        refused = cli(*argv)
        assert refused.code == 2 and words in refused.stderr, (argv, refused.stderr)
