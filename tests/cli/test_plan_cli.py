"""``tensorledger plan`` and ``fit --batch --seq``: table, JSON, and one-line refusals."""

from __future__ import annotations

import pytest

from tensorledger.cli.plan import global_batch_seqs
from tensorledger.errors import InputError
from tests.conftest import assert_one_line_error


def test_plan_json_llama_3_70b_on_64(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("plan", "--model", "llama-3-70b", "--hardware", "h100", "--count", "64",
              "--global-batch", "512seq", "--seq", "8192", "--tokens", "15T", "--top", "3",
              "--json").json()
    assert doc["command"] == "plan" and doc["count"] == 64
    assert doc["global_batch_seqs"] == 512 and doc["global_batch_tokens"] == 512 * 8192
    assert len(doc["ranked"]) == 3
    assert doc["searched"] == doc["feasible"] + sum(doc["rejected_by_reason"].values())
    best = doc["ranked"][0]
    assert best["choice"]["micro_batch"] * best["choice"]["accumulation"] \
        * best["choice"]["dp"] == 512
    assert doc["verified"] == []  # nothing traced without --verify
    # days = 15e12 tokens / tokens per second / 86400
    assert best["train_days"] == pytest.approx(15e12 / best["time"]["tokens_per_s"] / 86400)


def test_plan_table(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("plan", "-m", "llama-3-70b", "-n", "64", "-g", "4M", "--seq", "8192",
                 "--tokens", "15T", "--top", "3")
    assert result.code == 0, result.stderr
    out = result.stdout
    for column in ("layout", "micro × accum", "checkpoint", "memory/rank GB", "tokens/s", "MFU",
                   "days"):
        assert column in out
    assert "searched" in out and "feasible" in out and "memory per rank" in out
    # 4e6 / 8192 = 488.28 sequences; 4·2²⁰ / 8192 = 512: read in binary, and said so
    assert "4,194,304 tokens = 512 sequences of 8,192" in " ".join(out.split())


def test_global_batch_parsing() -> None:
    # "4M" at 8,192 a sequence: 4,000,000 / 8,192 = 488.28, 4·2²⁰ / 8,192 = 512 exactly
    seqs, note = global_batch_seqs("4M", 8192)
    assert seqs == 512 and note is not None and "powers of two" in note
    # "4M" at 1,000 a sequence: 4,000 sequences exactly, in decimal; no note
    assert global_batch_seqs("4M", 1000) == (4000, None)
    # neither reading whole: 3M at 7,000 a sequence: 428.57 (decimal), 449.39 (binary): rounded
    seqs, note = global_batch_seqs("3M", 7000)
    assert seqs == 429 and note is not None and "rounded to 429" in note
    # 16M for llama-3-405b at 8,192: 16·2²⁰ / 8,192 = 2,048 sequences
    assert global_batch_seqs("16M", 8192)[0] == 2048
    assert global_batch_seqs("4194304", 8192) == (512, None)  # 2^22 tokens
    assert global_batch_seqs("512seq", 8192) == (512, None)
    assert global_batch_seqs("1K seqs", 8192) == (1000, None)
    with pytest.raises(InputError, match="at least one sequence"):
        global_batch_seqs("100", 8192)
    with pytest.raises(InputError, match="whole number of sequences"):
        global_batch_seqs("1.5seq", 8192)


@pytest.mark.parametrize(("argv", "fragments"), [
    (["-m", "llama-3-8b", "-n", "16384", "-g", "1seq"],
     ("global batch binds", "1 sequence is smaller than")),
    (["-m", "llama-3-405b", "-n", "8", "-g", "8seq"],
     ("fits in no layout", "memory per rank binds")),
    (["-m", "llama-3-8b", "-g", "64seq", "--budget", "2GB"], ("memory per rank binds",)),
    (["-m", "llama-3-8b", "-g", "64seq", "--budget", "100GB"], ("at most h100-sxm's 80 GB",)),
    (["-m", "llama-3-8b", "-g", "64seq", "--seq", "9000"], ("longer than llama-3-8b's",)),
    (["-m", "nope", "-g", "64seq"], ("unknown model",)),
    (["-m", "llama-3-8b", "-g", "64seq", "--attention", "sdpa"], ("unknown --attention",)),
    (["-m", "llama-3-8b", "-g", "64seq", "-n", "2000000"], ("--count",)),
])
def test_plan_refusals(cli, argv: list[str], fragments: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("plan", *argv), *fragments)


def test_fit_with_activations(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("fit", "--count", "8", "--precision", "lecture", "--batch", "8", "--seq", "4096",
              "--json").json()
    # 53.3e9 without activations; with 8 × 4096 tokens of activations about 24.05e9
    assert doc["params_without_activations"] == pytest.approx(640e9 / 12)
    assert doc["params"] == pytest.approx(24.05e9, rel=1e-3)
    table = cli("fit", "--count", "8", "--precision", "lecture", "--batch", "8", "--seq",
                "4096").stdout
    table = " ".join(table.split())
    assert "24.05B parameters" in table and "53.33B without activations" in table
    assert_one_line_error(cli("fit", "--batch", "8"), "--batch and --seq go together")
    assert_one_line_error(cli("fit", "--batch", "8", "--seq", "8", "--checkpoint", "some"),
                          "unknown checkpoint")


def test_plan_without_pipelines_does_not_import_torch() -> None:
    # a pipeline's schedules are priced from torch's action lists (issue 37): a search that
    # holds no pipeline (--max-pp 1, or --pp 1) imports no torch
    import subprocess
    import sys

    code = ("import sys; from tensorledger.cli import main; "
            "main(['plan', '-m', 'llama-3-8b', '-g', '64seq', '--max-pp', '1', '--json']); "
            "main(['plan', '-m', 'llama-3-8b', '-g', '64seq', '--pp', '1', '--json']); "
            "main(['fit', '--batch', '8', '--seq', '4096', '--json']); "
            "sys.stderr.write(str(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stderr.strip() == "[]"


def test_accumulate(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("accumulate", "-m", "llama-3-8b", "-n", "8", "--zero", "3", "-g", "64seq",
              "--seq", "8192", "--budget", "80GB", "--json").json()
    assert doc["command"] == "accumulate"
    assert [(o["micro_batch"], o["accumulation"]) for o in doc["options"]] == [
        (1, 8), (2, 4), (4, 2), (8, 1)]
    # one sequence: 59,649,458,180 bytes of activations (tests/plan/test_accumulate.py)
    assert doc["chosen"]["micro_batch"] == 1
    assert doc["chosen"]["activation_bytes"] == 59_649_458_180
    table = cli("accumulate", "-m", "llama-3-8b", "-n", "8", "--zero", "3", "-g", "64seq",
                "--seq", "8192", "--budget", "80GB").stdout
    assert "chosen: micro-batch 1 × 8 accumulation steps" in " ".join(table.split())
    assert_one_line_error(cli("accumulate", "-m", "llama-3-8b", "-n", "8", "-g", "4seq"),
                          "does not split over 8")
    assert_one_line_error(cli("accumulate", "-m", "llama-3-70b", "-n", "8", "-g", "8seq",
                              "--seq", "8192"), "memory per rank binds")


def test_plan_verify_traces_the_fastest_traceable_layouts(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("plan", "-m", "tiny", "-g", "8seq", "-n", "4", "--seq", "16", "-p", "fp32",
              "--top", "40", "--verify", "1", "--json").json()
    (verified,) = doc["verified"]
    # the fastest layout carries a pipeline beside DP: its first stage's rank is traced, each
    # stage laid out by FSDP2, over 3 micro-batches (1F1B's steady state on 2 stages)
    assert doc["ranked"][0]["layout"] in verified["layout"]
    assert "first stage, 3 micro-batches" in verified["layout"]
    assert verified["traced_sent_bytes"] == verified["closed_sent_bytes"]
    assert verified["closed_activation_bytes"] == pytest.approx(
        verified["traced_activation_bytes"], rel=0.01)
    table = cli("plan", "-m", "tiny", "-g", "8seq", "-n", "4", "--seq", "16", "-p", "fp32",
                "--top", "40", "--verify", "1").stdout
    assert "Verified: one step traced" in " ".join(table.split())


def test_plan_plot_is_written_whole_or_refused(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "frontier.png"
    done = cli("plan", "-m", "llama-3-70b", "-n", "64", "-g", "512seq", "--seq", "8192",
               "--plot", str(target))
    assert done.code == 0 and f"plot written to {target}" in " ".join(done.stdout.split())
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "frontier.gif"
    assert_one_line_error(cli("plan", "-m", "llama-3-70b", "-n", "64", "-g", "512seq",
                              "--seq", "8192", "--plot", str(bad)), ".gif")
    assert not bad.exists()


def test_llama_405b_on_16k_h100s_plans_at_a_published_mfu(cli) -> None:  # type: ignore[no-untyped-def]
    """Llama 3 405B, 16M tokens (2,048 sequences of 8,192) on 16,384 H100s: the default
    prices matmuls at the H100's published fraction at the layer's largest matmul, which on
    a TP-8 rank at micro-batch 1 is 2·8,192·16,384·53,248/8 = 1.79e12 FLOPs, past the largest
    sized point (4096³·2 = 1.37e11): 80.3%; the MFU lands in 0.30–0.50 (Llama 3: 38–43%).
    With --efficiency 1 (the ideal bound) it is faster."""
    args = ("plan", "-m", "llama-3-405b", "-n", "16384", "-g", "16M", "--seq", "8192",
            "--top", "1", "--json")
    doc = cli(*args).json()
    best = doc["ranked"][0]
    assert doc["global_batch_seqs"] == 2048 and doc["efficiency"] is None
    assert 0.30 <= best["time"]["mfu"] <= 0.50
    assert best["time"]["efficiency"] == pytest.approx(0.803)
    assert best["time"]["hfu"] >= best["time"]["mfu"]
    ideal = cli(*args, "--efficiency", "1").json()["ranked"][0]
    assert ideal["time"]["mfu"] > best["time"]["mfu"] and ideal["time"]["efficiency"] == 1.0


def test_plan_405b_tp_8_pp_16_evaluates_that_layout(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("plan", "-m", "llama-3-405b", "-n", "16384", "-g", "16M", "--seq", "8192",
            "--tp", "8", "--pp", "16", "--top", "5")
    doc = cli(*args, "--json").json()
    # 16,384 / (8 · 16) = 128 data-parallel ranks in every row; 126 layers on 16 stages
    assert {(r["choice"]["dp"], r["choice"]["tp"], r["choice"]["pp"])
            for r in doc["ranked"]} == {(128, 8, 16)}
    assert doc["fixed"]["tp"] == 8 and doc["fixed"]["pp"] == 16 and doc["fixed"]["dp"] is None
    table = " ".join(cli(*args).stdout.split())
    assert "fixed by you: TP 8, PP 16; the search filled the rest" in table


def test_plan_long_context_picks_context_parallelism(cli) -> None:  # type: ignore[no-untyped-def]
    """Llama 3 405B at 131,072 tokens (16M = 128 sequences) on 16,384 H100s: without CP a
    rank gathers a whole sequence's logits; the plan splits the sequence (Llama 3: CP 16)."""
    doc = cli("plan", "-m", "llama-3-405b", "-n", "16384", "-g", "16M", "--seq", "131072",
              "--top", "1", "--json").json()
    best = doc["ranked"][0]["choice"]
    assert doc["global_batch_seqs"] == 128 and best["cp"] > 1


def test_plan_llama_3_layout_with_its_stages_and_schedule(cli) -> None:  # type: ignore[no-untyped-def]
    """TP 8 · PP 16 · CP 1 with the first and last stage one block short and interleaved 1F1B,
    as fixed options: the one cut, the schedule and the chunks in every row."""
    doc = cli("plan", "-m", "llama-3-405b", "-n", "16384", "-g", "16M", "--seq", "8192",
              "--tp", "8", "--pp", "16", "--cp", "1", "--schedule", "interleaved-1f1b",
              "--chunks", "2", "--stage-layers", "first-1,last-1", "--top", "3",
              "--json").json()
    # 126 + 2 blocks over 32 stages is 4 each, the first and last 3
    assert {tuple(r["choice"]["stage_layers"]) for r in doc["ranked"]} == {
        (3,) + (4,) * 30 + (3,)}
    assert {(r["choice"]["schedule"], r["choice"]["chunks"], r["choice"]["cp"])
            for r in doc["ranked"]} == {("interleaved-1f1b", 2, 1)}


def test_plan_every_dimension_fixed_is_the_searched_row(cli) -> None:  # type: ignore[no-untyped-def]
    base = ("plan", "-m", "llama-3-70b", "-n", "64", "-g", "512seq", "--seq", "8192", "--json")
    best = cli(*base, "--top", "1").json()["ranked"][0]
    c = best["choice"]
    fixed = ["--dp", str(c["dp"]), "--tp", str(c["tp"]), "--pp", str(c["pp"]),
             "--zero", str(c["zero"]), "--fsdp", str(c["shard"]),
             "--sp" if c["sp"] else "--no-sp", "--microbatches", str(c["accumulation"]),
             "--checkpoint", c["checkpoint"], "--cp", str(c["cp"])]
    if c["pp"] > 1:
        fixed += ["--schedule", c["schedule"], "--chunks", str(c["chunks"]),
                  "--stage-layers", ",".join(map(str, c["stage_layers"]))]
    doc = cli(*base, *fixed).json()
    assert doc["searched"] == 1 and doc["feasible"] == 1
    (only,) = doc["ranked"]
    assert only["choice"] == c and only["time"]["step_s"] == best["time"]["step_s"]
    table = " ".join(cli(*base[:-1], *fixed).stdout.split())
    assert "searched 1 configuration:" in table and "one layout evaluated" in table


@pytest.mark.parametrize(("argv", "fragments"), [
    (["--tp", "8", "--pp", "18"], ("TP 8 · PP 18 does not divide the 16,384 devices",)),
    (["--dp", "128", "--tp", "8", "--pp", "8"], ("= 8,192 devices, not the 16,384",)),
    (["--tp", "16"], ("TP 16 (fixed by you)", "spans nodes")),
    (["--schedule", "dualpipev"], ("unknown pipeline schedule 'dualpipev'", "zbv")),
    (["--schedule", "zbv", "--chunks", "3"], ("zbv runs exactly 2 stages per rank",)),
    (["--schedule", "1f1b", "--chunks", "2"], ("1f1b runs one stage per rank",)),
    (["--cp", "3"], ("CP 3 does not divide the 16,384 devices",)),
    (["--cp", "8192"], ("CP 8192 cuts each sequence into 16384 chunks", "8,192")),
    (["--cp", "2", "--zero", "1"], ("not ZeRO-1",)),
    (["--stage-layers", "first-1,last-1"], ("--stage-layers cuts a pipeline: give --pp",)),
    (["--pp", "16", "--stage-layers", "8,...,8"], ("add up to 128 blocks", "126")),
    (["--pp", "16", "--stage-layers", "first-1"], ("do not split into 16 stages",)),
    (["--pp", "16", "--stage-layers", "x"], ("--stage-layers takes block counts",)),
    (["--checkpoint", "some"], ("unknown --checkpoint 'some'",)),
    (["--checkpoint", "selective"], ("--attention eager",)),
    (["--fsdp", "1", "--zero", "3"], ("ZeRO-3 needs a shard group above 1 rank",)),
    (["--pp", "1", "--schedule", "1f1b"], ("needs a pipeline",)),
    (["--tp", "1", "--sp"], ("SP needs tensor parallelism",)),
    (["--tp", "8", "--pp", "16", "--microbatches", "3"], ("do not split into 3 micro-batches",)),
    (["--zero", "4"], ("--zero",)),
    (["--tp", "8", "--pp", "16", "--dp", "128", "--fsdp", "8", "--zero", "1", "--no-sp",
      "--microbatches", "16", "--schedule", "1f1b", "--checkpoint", "none"],
     ("(fixed by you) does not fit: memory per rank", "against a budget of")),
])
def test_plan_fixed_refusals(cli, argv: list[str], fragments: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("plan", "-m", "llama-3-405b", "-n", "16384", "-g", "16M",
                              "--seq", "8192", *argv), *fragments)
