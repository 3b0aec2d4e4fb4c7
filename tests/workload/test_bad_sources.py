"""Bad model sources and misbehaving user code: one line on stderr, exit 2, stdout untouched
(``--json`` stays one document), and a factory file is not even imported by a command that
refuses its options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import assert_one_line_error

COMMANDS = ("trace", "memory", "roofline")

GOOD_MODULE = ("import torch\n"
               "class Net(torch.nn.Module):\n"
               "    def __init__(self):\n"
               "        super().__init__()\n"
               "        self.embed = torch.nn.Embedding(11, 6)\n"
               "        self.head = torch.nn.Linear(6, 11)\n"
               "    def forward(self, ids):\n"
               "        {forward}\n"
               "        return self.head(self.embed(ids))\n")

HOSTILE = {
    "exit at import": ("import sys\nsys.exit(0)\n", "importing", "called sys.exit(0)"),
    "exit in factory": ("import sys\ndef make():\n    sys.exit(3)\n", "the factory",
                        "called sys.exit(3)"),
    "interrupt in factory": ("def make():\n    raise KeyboardInterrupt\n", "the factory",
                             "raised KeyboardInterrupt"),
    "raise in factory": ("def make():\n    raise RuntimeError('no GPU for you')\n",
                         "the factory", "RuntimeError: no GPU for you"),
    "returns no module": ("def make():\n    return 42\n", "returned int",
                          "not a torch.nn.Module"),
    "no parameters": ("import torch\ndef make():\n    return torch.nn.ReLU()\n",
                      "no trainable parameters", "--step forward"),
    "exit in forward": (GOOD_MODULE.replace("{forward}", "raise SystemExit(4)")
                        + "def make():\n    return Net()\n", "a step of", "sys.exit(4)"),
    "interrupt in forward": (GOOD_MODULE.replace("{forward}", "raise KeyboardInterrupt")
                             + "def make():\n    return Net()\n", "a step of",
                             "KeyboardInterrupt"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("command", COMMANDS)
def test_hostile_factories_are_one_line(cli: Any, tmp_path: Path, command: str,
                                        case: str) -> None:
    code, *fragments = HOSTILE[case]
    path = tmp_path / "hostile.py"
    path.write_text(code)
    result = cli(command, "--model", f"{path}:make", "--seq", "4", "--json")
    assert_one_line_error(result, *fragments, "hostile.py")


def test_a_factory_that_prints_keeps_json_on_stdout(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "chatty.py"
    path.write_text("print('hello from import')\n"
                    + GOOD_MODULE.replace("{forward}", "print('hello from forward')")
                    + "def make():\n    print('hello from make')\n    return Net()\n")
    for command in (*COMMANDS, "models"):
        args = ((command, "--model", f"{path}:make", "--seq", "4", "--json")
                if command != "models" else ("models", f"{path}:make", "--json"))
        result = cli(*args)
        assert result.code == 0, result.stderr
        json.loads(result.stdout)  # one JSON document, the prints went to stderr
        assert "hello from make" in result.stderr


@pytest.mark.parametrize(("source", "fragments"), [
    ("{tmp}/absent.py:make", ("model factory file not found",)),
    ("{tmp}/ok.py:nothing_here", ("defines no function 'nothing_here'", "make")),
    ("{tmp}/ok.py:1bad", ("not of the form path/to/file.py:function",)),
    ("{tmp}/absent/config.json", ("config.json", "does not exist")),
    ("{tmp}/unknown/config.json", ("model_type 'no-such-architecture'",)),
    ("{tmp}/typeless/config.json", ("field 'model_type' must be a name",)),
    ("llama-7", ("unknown model", "llama-3-8b")),
    # a path is not a typo: it says the path is missing (issue 41)
    ("{tmp}/cfg/pythia", ("model path", "cfg/pythia does not exist", "config.json")),
    ("./cfg/pythia", ("model path ./cfg/pythia does not exist",)),
    # a near-miss preset names the nearest presets first (issue 41)
    ("llama3-8b", ("unknown model", "'llama3-8b'; did you mean llama-3-8b,")),
])
@pytest.mark.parametrize("command", (*COMMANDS, "models"))
def test_bad_sources_are_one_line(cli: Any, tmp_path: Path, command: str, source: str,
                                  fragments: tuple[str, ...]) -> None:
    (tmp_path / "ok.py").write_text(GOOD_MODULE.replace("{forward}", "pass")
                                    + "def make():\n    return Net()\n")
    for name, body in (("unknown", {"model_type": "no-such-architecture"}),
                       ("typeless", {"model_type": ["llama"]})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(body))
    text = source.format(tmp=tmp_path)
    args = ("models", text) if command == "models" else (command, "--model", text, "--seq", "4")
    assert_one_line_error(cli(*args), *fragments)


@pytest.mark.parametrize(("command", "bad"), [
    ("trace", ("--batch", "0")), ("memory", ("--precision", "fp7")),
    ("roofline", ("--hardware", "h1000")), ("memory", ("--count", "0")),
    ("trace", ("--checkpoint",)), ("roofline", ("--optimizer", "adamax")),
])
def test_a_refused_command_does_not_import_the_factory(cli: Any, tmp_path: Path, command: str,
                                                       bad: tuple[str, ...]) -> None:
    marker = tmp_path / "imported"
    path = tmp_path / "marks.py"
    path.write_text(f"open({str(marker)!r}, 'w').close()\n"
                    + GOOD_MODULE.replace("{forward}", "pass")
                    + "def make():\n    return Net()\n")
    result = cli(command, "--model", f"{path}:make", "--seq", "4", *bad)
    assert result.code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert not marker.exists()


def test_llama_3_8b_steady_state_peak_holds_the_adamw_moments() -> None:
    from tensorledger.ledger.memory import memory_report
    from tensorledger.workload import resolve_workload

    ledger = memory_report(resolve_workload("llama-3-8b", batch=1, seq=16, precision="fp32",
                                            device="meta"))
    peak = ledger.timeline.peak
    moments = 2 * 4 * 8_030_261_248  # exp_avg and exp_avg_sq, fp32, every parameter
    counters = 4 * (32 * 9 + 3)  # one fp32 step per tensor, 291 tensors
    assert peak.optimizer_state_bytes == moments + counters
    assert ledger.peak_bytes >= 4 * 8_030_261_248 + moments
    # The first step has no moments until its optimizer step: it never peaks higher (here
    # both peak in the optimizer step, when the moments exist in either).
    assert ledger.first_step_peak_bytes is not None
    assert ledger.first_step_peak_bytes <= ledger.peak_bytes
