"""The napkin paths that use models answer without importing torch."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import contextlib, io, sys
from tensorledger.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    codes = [main(["time", "--model", "llama-3-70b", "--tokens", "15T", "--count", "1024"]),
             main(["models", "--json"]), main(["models", "gpt2"])]
assert codes == [0, 0, 0], codes
assert "torch" not in sys.modules, "torch was imported"
print("ok")
"""


def test_time_model_and_models_do_not_import_torch() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
