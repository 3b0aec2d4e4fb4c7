"""``tensorledger checkpoint``: the policies of a step predicted from one trace (and traced with
``--verify``), the budget's optimum, the trade-off plot, and one-line refusals.

The tiny figures (batch 2, seq 24, fp32, forward-backward) are those of
tests/plan/test_checkpoint_traced.py and docs/checkpointing.md; every number asserted here is
checked against the library called directly, or against arithmetic written beside it."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from tensorledger.cli.checkpoint import parse_deep
from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.ledger.checkpointing import (
    PolicyCheck,
    checkpoint_profile,
    policy_row,
)
from tensorledger.plan.checkpoint import (
    CheckpointProfile,
    every_block,
    optimal_under_budget,
    predict_policy,
    standard_policies,
    synthetic_profile,
)
from tensorledger.workload import resolve_workload
from tensorledger.workload.checkpointing import trace_workload_with_policy
from tests.conftest import assert_one_line_error

TINY_ARGS = ("--model", "tiny", "--batch", "2", "--seq", "24", "--precision", "fp32", "--step",
             "forward-backward")
TINY = ("checkpoint", *TINY_ARGS)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NAMES = ["none", "every block", "every 2nd block", "sqrt(L) segments", "selective"]


@cache
def _tiny_profile() -> CheckpointProfile:
    """The second code path: the library's profile of the same step, traced on fake tensors
    (the command traces it on meta without --verify)."""
    work = resolve_workload("tiny", batch=2, seq=24, precision="fp32", step="forward-backward",
                            device="fake")
    return checkpoint_profile(trace_workload_with_policy(work, None), get_hardware("h100"))


def test_tiny_predictions_with_a_budget_against_the_library(cli) -> None:  # type: ignore[no-untyped-def]
    budget = 900_000  # between every block's peak (850,440) and none's (915,592)
    doc = cli(*TINY, "--budget", str(budget), "--json").json()
    assert doc["command"] == "checkpoint" and doc["verified"] is False
    assert doc["n_blocks"] == 2 and doc["every_k"] == 2 and doc["hardware"] == "h100-sxm"
    assert doc["budget_bytes"] == budget and doc["no_fit"] is None
    rows = doc["rows"]
    assert [r["policy"] for r in rows] == [*NAMES, "optimal within 900,000 bytes"]
    profile = _tiny_profile()
    expected = [predict_policy(profile, p) for p in standard_policies(2, 2)]
    expected.append(optimal_under_budget(profile, budget))
    for row, prediction in zip(rows, expected, strict=True):
        assert row["saved_bytes"] == prediction.saved_bytes, row["policy"]
        assert row["peak_bytes"] == prediction.peak_bytes, row["policy"]
        assert row["recompute_flops"] == prediction.recompute_flops, row["policy"]
        assert row["recompute_time_s"] == pytest.approx(prediction.recompute_time_s)
        assert row["fits"] is (prediction.peak_bytes <= budget)
        assert row["traced_peak_bytes"] is None and row["peak_error"] is None
    by_name = {r["policy"]: r for r in rows}
    # the figures of docs/checkpointing.md's tiny table
    assert by_name["none"]["saved_bytes"] == 488_260
    assert by_name["every block"]["recompute_flops"] == 7_825_200
    assert by_name["every 2nd block"]["recompute_flops"] == 7_825_200 // 2  # block 1 only
    assert by_name["every block"]["peak_bytes"] == 850_440  # fits: 850,440 <= 900,000
    assert [r["fits"] for r in rows] == [False, True, False, False, False, True]
    # segments as (first block, stop, mode): every block is [0,1) and [1,2); √2 rounds up to
    # 2 blocks, the last segment is left alone, so nothing is checkpointed
    assert by_name["every block"]["segments"] == [[0, 1, "full"], [1, 2, "full"]]
    assert by_name["sqrt(L) segments"]["segments"] == []
    assert by_name["selective"]["checkpointed_blocks"] == 2


def test_tiny_verified_with_the_plot(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plot = tmp_path / "tradeoff.png"
    doc = cli(*TINY, "--verify", "--budget", "900000", "--plot", str(plot), "--json").json()
    assert doc["verified"] is True
    by_name = {r["policy"]: r for r in doc["rows"]}
    # traced beside predicted, docs/checkpointing.md: the traced bytes kept add the 8 bytes of
    # the loss and its gradient seed (4 + 4, fp32 scalars)
    assert by_name["none"]["traced_saved_bytes"] == 488_260 + 8
    assert by_name["every block"]["traced_saved_bytes"] == 86_596 + 8
    assert by_name["every block"]["traced_peak_bytes"] == 850_440
    assert by_name["selective"]["traced_peak_bytes"] == 850_440  # predicted 961,800: a bound
    for row in doc["rows"]:
        # recomputation adds forward ops and nothing else: the FLOPs agree exactly
        assert row["traced_recompute_flops"] == row["recompute_flops"], row["policy"]
        assert row["recompute_flops_error"] == 0
        assert row["saved_error"] == pytest.approx(
            row["traced_saved_bytes"] / row["saved_bytes"] - 1)
        assert row["peak_error"] == pytest.approx(row["traced_peak_bytes"] / row["peak_bytes"]
                                                  - 1)
    assert by_name["none"]["saved_error"] == pytest.approx(8 / 488_260)
    assert by_name["selective"]["peak_error"] == pytest.approx(850_440 / 961_800 - 1)
    assert plot.read_bytes().startswith(PNG_SIGNATURE)


def test_the_table_names_every_column(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli(*TINY, "--budget", "0", "--quiet")
    assert result.code == 0, result.stderr
    out = " ".join(result.stdout.split())
    for column in ("policy", "blocks (segments)", "saved", "peak", "recompute FLOPs",
                   "recompute time", "fits"):
        assert column in out
    assert "error" not in out  # the traced table only with --verify
    # 7,825,200 FLOPs shown to four digits; 488,260 bytes as 488.3 KB
    assert "7.825e6 FLOPs" in out and "488.3 KB" in out and "2/2 (2 full)" in out
    # a budget nothing fits is not an error: every policy is marked, and the reason given
    assert "no checkpointing policy keeps the predicted peak within 0 bytes" in out


def test_the_deep_network_against_hand_arithmetic(cli) -> None:  # type: ignore[no-untyped-def]
    # D = 64, L = 16, B = 512, GELU, fp32 on meta: one activation is 512·64·4 = 131,072 bytes
    unit = 512 * 64 * 4
    doc = cli("checkpoint", "--deep", "64,16,512,gelu", "--every", "3", "--verify",
              "--json").json()
    by_name = {r["policy"]: r for r in doc["rows"]}
    assert list(by_name) == ["none", "every block", "every 3rd block", "sqrt(L) segments",
                             "selective"]
    block_flops = 2 * 512 * 64 * 64 + 20 * 512 * 64  # the matmul and the GELU (20 per element)
    assert by_name["every block"]["recompute_flops"] == 16 * block_flops == 77_594_624
    # blocks 2, 5, 8, 11, 14 alone: 5 blocks
    assert by_name["every 3rd block"]["recompute_flops"] == 5 * block_flops
    # ⌈√16⌉ = 4: segments [0,4) [4,8) [8,12), 12 blocks recomputed
    assert by_name["sqrt(L) segments"]["recompute_flops"] == 12 * block_flops
    assert by_name["selective"]["recompute_flops"] == 16 * 20 * 512 * 64  # the GELUs only
    # none: each block keeps its input and its GELU input (2 units; block 0's input is the
    # network's own, outside), plus the last output: 16·2 = 32 units; every block keeps 16
    assert by_name["none"]["saved_bytes"] == 32 * unit == 4_194_304
    assert by_name["every block"]["saved_bytes"] == 16 * unit == 2_097_152
    assert by_name["sqrt(L) segments"]["saved_bytes"] == 11 * unit == 1_441_792
    for row in doc["rows"]:
        assert row["traced_recompute_flops"] == row["recompute_flops"], row["policy"]
        assert row["traced_saved_bytes"] == row["saved_bytes"] + 8, row["policy"]
        assert row["traced_peak_bytes"] == row["peak_bytes"], row["policy"]


def test_policy_rows_come_from_the_core() -> None:
    profile = synthetic_profile(4, input_bytes=10, interior_bytes=30, forward_flops=100)
    prediction = predict_policy(profile, every_block(4))
    # every block keeps only its input: 0 (block 0's is the network's, outside) + 3·10
    assert prediction.saved_bytes == 30
    check = PolicyCheck(prediction, 33, prediction.peak_bytes, 400)
    row = policy_row(prediction, 29, check)
    assert row.fits is False and row.n_segments == 4 and row.checkpointed_blocks == 4
    assert row.saved_error == pytest.approx(33 / 30 - 1)
    assert row.recompute_flops_error == 0  # 4 blocks · 100 = 400 both ways
    assert PolicyCheck(prediction, 30, 0, 0).recompute_flops_error == -1
    plain = predict_policy(profile, standard_policies(4)[0])
    assert PolicyCheck(plain, 150, 0, 0).recompute_flops_error == 0  # 0 of 0
    with pytest.raises(InputError, match="the check is of"):
        policy_row(plain, None, check)


def test_parse_deep() -> None:
    assert parse_deep("64,16,512") == (64, 16, 512, "gelu")
    assert parse_deep(" 8, 2, 4, ReLU ") == (8, 2, 4, "relu")
    for bad in ("64,16", "64,16,512,tanh", "0,16,512", "64,999,512", "٤,2,4", "a,b,c"):
        with pytest.raises(InputError, match="--deep"):
            parse_deep(bad)


@pytest.mark.parametrize(("argv", "fragments"), [
    ((), ("give a reference model with --model",)),
    (("--model", "tiny", "--deep", "4,2,8"), ("one of them",)),
    ((*TINY_ARGS, "--every", "3"), ("--every 3 is more than the 2 blocks",)),
    ((*TINY_ARGS, "--every", "0"), ("--every",)),
    ((*TINY_ARGS, "--budget", "nan"), ("--budget",)),
    ((*TINY_ARGS, "--budget", "-1"), ("--budget",)),
    (("--model", "tiny", "--step", "forward"), ("no backward pass",)),
    (("--model", "tiny", "--hardware", "h1000"), ("h1000",)),
    (("--model", "nope"), ("nope",)),
    (("--deep", "4,2,8,tanh"), ("tanh",)),
    ((*TINY_ARGS, "--verify", "--device", "meta"), ("--device fake",)),
])
def test_refusals_are_one_line(cli, argv: tuple[str, ...], fragments: tuple[str, ...]  # type: ignore[no-untyped-def]
                               ) -> None:
    assert_one_line_error(cli("checkpoint", *argv), *fragments)


def test_a_factory_is_refused_before_it_runs(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    factory = tmp_path / "model.py"
    marker = tmp_path / "ran"
    factory.write_text(f"open({str(marker)!r}, 'w').close()\n"
                       "def make():\n    raise SystemExit(3)\n")
    assert_one_line_error(cli("checkpoint", "--model", f"{factory}:make"),
                          "built by factory, not one", "give a preset")
    assert not marker.exists()


def test_a_config_that_transformers_builds_is_refused(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # an unknown model_type is built by transformers (its layers are no .blocks chain) or,
    # without the extra, not read at all: refused in one line either way
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64}')
    assert_one_line_error(cli("checkpoint", "--model", str(config)))


@pytest.mark.parametrize("name", ["p.txt", "missing/p.png"])
def test_a_refused_plot_path_leaves_no_file(cli, tmp_path: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli(*TINY, "--plot", str(tmp_path / name)))
    assert list(tmp_path.rglob("*")) == []


def test_bad_input_after_the_plot_path_leaves_no_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli(*TINY, "--every", "5", "--plot", str(tmp_path / "p.png")),
                          "--every 5")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("activation", "kept"), [
    ("gelu", "(8 → 4)"),  # L = 4: each block's matmul input and GELU input, 2·L = 8 → L = 4
    ("relu", "(5 → 4)"),  # ReLU's output is the next block's input: L + 1 = 5 → L = 4
])
def test_the_deep_network_explains_what_its_activation_keeps(
        cli, activation: str, kept: str) -> None:  # type: ignore[no-untyped-def]
    out = cli("checkpoint", "--deep", f"64,4,8,{activation}").stdout
    assert "checkpointing each block keeps only the block's input" in out
    assert kept in out and {"gelu": "GELU", "relu": "ReLU"}[activation] in out
    assert "L·B·D" in out


def test_a_transformer_is_not_explained_by_the_deep_network(cli) -> None:  # type: ignore[no-untyped-def]
    # the paragraph is the lecture's deep network's (issue 41: it was printed under every
    # checkpointed model, llama-3-405b's included)
    out = cli("checkpoint", "--model", "tiny", "--seq", "8").stdout
    assert "Activation checkpointing" in out
    assert "GELU" not in out and "ReLU" not in out and "L·B·D" not in out


def test_sqrt_segments_that_equal_none_say_why(cli) -> None:  # type: ignore[no-untyped-def]
    """tiny has 2 blocks: ⌈√2⌉ = 2 blocks a segment makes one segment, the last, which is not
    recomputed, so √L checkpoints nothing; the output says so."""
    text = " ".join(cli("checkpoint", "--model", "tiny", "--seq", "32").stdout.split())
    assert "sqrt(L) segments: ⌈√2⌉ = 2 blocks a segment leaves no segment but the last" in text
