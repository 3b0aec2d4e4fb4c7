"""Decode steps run for real on this CPU, beside their prediction for the probed profile.

Issue 39: the reference tiny model, the GPT-2 small preset and a Hugging Face Llama-shaped
model (built by transformers from a config.json written here: no hub, no weights) decode one
token per sequence against a KV cache of ``context`` tokens — their own caches: the reference
model's written in place, transformers' ``DynamicCache`` grown by ``torch.cat``.  Each step is
traced and predicted for this machine's profile (``--profile FILE``, e.g. what ``tensorledger
probe`` saved; else probed and calibrated here, as ``tensorledger probe`` does), then timed
with the harness (``ledger.roofline.StepTiming``: a warm-up step, whole steps for a budget,
profiled steps), in ``--rounds`` rounds taken in turn over the workloads so a spell when the
machine runs slower falls on every workload alike.  The predicted figure is the eager step's
(a CPU runs every op as it comes: the per-op cost counts); target: within 25%.

fp32 throughout: the probe measures this CPU's fp32 matmuls (bf16 on a CPU without bf16 units
is an emulation the profile does not describe).  Prints a table, then one JSON line.  The
machine may be shared: run it on a quiet one, and read the spread column first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from tensorledger.bench import probe, profile_toml
from tensorledger.errors import TensorLedgerError
from tensorledger.hardware import Hardware, get_hardware, load_hardware_file
from tensorledger.hardware.catalog import parse_hardware_toml
from tensorledger.ledger.calibrate import calibrate, calibration_toml
from tensorledger.ledger.roofline import StepTiming
from tensorledger.workload import resolve_workload

TARGET = 0.25

#: A Llama-shaped config (GQA 8/2 heads, SwiGLU), for transformers to build.
HF_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 8192,
            "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
            "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
            "max_position_embeddings": 4096, "tie_word_embeddings": False}

WORKLOADS = (  # (label, model, batch, context, held to the target)
    ("tiny (reference), batch 4, context 256", "tiny", 4, 256, True),
    ("gpt2 small (reference), batch 1, context 512", "gpt2", 1, 512, True),
    # transformers' Llama runs more Python a step than the per-op cost the probe times on the
    # reference model: shown beside the two, not held to the target (issue 39 holds the tiny
    # and small models to it)
    ("HF Llama d256 L4 (DynamicCache), batch 2, context 256", "hf-llama", 2, 256, False),
)


def _say(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def _profile(path: str | None, folder: Path, keep: str | None, fit: bool,
             max_spread: float) -> Hardware:
    """``path``'s profile (``local``: the one ``tensorledger probe`` saved), else this machine
    probed (fp32; figures spread more than ``max_spread`` set aside) and, with ``fit``,
    calibrated as ``tensorledger probe --calibrate`` does (kept at ``keep``)."""
    if path == "local":
        return get_hardware("local")
    if path:
        return load_hardware_file(path)
    result = probe("cpu", dtypes=("fp32",), progress=_say, max_spread=max_spread)
    for entry in result.set_aside:
        _say(f"set aside: {entry}")
    text = profile_toml(result)
    if fit:
        fitted = calibrate(parse_hardware_toml(text, "probe", "local"), progress=_say)
        text = profile_toml(result, calibration=calibration_toml(fitted))
    target = Path(keep) if keep else folder / "local.toml"
    target.write_text(text)
    return load_hardware_file(target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6,
                        help="rounds of each workload, taken in turn over the workloads")
    parser.add_argument("--budget", type=float, default=6.0,
                        help="seconds of whole steps of each workload, over its rounds")
    parser.add_argument("--profile", help="a calibrated profile to use instead of probing "
                        "(`local`: the one `tensorledger probe` saved)")
    parser.add_argument("--save-profile", help="where to keep the profile probed here")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="probe only: the calibration's steps take many minutes on a busy "
                        "machine (the per-op cost is then the probe's)")
    parser.add_argument("--max-spread", type=float, default=0.10,
                        help="the probe's noise limit (as `tensorledger probe --max-spread`)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        try:
            chip = _profile(args.profile, folder, args.save_profile, not args.no_calibrate,
                            args.max_spread)
        except TensorLedgerError as error:  # a probe too noisy to use, a profile unreadable
            sys.exit(f"bench_decode: {error}")
        config = folder / "hf-llama" / "config.json"
        config.parent.mkdir()
        config.write_text(json.dumps(HF_LLAMA))
        timings = []
        for label, model, batch, context, held in WORKLOADS:
            source = str(config) if model == "hf-llama" else model
            work = resolve_workload(source, batch=batch, step="decode", context=context,
                                    precision="fp32", device="cpu")
            _say(f"preparing {label}")
            timings.append((label, work, StepTiming(work, chip), held))
        for index in range(args.rounds):
            _say(f"round {index + 1} of {args.rounds}")
            for _, _, timing, _ in timings:
                timing.round(args.budget / args.rounds, warmup=1)
        rows = []
        print(f"{torch.get_num_threads()} threads; fp32 decode steps; profile {chip.id} "
              f"({'calibrated' if chip.calibration is not None else 'not calibrated'})")
        print(f"{'workload':<56}{'predicted':>11}{'measured':>11}{'error':>8}"
              f"{'tokens/s meas.':>16}{'spread':>8}")
        for label, work, timing, held in timings:
            run = timing.report()
            c = run.comparison
            assert c is not None and run.serving is not None
            spread = max(part.spread for part in timing.parts)
            rows.append({"workload": label, "model": work.model, "batch": work.batch,
                         "context": work.context, "predicted_step_s": c.predicted_step_s,
                         "measured_step_s": c.measured_step_s, "error": c.error,
                         "predicted_tokens_per_s": work.batch / c.predicted_step_s,
                         "measured_tokens_per_s": work.batch / c.measured_step_s,
                         "bound": run.serving.bound, "max_round_spread": spread,
                         "warning": run.measurement_warning,
                         "held_to_target": held,
                         "pass": abs(c.error) <= TARGET if held else None})
            print(f"{label:<56}{c.predicted_step_s * 1e3:>9.2f}ms{c.measured_step_s * 1e3:>9.2f}"
                  f"ms{c.error:>+8.1%}{work.batch / c.measured_step_s:>16,.0f}{spread:>8.0%}"
                  + ("" if held else "  (not held to the target)"), flush=True)
        errors = [abs(float(str(row["error"]))) for row in rows if row["held_to_target"]]
        print(json.dumps({"benchmark": "decode_cpu", "profile": chip.id,
                          "calibrated": chip.calibration is not None, "rows": rows,
                          "median_abs_error": statistics.median(errors),
                          "max_abs_error": max(errors), "target_error": TARGET,
                          "pass": all(row["pass"] for row in rows if row["held_to_target"])}))


if __name__ == "__main__":
    main()
