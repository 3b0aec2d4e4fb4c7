"""The README's samples, regenerated from the commands' real output.

``python scripts/readme_sample.py`` runs the demo command at 120 columns and writes its output
into the README's ``text`` block after "Real output of that command", and the fine-tuning
commands of "Will my fine-tune fit?" into the block after "Real output of these commands"
(each command's peak and fit, the lines the section is about); ``--check`` exits 1 when the
README differs from what the commands print today (tests/test_readme.py runs the checks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
COMMAND = ("account", "--model", "gpt2", "--batch", "8", "--seq", "1024", "--hardware", "h100",
           "--count", "8", "--tokens", "10B")
MARKER = "Real output of that command"

#: "Will my fine-tune fit?": llama-3-8b, one sequence of 1,024 tokens, AdamW; full fine-tuning
#: (mixed bf16), LoRA r=16 over a bf16 base, QLoRA (the same over NF4), on a 24 GB chip, an
#: 80 GB one and eight 80 GB ones; and full fine-tuning on one 80 GB chip with its parameters,
#: gradients and optimizer state offloaded to the host (FSDP2's CPUOffloadPolicy).
_EIGHT_B = ("memory", "--model", "llama-3-8b", "--seq", "1024")
_LORA = ("--precision", "bf16", "--lora", "16")
FIT_COMMANDS: tuple[tuple[str, ...], ...] = (
    (*_EIGHT_B, "--hardware", "rtx-4090"),
    (*_EIGHT_B, "--hardware", "h100"),
    (*_EIGHT_B, "--hardware", "h100", "--fsdp", "8"),
    (*_EIGHT_B, "--hardware", "h100", "--offload", "params"),
    (*_EIGHT_B, *_LORA, "--hardware", "rtx-4090"),
    (*_EIGHT_B, *_LORA, "--hardware", "h100"),
    (*_EIGHT_B, *_LORA, "--qlora", "--hardware", "rtx-4090"),
    (*_EIGHT_B, *_LORA, "--qlora", "--hardware", "h100"),
)
FIT_MARKER = "Real output of these commands"
#: The paragraphs of ``memory``'s output quoted for each command: the peak, what
#: ``--offload params`` keeps on the host and moves, and the fit.
_QUOTED = ("peak of the steady-state step", "parameters offloaded", "NVIDIA ")


def command_output() -> str:
    """What the demo command prints at 120 columns, trailing spaces stripped."""
    return "\n".join(line.rstrip() for line in _run_each((COMMAND,), 120)[0].rstrip().splitlines())


#: Printed between two commands' outputs by :func:`_run_each`.
_SEPARATOR = "\x00 next command \x00"


def _run_each(commands: tuple[tuple[str, ...], ...], columns: int) -> list[str]:
    """What each of ``commands`` prints, run one after another in one process (torch and the
    package imported once, not once a command)."""
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb"}
    run = ("import json, sys; from tensorledger.cli import main\n"
           "for argv in json.loads(sys.argv[1]):\n"
           "    code = main(argv)\n"
           "    if code: sys.exit(code)\n"
           f"    print({_SEPARATOR!r}, flush=True)")
    done = subprocess.run([sys.executable, "-c", run, json.dumps(commands)], env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout.split(_SEPARATOR + "\n")[:-1]


def fit_output(command: tuple[str, ...], printed: str) -> str:
    """One fine-tuning command and the paragraphs of ``printed``, its output, the README quotes
    (printed unwrapped, then wrapped at 96 columns)."""
    lines = [line.strip() for line in printed.splitlines()]
    quoted = [line for line in lines if line.startswith(_QUOTED)]
    shown = [f"$ tensorledger {' '.join(command)}"]
    for line in quoted:
        shown += textwrap.wrap(line, 96, subsequent_indent="  ")
    return "\n".join(shown)


def _block(text: str, marker: str) -> tuple[int, int]:
    start = text.index("```text\n", text.index(marker)) + len("```text\n")
    return start, text.index("\n```", start)


def readme_with(sample: str, text: str, marker: str = MARKER) -> str:
    """``text`` (the README) with the sample block after ``marker`` replaced by ``sample``."""
    start, end = _block(text, marker)
    return text[:start] + sample + text[end:]


def fits_sample() -> str:
    printed = _run_each(FIT_COMMANDS, 1000)
    return "\n\n".join(fit_output(command, text)
                       for command, text in zip(FIT_COMMANDS, printed, strict=True))


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    updated = readme_with(fits_sample(), readme_with(command_output(), text), FIT_MARKER)
    if "--check" in argv:
        return 0 if updated == text else 1
    README.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
