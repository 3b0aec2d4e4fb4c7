"""``trace`` and ``memory`` with a layout: one rank's figures in the table and the JSON, and
every refused layout one line on stderr with exit status 2."""

from __future__ import annotations

import pytest

from tensorledger.models import get_preset
from tensorledger.napkin.transformer import parameter_count
from tests.conftest import assert_one_line_error

TINY_PARAMS = parameter_count(get_preset("tiny")).total_params


def test_memory_json_is_one_ranks(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("memory", "--model", "tiny", "--batch", "2", "--seq", "16", "--precision", "fp32",
              "--fsdp", "2", "--hardware", "h100", "--json").json()
    assert doc["ranks"] == 2 and doc["layout"] == "FSDP ZeRO-3 × 2"
    # half of the fp32 parameters on each of the 2 ranks (every first dimension divides by 2)
    assert doc["params_bytes"] == 4 * TINY_PARAMS // 2
    assert doc["fit"]["count"] == 1  # the traced peak is already one device's


def test_memory_table_says_per_rank(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("memory", "--model", "tiny", "--batch", "1", "--seq", "8", "--fsdp", "2",
                 "--dp", "2")
    assert result.code == 0, result.stderr
    assert "on one of 4 ranks (FSDP ZeRO-3 × 2 · replicas × 2)" in result.stdout.replace(
        "\n", " ")


def test_trace_json_lists_the_communication(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("trace", "--model", "tiny", "--batch", "1", "--seq", "8", "--precision", "fp32",
              "--fsdp", "2", "--depth", "1", "--json").json()
    kinds = {(row["phase"], row["kind"]) for row in doc["summary"]["communication"]}
    assert kinds == {("forward", "all-gather"), ("backward", "all-gather"),
                     ("backward", "reduce-scatter")}
    assert doc["params"] == TINY_PARAMS and doc["params_per_rank"] == TINY_PARAMS // 2


@pytest.mark.parametrize(("argv", "fragment"), [
    (["memory", "--fsdp", "4", "--count", "8"], "--count 8 is not the layout's 4 (fsdp)"),
    (["memory", "--tp", "3"], "--tp 3 does not divide tiny's 4 attention heads"),
    (["trace", "--tp", "4"], "--tp 4 does not divide tiny's 2 key/value heads"),
    (["trace", "--zero", "2"], "give --fsdp N (N > 1) with it"),
    (["memory", "--sp"], "--sp splits the sequence"),
    (["trace", "--fsdp", "0"], "--fsdp must be between 1"),
    (["memory", "--fsdp", "2", "--device", "cpu"], "drop --device cpu"),
    (["memory", "--tp", "2", "--sp", "--seq", "9"], "--seq 9 does not divide by 2"),
])
def test_refused_layouts(cli, argv: list[str], fragment: str) -> None:  # type: ignore[no-untyped-def]
    result = cli(*argv, "--model", "tiny", *(["--seq", "8"] if "--seq" not in argv else []))
    assert_one_line_error(result, fragment)


def test_a_factory_that_exits_under_a_layout(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    factory = tmp_path / "model.py"
    factory.write_text("import sys, torch\n"
                       "class M(torch.nn.Module):\n"
                       "    def __init__(self):\n"
                       "        super().__init__()\n"
                       "        self.embed = torch.nn.Embedding(16, 8)\n"
                       "    def forward(self, x):\n"
                       "        sys.exit(3)\n"
                       "def make():\n"
                       "    return M()\n")
    result = cli("memory", "--model", f"{factory}:make", "--seq", "8", "--fsdp", "2", "--json")
    assert_one_line_error(result, "sys.exit(3)")


def test_pipeline_memory_is_the_first_stages(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("memory", "--model", "tiny", "--batch", "4", "--seq", "16", "--precision", "fp32",
              "--pp", "2", "--microbatches", "2", "--json").json()
    # stage 0 holds the embedding (128 · 64) and block 0 (36,992): 45,184 fp32 parameters;
    # AdamW's two moments of each, and a 4-byte step counter for each of its 10 tensors
    stage = 128 * 64 + 36_992
    assert doc["params_bytes"] == doc["grads_bytes"] == 4 * stage
    assert doc["optimizer_state_bytes"] == 8 * stage + 4 * 10
    assert doc["ranks"] == 2 and doc["layout"] == "PP × 2 (1f1b, 2 micro-batches)"


def test_pipeline_stages_laid_out_over_fsdp_and_tp(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("memory", "--model", "tiny", "--batch", "4", "--seq", "16", "--precision",
              "bf16-master", "--pp", "2", "--microbatches", "2", "--fsdp", "2", "--zero", "2",
              "--tp", "2", "--sp", "--json").json()
    # stage 0's rank: the embedding's 64 of 128 rows (4,096 values) and block 0's matrices
    # split over TP 2 (36,864 / 2) with its two norms of 64 whole: 22,656 values, each tensor
    # halved again by FSDP: 11,328 bf16 values at rest, fp32 masters and AdamW's 2 moments
    stage = (128 * 64 + 36_864) // 2 + 2 * 64
    assert stage == 22_656
    assert doc["params_bytes"] == 2 * stage // 2
    assert doc["optimizer_state_bytes"] == (4 + 8) * stage // 2 + 4 * 10
    assert doc["ranks"] == 8 and "PP × 2" in doc["layout"] and "TP + SP × 2" in doc["layout"]


def test_pipeline_trace_lists_the_sends(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("trace", "--model", "tiny", "--batch", "4", "--seq", "16", "--precision", "fp32",
              "--pp", "2", "--microbatches", "2", "--schedule", "gpipe", "--depth", "1",
              "--json").json()
    rows = doc["summary"]["communication"]
    # stage 0 sends each micro-batch's activation (2 × 16 × 64 fp32 = 8,192 bytes) and
    # receives its gradient: 2 of each, 16,384 bytes each way
    assert sum(r["calls"] for r in rows) == 4
    assert sum(r["bytes_sent"] for r in rows) == sum(r["bytes_received"] for r in rows) == 16_384
    assert doc["summary"]["six_n_d"] is None  # a stage runs a share of the layers


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--pp", "3", "--schedule", "gpipe"], "--pp 3 does not divide tiny's 2 layers"),
    (["--pp", "2", "--microbatches", "3"], "does not split into 3 micro-batches"),
    (["--microbatches", "2"], "--microbatches, --schedule, --chunks and --stage-layers run a "
                              "pipeline"),
    (["--pp", "2", "--microbatches", "2", "--schedule", "zb"], "unknown pipeline schedule"),
    (["--pp", "2"], "1f1b needs a micro-batch per stage at least"),
    (["--pp", "2", "--microbatches", "2", "--chunks", "2"], "1f1b runs one stage per rank"),
    (["--pp", "2", "--microbatches", "2", "--schedule", "zbv", "--chunks", "3"],
     "zbv runs exactly 2 stages per rank"),
    (["--pp", "2", "--microbatches", "4", "--schedule", "interleaved-1f1b", "--chunks", "3"],
     "--pp 2 × 3 chunks does not divide tiny's 2 layers"),
    (["--pp", "2", "--microbatches", "2", "--stage-layers", "1,2"],
     "--stage-layers 1,2 add up to 3 blocks, not the model's 2"),
    (["--pp", "2", "--microbatches", "2", "--stage-layers", "1"],
     "--stage-layers gives 1 counts for 2 stages"),
    (["--pp", "2", "--microbatches", "2", "--stage-layers", "first-1"],
     "2 layers do not split into 2 stages with the first 1"),
    (["--pp", "2", "--microbatches", "2", "--stage-layers", "1,x"], "got 'x' in '1,x'"),
    (["--pp", "2", "--microbatches", "2", "--dp", "2"],
     "DDP (and ZeRO-1 under it) within pipeline stages is not traced"),
    (["--pp", "2", "--microbatches", "2", "--step", "forward"], "whole training step"),
])
def test_refused_pipelines(cli, argv: list[str], fragment: str) -> None:  # type: ignore[no-untyped-def]
    precision = [] if "--precision" in argv else ["--precision", "fp32"]
    result = cli("trace", "--model", "tiny", "--batch", "4", "--seq", "16", *precision, *argv)
    assert_one_line_error(result, fragment)
