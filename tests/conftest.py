"""Shared test helpers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tensorledger.cli import main


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Run ``tensorledger ARGS...`` in-process; returns exit code, stdout and stderr."""

    def run(*args: str | Sequence[str]) -> CliResult:
        argv = [str(a) for a in args]
        code = main(argv)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def assert_one_line_error(result: CliResult, *fragments: str) -> None:
    """Bad input: exit 2, nothing on stdout, exactly one line on stderr naming the problem."""
    assert result.code == 2, (result.code, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tensorledger: error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
