"""Napkin answers without torch: `tensorledger time ...` against `python -c "import torch"`.

Both are whole processes started the same way, timed in the same run; the napkin command must
take at most 0.3× as long as importing torch.  Prints a table, then one JSON line.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEATS = 7
BIN = Path(sys.executable).parent
COMMANDS = {
    "tensorledger time": [str(BIN / "tensorledger"), "time", "--params", "70B", "--tokens", "15T",
                          "--hardware", "h100", "--count", "1024", "--mfu", "0.5"],
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
}


def wall_s(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    for argv in COMMANDS.values():  # warm the file cache once
        wall_s(argv)
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(REPEATS):  # interleaved, so drift in machine load hits both alike
        for name, argv in COMMANDS.items():
            samples[name].append(wall_s(argv))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    napkin, torch_import = medians.values()
    ratio = napkin / torch_import
    print(f"{'command':<28}{'median s':>10}{'min s':>10}")
    for name, values in samples.items():
        print(f"{name:<28}{statistics.median(values):>10.3f}{min(values):>10.3f}")
    print(f"ratio napkin / import torch = {ratio:.3f} (target <= 0.3)")
    print(json.dumps({"benchmark": "napkin_time_vs_import_torch", "repeats": REPEATS,
                      "napkin_time_s": napkin, "import_torch_time_s": torch_import,
                      "ratio": ratio, "target_ratio": 0.3, "pass": ratio <= 0.3}))


if __name__ == "__main__":
    main()
