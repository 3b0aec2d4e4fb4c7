"""Launch a script of this folder on real gloo ranks under ``torchrun`` (CPU, one thread a
rank) and read back what each rank wrote: ``<name>.rank<r>.json`` in ``out``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def torchrun(script: Path, out: Path, ranks: int,
             names: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Run ``script out`` on ``ranks`` ranks; each name's records, rank by rank."""
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         str(ranks), str(script), str(out)], capture_output=True, text=True, timeout=240,
        env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: [json.loads((out / f"{name}.rank{r}.json").read_text()) for r in range(ranks)]
            for name in names}
