"""``tensorledger account``: every number of its JSON against direct calls of the trace, memory
and roofline pipelines on the same workload (each traces the step again, on its own)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import tensorledger
from tensorledger.hardware import get_hardware
from tensorledger.hardware.target import target_of
from tensorledger.ledger import memory_report, roofline_report, trace_report
from tensorledger.napkin.transformer import get_preset, parameter_count
from tensorledger.workload import resolve_workload
from tensorledger.workload.layout import resolve_layout
from tests.conftest import assert_one_line_error

ARGS = ("--model", "tiny", "--batch", "3", "--seq", "20", "--hardware", "a100", "--count", "4",
        "--tokens", "2B", "--usd-per-device-hour", "1.5")


def test_every_number_equals_the_direct_pipelines(cli: Any) -> None:
    doc = cli("account", *ARGS, "--json").json()
    chip = get_hardware("a100")
    # --count 4 alone: data parallel over 4 devices, one DDP rank traced on a fake group
    work = resolve_workload("tiny", batch=3, seq=20, target=target_of(chip),
                            layout=resolve_layout(dp=4))
    traced = trace_report(work, 2)
    memory = memory_report(work, chip)
    roofline = roofline_report(work, chip)

    assert doc["params"] == traced.params == parameter_count(get_preset("tiny")).total_params
    parts = parameter_count(get_preset("tiny"))
    assert doc["params_by_part"] == {k: v for k, v in parts.parts().items() if v}
    summary = doc["trace"]
    assert summary["flops"] == traced.summary.flops
    assert summary["flops_causal_halved"] == traced.summary.flops_causal_halved
    assert [(p["phase"], p["flops"], p["bytes_read"]) for p in summary["by_phase"]] == [
        (p.phase, p.flops, p.bytes_read) for p in traced.summary.by_phase]
    assert summary["six_n_d"]["six_n_d_flops"] == 6 * doc["params"] * 3 * 20

    m = doc["memory"]
    for key in ("params_bytes", "grads_bytes", "optimizer_state_bytes",
                "saved_activation_bytes", "peak_bytes", "first_step_peak_bytes"):
        assert m[key] == getattr(memory, key), key

    r = doc["roofline"]
    assert r["time_s"] == pytest.approx(roofline.prediction.time_s)
    assert r["mfu"] == pytest.approx(roofline.prediction.mfu)
    assert [c["name"] for c in r["by_category"]] == [
        c.name for c in roofline.prediction.by_category]
    assert [c["time_s"] for c in r["by_category"]] == pytest.approx(
        [c.time_s for c in roofline.prediction.by_category])
    # Derived figures, by hand: 4 devices × 60 tokens per step time (its all-reduce
    # included); 2e9 tokens of run.
    step_s = roofline.prediction.time_s
    assert roofline.prediction.communication_s > 0
    assert doc["step_time_s"] == pytest.approx(step_s)
    assert doc["cluster_tokens_per_s"] == pytest.approx(4 * 60 / step_s)
    run = doc["run"]
    assert run["steps"] == pytest.approx(2e9 / (4 * 60))
    assert run["time_s"] == pytest.approx(2e9 / (4 * 60 / step_s))
    assert run["days"] == pytest.approx(run["time_s"] / 86_400)
    assert run["device_hours"] == pytest.approx(run["time_s"] / 3600 * 4)
    assert run["cost_usd"] == pytest.approx(run["device_hours"] * 1.5)


def test_the_library_returns_a_ledger_that_renders() -> None:
    ledger = tensorledger.account("tiny", "a100", batch=2, seq=16)
    assert "MFU" in repr(ledger) and ledger.run is None
    html = ledger._repr_html_()  # a fragment: headline, tables, SVG plots; no page, no script
    assert "<html" not in html and "<script" not in html
    assert "<caption>FLOPs by phase</caption>" in html and "id='roofline'" in html
    assert "id='headline'" in html and len(html.encode()) < 300_000
    assert not re.search(r"<link[^>]+href=\"?https?:|<img[^>]+src=\"?https?:", html)
    import io

    from rich.console import Console

    console = Console(record=True, width=120, file=io.StringIO())
    console.print(ledger)
    assert "Predicted time by category" in console.export_text()


def test_terminal_output_names_the_run(cli: Any) -> None:
    result = cli("account", *ARGS)
    assert result.code == 0, result.stderr
    assert "the whole run: 2e9 tokens" in result.stdout.replace("2e+09", "2e9")
    assert "4 × a100" in result.stdout


@pytest.mark.parametrize(("args", "fragment"), [
    (("--model", "nope"), "unknown model"),
    (("--model", "tiny", "--hardware", "h1000"), "unknown hardware"),
    (("--model", "tiny", "--count", "0"), "--count must be"),
    (("--model", "tiny", "--tokens", "lots"), "lots"),
    (("--model", "tiny", "--usd-per-device-hour", "-1", "--tokens", "1B"),
     "--usd-per-device-hour must be a positive number"),
    (("--model", "tiny", "--seq", "0"), "--seq must be between 1 and"),
])
def test_bad_input_is_one_line(cli: Any, args: tuple[str, ...], fragment: str) -> None:
    assert_one_line_error(cli("account", *args), fragment)


def test_parameter_shares_are_of_the_model_not_of_a_shard(cli: Any) -> None:
    """Under FSDP 4 a rank holds a quarter of tiny's parameters, but the parts table shares out
    the whole model: tiny's 90,432 parameters (napkin's count), each rank 90,432 / 4 = 22,608;
    the mlp's 49,152 is 49,152 / 90,432 = 54.4% of it (not 217.4% of a shard)."""
    total = parameter_count(get_preset("tiny")).total_params
    assert total == 90_432
    result = cli("account", "--model", "tiny", "--batch", "1", "--seq", "16", "--hardware",
                 "h100", "--fsdp", "4")
    assert result.code == 0, result.stderr
    assert f"Parameters: {total:,}" in result.stdout
    assert f"this rank holds {total // 4:,}" in result.stdout
    assert re.search(r"mlp\s+│\s+49,152\s+│\s+54\.4%", result.stdout)
    doc = cli("account", "--model", "tiny", "--batch", "1", "--seq", "16", "--hardware", "h100",
              "--fsdp", "4", "--json").json()
    assert doc["params"] == total // 4
    assert sum(doc["params_by_part"].values()) == total
