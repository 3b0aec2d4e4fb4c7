"""Forward of the einops model against a plain-PyTorch reimplementation (a second code path),
against FlopCounterMode (a third-party oracle for matmul FLOPs), and a short training run."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.models import TransformerLM, build_model
from tensorledger.napkin import TransformerConfig, forward_flops_per_token, get_preset

GPT_STYLE = TransformerConfig(name="mha-gpt", vocab_size=37, context_length=12, d_model=24,
                              n_layers=2, n_heads=4)
LLAMA_GQA = TransformerConfig(name="gqa-llama", vocab_size=37, context_length=12, d_model=24,
                              n_layers=2, n_heads=6, n_kv_heads=2, d_ff=40, mlp="swiglu",
                              norm="rmsnorm", positions="rope", tied_embeddings=False,
                              bias=False, rope_theta=500.0)
MQA_ROPE_LAYERNORM = TransformerConfig(name="mqa", vocab_size=37, context_length=12, d_model=16,
                                       n_layers=1, n_heads=4, n_kv_heads=1, head_dim=6,
                                       positions="rope", tied_embeddings=False)


def plain_norm(config: TransformerConfig, x: torch.Tensor, weight: torch.Tensor,
               bias: torch.Tensor | None) -> torch.Tensor:
    if config.norm == "rmsnorm":
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + config.norm_eps) * weight
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    out = (x - mean) / torch.sqrt(var + config.norm_eps) * weight
    return out + bias if bias is not None else out


def plain_linear(x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
    out = x @ layer.weight.T
    return out + layer.bias if layer.bias is not None else out


def plain_rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """x: (batch, heads, seq, dim); pairs feature i with i + dim/2 (Hugging Face layout)."""
    seq, dim = x.shape[-2], x.shape[-1]
    half = dim // 2
    freqs = [theta ** (-2 * i / dim) for i in range(half)]
    angle = torch.tensor([[p * f for f in freqs] for p in range(seq)], dtype=torch.float32)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def plain_forward(model: TransformerLM, tokens: torch.Tensor) -> torch.Tensor:
    """The same network with plain matmuls, an explicit mask and softmax, per-head loops."""
    config = model.config
    batch, seq = tokens.shape
    x = model.token_embedding.weight[tokens]
    if model.position_embedding is not None:
        x = x + model.position_embedding.weight[:seq]
    mask = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    group = config.n_heads // config.n_kv_heads
    for block in model.blocks:
        attn = block.attention
        h = plain_norm(config, x, block.attention_norm.weight,
                       getattr(block.attention_norm, "bias", None))
        q = plain_linear(h, attn.query).reshape(batch, seq, config.n_heads, config.head_dim)
        k = plain_linear(h, attn.key).reshape(batch, seq, config.n_kv_heads, config.head_dim)
        v = plain_linear(h, attn.value).reshape(batch, seq, config.n_kv_heads, config.head_dim)
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        if config.positions == "rope":
            q, k = plain_rope(q, config.rope_theta), plain_rope(k, config.rope_theta)
        heads = []
        for head in range(config.n_heads):
            kv = head // group  # query heads share key/value heads in consecutive groups
            scores = q[:, head] @ k[:, kv].permute(0, 2, 1) / math.sqrt(config.head_dim)
            scores = scores.masked_fill(~mask, float("-inf"))
            heads.append(torch.softmax(scores, dim=-1) @ v[:, kv])
        x = x + plain_linear(torch.cat(heads, dim=-1), attn.output)
        h = plain_norm(config, x, block.mlp_norm.weight, getattr(block.mlp_norm, "bias", None))
        mlp = block.mlp
        if config.mlp == "swiglu":
            hidden = F.silu(plain_linear(h, mlp.gate)) * plain_linear(h, mlp.up)
        else:
            u = plain_linear(h, mlp.up)
            hidden = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        x = x + plain_linear(hidden, mlp.down)
    final = plain_norm(config, x, model.final_norm.weight, getattr(model.final_norm, "bias", None))
    return final @ model.head.weight.T


@pytest.mark.parametrize("config", [GPT_STYLE, LLAMA_GQA, MQA_ROPE_LAYERNORM],
                         ids=lambda c: c.name)
def test_forward_equals_plain_reimplementation(config: TransformerConfig) -> None:
    torch.manual_seed(0)
    model = build_model(config, "cpu")
    with torch.no_grad():  # non-trivial norm weights and biases, so they are exercised
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.1 * torch.randn_like(parameter))
    tokens = torch.randint(0, config.vocab_size, (3, 10))
    with torch.no_grad():
        expected = plain_forward(model, tokens)
        actual = model(tokens)
    assert actual.shape == (3, 10, config.vocab_size)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", [get_preset("gpt2"), LLAMA_GQA], ids=lambda c: c.name)
def test_matmul_flops_match_flop_counter(config: TransformerConfig) -> None:
    # FlopCounterMode counts mm/addmm/bmm (SDPA on meta runs as bmm) without causal halving.
    batch, seq = 2, 12
    model = build_model(config, "meta")
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(batch, seq, dtype=torch.long, device="meta"))
    full = forward_flops_per_token(config, seq, "full")
    assert counter.get_total_flops() == full.total_flops * batch * seq


def test_tiny_preset_trains() -> None:
    torch.manual_seed(0)
    config = get_preset("tiny")
    model = build_model(config, "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, config.vocab_size, (4, config.context_length + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    losses = []
    for _ in range(50):
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # starts near ln(128) ≈ 4.85 (uniform guesses) and memorises the fixed batch
    assert abs(losses[0] - math.log(config.vocab_size)) < 0.2
    assert losses[-1] < 0.5 * losses[0]
