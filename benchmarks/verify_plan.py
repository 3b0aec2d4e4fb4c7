"""The planner's closed forms against traced ranks at scale: `plan --verify` for llama-3-70b on
64 H100s (global batch 4M tokens of 8192, the planner's default recipe bf16-master + AdamW).

The top ``--top`` (default 3) layouts of the full search are traced: torch.distributed's own
parallel code (FSDP2, DTensor TP/SP, checkpointing, and torch's pipeline schedules over stages
laid out so) on fake ranks, one process, one step (with a pipeline: of one micro-batch more
than the stages, the steady state of 1F1B, on the stage the closed form finds busiest).
``--max-pp 1`` restricts the search to layouts without a pipeline.  Prints each layout's state,
activations, peak and bytes sent, closed form beside traced, with the error, then one JSON
line (the target: within 5%).  Takes minutes.
"""

from __future__ import annotations

import argparse
import json
import time

from tensorledger.hardware import get_hardware
from tensorledger.ledger.plan import verify_choice
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.layouts import plan_layouts, plan_setup

TARGET = 0.05


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3-70b")
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--batch-seqs", type=int, default=488)
    parser.add_argument("--precision", default="bf16-master")
    parser.add_argument("--max-pp", type=int, default=None)
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args()
    config, chip = get_preset(args.model), get_hardware("h100")
    plan = plan_layouts(config, chip, args.count, seq_len=args.seq,
                        global_batch_seqs=args.batch_seqs, precision=args.precision,
                        top=args.top, max_pp=args.max_pp)
    setup = plan_setup(config, chip, args.count, seq_len=args.seq,
                       global_batch_seqs=args.batch_seqs, precision=args.precision,
                       max_pp=args.max_pp)
    results = []
    for row in plan.ranked:
        start = time.perf_counter()
        v = verify_choice(setup, row.choice, args.model)
        took = time.perf_counter() - start
        errors = v.errors()
        print(f"{v.layout} (traced as {v.traced_layout}, {took:.0f} s)")
        for name, closed, traced in (
                ("state", v.closed_state_bytes, v.traced_state_bytes),
                ("activations", v.closed_activation_bytes, v.traced_activation_bytes),
                ("peak", v.closed_total_bytes, v.traced_peak_bytes),
                ("sent", v.closed_sent_bytes, v.traced_sent_bytes)):
            print(f"  {name:12s} closed {closed / 1e9:10.3f} GB  traced {traced / 1e9:10.3f} GB"
                  f"  error {errors[name]:+.2%}")
        print("  traced peak at " + v.traced_peak_op + ": " + ", ".join(
            f"{k} {b / 1e9:.2f} GB" for k, b in v.traced_peak_by_category.items()))
        results.append({"layout": v.layout, "peak_by_category": v.traced_peak_by_category,
                        "seconds": took, "errors": errors,
                        "closed": [v.closed_state_bytes, v.closed_activation_bytes,
                                   v.closed_total_bytes, v.closed_sent_bytes],
                        "traced": [v.traced_state_bytes, v.traced_activation_bytes,
                                   v.traced_peak_bytes, v.traced_sent_bytes]})
    within = all(abs(r["errors"][k]) <= TARGET for r in results  # type: ignore[index]
                 for k in ("state", "activations", "peak", "sent"))
    print(json.dumps({"benchmark": "verify_plan", "model": args.model, "count": args.count,
                      "max_pp": args.max_pp, "results": results, "within_5_percent": within}))


if __name__ == "__main__":
    main()
