"""benchmarks/bench_published.py: its arithmetic, its citations, and one small row run.

The published rows themselves take minutes to account; here every row is checked for a source
and a layout that adds up, the conversions are derived by hand, and one tiny made-up row goes
through the same prediction path as the published ones.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_published.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_published", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_published"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_every_row_is_cited_and_says_what_it_counts(bench: ModuleType) -> None:
    runs = bench.RUNS
    assert len({run.key for run in runs}) == len(runs)
    predicted = [run for run in runs if run.cannot_express is None]
    assert len(predicted) >= 8
    for run in runs:
        # a paper (arXiv id) or a repository path, and the table or section within it
        assert re.search(r"arXiv:\d{4}\.\d{5}|github\.com/\S+/\S+", run.source), run.key
        assert re.search(r"Table|§|docs/|README|'", run.source), run.key
        assert run.utilisation in ("MFU", "HFU")
        assert run.published > 0 and run.seq > 0 and run.chips > 0
    # Megatron-LM's Table 1 counts the recomputed forward (Eq. 3); the others' MFU does not
    for run in runs:
        assert run.counts_recompute == run.key.startswith("megatron")


def test_layouts_add_up_to_the_published_chips(bench: ModuleType) -> None:
    from tensorledger.workload.layout import resolve_layout

    for run in bench.RUNS:
        if run.cannot_express is not None:
            continue
        layout = resolve_layout(**run.layout)
        assert layout.count == run.chips, run.key
        assert run.global_batch % run.data_parallel == 0, run.key
        if layout.pp > 1:  # the rank's batch in micro-batches of the published size
            assert run.rank_batch == layout.microbatches * (run.micro_batch or 1), run.key
            assert run.shape.layers % (layout.pp * layout.chunks) == 0, run.key
            assert not run.shape.tied, run.key
        elif run.micro_batch is not None:  # accumulated outside a pipeline
            assert run.rank_batch == run.accumulated * run.micro_batch, run.key


def test_megatron_rows_follow_the_published_scripts(bench: ModuleType) -> None:
    """examples/sc21/run_table_1.sh: (TP, PP, MBS, GBS) per model, DDP for data parallelism;
    the program of 2021 (no FlashAttention yet, dropout 0.1) as --attention eager."""
    script = {"megatron-1.7b": (1, 1, 16, 512), "megatron-3.6b": (2, 1, 16, 512),
              "megatron-7.5b": (4, 1, 16, 512), "megatron-18.4b": (8, 1, 8, 1024),
              "megatron-39.1b": (8, 2, 4, 1536), "megatron-145.6b": (8, 8, 2, 2304)}
    for run in bench.RUNS:
        if run.key not in script:
            continue
        tp, pp, mbs, gbs = script.pop(run.key)
        assert (run.layout.get("tp", 1), run.layout.get("pp", 1), run.micro_batch,
                run.global_batch) == (tp, pp, mbs, gbs), run.key
        assert run.attention == "eager" and run.dropout == 0.1, run.key
        if pp == 1:  # plain DDP beside TP, no sharding
            assert "fsdp" not in run.layout and run.data_parallel * tp == run.chips, run.key
    assert not script
    # 18.4B: 1,024 / 32 ranks = 32 sequences, micro-batches of 8: 4 accumulated
    assert next(r for r in bench.RUNS if r.key == "megatron-18.4b").accumulated == 4
    # 145.6B: 80 layers, 5 a virtual stage over PP 8: 2 stages a rank, interleaved
    big = next(r for r in bench.RUNS if r.key == "megatron-145.6b")
    assert big.layout["chunks"] == 80 // (5 * 8) == 2


def test_megatron_flop_rate_to_tokens_per_second_by_hand(bench: ModuleType) -> None:
    run = next(r for r in bench.RUNS if r.key == "megatron-1.7b")
    # Eq. 3 per token, l = 24, h = 2304, s = 2048, V = 51200:
    # 96 · 24 · 2304² = 12,230,590,464; 1 + 2048/13824 + 51200/884736 = 1.2060185...
    per_token = 12_230_590_464 * (1 + 2048 / 13_824 + 51_200 / 884_736)
    assert bench.megatron_flops_per_token(run.shape, run.seq) == pytest.approx(per_token,
                                                                               rel=1e-12)
    assert per_token == pytest.approx(1.47503e10, rel=1e-5)
    # 137 TFLOP/s per GPU over 1.47503e10 FLOPs a token: 9,288 tokens/s per GPU
    assert run.published_tokens_per_s == pytest.approx(137e12 / per_token, rel=1e-12)
    assert round(run.published_tokens_per_s) == 9288
    # a row published in tokens/s is taken as is
    titan = next(r for r in bench.RUNS if r.key == "torchtitan-llama3-70b")
    assert titan.published_tokens_per_s == 331
    # Llama 3 states MFU, not the FLOP count behind it: no tokens/s is derived
    assert next(r for r in bench.RUNS if r.key == "llama3-405b-8k").published_tokens_per_s is None


def test_ratio_and_verdict_by_hand(bench: ModuleType) -> None:
    assert bench.ratio(121.0, 110.0) == pytest.approx(0.1)
    verdict = bench.Verdict({"a": 0.05, "b": -0.12, "c": 0.40, "d": -0.20})
    # |ratios| 0.05, 0.12, 0.20, 0.40: median (0.12 + 0.20) / 2 = 0.16; worst c at +40%
    assert verdict.median_abs == pytest.approx(0.16)
    assert verdict.worst == ("c", 0.40)
    assert not verdict.passed  # 16% > 15% and 40% > 30%
    assert bench.Verdict({"a": 0.10, "b": -0.29, "c": 0.01}).passed  # median 10%, worst 29%


def test_the_markdown_table_lists_rows_it_cannot_express(bench: ModuleType) -> None:
    uneven = next(r for r in bench.RUNS if r.key == "llama3-405b-8k")
    text = bench.markdown([(uneven, None, uneven.cannot_express)])
    assert "not predicted: not compared: the paper states no FLOP count" in text
    assert "8,192 × h100-sxm" in text
    assert ("TP 8 · PP 16 (32 micro-batches; interleaved-1f1b, 2 stages a rank; stages "
            "first-1,last-1) · FSDP 64 (ZeRO-2)") in text
    assert "— (no FLOP count stated)" in text


def test_one_small_row_through_the_prediction_path(bench: ModuleType) -> None:
    shape = bench.Shape("tiny-gpt", vocab=96, d_model=48, layers=2, heads=4)
    run = bench.PublishedRun("tiny", "github.com/example/none README", shape, "h100-sxm", 2,
                             {"fsdp": 2}, 6, 24, False, "mixed-bf16", 1.0, "tokens/s/chip",
                             None, "MFU")
    prediction = bench.predict(run)
    # every rank steps on 6 / 2 = 3 sequences of 24 tokens in the cluster's (serial) step
    assert prediction.tokens_per_s == pytest.approx(3 * 24 / prediction.step_s, rel=1e-12)
    assert prediction.overlapped_tokens_per_s >= prediction.tokens_per_s
    assert prediction.communication_s > 0  # FSDP's gathers and reduce-scatters, on the links
    assert prediction.pipeline_bubble == 0
