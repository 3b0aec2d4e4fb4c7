"""Predicted against measured training steps on this CPU: the calibrated local profile.

Probes this machine into a temporary profile — or reads ``--profile FILE`` — then, ``--runs``
times, predicts and measures a whole AdamW training step of five workloads the calibration
never ran, each in every precision recipe of ``--recipes`` (fp32, mixed-bf16 and bf16 by
default; the calibration fits the same recipes' steps), reported side by side: the tiny
preset at two sizes, a GPT-2-shaped reference model at two sizes, and a user's factory
(examples/own_model.py).  Targets: the whole step within 10%, every category above 5% of the
measured step within 25%, in every recipe.  The runs go round the workloads in turn; each
workload's measured steps across its runs are set beside the spread the target allows one
prediction (the slowest at most 11/9 of the fastest), so a machine whose speed wanders says so;
a step the calibration ran (``CALIBRATION_MODELS[0]``), timed in the same rounds, shows how far
the machine's speed moved since the calibration.  Within a run, each workload is timed in
``--rounds`` rounds taken in turn over the five (and that step; ``ledger.roofline.StepTiming``),
so a spell when the machine runs faster or slower falls on every workload alike, and each
workload's figure is the median over the whole run rather than over a few seconds of it; each
round profiles ``--profiled`` steps of each, and the time between ops is the round's step times
their median share outside their calls (``roofline.compare``).  Without a calibrated
``--profile``, each run also fits its own calibration
(``ledger.calibrate.CalibrationRounds``: the calibration models, never the workloads) on steps
timed in the same rounds, so the calibration and the steps it is judged on see the same machine,
and on the probe's fp32 matmul sweep timed again in those rounds (``sweep=True``), not the
probe's own, taken minutes before; ``--calibrate-once`` calibrates once after the probe
instead, as ``tensorledger probe`` does.
Each category's measured figure and the time between ops carry their 95% interval
(``roofline.compare.median_interval``): a miss whose prediction lies inside it is marked ``*``,
one the measurement cannot tell from right, and the time between ops measured across runs is set
beside the spread its target allows.  Prints a table, then one JSON line.  Run it on a quiet
machine: the error of a busy one is the machine's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from tensorledger.bench import probe_apart, profile_toml
from tensorledger.hardware import Hardware, load_hardware_file
from tensorledger.hardware.catalog import parse_hardware_toml
from tensorledger.ledger.calibrate import (
    CALIBRATION_MODELS,
    CalibrationRounds,
    calibrate,
    calibration_toml,
)
from tensorledger.ledger.roofline import StepTiming
from tensorledger.models import get_preset
from tensorledger.roofline.compare import MEDIAN_COVERAGE
from tensorledger.workload import ModelSource, resolve_source, resolve_workload

ROOT = Path(__file__).resolve().parent.parent
STEP_TARGET, CATEGORY_TARGET, CATEGORY_SHARE = 0.10, 0.25, 0.05
# One prediction is within the target of every run only if the slowest run is at most
# (1 + target) / (1 − target) of the fastest: beyond that the machine, not the model, decides.
ALLOWED_SPREAD = (1 + STEP_TARGET) / (1 - STEP_TARGET) - 1
ALLOWED_CATEGORY_SPREAD = (1 + CATEGORY_TARGET) / (1 - CATEGORY_TARGET) - 1


def _gpt2_shaped(name: str, d_model: int, layers: int, heads: int, vocab: int,
                 context: int) -> ModelSource:
    config = dataclasses.replace(get_preset("gpt2"), name=name, d_model=d_model,
                                 n_layers=layers, n_heads=heads, n_kv_heads=heads, head_dim=0,
                                 d_ff=0, vocab_size=vocab, context_length=context)
    return ModelSource(label=name, kind="preset", builder="reference", name=name, config=config)


WORKLOADS = (  # (label, source, batch, seq)
    ("tiny, batch 4 × 32", resolve_source("tiny"), 4, 32),
    ("tiny, batch 16 × 32", resolve_source("tiny"), 16, 32),
    ("gpt2-shaped d128 L2, batch 4 × 128", _gpt2_shaped("gpt2-d128", 128, 2, 4, 2048, 128), 4,
     128),
    ("gpt2-shaped d256 L4, batch 4 × 256", _gpt2_shaped("gpt2-d256", 256, 4, 8, 4096, 256), 4,
     256),
    ("own_model.py (held aside), batch 4 × 64",
     resolve_source(f"{ROOT / 'examples' / 'own_model.py'}:make_model"), 4, 64),
)


# A step the calibration itself ran and fitted, timed in every run beside the workloads: its
# error is mostly how far the machine's speed moved since the calibration (not judged).
_REFERENCE_CONFIG, _REFERENCE_BATCH, _REFERENCE_SEQ = CALIBRATION_MODELS[0]
REFERENCE = (f"{_REFERENCE_CONFIG.name} (calibrated on)",
             ModelSource(label=_REFERENCE_CONFIG.name, kind="preset", builder="reference",
                         name=_REFERENCE_CONFIG.name, config=_REFERENCE_CONFIG),
             _REFERENCE_BATCH, _REFERENCE_SEQ)


def _inside(value: float, interval: tuple[float, float] | None) -> bool:
    return interval is not None and interval[0] <= value <= interval[1]


def _across_runs(what: str, target: float, allowed: float, by_label: dict[str, list[float]],
                 show_ms: bool) -> dict[str, float | None]:
    """Each workload's figure across its runs, slowest / fastest − 1 (None where a run measured
    it at or below 0), printed beside the spread within which one prediction could be within
    ``target`` of every run; with ``show_ms``, the figures too."""
    print(f"\n{what} across runs (one prediction within {target:.0%} of every run needs "
          f"slowest / fastest − 1 ≤ {allowed:.1%}):")
    spreads: dict[str, float | None] = {}
    for label, values in by_label.items():
        low, high = min(values), max(values)
        wide = spreads[label] = high / low - 1 if low > 0 else None
        verdict = ("the machine's noise alone exceeds the target"
                   if wide is None or wide > allowed else "")
        shown = f"{', '.join(f'{v * 1e3:.2f}' for v in values):>24} ms  " if show_ms else ""
        spread = "a run ≤ 0" if wide is None else f"{wide:.1%}"
        print(f"  {label:<56}{shown}{spread:>7}  {verdict}")
    return spreads


RECIPES = ("fp32", "mixed-bf16", "bf16")


def _labelled(label: str, recipe: str) -> str:
    return f"{label} [{recipe}]"


def _side_by_side(rows: list[dict[str, object]], recipes: tuple[str, ...]
                  ) -> dict[str, dict[str, float]]:
    """Print each workload's step error in each recipe side by side (the median over the
    runs, and the runs that passed), and return each recipe's median |error| and pass rate."""
    print("\nstep error by recipe, the median over the runs (runs passed / runs):")
    print(f"  {'workload':<42}" + "".join(f"{r:>20}" for r in recipes))
    for label, *_ in WORKLOADS:
        cells = []
        for recipe in recipes:
            mine = [r for r in rows if r["workload"] == _labelled(label, recipe)]
            errors = [float(r["error"]) for r in mine]  # type: ignore[arg-type]
            passed = sum(bool(r["pass"]) for r in mine)
            cells.append(f"{statistics.median(errors):+.1%} ({passed}/{len(mine)})"
                         if mine else "-")
        print(f"  {label:<42}" + "".join(f"{c:>20}" for c in cells))
    summary: dict[str, dict[str, float]] = {}
    for recipe in recipes:
        mine = [r for r in rows if r["recipe"] == recipe]
        if mine:
            summary[recipe] = {
                "median_abs_step_error": statistics.median(
                    abs(float(r["error"])) for r in mine),  # type: ignore[arg-type]
                "pass_rate": sum(bool(r["pass"]) for r in mine) / len(mine)}
    return summary


