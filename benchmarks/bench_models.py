"""Peak RSS of building llama-3-405b on the meta device, in a fresh process.

The reference, measured in the same run, is a fresh process that imports the same modules and
builds nothing: the ratio says what the 126-layer meta model itself costs on top of torch.
Prints a table, then one JSON line with unit-suffixed keys.  Run: python benchmarks/bench_models.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

MODEL = "llama-3-405b"


def _peak_rss_bytes() -> int:
    # Linux: VmHWM, this process's own high-water mark.  Its ru_maxrss is not: a child started
    # by vfork (as subprocess does) inherits the parent's peak, so under a pytest that has held
    # a gigabyte the child reported a gigabyte before it built anything.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    # ru_maxrss is KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def _child(what: str) -> None:
    import torch

    from tensorledger.models import build_model
    from tensorledger.napkin import get_preset

    params = 0
    build_s = 0.0
    if what == "build":
        start = time.perf_counter()
        model = build_model(get_preset(MODEL), "meta", torch.bfloat16)
        build_s = time.perf_counter() - start
        params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"what": what, "params": params, "build_time_s": build_s,
                      "peak_rss_bytes": _peak_rss_bytes()}))


def _run(what: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--child", what], capture_output=True,
                          text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    baseline = _run("import")
    build = _run("build")
    mib = 2**20
    extra = build["peak_rss_bytes"] - baseline["peak_rss_bytes"]
    print(f"{'process':<32} {'peak RSS':>12} {'build time':>12}")
    print(f"{'import torch + tensorledger':<32} {baseline['peak_rss_bytes'] / mib:>8.1f} MiB "
          f"{'':>12}")
    print(f"{'build ' + MODEL + ' on meta':<32} {build['peak_rss_bytes'] / mib:>8.1f} MiB "
          f"{build['build_time_s']:>10.3f} s")
    print(f"{MODEL}: {int(build['params']):,} parameters; the build adds {extra / mib:.1f} MiB "
          f"(bound: 1024 MiB)")
    print(json.dumps({"model": MODEL, "params": int(build["params"]),
                      "peak_rss_bytes": build["peak_rss_bytes"],
                      "baseline_peak_rss_bytes": baseline["peak_rss_bytes"],
                      "build_over_baseline_rss_ratio": build["peak_rss_bytes"]
                      / baseline["peak_rss_bytes"],
                      "build_time_s": build["build_time_s"],
                      "bound_bytes": 2**30}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        main()
