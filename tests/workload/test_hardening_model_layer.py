"""Issue 11's classes that live in the model layer, one regression test each (the rest are in
tests/cli/test_hardening.py): factories that misbehave (class 6), work that cannot fit on real
tensors (class 7), and formats torch cannot store asked for a trace (class 8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import assert_one_line_error


@pytest.mark.parametrize(("body", "fragment"), [
    ("import sys\nsys.exit(0)\n", "called sys.exit(0)"),
    ("def make():\n    import sys\n    sys.exit(3)\n", "called sys.exit(3)"),
    ("def make():\n    raise KeyboardInterrupt\n", "raised KeyboardInterrupt"),
    ("import torch\ndef make():\n    return torch.nn.Tanh()\n", "no trainable parameters"),
])
def test_factories_that_misbehave_are_one_line_and_exit_2(cli: Any, tmp_path: Path, body: str,
                                                          fragment: str) -> None:
    path = tmp_path / "bad_factory.py"
    path.write_text(body)
    result = cli("trace", "--model", f"{path}:make", "--seq", "8", "--json")
    assert_one_line_error(result, fragment, "bad_factory.py")


def test_factories_that_print_leave_json_whole_and_a_refusal_one_line(cli: Any,
                                                                      tmp_path: Path) -> None:
    path = tmp_path / "chatty.py"
    path.write_text("import torch\nprint('importing')\n"
                    "def make():\n    print('making')\n    return torch.nn.Linear(3, 3)\n")
    # builds fine, prints, then is refused (no token ids to feed): the line stands alone
    assert_one_line_error(cli("memory", "--model", f"{path}:make", "--seq", "8", "--json"),
                          "no embedding")
    result = cli("models", f"{path}:make", "--json")
    assert result.code == 0 and json.loads(result.stdout)["params"] == 3 * 3 + 3
    assert "making" in result.stderr


def test_work_that_cannot_fit_on_real_cpu_tensors_is_refused_with_the_figure(cli: Any) -> None:
    # llama-3-405b, fp32 AdamW: 405,853,388,800 · 16 bytes ≈ 6.5 TB, far past this machine
    result = cli("memory", "--model", "llama-3-405b", "--seq", "8", "--precision", "fp32",
                 "--device", "cpu")
    assert_one_line_error(result, "405,853,388,800 parameters, 16 bytes each", "GiB are "
                          "available", "use --device fake")


def test_silent_acceptance_of_a_format_torch_cannot_store(cli: Any) -> None:
    # tracing takes a precision recipe, not a storage format: fp4 is not one, and says so
    assert_one_line_error(cli("trace", "--model", "tiny", "--precision", "fp4"),
                          "unknown precision 'fp4'", "mixed-bf16")
    assert_one_line_error(cli("trace", "--model", "tiny", "--dtype", "fp4"), "--dtype")
