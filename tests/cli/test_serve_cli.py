"""``tensorledger serve`` end to end (issue 39): the table, JSON, the plot, one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error


def test_serve_prints_the_working_and_the_ridge(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plot = tmp_path / "serve.png"
    result = cli("serve", "--model", "llama-3-8b", "--hardware", "h100", "--plot", str(plot))
    assert result.code == 0, result.stderr
    for fragment in ("131,072 KV bytes a token", "5.648 ms", "batch 1 decode is memory-bound",
                     "ridge (roofline", "≈ 295", "51 sequences of 8,192 tokens"):
        assert fragment in result.stdout, fragment
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_serve_json(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("serve", "--model", "llama-3-70b", "--hardware", "h100", "--count", "8", "--tp",
              "4", "--kv-dtype", "fp8", "--weights-dtype", "fp8", "--context", "4096",
              "--memory-utilization", "0.92", "--block-size", "32", "--json").json()
    assert doc["command"] == "serve"
    assert doc["replicas"] == 2 and doc["kv_dtype"] == "fp8_e4m3fn"
    assert doc["kv_bytes_per_token"] == 2 * 80 * 8 * 128  # fp8: one byte an element
    assert doc["weights_bytes_per_chip"] == pytest.approx(70_553_706_496 / 4)
    assert doc["rows"][0]["batch"] == 1


def test_serve_reads_a_config_json(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, '
                      '"num_hidden_layers": 4, "num_attention_heads": 8, '
                      '"num_key_value_heads": 2, "intermediate_size": 512, '
                      '"max_position_embeddings": 2048}')
    doc = cli("serve", "--model", str(config), "--json").json()
    assert doc["kv_bytes_per_token"] == 2 * 4 * 2 * 32 * 2  # 1,024: 2 KV heads of 32


@pytest.mark.parametrize(("args", "fragment"), [
    (("--context", "1000000"), "fits no batch"),
    (("--hardware", "a100", "--kv-dtype", "fp8"), "a100-80gb has no fp8 arithmetic"),
    (("--kv-dtype", "fp3"), "unknown dtype"),
    (("--memory-utilization", "1.5"), "--memory-utilization"),
])
def test_serve_refusals_are_one_line(cli, args: tuple[str, ...], fragment: str) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("serve", "--model", "llama-3-8b", *args), fragment)
