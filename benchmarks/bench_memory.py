"""Memory accounting on top of tracing: llama-3-70b, batch 1, seq 8192, an AdamW step on meta.

Reference, in the same run: the trace issue's plain trace of the same step
(``trace_model(..., step="train", device="meta")``).  Measured: tracing with storage tagging
(parameters, gradients, optimizer state, saved activations) plus the timeline replay.  Each
runs in a fresh child process, so peak RSS is its own.  Bounds: at most 1.3× the tracing
time, under 1 GiB of RSS above the process baseline.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

MODEL, BATCH, SEQ = "llama-3-70b", 1, 8192


def _child(which: str) -> None:
    import torch

    from tensorledger.ledger.memory import memory_report
    from tensorledger.workload import resolve_workload, trace_workload

    torch.set_num_threads(1)
    # Imports happen before the clock starts, and are the same for both children.
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    work = resolve_workload(MODEL, batch=BATCH, seq=SEQ, precision="fp32", device="meta")
    if which == "trace":
        run = trace_workload(work)
        ops = len(run.trace.records)
        peak = 0
    else:  # the first and the steady-state step traced, with storage tags, and accounted
        ledger = memory_report(work)
        ops, peak = len(ledger.timeline.points), ledger.peak_bytes
    elapsed = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"time_s": elapsed, "peak_rss_bytes": rss, "baseline_rss_bytes": baseline,
                      "ops": ops, "peak_bytes": peak}))


def _run(which: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", which], check=True,
                         capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    trace = _run("trace")
    memory = _run("memory")
    ratio = memory["time_s"] / trace["time_s"]
    extra = memory["peak_rss_bytes"] - memory["baseline_rss_bytes"]
    mib = 2**20
    print(f"{MODEL}, batch {BATCH}, seq {SEQ}, AdamW step on meta")
    print(f"{'':<28} {'time':>10} {'peak RSS':>12} {'ops':>8}")
    print(f"{'trace (reference)':<28} {trace['time_s']:>8.2f} s "
          f"{trace['peak_rss_bytes'] / mib:>8.1f} MiB {int(trace['ops']):>8}")
    print(f"{'trace + memory timeline':<28} {memory['time_s']:>8.2f} s "
          f"{memory['peak_rss_bytes'] / mib:>8.1f} MiB {int(memory['ops']):>8}")
    print(f"memory / trace time: {ratio:.3f} (bound 1.3); RSS above baseline "
          f"{extra / mib:.1f} MiB (bound 1024 MiB); traced peak "
          f"{memory['peak_bytes'] / 2**30:.1f} GiB")
    print(json.dumps({"model": MODEL, "trace_time_s": trace["time_s"],
                      "memory_time_s": memory["time_s"], "memory_over_trace_time_ratio": ratio,
                      "memory_peak_rss_bytes": memory["peak_rss_bytes"],
                      "memory_extra_rss_bytes": extra, "trace_peak_rss_bytes":
                      trace["peak_rss_bytes"], "traced_peak_bytes": memory["peak_bytes"]}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        main()
