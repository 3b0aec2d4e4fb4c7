"""GPT-2 (124M) at sequence 1024: the meter's FLOPs per token beside nanoGPT's
``estimate_mfu`` formula (6N + 12·L·H·Q·T) and 6·N, term by term, as the README explains.

The step runs on the meta device (shapes only), batch 1, AdamW; the meter records it as it
would a real one (that a recording equals a trace of the same step is held on the tiny preset in
test_meter.py).  AdamW adds 14 FLOPs per parameter per step (as the cost registry counts its
ops), so its share per token falls as 1/batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tensorledger.bench.meter import Meter
from tensorledger.models import build_model
from tensorledger.napkin.transformer import (
    forward_flops_per_token,
    get_preset,
    parameter_count,
    transformer_training_flops,
)

SEQ = 1024


def test_gpt2_flops_per_token_meter_nanogpt_and_6n() -> None:
    config = get_preset("gpt2")
    model = build_model(config, "meta")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.zeros(1, SEQ, dtype=torch.long, device="meta")

    def step() -> None:
        logits = model(tokens)
        F.cross_entropy(logits.reshape(-1, config.vocab_size), tokens.reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    ticks = iter(range(10))  # 1 s per reading: MFU stays far below 1 on a meta "step"
    meter = Meter(model, hardware="h100", every=0, warmup_steps=0, quiet=True,
                  clock=lambda: float(next(ticks)))
    with meter.step():
        step()
    (count,) = meter.recordings
    assert count.tokens == SEQ and count.uncovered == {}

    L, H, Q, T, d = config.n_layers, config.n_heads, config.head_dim, SEQ, config.d_model
    params = parameter_count(config)
    assert params.total_params == 124_439_808

    # 6·N: every parameter, six FLOPs per token; no attention
    six_n = 6 * params.total_params
    assert six_n == 746_638_848

    # nanoGPT: N without the position table (get_num_params(non_embedding=True)), plus
    # 12·L·H·Q·T for the attention scores and values over the full context, forward and backward
    n_nano = params.total_params - config.context_length * d
    assert n_nano == 123_653_376
    nanogpt = 6 * n_nano + 12 * L * H * Q * T
    assert 12 * L * H * Q * T == 113_246_208
    assert nanogpt == 855_166_464

    # the closed form of the house: 6 × the weights that take part in a matmul (head included,
    # tied or not; biases, norms and tables excluded) + 3 × the attention matmuls
    closed = transformer_training_flops(config, 1.0, SEQ, "full")
    biases_and_norms = L * (4 * d + 4 * d + d + 2 * 2 * d) + 2 * d  # qkv/o, fc, proj, 2 LN; ln_f
    assert biases_and_norms == 121_344
    assert nanogpt - closed.flops_per_token == 6 * biases_and_norms  # 728,064

    # the meter: matmuls exactly as the closed form, except that fused attention's backward
    # recomputes the scores (2.5× forward, not 2×), plus every non-matmul FLOP of the step
    forward = forward_flops_per_token(config, SEQ, "full")
    attention_forward = forward.attention_scores_flops + forward.attention_values_flops
    assert attention_forward == 4 * L * T * d == 37_748_736
    matrix_per_token = sum(count.matrix_flops.values()) // SEQ
    assert sum(count.matrix_flops.values()) % SEQ == 0
    assert matrix_per_token == closed.flops_per_token + attention_forward // 2 == 873_312_768
    other = count.flops - SEQ * matrix_per_token  # elementwise, norms, softmax, loss, AdamW
    assert 0 < other < 0.01 * count.flops
    # AdamW: 14 FLOPs per parameter (as the cost registry counts its ops) and 1 per tensor
    # (its step counter), once per step however many tokens the step has
    tensors = list(model.parameters())
    assert count.phase_flops["optimizer"] == 14 * params.total_params + len(tensors)
    assert len(tensors) == 196  # 12 layers × 16 + token and position tables + final LayerNorm
    assert round(count.phase_flops["optimizer"] / SEQ) == 1_701_326  # over 1,024 tokens

    # the figures the README quotes
    assert round(count.flops / SEQ) == 877_833_364
    assert round(count.flops_causal_halved / SEQ) == 811_773_076
    assert round(other / SEQ) == 4_520_596
    summary = meter.close()
    assert summary.flops_per_step == count.flops  # measured figures need steps after it
    assert summary.peak is not None and summary.peak.label == "fp32"
