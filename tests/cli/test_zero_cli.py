"""``tensorledger zero``: ZeRO bytes per rank and bytes sent per step, table and JSON."""

from __future__ import annotations

import re

import pytest

from tests.conftest import assert_one_line_error

# llama-3-8b: 8,030,261,248 parameters (tests/napkin/test_parallel.py derives it); on 8 ranks a
# shard is 1,003,782,656.
P, SHARD = 8_030_261_248, 1_003_782_656


def test_zero_json_llama_3_8b(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("zero", "--model", "llama-3-8b", "--ranks", "8", "--precision", "bf16-master",
              "--optimizer", "adam", "--json").json()
    assert doc["command"] == "zero" and doc["params"] == P and doc["ranks"] == 8
    totals = [s["total_bytes"] for s in doc["stages"]]
    assert totals == [16 * P,                   # 128,484,179,968
                      4 * P + 12 * SHARD,       # 44,166,436,864
                      2 * P + 14 * SHARD,       # 30,113,479,680
                      16 * SHARD]               # 16,060,522,496
    sent = [c["sent_bytes_per_rank"] for c in doc["comm"]]
    # DDP all-reduce of bf16 grads 2·7/8·2P; ZeRO-1/2 reduce-scatter + all-gather, the same;
    # ZeRO-3 two all-gathers and a reduce-scatter, 3·7/8·2P
    assert sent == pytest.approx([1.75 * 2 * P, 1.75 * 2 * P, 1.75 * 2 * P, 2.625 * 2 * P])


def test_zero_table(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("zero", "--params", "8B", "--ranks", "64")
    assert result.code == 0, result.stderr
    assert "mixed-bf16 + adamw" in result.stdout
    # mixed-bf16 + AdamW: 4 + 4 + 0 + 8 bytes per parameter; a shard is 8e9 / 64 = 125e6
    # parameters; ZeRO-3 holds 4 · 125e6 = 500 MB of parameters and 16 · 125e6 = 2 GB in all,
    # DDP 16 · 8e9 = 128 GB
    (fsdp,) = [line for line in result.stdout.splitlines() if "+ parameters (FSDP)" in line]
    assert re.search(r"│\s+500 MB\s+│", fsdp) and re.search(r"│\s+2 GB\s+│", fsdp)
    (ddp,) = [line for line in result.stdout.splitlines() if "nothing (DDP)" in line]
    assert re.search(r"│\s+128 GB\s+│", ddp)


@pytest.mark.parametrize(("args", "fragment"), [
    ((), "give --params"),
    (("--params", "8B", "--model", "llama-3-8b"), "give --params"),
    (("--params", "8.5"), "whole number of parameters"),
    (("--params", "8B", "--ranks", "0"), "--ranks"),
    (("--params", "8B", "--precision", "fp12"), "fp12"),
    (("--model", "nope"), "nope"),
])
def test_zero_refusals(cli, args: tuple[str, ...], fragment: str) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("zero", *args), fragment)
