"""Hugging Face models traced as the target runs them (issue 35): the kernel each architecture's
attention runs on an H100, named; a padding mask decided on fake tensors as a real run decides
it; GPT-2's AdamW as torch's foreach kernels."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.hardware.target import target_of
from tensorledger.ledger.memory import memory_report
from tensorledger.ledger.trace import step_summary
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.hf_masks import NO_PADDING_ASSUMED

H100 = target_of(get_hardware("h100"))

FACTORY = '''
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make_model():
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=72, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64))


def make_inputs(batch, seq):
    ids = torch.zeros(batch, seq, dtype=torch.long)
    return {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long),
            "labels": ids, "use_cache": False}
'''


def _config(tmp_path: Path, raw: dict[str, Any]) -> str:
    folder = tmp_path / str(raw["model_type"])
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder / "config.json")


def test_falcon_materialises_its_mask_so_an_h100_runs_memory_efficient_attention(
        tmp_path: Path) -> None:
    """transformers' Falcon always builds its 4-D mask (``create_causal_mask(...,
    allow_is_causal_skip=False)``, so ALiBi can be added to it): flash takes no mask, the
    memory-efficient kernel does, in both layers."""
    path = _config(tmp_path, {"model_type": "falcon", "vocab_size": 97, "hidden_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4,
                              "new_decoder_architecture": False, "multi_query": True})
    run = trace_workload(resolve_workload(path, batch=2, seq=12, target=H100))
    assert [(k, why) for _, k, why in run.trace.attention_kernels] == [
        ("efficient", "not flash: an attention mask")] * 2
    ops = Counter(r.op for r in run.trace.records if r.category == "attention")
    assert ops == {"aten._scaled_dot_product_efficient_attention.default": 2,
                   "aten._scaled_dot_product_efficient_attention_backward.default": 2}


def test_gemma2_writes_its_attention_by_hand_as_on_a_gpu(tmp_path: Path) -> None:
    """Gemma 2 caps its scores (``attn_logit_softcapping``), which SDPA cannot: transformers
    runs its eager attention on any device, so no SDPA call is routed and the trace names the
    attention written as bmm + softmax."""
    path = _config(tmp_path, {"model_type": "gemma2", "vocab_size": 97, "hidden_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4,
                              "num_key_value_heads": 2, "head_dim": 16,
                              "intermediate_size": 72, "max_position_embeddings": 64})
    run = trace_workload(resolve_workload(path, batch=2, seq=12, target=H100))
    assert run.trace.attention_kernels == ()
    summary = step_summary(run, None)
    assert summary.hand_attention is not None and len(summary.hand_attention.modules) == 2


def test_a_padding_mask_on_fake_takes_the_real_branch(tmp_path: Path) -> None:
    """A factory passing an all-ones ``attention_mask`` (``use_cache=False``): a real CPU run
    reads the mask, finds no padding and runs SDPA with ``is_causal``; on fake tensors the same
    branch is taken and said.  Op for op the two agree but for the real run's read of the
    answer (``_local_scalar_dense``), and the peak is the same to the byte."""
    factory = tmp_path / "hf_llama.py"
    factory.write_text(FACTORY)
    runs, peaks = {}, {}
    for device in ("fake", "cpu"):
        work = resolve_workload(f"{factory}:make_model", batch=2, seq=24, precision="fp32",
                                device=device)
        runs[device] = trace_workload(work)
        peaks[device] = memory_report(work).peak_bytes
    fake_ops = [r.op for r in runs["fake"].trace.records]
    real_ops = [r.op for r in runs["cpu"].trace.records]
    read_back = "aten._local_scalar_dense.default"
    assert [op for op in real_ops if op != read_back] == [op for op in fake_ops
                                                           if op != read_back]
    assert Counter(real_ops)[read_back] - Counter(fake_ops)[read_back] == 1
    assert peaks["fake"] == peaks["cpu"]
    assert runs["fake"].assumptions == (NO_PADDING_ASSUMED,)
    assert runs["cpu"].assumptions == ()
    # on the H100 target the same mask is flash with is_causal in every layer
    work = resolve_workload(f"{factory}:make_model", batch=2, seq=24, target=H100)
    kernels = [k for _, k, _ in trace_workload(work).trace.attention_kernels]
    assert kernels == ["flash", "flash"]


def test_the_command_says_what_it_assumed(cli: Any, tmp_path: Path) -> None:
    factory = tmp_path / "hf_llama.py"
    factory.write_text(FACTORY)
    result = cli("trace", "--model", f"{factory}:make_model", "--batch", "2", "--seq", "16")
    assert result.code == 0, result.stderr
    assert NO_PADDING_ASSUMED.split(":")[0] in result.stdout
    assert "attention: flash in LlamaForCausalLM.model.layers.{0..1}.self_attn ×2" in \
        result.stdout.replace("\n", "")


@pytest.mark.parametrize("kernel", ["foreach", "for-loop"])
def test_gpt2_adamw_as_torch_runs_it_on_the_target(kernel: str) -> None:
    """GPT-2 (reference, 196 parameter tensors: 12 blocks × 16 + token and position
    embeddings + the final norm's weight and bias) on an H100: ``_multi_tensor_adamw`` is
    2·N + 10 ops (see tests/trace/test_target_program.py): 2·196 + 10 = 402; the loop's
    ``_single_tensor_adamw`` is 10 ops a tensor, 1,960."""
    run = trace_workload(resolve_workload("gpt2", batch=1, seq=64, target=H100,
                                          optimizer_kernel=kernel))
    optimizer_ops = sum(r.phase == "optimizer" for r in run.trace.records)
    tensors = 12 * 16 + 2 + 2
    assert len(run.param_numels) == tensors
    assert optimizer_ops == (2 * tensors + 10 if kernel == "foreach" else 10 * tensors)


@pytest.mark.parametrize("model_type", ["gemma2", "phi3", "gpt_neox", "falcon", "bert"])
def test_on_the_cpu_target_fake_equals_a_real_cpu_run(tmp_path: Path, model_type: str) -> None:
    """This machine's program (``--device cpu``, and fake tensors with the CPU target): every
    op the same, in order, with its module, phase, FLOPs and bytes, and the same peak."""
    from tests.workload.hf_configs import write_config

    path = str(write_config(tmp_path / model_type, model_type))
    works = {device: resolve_workload(path, batch=2, seq=12, precision="fp32", device=device)
             for device in ("fake", "cpu")}

    def rows(device: str) -> list[tuple[Any, ...]]:
        return [(r.op, r.module, r.phase, r.flops, r.bytes_read, r.bytes_written,
                 r.output_shapes) for r in trace_workload(works[device]).trace.records]

    assert rows("fake") == rows("cpu")
    assert memory_report(works["fake"]).peak_bytes == memory_report(works["cpu"]).peak_bytes
