"""Issue 39: decode of llama-3-8b on an H100 at batch 1 is memory-bound, its time per token
(weights + cache bytes) / expected bandwidth, derived here by hand; and the prefill and decode
steps through the commands, bad input refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.hardware.target import target_of
from tensorledger.ledger.roofline import roofline_report
from tensorledger.workload import resolve_workload
from tests.conftest import assert_one_line_error
from tests.workload.hf_configs import write_config

# llama-3-8b: d 4096, 32 layers, 32 query heads and 8 KV heads of 128, MLP 14336, vocab 128256.
# Weights a decode step streams through its matmuls, per layer:
#   q 4096·4096 = 16,777,216; k, v 2 · 4096·1024 = 8,388,608; o 16,777,216;
#   gate, up, down 3 · 4096·14336 = 176,160,768  →  218,103,808
# 32 layers 6,979,321,856 + the head 128256·4096 = 525,336,576 → 7,504,658,432 weights.
# (The embedding table is gathered, one row a token: 4096 · 2 bytes; the norms' 266,240
# weights are read by elementwise ops: both under 1 MB.)
MATMUL_WEIGHTS = 32 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096
assert MATMUL_WEIGHTS == 7_504_658_432
WEIGHT_BYTES = 2 * MATMUL_WEIGHTS  # bf16: 15,009,316,864
# The cache attention reads: the context and the token written, 32 layers · (key + value)
# · 8 heads · 128 · 2 bytes = 131,072 bytes a token (napkin's Llama-3-8B figure).
CONTEXT = 8192
CACHE_BYTES = (CONTEXT + 1) * 32 * 2 * 8 * 128 * 2
assert CACHE_BYTES == 1_073_872_896
# H100 SXM: 3.35 TB/s on the datasheet, 85% of it attained by eager streaming kernels.
EXPECTED_BANDWIDTH = 3.35e12 * 0.85
HAND_TIME_S = (WEIGHT_BYTES + CACHE_BYTES) / EXPECTED_BANDWIDTH  # 5.648 ms
assert round(HAND_TIME_S * 1e3, 3) == 5.648


def test_llama_3_8b_decode_on_h100_is_memory_bound_at_weights_plus_cache_over_bandwidth(
        ) -> None:
    h100 = get_hardware("h100")
    assert h100.memory_bandwidth_bytes_per_s == 3.35e12  # the hand figure's anchors
    assert h100.expected_bandwidth(1e9) == EXPECTED_BANDWIDTH
    work = resolve_workload("llama-3-8b", batch=1, step="decode", context=CONTEXT,
                            target=target_of(h100))  # the program an H100 runs
    assert work.precision.name == "bf16" and work.tokens == 1
    run = roofline_report(work, h100)
    serving = run.serving
    assert serving is not None and serving.bound == "memory"
    assert serving.streamed_time_s == pytest.approx(HAND_TIME_S, rel=0.05)
    # every op not a view launches a kernel at the chip's per-op cost: a second count of the
    # eager step's extra time
    kernels = sum(op.category != "view" for op in run.prediction.ops)
    assert serving.launch_time_s == pytest.approx(kernels * h100.expected_op_overhead_s)
    assert serving.eager_time_s == pytest.approx(serving.streamed_time_s
                                                 + serving.launch_time_s)
    assert serving.tokens_per_s_per_user == pytest.approx(1 / serving.streamed_time_s)


def test_prefill_step_runs_the_prompt_and_keeps_the_last_logits() -> None:
    """A prefill of S tokens: every matmul of the blocks over S rows, the head over 1."""
    from tensorledger.workload import trace_workload

    run = trace_workload(resolve_workload("tiny", batch=2, seq=24, step="prefill"))
    heads = [r for r in run.trace.records if r.module.endswith(".head")
             and r.category == "matmul"]
    assert heads and all(r.input_shapes[0][0] == 2 * 1 for r in heads)  # b · 1 rows
    attention = [r for r in run.trace.records if r.category == "attention"]
    assert all(r.flops_causal_halved * 2 == r.flops for r in attention)  # causal over itself


# ------------------------------------------------------------------------- the commands


@pytest.mark.parametrize("command", ["trace", "memory", "roofline", "account"])
def test_decode_and_prefill_through_every_command(cli, command: str) -> None:  # type: ignore[no-untyped-def]
    for sizes in (["--step", "decode", "--context", "32"], ["--step", "prefill", "--seq", "16"]):
        result = cli(command, "--model", "tiny", "--batch", "2", *sizes, "--json",
                     *(["-H", "h100"] if command in ("roofline", "account") else []))
        assert result.code == 0, result.stderr
        shown = result.json()
        assert shown["step"] == sizes[1]
        if command in ("roofline", "account"):
            assert shown["serving"]["bound"] in ("memory", "compute")
        if command == "memory":
            assert shown["kv_cache"]["storage_bytes"] == shown["kv_cache_bytes"] > 0


def test_memory_shows_the_cache_beside_napkin(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("memory", "--model", "tiny", "--step", "decode", "--context", "63",
                 "--batch", "4")
    assert result.code == 0, result.stderr
    assert "kv cache" in result.stdout and "63 → 64 tokens" in result.stdout


def test_bad_input_is_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = ["trace", "--model", "tiny", "--batch", "1"]
    assert_one_line_error(cli(*base, "--context", "8"), "--context", "decode")
    assert_one_line_error(cli(*base, "--step", "prefill", "--context", "8"), "--context")
    assert_one_line_error(cli(*base, "--step", "decode", "--context", "0"), "--context")
    assert_one_line_error(cli(*base, "--step", "decode"), "--context")
    # gpt2's table of positions holds 1024: the context and the new token need 1025
    assert_one_line_error(cli("memory", "--model", "gpt2", "--step", "decode", "--context",
                              "1024"), "1,025 positions")
    factory = tmp_path / "net.py"
    factory.write_text("import torch\n\ndef make():\n    return torch.nn.Linear(4, 4)\n")
    assert_one_line_error(cli("roofline", "--model", f"{factory}:make", "--step", "decode",
                              "--context", "8"), "cache")
    bert = write_config(tmp_path / "bert", "bert")
    assert_one_line_error(cli("account", "--model", str(bert), "--step", "decode",
                              "--context", "8"), "causal LM")
    assert_one_line_error(cli(*base, "--step", "decode", "--context", "8", "--checkpoint"),
                          "--checkpoint")
    assert_one_line_error(cli(*base, "--step", "decode", "--context", "8", "--dp", "2"),
                          "one device")
