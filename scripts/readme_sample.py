"""The README's sample of the main job, regenerated from the command's real output.

``python scripts/readme_sample.py`` runs the demo command at 120 columns and writes its output
into the README's ``text`` block after "Real output of that command"; ``--check`` exits 1 when
the README differs from what the command prints today (tests/test_readme.py runs the check).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
COMMAND = ("account", "--model", "gpt2", "--batch", "8", "--seq", "1024", "--hardware", "h100",
           "--count", "8", "--tokens", "10B")
MARKER = "Real output of that command"


def command_output() -> str:
    """What the demo command prints at 120 columns, trailing spaces stripped."""
    env = {**os.environ, "COLUMNS": "120", "TERM": "dumb"}
    run = "import sys; from tensorledger.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", run, *COMMAND], env=env,
                          capture_output=True, text=True, check=True)
    return "\n".join(line.rstrip() for line in done.stdout.rstrip().splitlines())


def readme_with(sample: str, text: str) -> str:
    """``text`` (the README) with its sample block replaced by ``sample``."""
    start = text.index("```text\n", text.index(MARKER)) + len("```text\n")
    end = text.index("\n```", start)
    return text[:start] + sample + text[end:]


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    updated = readme_with(command_output(), text)
    if "--check" in argv:
        return 0 if updated == text else 1
    README.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
