"""MFU counts the model's FLOPs, HFU every FLOP that ran: a checkpoint's recomputed forward is
recorded as such (a module's forward running inside a backward), so the checkpointed step's
FLOPs less its recomputed ones equal the same step traced without checkpointing, exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.workload.hf_configs import write_config


def _doc(cli: Any, *args: str) -> dict[str, Any]:
    result = cli("account", *args, "--hardware", "h100", "--count", "8", "--json")
    assert result.code == 0, result.stderr
    return result.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("source", ["tiny", "hf-llama"])
def test_recomputed_flops_are_the_checkpoints_extra(cli: Any, tmp_path: Path,
                                                    source: str) -> None:
    model = str(write_config(tmp_path, "llama")) if source == "hf-llama" else source
    args = ("--model", model, "--batch", "2", "--seq", "12", "--precision", "fp32")
    plain = _doc(cli, *args)
    checkpointed = _doc(cli, *args, "--checkpoint")
    recomputed = checkpointed["roofline"]["recomputed_flops"]
    # a second code path: the same step without checkpointing ran the model's FLOPs only
    assert plain["roofline"]["recomputed_flops"] == 0
    # transformers without a cache (checkpointing turns use_cache off) also looks for packed
    # sequences in the B × S = 2 × 12 position ids: ids[:, :1] − 1 (2), diff (24), != 1 (24),
    # cumsum (24), [:, −1] == 0 (2), .all() of 2 values (1)
    packed_check = 2 + 24 + 24 + 24 + 2 + 1 if source == "hf-llama" else 0
    assert checkpointed["roofline"]["flops"] - recomputed == \
        plain["roofline"]["flops"] + packed_check
    # the recomputed forward is at most the forward (early stop may skip its last ops)
    forward = next(p["flops"] for p in plain["trace"]["by_phase"] if p["phase"] == "forward")
    assert 0 < recomputed <= forward
    # MFU and HFU by hand from the ledger's own figures: FLOPs / (peak · cluster step)
    cluster = checkpointed["cluster"]
    denominator = cluster["peak_flop_per_s"] * cluster["rank_time_s"]  # no bubble here
    assert checkpointed["mfu"] == pytest.approx(
        (checkpointed["roofline"]["flops"] - recomputed) / denominator, rel=1e-12)
    assert checkpointed["hfu"] == pytest.approx(checkpointed["roofline"]["flops"] / denominator,
                                                rel=1e-12)
    assert plain["mfu"] == plain["hfu"]


def test_transformers_checkpointing_keeps_flash_and_saves_less(tmp_path: Path) -> None:
    """``--checkpoint`` on an HF model is transformers' own activation checkpointing: the
    recomputation runs the target's flash kernel again (2 layers: 2 forward + 2 recomputed),
    and the saved activations drop by more than 3× (to napkin's checkpointed form in fp32)."""
    from collections import Counter

    from tensorledger.hardware import get_hardware
    from tensorledger.hardware.target import target_of
    from tensorledger.ledger.memory import step_facts
    from tensorledger.memory.ledger import memory_ledger
    from tensorledger.workload.run import trace_workload
    from tensorledger.workload.spec import resolve_workload

    config = str(write_config(tmp_path, "llama"))
    target = target_of(get_hardware("h100"))
    runs = {ck: trace_workload(resolve_workload(config, batch=2, seq=12, precision="bf16",
                                                checkpoint=ck, target=target))
            for ck in (False, True)}
    flash = "aten._scaled_dot_product_flash_attention.default"
    counts = {ck: Counter(r.op for r in run.trace.records) for ck, run in runs.items()}
    assert counts[False][flash] == 2 and counts[True][flash] == 4
    assert sum(r.recomputed for r in runs[True].trace.records if r.op == flash) == 2
    ledgers = {ck: memory_ledger(run.trace, run.tags, step_facts(run))
               for ck, run in runs.items()}
    assert ledgers[True].saved_activation_bytes < ledgers[False].saved_activation_bytes / 3
    # in fp32 (napkin's form has no bf16 loss of transformers' upcast logits) the checkpointed
    # closed form: each layer's input and the head's, within 1%
    fp32 = trace_workload(resolve_workload(config, batch=2, seq=12, precision="fp32",
                                           checkpoint=True, target=target))
    ledger = memory_ledger(fp32.trace, fp32.tags, step_facts(fp32))
    closed = ledger.activations_closed_form
    assert closed is not None and closed.checkpointed
    assert ledger.saved_activation_bytes == pytest.approx(closed.total_bytes, rel=0.01)


def test_the_terminal_names_both(cli: Any) -> None:
    result = cli("account", "--model", "tiny", "--batch", "1", "--seq", "16", "--checkpoint",
                 "--hardware", "h100")
    assert result.code == 0, result.stderr
    assert "MFU" in result.stdout and "HFU (the recomputed forward counted)" in result.stdout
