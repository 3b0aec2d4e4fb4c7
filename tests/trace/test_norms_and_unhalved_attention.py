"""Norms written out op by op are counted as normalization, one norm per module the model
holds; attention that the causal-halved figure does not halve is said so."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.workload.hf_configs import TINY, write_config
from torch import nn

from tensorledger.models.build import build_model
from tensorledger.napkin.transformer import get_preset
from tensorledger.trace import summarize
from tensorledger.trace.records import is_norm_class
from tensorledger.workload import resolve_workload, trace_model, trace_workload


def _norm_modules(model: nn.Module) -> int:
    """The oracle: norms counted by walking the model, apart from the trace."""
    return sum(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) or type(m).__name__.endswith("RMSNorm")
               for m in model.modules())


def test_tiny_preset_norms_are_counted_per_module() -> None:
    run = trace_model("tiny", batch=2, seq=8, step="forward-backward", precision="fp32")
    summary = summarize(run.trace)
    model = build_model(get_preset("tiny"))
    expected = _norm_modules(model)
    assert expected == 2 * 2 + 1  # 2 layers × (attention_norm, mlp_norm) + final_norm
    assert summary.norms is not None and summary.norms.modules == expected
    assert summary.norms.classes == (("RMSNorm", expected),)
    # every elementwise or reduction op inside a norm module is normalization now
    inside = [r for r in run.trace.records
              if is_norm_class(run.trace.module_classes.get(r.module, ""))]
    assert inside and not [r for r in inside if r.category in ("elementwise", "reduction")]
    assert summary.norms.ops == sum(r.category == "normalization" for r in inside)
    assert summary.norms.flops == sum(r.flops for r in inside if r.category == "normalization")


def test_hf_llama_rmsnorm_written_out_is_normalization(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    path = write_config(tmp_path / "llama", "llama")
    work = resolve_workload(str(path), batch=2, seq=12, step="forward-backward",
                            precision="fp32", device="cpu")
    run = trace_workload(work)
    summary = summarize(run.trace)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY["llama"]))
    expected = _norm_modules(model)
    assert expected == 2 * 2 + 1  # num_hidden_layers 2 × (input, post-attention) + final
    assert summary.norms is not None
    assert summary.norms.modules == expected
    assert summary.norms.classes == (("LlamaRMSNorm", expected),)
    norm_rows = {c.category: c for c in summary.by_category}
    assert norm_rows["normalization"].ops >= summary.norms.ops > expected  # several per norm


def test_a_block_named_pre_norm_is_no_norm() -> None:
    assert not is_norm_class("PreNormBlock") and is_norm_class("BatchNorm2d")


ENCODER = '''
import torch
from torch import nn

WIDTH, HEADS, VOCAB = 24, 3, 50


class Encoder(nn.Module):
    """``how``: ``encoder`` (nn.TransformerEncoder, which finds a causal float mask and passes
    is_causal on), ``layers`` (nn.TransformerEncoderLayer called with the mask alone) or
    ``mha`` (nn.MultiheadAttention called with the mask: weights returned, bmm + softmax)."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.embed = nn.Embedding(VOCAB, WIDTH)
        if how == "mha":
            self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        else:
            self.layers = nn.ModuleList([nn.TransformerEncoderLayer(
                WIDTH, HEADS, dim_feedforward=40, batch_first=True, dropout=0.0)
                for _ in range(2)])
            if how == "encoder":
                self.encoder = nn.TransformerEncoder(self.layers[0], num_layers=2,
                                                     enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, input_ids):
        seq = input_ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=input_ids.device)
        x = self.embed(input_ids)
        if self.how == "mha":
            x = x + self.attn(x, x, x, attn_mask=mask)[0]
        elif self.how == "encoder":
            x = self.encoder(x, mask=mask)
        else:
            for layer in self.layers:
                x = layer(x, src_mask=mask)
        return self.head(x)


def encoder():
    return Encoder("encoder")


def layers():
    return Encoder("layers")


def mha():
    return Encoder("mha")
'''

#: TransformerEncoder deep-copies its layer; under fake tensors (the model is built there
#: first) the copy reads data pointers, which PyTorch warns about
FAKE_COPY = pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")


def _summary(tmp_path: Path, factory: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "encoder.py"
    path.write_text(ENCODER)
    # real tensors: finding a causal mask reads its values, which fake tensors do not have
    work = resolve_workload(f"{path}:{factory}", batch=2, seq=10, step="forward-backward",
                            precision="fp32", device="cpu")
    run = trace_workload(work)
    return run, summarize(run.trace)


@FAKE_COPY
def test_transformer_encoder_finds_the_causal_mask_and_halves(tmp_path: Path) -> None:
    run, summary = _summary(tmp_path, "encoder")
    attention = [r for r in run.trace.records if r.category == "attention"]
    assert len(attention) == 4  # 2 layers × (forward, backward)
    assert all(r.flops_causal_halved == r.flops // 2 for r in attention)
    assert summary.flops - summary.flops_causal_halved == sum(
        r.flops - r.flops // 2 for r in attention)
    assert summary.unhalved_attention is None and summary.hand_attention is None


def test_encoder_layers_given_a_mask_alone_are_flagged(tmp_path: Path) -> None:
    run, summary = _summary(tmp_path, "layers")
    attention = [r for r in run.trace.records if r.category == "attention"]
    assert len(attention) == 4 and summary.flops_causal_halved == summary.flops
    flagged = summary.unhalved_attention
    assert flagged is not None and flagged.ops == 4
    assert flagged.flops == sum(r.flops for r in attention)
    assert flagged.modules == ("Encoder.layers.0.self_attn", "Encoder.layers.1.self_attn")


def test_multihead_attention_with_weights_is_hand_attention(tmp_path: Path) -> None:
    run, summary = _summary(tmp_path, "mha")
    hand = summary.hand_attention
    assert hand is not None and hand.modules == ("Encoder.attn",)
    products = [r for r in run.trace.records
                if r.module == "Encoder.attn" and r.op.startswith(("aten.bmm.", "aten.baddbmm."))]
    assert hand.flops == sum(r.flops for r in products) > 0


def test_trace_cli_says_so(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    factory = tmp_path / "encoder.py"
    factory.write_text(ENCODER)
    result = cli("trace", "--model", f"{factory}:layers", "--batch", "2", "--seq", "10",
                 "--step", "forward-backward", "--device", "cpu")
    assert result.code == 0, result.stderr
    assert "the causal-halved figure does not halve them" in result.stdout
    assert "normalization: 4 norm modules (LayerNorm ×4)" in result.stdout  # 2 layers × 2


def test_a_causal_flag_is_not_flagged() -> None:
    run = trace_model("tiny", batch=2, seq=8, step="forward", precision="fp32")
    assert summarize(run.trace).unhalved_attention is None
    q = torch.ones(2, 3, 5, 4, device="meta")
    from tensorledger.trace import trace

    full = trace(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    flagged = summarize(full).unhalved_attention
    assert flagged is not None and flagged.ops == 1
    # 2 products (scores, values) × 2·B·H·S_q·S_k·D = 2 · 2·2·3·5·5·4 = 2400
    assert flagged.flops == 2 * 2 * 2 * 3 * 5 * 5 * 4
