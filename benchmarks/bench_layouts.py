"""One rank of a big layout against one device: `memory` of llama-3-70b and llama-3-405b.

Runs, as separate processes, alternately and ``--runs`` times each,

    tensorledger memory --model llama-3-70b  --seq 8192 --json                 (one device)
    tensorledger memory --model llama-3-70b  --seq 8192 --fsdp 8 --tp 8 --json (rank 0 of 64)
    tensorledger memory --model llama-3-405b --seq 8192 --json
    tensorledger memory --model llama-3-405b --seq 8192 --fsdp 64 --tp 8 --json (of 512)

and compares, per model, the median wall time of the laid-out rank against the single device
(target: ≤ 2×: the real FSDP2 and DTensor code on fake tensors costs a bounded overhead) and
the laid-out run's peak RSS (target < 1.5 GiB: nothing the size of the model is allocated),
read from each child's rusage.  ``--models`` picks a subset.  Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics

from bench_account import _run  # the child runner: wall time and peak RSS from rusage

LAYOUTS = {"llama-3-70b": ["--fsdp", "8", "--tp", "8"],
           "llama-3-405b": ["--fsdp", "64", "--tp", "8"]}
RATIO_TARGET, RSS_TARGET_BYTES = 2.0, 1.5 * 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--models", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    args = parser.parse_args()
    results = []
    for model in args.models:
        base = ["memory", "--model", model, "--seq", "8192", "--json", "--quiet"]
        commands = {"one device": base, "laid out": [*base, *LAYOUTS[model]]}
        times: dict[str, list[float]] = {name: [] for name in commands}
        rss: dict[str, list[int]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, command in commands.items():
                wall, peak = _run(command)
                times[name].append(wall)
                rss[name].append(peak)
                print(f"{model:<13} {name:<10} {wall:8.1f} s  peak RSS {peak / 2**30:.2f} GiB",
                      flush=True)
        one, laid = (statistics.median(times[n]) for n in commands)
        peak = max(rss["laid out"])
        ratio = laid / one
        print(f"{model}: {' '.join(LAYOUTS[model])} {laid:.1f} s against one device "
              f"{one:.1f} s, ratio {ratio:.2f} (target ≤ {RATIO_TARGET}); peak RSS "
              f"{peak / 2**30:.2f} GiB (target < 1.5)", flush=True)
        results.append({"model": model, "layout": " ".join(LAYOUTS[model]),
                        "one_device_s": one, "laid_out_s": laid, "ratio": ratio,
                        "laid_out_peak_rss_bytes": peak,
                        "pass": ratio <= RATIO_TARGET and peak < RSS_TARGET_BYTES})
    print(json.dumps({"benchmark": "layouts_memory", "target_ratio": RATIO_TARGET,
                      "target_rss_bytes": RSS_TARGET_BYTES, "results": results}))


if __name__ == "__main__":
    main()
