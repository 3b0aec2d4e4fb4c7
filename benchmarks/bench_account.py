"""The whole ledger against the trace alone: `account` on llama-3-70b for 64 H100s.

Runs, as separate processes, alternately and ``--runs`` times each,

    tensorledger trace   --model llama-3-70b --seq 8192 --json
    tensorledger account --model llama-3-70b --seq 8192 --hardware h100 --count 64 --json

and compares their median wall times (target: account ≤ 1.5 × trace: one trace shared by
every analysis) and account's peak RSS (target < 1.5 GiB), read from the child's rusage.
Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "tensorledger"
WORKLOAD = ["--model", "llama-3-70b", "--seq", "8192", "--json"]
COMMANDS = {"trace": ["trace", *WORKLOAD],
            "account": ["account", *WORKLOAD, "--hardware", "h100", "--count", "64"]}
RATIO_TARGET, RSS_TARGET_BYTES = 1.5, 1.5 * 2**30


def _run(args: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    start = time.perf_counter()
    child = subprocess.Popen([str(BIN), *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        error = child.stderr.read().decode() if child.stderr else ""
        raise SystemExit(f"{' '.join(args)} failed: {error}")
    return wall, usage.ru_maxrss * 1024  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    rss: dict[str, list[int]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, command in COMMANDS.items():
            wall, peak = _run(command)
            times[name].append(wall)
            rss[name].append(peak)
            print(f"{name:<8} {wall:8.1f} s  peak RSS {peak / 2**30:.2f} GiB", flush=True)
    trace_s, account_s = (statistics.median(times[n]) for n in ("trace", "account"))
    ratio = account_s / trace_s
    peak = max(rss["account"])
    print(f"median: trace {trace_s:.1f} s, account {account_s:.1f} s, ratio {ratio:.2f} "
          f"(target ≤ {RATIO_TARGET}); account peak RSS {peak / 2**30:.2f} GiB (target < 1.5)")
    print(json.dumps({"benchmark": "account_llama_3_70b", "trace_time_s": trace_s,
                      "account_time_s": account_s, "ratio": ratio, "target_ratio": RATIO_TARGET,
                      "account_peak_rss_bytes": peak, "trace_peak_rss_bytes": max(rss["trace"]),
                      "target_rss_bytes": RSS_TARGET_BYTES,
                      "pass": ratio <= RATIO_TARGET and peak < RSS_TARGET_BYTES}))


if __name__ == "__main__":
    main()
