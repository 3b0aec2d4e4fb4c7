"""What a traced profile costs ``plan``, and how well it predicts traced ranks (issue 36).

Writes a Qwen2 config.json with Qwen2-72B's published sizes (hidden 8192, 80 layers, 64 heads,
8 key/value heads, MLP 29,568, vocabulary 152,064), measures its per-block profile as ``plan``
does (fake traces at 1 and 2 blocks, 1 and 2 tensor-parallel ranks), times it (target: at most
30 s), plans it on ``--count`` H100s, and with ``--verify N`` traces the top N traceable layouts
with the real parallel code, printing closed / traced − 1 for the peak, the state and the
bytes sent (target: within 5%).  ``--model`` profiles another source instead (a preset, a
config.json, a factory ``file.py:fn``).  The last line is JSON.

    python benchmarks/bench_profile.py                      # the 72B profile and its plan
    python benchmarks/bench_profile.py --verify 3 --count 64 --seq 2048 --checkpoint none
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tensorledger.errors import TensorLedgerError
from tensorledger.hardware import get_hardware
from tensorledger.ledger.plan import traceable_layout, verify_choice
from tensorledger.ledger.profile import measure_profile
from tensorledger.plan import FixedDims, plan_layouts
from tensorledger.plan.layouts import plan_setup
from tensorledger.workload.source import resolve_source

PROFILE_TARGET_S = 30.0
VERIFY_TARGET = 0.05
#: Qwen/Qwen2-72B's config.json sizes (the published model card's)
QWEN2_72B = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 8192,
             "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
             "intermediate_size": 29568, "vocab_size": 152064,
             "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
             "tie_word_embeddings": False, "hidden_act": "silu"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a source; default: Qwen2-72B's config")
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--batch-seqs", type=int, default=512)
    parser.add_argument("--precision", default="bf16-master")
    parser.add_argument("--verify", type=int, default=0)
    parser.add_argument("--checkpoint", default=None,
                        help="fix checkpointing (none: the layouts a trace can check)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = args.model
        if model is None:
            path = Path(folder) / "qwen2-72b" / "config.json"
            path.parent.mkdir()
            path.write_text(json.dumps(QWEN2_72B))
            model = str(path)
        source = resolve_source(model)
        start = time.perf_counter()
        profile = measure_profile(source, seq_len=args.seq, precision=args.precision)
        profile_s = time.perf_counter() - start
        chip = get_hardware("h100")
        start = time.perf_counter()
        plan = plan_layouts(profile, chip, args.count, seq_len=args.seq,
                            global_batch_seqs=args.batch_seqs, precision=args.precision,
                            top=50, fixed=FixedDims(checkpoint=args.checkpoint))
        plan_s = time.perf_counter() - start
        print(f"{profile.name}: {profile.params():,} parameters, {profile.n_layers} blocks; "
              f"profile {profile_s:.1f} s (target ≤ {PROFILE_TARGET_S:g} s), plan "
              f"{plan_s:.2f} s, {plan.searched:,} searched, {plan.feasible:,} feasible")
        for rank, row in enumerate(plan.ranked[:3], 1):
            c = row.choice
            print(f"  {rank}. {row.layout}, micro {c.micro_batch} × {c.accumulation}, "
                  f"checkpoint {c.checkpoint}: {row.memory.total_bytes / 1e9:.2f} GB, "
                  f"{row.time.step_s:.2f} s, MFU {row.time.mfu:.1%}")
        errors: list[dict[str, float | str]] = []
        if args.verify:
            setup = plan_setup(profile, chip, args.count, seq_len=args.seq,
                               global_batch_seqs=args.batch_seqs, precision=args.precision)
            for row in plan.ranked:
                if len(errors) == args.verify:
                    break
                if isinstance(traceable_layout(row.choice), str):
                    continue
                try:
                    checked = verify_choice(setup, row.choice, model)
                except TensorLedgerError as refusal:  # a layout the workload refuses
                    print(f"  not traced: {row.layout}: {refusal}")
                    continue
                error = checked.errors()
                errors.append({"layout": checked.layout, **error})
                print(f"  traced {checked.layout}: " + ", ".join(
                    f"{name} {value:+.2%}" for name, value in error.items()))
    worst = max((abs(float(e[k])) for e in errors for k in ("peak", "state", "sent")),
                default=0.0)
    print(json.dumps({"model": profile.name, "profile_s": profile_s, "plan_s": plan_s,
                      "searched": plan.searched, "verified": len(errors),
                      "worst_verify_error": worst,
                      "profile_within_target": profile_s <= PROFILE_TARGET_S,
                      "verify_within_target": worst <= VERIFY_TARGET}))


if __name__ == "__main__":
    main()
