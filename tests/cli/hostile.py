"""Hostile inputs for the hardening tests and the fuzz test: files that are not what they
claim, and model factories that misbehave.  ``make_hostile_files(folder)`` writes them all and
returns their paths by name."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CHIP", "FACTORIES", "HOSTILE_FILE_NAMES", "make_hostile_files"]

#: A valid one-chip hardware file, which the hostile variants below break one field at a time.
CHIP = ('name = "Test chip"\nmemory = "80GB"\nmemory_bandwidth = "3TB/s"\n'
        '[dense]\nbf16 = "900TFLOP/s"\nfp32 = "60TFLOP/s"\n')

_TOML = {
    "chip.toml": CHIP,
    "list_memory.toml": CHIP.replace('memory = "80GB"', "memory = [80]"),
    "table_memory.toml": CHIP.replace('memory = "80GB"', "memory = { a = 1 }"),
    "date_memory.toml": CHIP.replace('memory = "80GB"', "memory = 1979-05-27"),
    "bool_memory.toml": CHIP.replace('memory = "80GB"', "memory = true"),
    "huge_int_memory.toml": CHIP.replace('memory = "80GB"', "memory = " + "9" * 5000),
    "inf_peak.toml": CHIP.replace('bf16 = "900TFLOP/s"', "bf16 = inf"),
    "nan_peak.toml": CHIP.replace('bf16 = "900TFLOP/s"', "bf16 = nan"),
    "negative_bandwidth.toml": CHIP.replace('"3TB/s"', "-3"),
    "name_list.toml": CHIP.replace('name = "Test chip"', 'name = ["x"]'),
    "sources_string.toml": CHIP.replace("[dense]", 'sources = "datasheet"\n[dense]'),
    "aliases_string.toml": CHIP.replace("[dense]", 'aliases = "h1"\n[dense]'),
    "inf_curve.toml": CHIP + '[curves]\n"matmul.bf16" = [[1.0, inf]]\n',
    "bool_curve.toml": CHIP + '[curves]\n"bandwidth" = [[true, 2.0]]\n',
    "nested_low_precision.toml": CHIP + "[calibration.low_precision.low_precision]\n",
    "other_script_digits.toml": CHIP.replace('"80GB"', '"٨٠GB"'),
    "deep.toml": "a = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "not_toml.toml": "this is = not [toml\n",
}

_JSON = {
    "config.json": '{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, '
                   '"vocab_size": 128, "n_positions": 64}',
    "deep.json": "[" * 100_000 + "]" * 100_000,
    "model_type_list.json": '{"model_type": ["gpt2"], "n_layer": 2}',
    "huge_layers.json": '{"model_type": "gpt2", "n_layer": 1000000, "n_embd": 64, "n_head": 2}',
    "wide.json": '{"model_type": "gpt2", "n_layer": 1, "n_embd": 1099511627776, "n_head": 2}',
    "huge_int.json": '{"model_type": "gpt2", "n_layer": ' + "9" * 5000 + "}",
    "nan.json": '{"model_type": "gpt2", "n_layer": NaN}',
}

#: Model factories that misbehave, for ``--model file.py:make`` (the workload guard's cases).
FACTORIES = {
    "exit_at_import.py": "import sys\nsys.exit(0)\n",
    "exit3_in_factory.py": "import sys\n\ndef make():\n    sys.exit(3)\n",
    "exit_in_forward.py": (
        "import sys, torch\n\nclass M(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.w = torch.nn.Linear(4, 4)\n\n"
        "    def forward(self, x):\n        sys.exit(0)\n\ndef make():\n    return M()\n"),
    "os_exit_in_factory.py": "import os\n\ndef make():\n    os._exit(0)\n",
    "os_exit_in_forward.py": (
        "import torch\nfrom posix import _exit\n\nclass M(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.w = torch.nn.Embedding(16, 4)\n\n    def forward(self, x):\n"
        "        try:\n            _exit(0)\n        except Exception:\n            pass\n\n"
        "def make():\n    return M()\n"),
    "prints.py": (
        "import torch\nprint('hello from the factory')\n\ndef make():\n"
        "    print('building')\n    return torch.nn.Linear(4, 4)\n"),
    "raises.py": "def make():\n    raise RuntimeError('factory failed')\n",
    "interrupts.py": "def make():\n    raise KeyboardInterrupt\n",
    "no_parameters.py": "import torch\n\ndef make():\n    return torch.nn.ReLU()\n",
    "not_a_module.py": "def make():\n    return 42\n",
}

#: Every name ``make_hostile_files`` returns.
HOSTILE_FILE_NAMES = (*_TOML, *_JSON, *FACTORIES, "fifo.toml", "fifo.json", "folder.toml",
                      "binary.toml", "binary.json", "dev_zero", "missing.toml", "h100")


def make_hostile_files(folder: Path) -> dict[str, str]:
    """Write every hostile file into ``folder``; returns name → path (``dev_zero`` is
    ``/dev/zero``, ``missing.toml`` does not exist)."""
    paths: dict[str, str] = {}
    for name, text in {**_TOML, **_JSON, **FACTORIES}.items():
        (folder / name).write_text(text, encoding="utf-8")
    for name in ("fifo.toml", "fifo.json"):
        os.mkfifo(folder / name)
    (folder / "folder.toml").mkdir()
    binary = bytes(range(256)) * 4
    (folder / "binary.toml").write_bytes(binary)
    (folder / "binary.json").write_bytes(binary)
    (folder / "h100").write_text("not a chip\n", encoding="utf-8")  # must not shadow the catalog
    for name in HOSTILE_FILE_NAMES:
        paths[name] = str(folder / name)
    paths["dev_zero"] = "/dev/zero"
    return paths
