"""``tensorledger memory``: the breakdown, the fit, the checkpointing note, JSON and errors."""

from __future__ import annotations

from pathlib import Path

import torch

from tensorledger.models import build_model, get_preset
from tensorledger.napkin import recipe_bytes
from tests.conftest import CliResult, assert_one_line_error


def test_json_breakdown_matches_recipe(cli) -> None:  # type: ignore[no-untyped-def]
    result: CliResult = cli("memory", "--model", "tiny", "--batch", "2", "--seq", "16",
                            "--optimizer", "adamw", "--precision", "bf16-fp32-states",
                            "--hardware", "h100", "--count", "8", "--json")
    assert result.code == 0, result.stderr
    data = result.json()["result"] if "result" in result.json() else result.json()
    numels = [p.numel() for p in build_model(get_preset("tiny"), "meta").parameters()]
    recipe = recipe_bytes("bf16-fp32-states", "adamw", numels)
    assert data["params_bytes"] == recipe.params_bytes  # 2 bytes per parameter
    assert data["optimizer_state_bytes"] == recipe.optimizer_bytes  # 8 per param + 4 per tensor
    assert data["fit"]["fits_replicated"] is True
    assert data["peak_bytes"] == max(p["total_bytes"] for p in data["timeline"]["points"])


def test_table_checkpoint_explanation_and_plot(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plot = tmp_path / "memory.png"
    result = cli("memory", "--model", "tiny", "--batch", "1", "--seq", "8", "--precision",
                 "fp32", "--checkpoint", "--plot", str(plot))
    assert result.code == 0, result.stderr
    assert "checkpointed" in result.stdout
    # the lecture's deep network (blocks of matmul + GELU or ReLU) explains checkpointing under
    # `checkpoint --deep`; under a Transformer it described another network (issue 41)
    assert "GELU" not in result.stdout and "ReLU" not in result.stdout
    assert "L·B·D" not in result.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("memory", "--model", "gpt5"), "unknown model")
    assert_one_line_error(cli("memory", "--model", "tiny", "--precision", "fp8"),
                          "unknown precision")
    assert_one_line_error(cli("memory", "--model", "tiny", "--batch", "0"), "--batch")
    assert_one_line_error(cli("memory", "--model", "gpt2", "--seq", "4096"), "context")
    assert_one_line_error(cli("memory", "--model", "tiny", "--seq", "8", "--hardware", "h1000"),
                          "unknown hardware")
    missing = tmp_path / "nope" / "m.png"
    assert_one_line_error(cli("memory", "--model", "tiny", "--seq", "8", "--plot",
                              str(missing)), "does not exist")
    assert not missing.exists()
    if not torch.cuda.is_available():
        assert_one_line_error(cli("memory", "--model", "tiny", "--seq", "8", "--device", "cuda"),
                              "no CUDA device")


def test_a_forward_step_holds_its_weights_and_nothing_a_step_trains(cli) -> None:  # type: ignore[no-untyped-def]
    """A forward step has every weight in memory (tiny: 90,432 parameters × 4 bytes of fp32
    storage under mixed-bf16 = 361,728 B), and no gradients, optimizer state or saved
    activations: the table shows the parameters alone, the title names no optimizer."""
    numels = [p.numel() for p in build_model(get_preset("tiny"), "meta").parameters()]
    assert sum(numels) == 90_432
    data = cli("memory", "--model", "tiny", "--step", "forward", "--batch", "1", "--seq", "16",
               "--json").json()
    assert data["params_bytes"] == 90_432 * 4
    assert data["grads_bytes"] == data["optimizer_state_bytes"] == 0
    assert data["saved_activation_bytes"] == 0
    text = cli("memory", "--model", "tiny", "--step", "forward", "--batch", "1", "--seq", "16")
    assert "adamw" not in text.stdout and "gradients" not in text.stdout
    assert "361.7 KB (353.2 KiB) │ 361.7 KB (353.2 KiB)" in text.stdout  # traced = closed form