def _say(step: str) -> None:
    print(f"  {step}", file=sys.stderr, flush=True)


def _profile(path: str | None, once: bool, recipes: tuple[str, ...]) -> Hardware:
    """The chip the runs predict on: ``path``'s profile, else this machine probed, and with
    ``once`` calibrated right after (as ``tensorledger probe`` does); else uncalibrated: each
    run then fits its own calibration in its rounds."""
    if path:
        return load_hardware_file(path)
    # every dtype the recipes run, in a process of its own: the steps timed here then run
    # their attention as a fresh process does (bench.probe_apart)
    result = probe_apart(device="cpu", progress=_say)
    text = profile_toml(result)
    if once:
        fitted = calibrate(parse_hardware_toml(text, "probe", "local"), progress=_say,
                           recipes=recipes)
        text = profile_toml(result, calibration=calibration_toml(fitted))
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "local.toml"
        target.write_text(text)
        print(f"profile:\n{text}", file=sys.stderr)
        return load_hardware_file(target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=12,
                        help="rounds of each workload in a run, taken in turn over the five")
    parser.add_argument("--budget", type=float, default=6.0,
                        help="seconds of whole steps of each workload in a run, over its rounds")
    parser.add_argument("--profiled", type=int, default=3,
                        help="steps of each workload (and calibration model) a round profiles "
                        "call by call: the time between ops is each round's whole step less "
                        "their median, so one slow profiled step moves it less")
    parser.add_argument("--profile", help="a calibrated profile to use instead of probing")
    parser.add_argument("--recipes", default=",".join(RECIPES),
                        help="precision recipes each workload runs in, comma-separated "
                        f"(default {','.join(RECIPES)})")
    parser.add_argument("--calibrate-once", action="store_true",
                        help="calibrate once after the probe, as `tensorledger probe` does, "
                        "rather than in each run's rounds")
    args = parser.parse_args()
    recipes = tuple(r.strip() for r in args.recipes.split(",") if r.strip())
    if not recipes:
        parser.error("--recipes names one recipe at least, such as fp32,mixed-bf16")
    chip = _profile(args.profile, args.calibrate_once, recipes)
    # without a calibrated profile, each run fits its calibration on the calibration models'
    # steps timed in the same rounds as the workloads: a spell when the machine runs slower
    # falls on both alike
    in_rounds = chip.calibration is None
    rows: list[dict[str, object]] = []
    errors: list[float] = []
    # the runs follow one another, minutes apart; within a run the rounds go round the
    # workloads, each in every recipe, in turn
    works = [(_labelled(label, recipe), recipe,
              resolve_workload(source, batch=batch, seq=seq, precision=recipe, device="cpu"))
             for label, source, batch, seq in WORKLOADS for recipe in recipes]
    recipe_of = {label: recipe for label, recipe, _ in works}
    measured_by: dict[str, list[float]] = {label: [] for label, *_ in works}
    between_by: dict[str, list[float]] = {label: [] for label, *_ in works}
    how = ("in each run, on the calibration models timed in the same rounds" if in_rounds else
           "once, before the runs")
    print(f"{torch.get_num_threads()} threads; train steps (AdamW) in {', '.join(recipes)}; "
          f"chip {chip.id}, "
          f"calibrated {how}; {len(chip.unreliable)} figures of the probe unreliable")
    print(f"{'workload':<56}{'run':>4}{'predicted':>12}{'measured':>12}{'error':>9}  "
          "categories above 5% (error)")
    _, source, batch, seq = REFERENCE
    reference = resolve_workload(source, batch=batch, seq=seq, precision="fp32", device="cpu")
    drift: list[float] = []
    for run_index in range(args.runs):
        timings = [(label, StepTiming(work, chip, profiled=args.profiled))
                   for label, _, work in works]
        steady = StepTiming(reference, chip, profiled=args.profiled)
        # the calibration times the probe's matmul sweep in the same rounds, and fits on it
        session = (CalibrationRounds(chip, progress=_say, profiled=args.profiled, sweep=True,
                                     recipes=recipes) if in_rounds else None)
        for round_index in range(args.rounds):
            print(f"  run {run_index}, round {round_index + 1} of {args.rounds}",
                  file=sys.stderr, flush=True)
            if session is not None:
                session.round(args.budget / args.rounds, f"{round_index + 1} of {args.rounds}")
            for timing in (*(t for _, t in timings), steady):
                # another workload ran just before: one step untimed warms its caches again
                timing.round(args.budget / args.rounds, warmup=1)
        if session is not None:
            calibration = session.fitted()
            print(f"run {run_index}:\n{calibration_toml(calibration)}\nmatmul.fp32 re-timed: "
                  f"{session.hardware.curves.get('matmul.fp32')}", file=sys.stderr)
            fitted = dataclasses.replace(session.hardware, calibration=calibration)
            for timing in (*(t for _, t in timings), steady):
                timing.reprice(fitted)
        drift.append(steady.compared()[0].error)
        for label, timing in timings:
            run = timing.report()
            c = run.comparison
            assert c is not None
            big = {x.category: x.error for x in c.categories
                   if x.measured_s >= CATEGORY_SHARE * c.measured_step_s}
            # a prediction inside the measured median's 95% interval: the measurement cannot
            # tell it from right
            inside = {x.category: _inside(x.predicted_s, x.measured_interval_s)
                      for x in c.categories if x.category in big}
            if c.unattributed_s >= CATEGORY_SHARE * c.measured_step_s:
                big["(between ops)"] = c.between_error
                inside["(between ops)"] = _inside(c.predicted_between_s, c.residual_interval_s)
            errors.append(abs(c.error))
            measured_by[label].append(c.measured_step_s)
            between_by[label].append(c.residual_s)
            rows.append({"workload": label, "recipe": recipe_of[label], "run": run_index,
                         "error": c.error,
                         "predicted_step_s": c.predicted_step_s,
                         "measured_step_s": c.measured_step_s, "categories": big,
                         "prediction_inside_measured_interval": inside,
                         "pass": abs(c.error) <= STEP_TARGET and all(
                             abs(e) <= CATEGORY_TARGET for e in big.values())})
            shown = ", ".join(
                f"{k} {v:+.0%}{'*' if inside[k] and abs(v) > CATEGORY_TARGET else ''}"
                for k, v in big.items())
            print(f"{label:<56}{run_index:>4}{c.predicted_step_s * 1e3:>10.1f}ms"
                  f"{c.measured_step_s * 1e3:>10.1f}ms{c.error:>+9.1%}  {shown}", flush=True)
    print(f"(* a miss whose prediction lies inside the measured median's "
          f"{MEDIAN_COVERAGE:.0%} interval)")
    print(f"\n{REFERENCE[0]}, {REFERENCE[2]} × {REFERENCE[3]}, timed in the same rounds: error "
          + ", ".join(f"{e:+.1%}" for e in drift) + " by run (a step the calibration fitted: "
          "mostly how far the machine's speed moved since it)")
    by_recipe = _side_by_side(rows, recipes)
    noise = _across_runs("measured step", STEP_TARGET, ALLOWED_SPREAD, measured_by, False)
    between_noise = _across_runs("time between ops measured", CATEGORY_TARGET,
                                 ALLOWED_CATEGORY_SPREAD, between_by, True)
    print(json.dumps({"benchmark": "roofline_cpu_calibrated", "runs": rows,
                      "recipes": list(recipes), "by_recipe": by_recipe,
                      "median_abs_step_error": statistics.median(errors),
                      "max_abs_step_error": max(errors),
                      "measured_spread_across_runs": noise,
                      "allowed_spread_across_runs": ALLOWED_SPREAD,
                      "between_ops_spread_across_runs": between_noise,
                      "allowed_between_ops_spread_across_runs": ALLOWED_CATEGORY_SPREAD,
                      "calibrated": how,
                      "calibrated_step_error_by_run": drift,
                      "unreliable_profile_figures": list(chip.unreliable),
                      "target_step_error": STEP_TARGET, "target_category_error": CATEGORY_TARGET,
                      "pass": all(r["pass"] for r in rows)}))


if __name__ == "__main__":
    main()
