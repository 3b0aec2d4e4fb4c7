"""``account`` on a cluster (issue 36, item 1): every layout option, ``--count`` alone as data
parallel with its all-reduce priced, the cluster's step and MFU from the traced rank."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.roofline.collectives import CollectiveKind, collective_time

LLAMA = {"model_type": "llama", "vocab_size": 128, "hidden_size": 128,
         "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 8, "max_position_embeddings": 256}


def test_count_alone_is_data_parallel_with_its_all_reduce_on_the_network(cli: Any) -> None:
    """tiny in fp32 on 16 H100s (two nodes of 8): DDP all-reduces the fp32 gradients, one
    bucket of 4 × 90,432 = 361,728 bytes.  A ring over 16 ranks crosses the network, where its
    slowest link is the node's 8 NICs together, 8 × 50 GB/s = 400 GB/s (NVLink: 450):
    2·15/16 · 361,728 B / 400 GB/s = 1.6956 µs; 2·15 = 30 ring steps, 2 of them between the
    nodes at 2.7 µs and 28 inside at 0.6 µs: 22.2 µs; 23.8956 µs in all.  On one device nothing
    is exchanged."""
    args = ("account", "--model", "tiny", "--batch", "2", "--seq", "32", "--precision", "fp32",
            "--hardware", "h100", "--json")
    doc = cli(*args, "--count", "16").json()
    assert doc["params"] == 90_432
    (reduce,) = doc["trace"]["communication"]
    assert (reduce["kind"], reduce["group_size"], reduce["calls"]) == ("all-reduce", 16, 1)
    assert reduce["size_bytes"] == 4 * 90_432
    bandwidth_s = 2 * 15 / 16 * 361_728 / 400e9
    latency_s = 2 * 2.7e-6 + 28 * 0.6e-6
    assert doc["roofline"]["communication_s"] == pytest.approx(bandwidth_s + latency_s,
                                                               rel=1e-9)
    second_path = collective_time(CollectiveKind.ALL_REDUCE, 361_728, 16, get_hardware("h100"))
    assert second_path.link == "inter-node (NIC)"
    assert second_path.time_s == pytest.approx(bandwidth_s + latency_s, rel=1e-9)
    assert doc["count"] == 16 and doc["cluster"]["data_parallel"] == 16
    one = cli(*args).json()
    assert one["roofline"]["communication_s"] == 0 and one["trace"]["communication"] == []
    assert one["cluster"]["ranks"] == 1


def test_a_3d_layout_of_an_hf_config_per_rank_and_cluster_by_hand(cli: Any,
                                                                  tmp_path: Path) -> None:
    """An HF Llama config on 128 H100s, FSDP 8 × TP 8 × PP 2 with 4 micro-batches: the
    account's per-rank memory is ``memory``'s with the same options, byte for byte; the
    cluster's step is the rank's over (1 − bubble), bubble (p − 1)/(m + p − 1) = 1/5; its
    tokens/s the 8 data-parallel ranks' 8 × 64 tokens over that step; its MFU the rank's FLOPs
    over the peak and that step."""
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    options = ("--model", str(folder / "config.json"), "--fsdp", "8", "--tp", "8", "--pp", "2",
               "--microbatches", "4", "--batch", "8", "--seq", "64", "--hardware", "h100",
               "--json")
    account = cli("account", *options).json()
    memory = cli("memory", *options).json()
    assert account["memory"]["peak_bytes"] == memory["peak_bytes"]
    for key in ("params_bytes", "grads_bytes", "optimizer_state_bytes",
                "saved_activation_bytes"):
        assert account["memory"][key] == memory[key], key
    cluster = account["cluster"]
    assert cluster["ranks"] == 128 and cluster["data_parallel"] == 8
    bubble = (2 - 1) / (4 + 2 - 1)
    assert cluster["pipeline_bubble"] == pytest.approx(bubble)
    rank_s = account["roofline"]["time_s"]
    step_s = rank_s / (1 - bubble)
    assert account["cluster_tokens_per_s"] == pytest.approx(8 * 8 * 64 / step_s)
    peak = get_hardware("h100").peak_flop_per_s("bf16")
    assert account["mfu"] == pytest.approx(account["roofline"]["flops"] / (peak * step_s))
    assert account["mfu"] < account["roofline"]["mfu"]  # the bubble costs the cluster


def test_count_and_layout_must_agree(cli: Any) -> None:
    result = cli("account", "--model", "tiny", "--fsdp", "2", "--count", "4")
    assert result.code == 2 and "--count" in result.stderr


SMALL = """[small]
name = "a small GPU"
memory = "0.8GB"
memory_bandwidth = "1TB/s"
[small.dense]
bf16 = "100TFLOP/s"
fp32 = "10TFLOP/s"
"""


def test_a_step_that_does_not_fit_names_the_planners_layout(cli: Any, tmp_path: Path) -> None:
    """tiny at batch 256 × 32 on a 0.8 GB chip: beside the 723 MiB CUDA context and 5% of the
    peak, (0.8e9 − 758,120,448) / 1.05 = 39.9 MB is usable, the traced peak is larger; the
    account names the planner's fastest layout that fits, the same as ``plan_layouts`` of the
    same model, device, batch and recipe (a second path).  At batch 8 it fits: nothing named."""
    from tensorledger.hardware.catalog import load_hardware_file
    from tensorledger.napkin.transformer import get_preset
    from tensorledger.plan import plan_layouts

    chip = tmp_path / "small.toml"
    chip.write_text(SMALL)
    doc = cli("account", "--model", "tiny", "--batch", "256", "--seq", "32", "--hardware",
              str(chip), "--json").json()
    usable = (0.8e9 - 758_120_448) / 1.05
    assert doc["memory"]["peak_bytes"] > usable and not doc["memory"]["fit"]["fits_replicated"]
    plan = plan_layouts(get_preset("tiny"), load_hardware_file(chip), 1, seq_len=32,
                        global_batch_seqs=256, precision="mixed-bf16", optimizer="adamw",
                        top=1)
    assert doc["fits_with"]["layout"] == plan.best.layout
    assert doc["fits_with"]["choice"]["micro_batch"] == plan.best.choice.micro_batch
    assert doc["fits_with"]["memory"]["total_bytes"] <= usable
    text = cli("account", "--model", "tiny", "--batch", "256", "--seq", "32", "--hardware",
               str(chip)).stdout
    assert "to fit: the planner's fastest layout" in " ".join(text.split())
    fits = cli("account", "--model", "tiny", "--batch", "8", "--seq", "32", "--hardware",
               str(chip), "--json").json()
    assert fits["memory"]["fit"]["fits_replicated"] and fits["fits_with"] is None


def test_a_recomputed_step_names_its_utilisation_hfu(cli: Any) -> None:
    """With --checkpoint the trace holds the recomputed forward too: FLOPs that ran over the
    step and the peak are the hardware FLOPs utilisation, and the line says HFU; without it,
    MFU."""
    args = ("--model", "tiny", "--batch", "2", "--seq", "32", "--hardware", "h100")
    for command in ("roofline", "account"):
        checkpointed = " ".join(cli(command, *args, "--checkpoint").stdout.split())
        plain = " ".join(cli(command, *args).stdout.split())
        assert "expected step" in checkpointed and "HFU (the recomputed forward counted)" in \
            checkpointed
        assert "HFU" not in plain and ": MFU " in plain
