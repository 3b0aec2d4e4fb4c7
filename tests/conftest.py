"""Shared test helpers."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import settings

from tensorledger.cli import main

# No example is judged by how long it ran: a loaded CI machine is no reason to fail (and no test
# here asserts on wall-clock time).
settings.register_profile("tensorledger", deadline=None)
settings.load_profile("tensorledger")

# Under mutmut (its process sets MUTANT_UNDER_TEST before pytest starts) torch gets one intra-op
# thread.  mutmut forks a worker per mutant from a process that has already run tests, so the
# OpenMP pool's threads stay behind in the parent; the worker's first parallel op then waits at
# the pool's barrier forever (libgomp's gomp_team_barrier_wait_end), until mutmut's wall-clock
# timer kills it and reports a "timeout": a surviving mutant counted as killed.  With one thread
# torch runs each op inline and never enters the pool.  `make mutation` also exports
# OMP_NUM_THREADS=1, which does the same before torch is imported.
if "MUTANT_UNDER_TEST" in os.environ:
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _table_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables at the CLI's own default width for a pipe (120), whatever the runner's terminal
    (pytest-xdist's workers report 80 columns); a test may set COLUMNS itself."""
    monkeypatch.setenv("COLUMNS", "120")


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


#: For tests of the "no CUDA device" refusal: they can only pass where there is none.
NEEDS_NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(),
                                   reason="checks the refusal on a machine without CUDA")


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


@pytest.fixture(autouse=True)
def _one_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    """One intra-op thread for the model and memory tests: their small tensors on 2 shared
    cores run far slower with threads contending than on one."""
    if request.node.path.parent.name not in ("models", "memory"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
