"""The real-rank launches, shared: one ``torchrun`` of ``parallel_torchrun.py`` per world size
for the whole session (the 2-rank one steps the pipeline schedules too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).with_name("parallel_torchrun.py")

Real = dict[str, list[dict[str, Any]]]


def _launch(tmp_path_factory: pytest.TempPathFactory, ranks: int) -> Real:
    out = tmp_path_factory.mktemp(f"torchrun{ranks}")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         str(ranks), str(SCRIPT), str(out)], capture_output=True, text=True, timeout=240,
        env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    names = {path.name.split(".rank")[0] for path in out.glob("*.rank0.json")}
    return {name: [json.loads((out / f"{name}.rank{r}.json").read_text()) for r in range(ranks)]
            for name in names}


@pytest.fixture(scope="session")
def real2(tmp_path_factory: pytest.TempPathFactory) -> Real:
    """Each record of the 2-rank launch, by run name, rank by rank."""
    return _launch(tmp_path_factory, 2)


@pytest.fixture(scope="session")
def real4(tmp_path_factory: pytest.TempPathFactory) -> Real:
    """Each record of the 4-rank launch, by run name, rank by rank."""
    return _launch(tmp_path_factory, 4)
