"""Presets of the models package, traced: matmul FLOPs equal the closed forms exactly, nothing
is uncovered, FlopCounterMode agrees on the matmuls, and the CLI prints what the library
counts."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from tests.conftest import assert_one_line_error
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.hardware.target import default_target
from tensorledger.napkin.transformer import PRESETS, forward_flops_per_token, get_preset
from tensorledger.trace import by_module
from tensorledger.workload import trace_model


def _matmul(run, phase: str, category: str) -> int:  # type: ignore[no-untyped-def]
    return sum(r.flops for r in run.trace.records if r.phase == phase and r.category == category)


# the mixtures of experts at full size: tests/models/test_moe_reference.py (tiny-moe, and
# Mixtral-8x7B at a short sequence)
@pytest.mark.parametrize("preset", sorted(p for p, c in PRESETS.items() if c.moe is None))
def test_traced_matmul_flops_equal_the_closed_form(preset: str) -> None:
    batch, seq = 2, 16
    run = trace_model(preset, batch=batch, seq=seq, step="forward-backward", device="meta",
                      precision="fp32")
    closed = forward_flops_per_token(get_preset(preset), seq, "full")
    tokens = batch * seq
    forward_linear = _matmul(run, "forward", "matmul")
    forward_attention = _matmul(run, "forward", "attention")
    assert forward_linear + forward_attention == tokens * closed.total_flops
    assert forward_attention == tokens * (closed.attention_scores_flops
                                          + closed.attention_values_flops)
    # backward: two products per forward product; fused attention recomputes its scores
    assert _matmul(run, "backward", "matmul") == 2 * forward_linear
    assert 2 * _matmul(run, "backward", "attention") == 5 * forward_attention
    assert run.trace.uncovered == {}
    root = by_module(run.trace)
    assert root.flops == sum(r.flops for r in run.trace.records)


def test_llama_3_8b_matmuls_match_flop_counter_on_meta() -> None:
    with FlopCounterMode(display=False) as oracle:
        run = trace_model("llama-3-8b", batch=1, seq=32, step="forward-backward",
                          precision="fp32")
    ours: Counter[str] = Counter()
    for r in run.trace.records:
        if r.category == "matmul":
            ours[r.op.rsplit(".", 1)[0]] += r.flops
    theirs = {str(op): n for op, n in oracle.get_flop_counts()["Global"].items()}
    assert ours == theirs


def test_tiny_counts_identical_on_meta_fake_and_cpu() -> None:
    runs = [trace_model("tiny", batch=2, seq=8, step="train", device=d, precision="fp32")
            for d in ("meta", "fake", "cpu")]
    shapes = [[(r.op, r.module, r.phase, r.flops, r.flops_causal_halved, r.bytes_read,
                r.bytes_written, r.output_shapes) for r in run.trace.records] for run in runs]
    assert shapes[0] == shapes[1] == shapes[2]
    assert [run.trace.device for run in runs] == ["meta", "fake:cpu", "cpu"]
    assert all(run.trace.uncovered == {} for run in runs)


def test_cli_trace_prints_the_library_counts(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("trace", "--model", "tiny", "--batch", "1", "--seq", "8", "--precision", "fp32",
                 "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["schema_version"] == 1
    # the command traces an H100's program when it names no --hardware
    run = trace_model("tiny", batch=1, seq=8, step="train", optimizer="adamw", precision="fp32",
                      target=default_target())
    summary = document["summary"]
    assert summary["flops"] == run.trace.flops
    assert summary["uncovered"] == {}
    assert summary["modules"]["flops"] == run.trace.flops
    assert {c["category"]: c["flops"] for c in summary["by_category"]}["matmul"] == sum(
        r.flops for r in run.trace.records if r.category == "matmul")
    assert [p["phase"] for p in summary["by_phase"]] == ["forward", "backward", "optimizer"]
    table = cli("trace", "--model", "tiny", "--seq", "8", "--step", "forward-backward",
                "--depth", "1")
    assert table.code == 0
    assert "By category" in table.stdout and "TransformerLM" in table.stdout
    assert "uncovered ops: none" in table.stdout
    rows = [line for line in table.stdout.splitlines() if line.startswith("│")]
    assert not any("blocks" in row for row in rows)  # depth 1 folds the blocks into the model


def test_cli_trace_and_einsum_errors(cli) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("trace", "--model", "nope"), "unknown model", "llama-3-8b")
    assert_one_line_error(cli("trace", "--model", "tiny", "--step", "sideways"), "step")
    assert_one_line_error(cli("trace", "--model", "gpt2", "--seq", "4096"), "context")
    assert_one_line_error(cli("einsum", "a b, b c -> a z", "a=1", "b=2", "c=3"), "'z'")
    assert_one_line_error(cli("einsum", "a b -> a", "a=2", "b"), "name=value")


def test_cli_einsum_prints_the_lecture_example(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("einsum", "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2", "batch=2",
            "seq1=3", "seq2=3", "hidden=4", "--dtype", "bf16")
    result = cli(*args)
    assert result.code == 0
    assert "FLOPs: 144" in result.stdout            # 2 * 2 * 3 * 3 * 4
    assert "132 (96 read + 36 written)" in result.stdout
    assert "batch 2" in result.stdout and "M 3" in result.stdout and "K 4" in result.stdout
    document = json.loads(cli(*args, "--json").stdout)
    assert document["flops"] == 144
    assert document["matmul"]["k"] == 4


def test_einsum_command_loads_no_torch() -> None:
    import subprocess
    import sys

    code = ("import sys; from tensorledger.cli import main; "
            "main(['einsum', 'a b, b c -> a c', 'a=2', 'b=3', 'c=4']); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
