"""Issue 11: every command, argument vectors generated from the CLI's own definitions.

The commands and their options are read from the click command the app builds
(``build_command()``: names, kinds, required or not, flags); values come from pools chosen by
the option's name or kind: numbers at and past every limit, empty, negative, NaN and
infinities, digits of other scripts, random unit suffixes, hostile files (FIFO, folder,
binary, deep nesting, wrong field types, /dev/zero) and output paths that cannot be written.
For each vector the CLI runs in-process and must either

- exit 0 with output on stdout (one JSON document with ``--json``), or
- exit 2 with exactly one line on stderr, nothing on stdout and no file left behind.

Hypothesis runs derandomized (the same cases in every run) without shrinking, so the time is
bounded; ``probe`` runs with a stand-in for the minutes of measuring (and calibrating, and the
torchrun of ``--collectives``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tensorledger.cli.main import build_command, main
from tests.cli.hostile import FACTORIES, make_hostile_files

# ------------------------------------------------------------------ the CLI's own definitions


@dataclass(frozen=True)
class Param:
    name: str
    opt: str | None  # the longest option string, or None for an argument
    kind: str  # "int", "float", "str", "path", "bool", "list"
    required: bool
    flag: bool


def _kind(param: Any) -> str:
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    name = getattr(annotation, "__name__", str(annotation))
    if getattr(param, "nargs", 1) == -1 or name == "list":
        return "list"
    return {"int": "int", "float": "float", "bool": "bool", "Path": "path"}.get(name, "str")


def _commands() -> dict[str, tuple[Param, ...]]:
    """Every leaf command by its path (``bench matmul``), with its parameters."""
    found: dict[str, tuple[Param, ...]] = {}
    stack: list[tuple[tuple[str, ...], Any]] = [((), build_command())]
    while stack:
        path, command = stack.pop()
        subcommands = getattr(command, "commands", None)
        if subcommands:
            stack.extend(((*path, name), sub) for name, sub in subcommands.items())
            continue
        params = []
        for param in command.params:
            opts = [o for o in param.opts if o.startswith("--")]
            params.append(Param(param.name, max(opts, key=len) if opts else None,
                                _kind(param), bool(param.required),
                                bool(getattr(param, "is_flag", False))))
        found[" ".join(path)] = tuple(params)
    return found


COMMANDS = _commands()
#: Commands of the model layer, guarded by the workload guard of issue 10 (the lead's).
MODEL_COMMANDS = ("models", "trace", "einsum", "memory", "roofline", "checkpoint")
OWN_COMMANDS = tuple(sorted(c for c in COMMANDS if c not in MODEL_COMMANDS))

# ---------------------------------------------------------------------------- value pools

INT64_MAX = 2**63 - 1
NUMBER_TEXTS = ["0", "1", "2", "7", "70", "1.5", ".5", "1e3", "1e-320", "1e308", "1e400",
                "-1", "-7", "nan", "inf", "-inf", "", " ", "٧٠", "７０", "१", "1_000", "0x10",
                "7" * 5000, str(INT64_MAX), str(INT64_MAX + 1), "1" + "0" * 400]
UNIT_SUFFIXES = ["", "K", "M", "B", "G", "T", "P", "k", "m", "b", "t", "Q", "FLOPs", "FLOP/s",
                 "TFLOPS", "GB", "GiB", "Gb", "s", "ms", "min", "h", "d", "w", "y", "µs", "days",
                 " B", "/s", "ｍ"]
INTS = ["0", "1", "2", "3", "-1", "-64", "63", "64", str(INT64_MAX), str(INT64_MAX + 1),
        str(-(2**63) - 1), "1" + "0" * 400, "7" * 5000, "1e3", "1.5", "", "nan", "٤", "４",
        " 4 ", "+3", "0x10", "1_0"]
FLOATS = ["0", "0.5", "1", "1.0", "-1", "-0.5", "1e-320", "1e308", "1e400", "nan", "inf",
          "-inf", "", "٣", "0,5", "7" * 5000, "1e-3", "+0.25"]


def _quantities() -> st.SearchStrategy[str]:
    return st.builds(lambda n, u: n + u, st.sampled_from(NUMBER_TEXTS),
                     st.sampled_from(UNIT_SUFFIXES))


@dataclass
class Place:
    """Where a case may write: an output folder, a file, and the hostile fixtures."""

    out: Path
    a_file: Path
    files: dict[str, str]


def _hardware(place: Place) -> list[str]:
    bad = ["fifo.toml", "folder.toml", "binary.toml", "deep.toml", "list_memory.toml",
           "table_memory.toml", "date_memory.toml", "inf_peak.toml", "nan_peak.toml",
           "huge_int_memory.toml", "name_list.toml", "sources_string.toml", "inf_curve.toml",
           "bool_curve.toml", "nested_low_precision.toml", "not_toml.toml", "missing.toml",
           "dev_zero", "chip.toml"]
    return ["h100", "a100", "H100", "b200", "local", "", "h1000", "٧", "x" * 5000,
            *(place.files[name] for name in bad)]


def _outputs(place: Place, suffix: str) -> list[str]:
    out = place.out
    return [str(out / f"p{suffix}"), str(out), str(place.a_file / f"p{suffix}"),
            str(out / "missing" / f"p{suffix}"), str(out / "p.txt"),
            str(out / ("n" * 300 + suffix)), ""]


def _value_pool(command: str, param: Param, place: Place) -> st.SearchStrategy[str]:
    """Values for one parameter, by its name first and its kind second."""
    name = param.name
    pools: dict[str, list[str] | st.SearchStrategy[str]] = {
        "hardware": _hardware(place),
        "name": (["fp4_e2m1", "e4m3", "bf16", "fp16", "nope", "", "٣"] if command == "formats"
                 else _hardware(place) if command == "hardware" else ["tiny", "gpt2", "nope"]),
        "shape": ["4x4", "1x1", "3x5x7", "0x4", "-4x4", "٤x٤", "4x", "x", "", "4x4x",
                  "x".join(["2"] * 65), "1" + "0" * 30 + "x4", "1" + "0" * 400, "16384x16385",
                  "4096x4096x4096x4096", "7" * 5000, "4×8", "4,8", " 4 x 8 "],
        "dtype": ["fp32", "bf16", "fp16", "fp8", "fp4", "int8", "", "fp33", "٣", "tf32"],
        "dtype_arg": ["fp32", "bf16", "fp4", "", "fp33"],
        "optimizer": ["adamw", "sgd", "adam8bit", "lion", "", "adan"],
        "optimizer_kernel": ["auto", "foreach", "fused", "for-loop", "", "apex", "FUSED"],
        "precision": ["mixed-bf16", "fp32", "lecture", "", "fp12", "fp8-tensorwise", "fp8-rowwise",
                      "FP8", "fp8-blockwise", "mxfp8"],
        # issue 39: the inference steps (decode with and without --context, from its pool)
        "step": ["train", "forward", "prefill", "decode", "decode", "", "DECODE", "nope"],
        "to": ["fp16", "bf16", "e4m3", "fp4", "e8m0", "fp64", "", "fp3"],
        "value": st.one_of(st.sampled_from(FLOATS), _quantities()),
        "schemes": ["nvfp4", "mxfp4,fp8", "bf16", "", ",", "bogus", "nvfp4," * 3],
        "dist": ["normal", "uniform", "laplace", "cauchy", ""],
        "tensor": ["x", "", "weight"],
        "input": [place.files[n] for n in ("fifo.toml", "folder.toml", "binary.toml",
                                            "dev_zero", "missing.toml", "binary.json")],
        "device": ["cpu", "cuda", "gpu", "meta", "", "cuda:99999999999999999999"],
        "plot": _outputs(place, ".png"),
        "output": _outputs(place, ".toml"),
        "duration": st.one_of(_quantities(), st.sampled_from(["1d", "2w", "36h", "3m", ""])),
        "days": st.sampled_from(FLOATS),
        "params": st.one_of(_quantities(), st.sampled_from(["70B", "7e9", "1e400"])),
        "tokens": st.one_of(_quantities(), st.sampled_from(["15T", "1e12"])),
        # a mixture of experts' active count (issue 38): at, below and past --params
        "active_params": st.one_of(_quantities(), st.sampled_from(["12.9B", "70B", "1e400"])),
        # fit's mixture of experts (issue 38): E and k, k at and past E
        "experts": ["1", "2", "8", "256", "0", "-1", "", "٣", str(INT64_MAX + 1)],
        "top_k": ["1", "2", "8", "9", "0", "-1", "", "٣", str(INT64_MAX + 1)],
        "flops": st.one_of(_quantities(), st.sampled_from(["3.14e23", "6e24FLOPs", "1e5FLOP/s"])),
        # checkpoint --verify traces the step six times: only the tiny model is traced there
        "model": [("tiny" if command == "checkpoint" else "llama-3-8b"), "gpt2-small", "",
                  "nope", place.files["deep.json"], place.files["fifo.json"],
                  place.files["dev_zero"],
                  *(["tiny", "gpt2", "llama-3-70b", place.files["config.json"],
                     place.files["wide.json"], place.files["huge_layers.json"]]
                    if command == "serve" else [])],
        "lora": ["8", "1", "0", "-1", "65537", "٣", "", str(INT64_MAX + 1)],
        "offload": ["activations", "params", "", "bogus", "ACTIVATIONS", "activations,", "٣",
                    "activations,params"],
        "lora_targets": ["q_proj,v_proj", "query,value", "nope", "", ",", "q proj", "٣",
                         "x" * 5000],
        # a mixture of experts' routing (issue 38): on these dense models any but balanced is
        # refused; hostile files as histograms; MOE_ROUTING_CASES below for an MoE model
        "routing": ["balanced", "skew=0.3", "skew=0", "skew=-1", "skew=nan", "skew=inf",
                    "skew=", "", "٣", place.files["fifo.json"], place.files["dev_zero"],
                    place.files["deep.json"], place.files["config.json"],
                    place.files["binary.json"], str(place.out / "missing.json")],
        "deep": ["4,3,8", "4,3,8,relu", "8,2,4,gelu", "0,3,8", "4,3", "4,3,8,tanh", "4,999,8",
                 "٤,3,8", "", "x" * 5000],
        "every": ["1", "2", "3", "4", "0", "-1", "٣", "", "nan", str(INT64_MAX + 1)],
        # valid sizes stay small so every case runs in milliseconds
        "n": ["1", "2", "16", "0", "-1", "1000000", "1048577", str(INT64_MAX + 1), "٤", "",
              "1" + "0" * 400],
        "budget": (["70GB", "80GB", "81GB", "1GB", "0", "-1GB", "nan", "1e400", "٣", "", "70"]
                   if command in ("plan", "accumulate", "memory", "account") else
                   ["900000", "1MB", "2MiB", "0", "-1", "nan", "1e400", "٣", "", "1e300"]
                   if command == "checkpoint" else
                   ["0", "0.001", "-1", "nan", "inf", "601", "1e400", "٣", ""]),
        "global_batch": ["4M", "512seq", "64 seqs", "1seq", "0seq", "1.5seq", "seq", "0", "-1",
                         "1e400", "nan", "٤M", "", "1M", "7" * 5000, "4294967297seq"],
        "checkpoint": ["none", "full", "selective", "", "FULL"],
        "attention": ["flash", "eager", "", "sdpa", "math", "efficient", "auto"],
        # probe's noise limit (a fraction of the median): at, inside and past its bounds
        "max_spread": ["0.1", "0.01", "100", "0.5", "0", "0.009", "101", "-0.1", "nan", "inf",
                       "1e400", "10%", "", "٣"],
        # serve (issue 39): cache and weight dtypes, chips that lack them, contexts that fit
        # no batch, utilisations and page sizes at and past their bounds
        "kv_dtype": ["bf16", "fp16", "fp8", "e5m2", "int8", "fp4", "bool", "e8m0", "fp64", "",
                     "fp33", "٣"],
        "weights_dtype": ["bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4", "fp16", "", "int3",
                          "٣"],
        "context": ["1", "16", "128", "8192", "131072", "1000000", str(2**31),
                    str(2**31 + 1), "0", "-1", "", "٤", "1e3", "7" * 5000],
        "memory_utilization": ["0.9", "0.5", "1", "0.01", "1e-300", "0", "-0.5", "1.01",
                               "nan", "inf", "", "٣"],
        "block_size": ["16", "1", "32", "8192", "1048576", "1048577", "0", "-16", "", "٤"],
        "tp": ["1", "2", "4", "8", "3", "0", "-1", str(INT64_MAX), str(INT64_MAX + 1), "", "٤"],
        # context parallelism (issue 37): the sequence must divide by 2·cp
        "cp": ["1", "2", "4", "3", "16", "0", "-1", "1048577", str(INT64_MAX), "", "٤"],
        "cp_rotate": ["allgather", "alltoall", "ALLTOALL", "ring", "", "٣"],
        # expert tensor parallelism (issue 38): 1 or the --tp degree, beside --ep and --tp
        "etp": ["1", "2", "4", "3", "0", "-1", "1048577", str(INT64_MAX), "", "٤"],
        # a valid --verify traces a model for seconds to minutes: tests/plan/test_verify.py
        "verify": ["0", "-1", "11", "", "٣", "nan"],
        # pipelines (issue 37): every torch schedule, chunks it does or does not take, stage
        # layers that add up, do not, or cannot be read
        "schedule": ["1f1b", "gpipe", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv",
                     "LoopedBFS", "dualpipev", "", "٣"],
        "chunks": ["1", "2", "3", "4", "0", "-1", "", "٣", str(INT64_MAX + 1)],
        "stage_layers": ["1,1", "1,2", "first-1,last-1", "first-0", "1,...,1", "7,8,...,8,7",
                         "...", "0,2", "first-1,first-2", "last-99", ",", "", "٣", "x" * 5000,
                         "1," * 3000],
    }
    if command == "plan":  # the dimensions plan fixes (issue 36): valid, contradictory, junk
        degrees = ["1", "2", "4", "8", "3", "16", "0", "-1", "1048577", "", "٤"]
        # expert parallelism (issue 38): on the dense fuzz models any but 1 is refused
        pools |= {"dp": degrees, "fsdp": degrees, "pp": degrees, "ep": degrees,
                  "zero": ["0", "1", "2", "3", "4", "-1", "", "٣"],
                  "microbatches": ["1", "2", "8", "3", "0", "-1", "4294967297", "", "٤"],
                  "schedule": ["1f1b", "interleaved", "interleaved-2", "interleaved-4",
                               "interleaved-3", "interleaved-1f1b", "gpipe", "", "1F1B",
                               "looped-bfs", "interleaved-zb", "zbv", "ZBV", "dualpipev",
                               "٣"]}
    pool = pools.get(name)
    if isinstance(pool, list):
        return st.sampled_from(pool)
    if pool is not None:
        return pool
    if param.kind == "int":
        return st.sampled_from(INTS)
    if param.kind == "float":
        return st.sampled_from(FLOATS)
    return st.one_of(st.sampled_from(["", "x", "٣", "-1", "nan", "x" * 5000]), _quantities())


#: Options whose defaults take seconds of measuring: always given, from their small pools.
ALWAYS_GIVEN = {("bench matmul", "n"), ("bench matmul", "budget")}


@st.composite
def argv_for(draw: st.DrawFn, command: str, place: Place) -> list[str]:
    argv = command.split()
    params = COMMANDS[command]
    positional = []
    for param in params:
        include = param.required or (command, param.name) in ALWAYS_GIVEN or draw(st.booleans())
        if not include:
            continue
        if param.flag:
            argv.append(param.opt or "")
            continue
        if param.kind == "list":
            values = draw(st.lists(st.sampled_from(["a=2", "b=3", "x=", "=4", "a=-1",
                                                    "a=" + "9" * 5000, "a=٤"]), max_size=3))
            positional.extend(values)
            continue
        value = draw(_value_pool(command, param, place))
        if param.opt is None:
            positional.append(value)
        elif value.startswith("-") and draw(st.booleans()):
            argv.append(f"{param.opt}={value}")
        else:
            argv += [param.opt, value]
    return argv + positional


# --------------------------------------------------------------------------- one case


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _fake_probe(*args: object, **kwargs: object) -> Any:
    from tensorledger.bench.probe import ProbeResult

    return ProbeResult(device="cpu", name="fuzz", memory_bytes=2**30,
                       dense_flop_per_s={"fp32": 1e11}, memory_bandwidth_bytes_per_s=1e10,
                       op_overhead_s=1e-6, bare_op_overhead_s=1e-6)


def _fake_collectives(ranks: int = 2, *args: object, **kwargs: object) -> Any:
    from tensorledger.bench.collectives import CollectiveProbe, LinkFit, collective_point
    from tensorledger.roofline.collectives import CollectiveKind

    points = tuple(collective_point(CollectiveKind.ALL_REDUCE, size, ranks, [time_s])
                   for size, time_s in ((4096, 1e-4), (2**20, 2e-3)))
    fit = LinkFit(latency_s=50e-6, bandwidth_bytes_per_s=1e9, ranks=ranks, points=2,
                  rms_relative_error=0.0)
    return CollectiveProbe(backend="gloo", device="cpu", ranks=ranks, link="intra-node",
                           points=points, fit=fit)


def _fake_calibrate(*args: object, **kwargs: object) -> Any:
    from tensorledger.hardware import Calibration

    # with the low-precision recipes' fit, so the profile written holds both tables
    return Calibration(scale={"matmul": 1.0}, op_cost_s=1e-6, between_ops_s={},
                       low_precision=Calibration(scale={"matmul-bf16": 1.0}, op_cost_s=2e-6,
                                                 between_ops_s={}))


def run_case(argv: list[str], place: Place) -> Outcome:
    before = _listing(place.out)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    outcome = Outcome(code, stdout.getvalue(), stderr.getvalue())
    shown = f"argv={[a if len(a) < 60 else a[:50] + '…' for a in argv]} -> {outcome}"
    assert code in (0, 2), shown
    assert "Traceback" not in outcome.stderr, shown
    if code == 0:
        assert outcome.stdout.strip(), shown
        if "--json" in argv:
            json.loads(outcome.stdout)
    else:
        assert outcome.stdout == "", shown
        lines = outcome.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tensorledger: error: "), shown
        assert _listing(place.out) == before, shown
    return outcome


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_hostile_files(tmp_path_factory.mktemp("hostile"))


@contextlib.contextmanager
def _place(files: dict[str, str]) -> Iterator[Place]:
    root = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        (root / "out").mkdir()
        (root / "a_file").write_text("x")
        yield Place(root / "out", root / "a_file", files)
    finally:
        shutil.rmtree(root)


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Probe and its collectives stand in for the measurement; the profile home is a fresh
    folder; one thread."""
    import torch

    import tensorledger.bench as bench
    import tensorledger.bench.collectives as collectives
    import tensorledger.ledger.calibrate as calibration

    monkeypatch.setattr(bench, "probe", _fake_probe)
    monkeypatch.setattr(bench, "probe_apart", _fake_probe)  # --calibrate's probe
    monkeypatch.setattr(collectives, "probe_collectives", _fake_collectives)
    monkeypatch.setattr(calibration, "calibrate", _fake_calibrate)
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "100")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


EXAMPLES_PER_COMMAND = 36
_SETTINGS = settings(max_examples=EXAMPLES_PER_COMMAND, deadline=None, derandomize=True,
                     database=None, phases=[Phase.explicit, Phase.generate],
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("command", OWN_COMMANDS)
def test_fuzz_every_command(command: str, hostile_files: dict[str, str], isolated: None
                            ) -> None:
    @_SETTINGS
    @given(data=st.data())
    def case(data: st.DataObject) -> None:
        with _place(hostile_files) as place:
            run_case(data.draw(argv_for(command, place)), place)

    case()


def test_fuzz_covers_every_command_and_enough_cases() -> None:
    # the command list comes from the app itself: a new command is fuzzed without a change here
    assert set(OWN_COMMANDS) | set(MODEL_COMMANDS) == set(COMMANDS)
    assert {"time", "budget", "fit", "tensor", "hardware", "formats", "cast", "quantize",
            "probe", "bench matmul", "zero", "plan", "serve"} <= set(OWN_COMMANDS)
    assert EXAMPLES_PER_COMMAND * len(OWN_COMMANDS) >= 300


def test_fuzz_hostile_fixture_set_is_complete(hostile_files: dict[str, str]) -> None:
    for name in ("fifo.toml", "folder.toml", "binary.toml", "deep.toml", "deep.json",
                 "list_memory.toml", "nested_low_precision.toml", "dev_zero", *FACTORIES):
        assert os.path.lexists(hostile_files[name]), name


#: Pipelines a command cannot run (issue 37): one line, exit 2, before anything is traced.
PIPELINE_REFUSALS = [
    # stage layers that do not add up to tiny's 2 blocks
    (["--pp", "2", "--microbatches", "2", "--stage-layers", "1,2"], "add up to 3 blocks"),
    (["--pp", "2", "--microbatches", "2", "--stage-layers", "first-1"],
     "do not split into 2 stages"),
    # a schedule that needs more micro-batches: 1F1B one a stage; interleaved rounds
    (["--pp", "2", "--microbatches", "1", "--batch", "4"], "1f1b needs a micro-batch per stage"),
    (["--pp", "2", "--microbatches", "5", "--batch", "5", "--schedule", "interleaved-zb"],
     "runs the micro-batches in 2 equal rounds"),
    (["--pp", "2", "--microbatches", "2", "--schedule", "zbv", "--chunks", "4"],
     "zbv runs exactly 2 stages per rank"),
]


@pytest.mark.parametrize("command", ["trace", "memory", "roofline", "account"])
@pytest.mark.parametrize(("argv", "fragment"), PIPELINE_REFUSALS)
def test_impossible_pipelines_are_one_line(command: str, argv: list[str], fragment: str,
                                           hostile_files: dict[str, str], isolated: None
                                           ) -> None:
    base = [command, "--model", "tiny", "--seq", "8",
            *([] if "--batch" in argv else ["--batch", "4"])]
    with _place(hostile_files) as place:
        outcome = run_case([*base, *argv], place)
    assert outcome.code == 2 and fragment in outcome.stderr, outcome


#: What plan cannot search (issue 37 item 5): one line, exit 2.
PLAN_REFUSALS = [
    (["--cp", "3", "--count", "6"], "CP 3 cuts each sequence into 6 chunks"),
    (["--pp", "2", "--stage-layers", "1,2"], "add up to 3 blocks"),
    (["--stage-layers", "1,1"], "--stage-layers cuts a pipeline: give --pp"),
    (["--schedule", "zbv", "--chunks", "4"], "zbv runs exactly 2 stages per rank"),
    (["--dp", "2", "--pp", "2", "--microbatches", "1", "--schedule", "1f1b"],
     "1f1b needs a micro-batch per stage"),
    # LoRA / QLoRA (issue 40): account's checks, and what the planner does not price yet
    (["--lora", "0"], "--lora must be between 1 and 65,536"),
    (["--qlora"], "give the adapters' rank with --lora R too"),
    (["--lora", "8", "--lora-targets", "q_proj"], "peft's q_proj is the reference model's"),
    (["--lora", "8", "--lora-targets", "q proj"], "--lora-targets takes module names"),
    (["--lora", "8", "--cp", "2"], "not priced with --lora"),
    (["--lora", "8", "--precision", "fp8-rowwise"], "use one of them"),
    (["--ep", "2"], "tiny has none: drop --ep"),  # a dense model has no experts to shard
    (["--ep", "0"], "--ep"),
    (["--model", "tiny-moe", "--ep", "4"], "EP 4 does not divide tiny-moe's 6 routed experts"),
    (["--model", "tiny-moe", "--ep", "2", "--sp"], "EP 2 beside SP"),
    (["--model", "tiny-moe", "--ep", "2", "--cp", "2"], "EP 2 beside CP 2"),
    (["--model", "tiny-moe", "--ep", "2", "--dp", "1"], "does not divide DP 1"),
]


@pytest.mark.parametrize(("argv", "fragment"), PLAN_REFUSALS)
def test_impossible_plans_are_one_line(argv: list[str], fragment: str,
                                       hostile_files: dict[str, str], isolated: None) -> None:
    base = ["plan", "--model", "tiny", "--seq", "8", "--global-batch", "8seq",
            *([] if "--count" in argv else ["--count", "4"])]
    with _place(hostile_files) as place:
        outcome = run_case([*base, *argv], place)
    assert outcome.code == 2 and fragment in outcome.stderr, outcome


# --------------------------------------------------- the model layer: the workload guard's

MODEL_EXAMPLES = 8


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_fuzz_model_commands(command: str, hostile_files: dict[str, str], isolated: None
                             ) -> None:
    factories = [f"{hostile_files[name]}:make" for name in FACTORIES]

    @settings(_SETTINGS, max_examples=MODEL_EXAMPLES)
    @given(data=st.data())
    def case(data: st.DataObject) -> None:
        with _place(hostile_files) as place:
            argv = data.draw(argv_for(command, place))
            if command != "einsum" and data.draw(st.booleans()):
                argv = _small_model(argv, data.draw(st.sampled_from(
                    ["tiny", *factories, hostile_files["config.json"],
                     hostile_files["huge_layers.json"], hostile_files["wide.json"],
                     hostile_files["model_type_list.json"], hostile_files["huge_int.json"],
                     hostile_files["nan.json"]])))
            run_case(argv, place)

    case()


def _small_model(argv: list[str], model: str) -> list[str]:
    """The case with ``--model`` replaced and tiny batch and sequence, so it runs fast."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--model", "-m", "--batch", "-b", "--seq", "-s", "--seq-len"):
            skip = True
            continue
        if arg.startswith(("--model=", "--batch=", "--seq=")):
            continue
        out.append(arg)
    if out and out[0] == "models":
        return [*out[:1], model, *out[1:]]
    return [*out, "--model", model, "--batch", "1", "--seq", "8"]


#: Cases of the model layer that broke the promise before the workload guard of issue 10
#: (found by the fuzz above and a sweep of every hostile model over every model command): kept
#: as regression cases.
MODEL_LAYER_HOSTILE_CASES = [
    *((command, model) for command in ("trace", "roofline") for model in (
        "exit_at_import.py:make",  # exit 0, nothing said
        "exit3_in_factory.py:make",  # exit 3
        "exit_in_forward.py:make",  # exit 0, nothing said
        "prints.py:make",  # the factory's print lands on stdout
        "interrupts.py:make",  # exit 130, nothing said
    )),
    ("trace", "no_parameters.py:make"),  # ValueError: optimizer got an empty parameter list
    ("memory", "exit_at_import.py:make"),
    # os._exit ended the process: exit 0, nothing said (issue 35)
    *((command, "os_exit_in_factory.py:make") for command in ("models", "trace", "memory")),
    ("trace", "os_exit_in_forward.py:make"),
    ("memory", "prints.py:make"),
    *((command, model) for command in ("models", "trace", "memory", "roofline") for model in (
        "deep.json",  # RecursionError
        "model_type_list.json",  # TypeError: unhashable type: 'list'
        "huge_int.json",  # ValueError: Exceeds the limit (4300 digits)
    )),
]


@pytest.mark.parametrize(("command", "model"), MODEL_LAYER_HOSTILE_CASES)
def test_model_layer_hostile_models(command: str, model: str, hostile_files: dict[str, str],
                                    isolated: None) -> None:
    name, _, factory = model.partition(":")
    target = hostile_files[name] + (f":{factory}" if factory else "")
    argv = ([command, target, "--json"] if command == "models" else
            [command, "--model", target, "--batch", "1", "--seq", "8", "--json"])
    with _place(hostile_files) as place:
        run_case(argv, place)


#: QLoRA (issue 40): --qlora without --lora, with a bad rank or targets, on models with no
#: linear NF4 can hold (HF GPT-2's Conv1D, the tiny preset's small weights, a factory), beside
#: a layout, and a step that runs (gpt2's linears hold whole NF4 blocks).
QLORA_CASES: list[list[str]] = [
    ["--qlora"], ["--qlora", "--lora", "0"], ["--qlora", "--lora-targets", "q_proj"],
    ["--qlora", "--lora", "8", "--lora-targets", "nope"],
    ["--qlora", "--lora", "8", "--lora-targets", "q proj"],
    ["--qlora", "--lora", "8", "--fsdp", "2"], ["--qlora", "--lora", "8", "--step", "forward"],
    ["--qlora", "--lora", "8", "--device", "meta"],
    ["--qlora", "--lora", "8", "--offload", "activations"],
    ["--offload", "activations", "--device", "meta"], ["--offload", "params"],
    ["--offload", "activations", "--step", "forward"], ["--offload", "activations"],
    # --offload params (FSDP2's CPUOffloadPolicy) and LoRA under layouts: what runs, and the
    # layouts, devices and recipes refused beside them
    ["--offload", "params", "--fsdp", "2"], ["--offload", "activations,params", "--fsdp", "2"],
    ["--offload", "params", "--dp", "2"], ["--offload", "params", "--tp", "2"],
    ["--offload", "params", "--pp", "2", "--microbatches", "2"],
    ["--offload", "params", "--device", "cpu"],
    ["--offload", "params", "--precision", "fp8-rowwise", "--fsdp", "2"],
    ["--lora", "8", "--fsdp", "2"], ["--lora", "8", "--dp", "2"], ["--lora", "8", "--tp", "2"],
    ["--lora", "8", "--fsdp", "2", "--zero", "1"],
    ["--lora", "8", "--fsdp", "2", "--offload", "params"],
]


@pytest.mark.parametrize("model", ["tiny", "gpt2", "config.json", "no_parameters.py:make"])
@pytest.mark.parametrize("options", QLORA_CASES, ids=" ".join)
def test_qlora_cases(model: str, options: list[str], hostile_files: dict[str, str],
                     isolated: None) -> None:
    pytest.importorskip("torchao")
    name, _, factory = model.partition(":")
    target = hostile_files[name] + f":{factory}" if factory else hostile_files.get(name, name)
    with _place(hostile_files) as place:
        run_case(["trace", "--model", target, "--batch", "1", "--seq", "8", *options], place)


# ------------------------------------------------ config.json fields (issue 35): the checker's

#: Values a size field is given: small valid ones (so a case that passes builds in a moment;
#: the bounds themselves are tests/workload/test_hf_checks.py's), zero, negative, past every
#: bound, not whole numbers, left out.
CONFIG_FIELD_VALUES: list[Any] = [1, 2, 3, 4, 8, 12, 97, 0, -1, -(2**63), 1025, (1 << 24) + 1,
                                  10**40, 1.5, True, None, "32", [4], "MISSING"]
#: ``num_labels`` also past its bound: transformers names every label, a million take minutes
CONFIG_LABELS: list[Any] = [1, 3, 0, -1, 1 << 17, (1 << 22) + 1, 10**40, 2.5, None, "MISSING"]
CONFIG_FIELDS = ("hidden_size", "n_embd", "num_hidden_layers", "n_layer",
                 "num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads",
                 "vocab_size", "intermediate_size", "n_inner", "ffn_hidden_size",
                 "max_position_embeddings", "n_positions", "head_dim", "pad_token_id",
                 "architectures", "num_labels")
CONFIG_EXAMPLES = 24


@st.composite
def hostile_config(draw: st.DrawFn) -> dict[str, Any]:
    """A tiny config of a supported model_type with one to three fields changed or removed."""
    from tests.workload.hf_configs import CHECKED

    raw = dict(CHECKED[draw(st.sampled_from(sorted(CHECKED)))])
    for key in draw(st.lists(st.sampled_from(CONFIG_FIELDS), min_size=1, max_size=3)):
        if key == "architectures":
            value: Any = draw(st.sampled_from([["XForCausalLM"], ["XForMaskedLM"],
                                               ["XForSequenceClassification"], ["XModel"],
                                               "XForCausalLM", [], None]))
        else:
            value = draw(st.sampled_from(CONFIG_LABELS if key == "num_labels"
                                         else CONFIG_FIELD_VALUES))
        if value == "MISSING":
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def test_fuzz_config_fields(hostile_files: dict[str, str], isolated: None) -> None:
    @settings(_SETTINGS, max_examples=CONFIG_EXAMPLES)
    @given(raw=hostile_config(), command=st.sampled_from(["models", "trace"]),
           seq=st.sampled_from(["8", "64", "65"]))
    def case(raw: dict[str, Any], command: str, seq: str) -> None:
        with _place(hostile_files) as place:
            path = place.out.parent / "config.json"
            path.write_text(json.dumps(raw))
            argv = ([command, str(path), "--json"] if command == "models" else
                    [command, "--model", str(path), "--batch", "1", "--seq", seq,
                     "--precision", "fp32", "--json"])
            run_case(argv, place)

    case()


# ------------------------------------------ a mixture of experts' routing (issue 38): refusals

#: A tiny Mixtral (4 experts, top-2) and routings it cannot run at batch 2 × seq 4 (8 tokens,
#: 16 token-slots): each is one line and exit 2, before anything is built.
MOE_CONFIG = {"model_type": "mixtral", "vocab_size": 97, "hidden_size": 40,
              "intermediate_size": 24, "num_hidden_layers": 1, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 12, "num_local_experts": 4,
              "num_experts_per_tok": 2, "max_position_embeddings": 64}
MOE_ROUTING_CASES = {
    "sum": [4, 4, 4, 2],  # 14 slots, not 16
    "experts": [4, 4, 4, 2, 2],  # 5 experts, the model has 4
    "busy": [9, 3, 2, 2],  # 9 slots for one expert: more than the 8 tokens
    "negative": [8, 8, -1, 1],
    "floats": [4.0, 4, 4, 4],
    "table": {"0": 16},
    "empty": [],
    "zeros": [0, 0, 0, 0],
}


@pytest.mark.parametrize("case", [*MOE_ROUTING_CASES, "skew=2", "skew=-0.1", "skew=x"])
@pytest.mark.parametrize("command", ["trace", "memory", "roofline", "account"])
def test_moe_routing_refusals_are_one_line(case: str, command: str, tmp_path: Path,
                                           hostile_files: dict[str, str], isolated: None
                                           ) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MOE_CONFIG))
    routing = case
    if case in MOE_ROUTING_CASES:
        routing = str(tmp_path / f"{case}.json")
        Path(routing).write_text(json.dumps(MOE_ROUTING_CASES[case]))
    with _place(hostile_files) as place:
        outcome = run_case([command, "--model", str(config), "--batch", "2", "--seq", "4",
                            "--routing", routing], place)
    assert outcome.code == 2
    assert "routing" in outcome.stderr


#: The reference mixture of experts (issue 38): its routing, layouts and active counts through
#: the commands; each case exits 0 with output or 2 with one line (run_case's promise).
REFERENCE_MOE_CASES = [
    ["trace", "--model", "tiny-moe", "--batch", "2", "--seq", "4", "--routing", "skew=2"],
    ["memory", "--model", "tiny-moe", "--batch", "2", "--seq", "4", "--routing", "skew=2.5"],
    ["roofline", "--model", "tiny-moe", "--batch", "2", "--seq", "4", "--tp", "2"],
    ["memory", "--model", "tiny-moe", "--batch", "4", "--seq", "4", "--pp", "2",
     "--microbatches", "2"],
    ["trace", "--model", "tiny-moe", "--step", "decode", "--context", "4"],
    # expert parallelism of the reference experts, beside tensor and pipeline parallelism
    ["trace", "--model", "tiny-moe", "--batch", "2", "--seq", "4", "--ep", "2", "--tp", "2"],
    ["memory", "--model", "tiny-moe", "--batch", "2", "--seq", "4", "--ep", "2", "--tp", "2",
     "--etp", "2"],
    ["memory", "--model", "tiny-moe", "--batch", "4", "--seq", "4", "--ep", "3", "--pp", "2",
     "--fsdp", "2", "--microbatches", "2", "--routing", "skew=1"],
    ["fit", "--experts", "8", "--top-k", "9"],
    ["fit", "--experts", "8", "--top-k", "2", "--batch", "1", "--seq", "4096"],
    ["zero", "--model", "tiny-moe", "--active-params", "1K"],
    ["time", "--model", "tiny-moe", "--tokens", "1B", "--active-params", "1e400"],
]


@pytest.mark.parametrize("argv", REFERENCE_MOE_CASES, ids=lambda argv: " ".join(argv))
def test_reference_moe_options(argv: list[str], hostile_files: dict[str, str], isolated: None
                               ) -> None:
    with _place(hostile_files) as place:
        run_case(argv, place)


# ------------------------------------------- prefill and decode (issue 39): the cache's options

#: --context and the inference steps, valid and not, through the workload commands: each case
#: exits 0 with output or 2 with one line (run_case's promise).
DECODE_CASES = [
    ["trace", "--model", "tiny", "--step", "decode", "--context", "8"],
    ["memory", "--model", "tiny", "--step", "prefill", "--seq", "8", "--json"],
    ["roofline", "--model", "tiny", "--step", "decode", "--context", "1"],
    ["account", "--model", "tiny", "--step", "decode", "--context", "16", "--batch", "3"],
    ["trace", "--model", "tiny", "--step", "forward", "--context", "8"],  # not decode
    ["memory", "--model", "tiny", "--step", "prefill", "--context", "8"],
    ["roofline", "--model", "tiny", "--step", "decode", "--context", "0"],
    ["account", "--model", "tiny", "--step", "decode", "--context", "-1"],
    ["trace", "--model", "tiny", "--step", "decode", "--context", str(2**24 + 1)],
    ["trace", "--model", "tiny", "--step", "decode", "--context", "٤"],
    ["memory", "--model", "tiny", "--step", "decode"],  # no context
    ["memory", "--model", "gpt2", "--step", "decode", "--context", "1024"],  # 1,025 positions
    ["trace", "--model", "tiny", "--step", "decode", "--context", "8", "--lora", "4"],
    ["trace", "--model", "tiny", "--step", "decode", "--context", "8", "--tp", "2"],
]


@pytest.mark.parametrize("argv", DECODE_CASES, ids=lambda argv: " ".join(argv[:1] + argv[3:]))
def test_decode_options(argv: list[str], hostile_files: dict[str, str], isolated: None
                        ) -> None:
    with _place(hostile_files) as place:
        run_case(argv, place)


def test_decode_of_a_model_without_a_cache_path(hostile_files: dict[str, str],
                                                isolated: None) -> None:
    """A factory's module has no cache path: one line, exit 2 (never a traceback)."""
    factory = Path(hostile_files["prints.py"]).parent / "plain_net.py"
    factory.write_text("import torch\n\ndef make():\n    return torch.nn.Linear(4, 4)\n")
    with _place(hostile_files) as place:
        outcome = run_case(["trace", "--model", f"{factory}:make", "--step", "decode",
                            "--context", "8"], place)
    assert outcome.code == 2 and "cache" in outcome.stderr


#: Impossible context-parallel layouts (issue 37): one line on stderr, exit 2, nothing built.
IMPOSSIBLE_CP = [
    ["trace", "--model", "tiny", "--seq", "12", "--cp", "4"],  # 12 does not divide by 2·4
    ["memory", "--model", "tiny", "--seq", "8", "--cp", "8"],  # more chunks than tokens
    ["roofline", "--model", "tiny", "--seq", "16", "--cp", "2", "--fsdp", "2", "--zero", "1"],
    ["account", "--model", "tiny", "--seq", "16", "--cp", "0"],
    # beside a pipeline: each stage's ranks cut the same sequence (20 is not 2·3 chunks), the
    # batch must split into micro-batches, and the ring's kernel checks reach the command
    ["trace", "--model", "tiny", "--seq", "20", "--cp", "3", "--pp", "2", "--batch", "2",
     "--microbatches", "2"],
    ["memory", "--model", "tiny", "--seq", "16", "--cp", "2", "--pp", "2", "--batch", "3",
     "--microbatches", "2"],
    ["roofline", "--model", "tiny", "--seq", "16", "--cp", "2", "--pp", "2", "--batch", "2",
     "--microbatches", "2", "--precision", "fp32"],
    ["account", "--model", "tiny", "--seq", "16", "--cp", "2", "--pp", "2", "--batch", "2",
     "--microbatches", "2", "--zero", "1"],
    ["trace", "--model", "tiny", "--seq", "16", "--cp-rotate", "alltoall"],  # no --cp
    ["trace", "--model", "tiny", "--seq", "16", "--cp", "2", "--cp-rotate", "ring"],
    # an H100's fp32 kernel (memory-efficient) pads its log-sum-exp to 32 rows: chunks of 16
    # tokens cannot be merged by torch's ring
    ["trace", "--model", "tiny", "--seq", "64", "--cp", "2", "--precision", "fp32"],
]


@pytest.mark.parametrize("argv", IMPOSSIBLE_CP)
def test_impossible_context_parallel_layouts(argv: list[str], hostile_files: dict[str, str],
                                             isolated: None) -> None:
    with _place(hostile_files) as place:
        outcome = run_case(argv, place)
    assert outcome.code == 2 and len(outcome.stderr.strip().splitlines()) == 1, outcome
    assert any(option in outcome.stderr
               for option in ("--cp", "--zero", "--seq", "--batch")), outcome


# -------------------------------------------- expert parallelism (issue 38, item 5): refusals

#: --ep on the tiny Mixtral of MOE_CONFIG (4 experts) and beside what it is not laid out with:
#: one line on stderr naming --ep, exit 2, nothing built.
IMPOSSIBLE_EP = [
    ["--ep", "3"],  # does not divide 4 experts
    ["--ep", "8"],  # more ranks than experts
    ["--ep", "0"],
    ["--ep", "-2"],
    ["--ep", "2", "--tp", "2"],  # a config.json's experts have no plan beside --tp
    ["--ep", "2", "--tp", "2", "--sp"],
    ["--ep", "2", "--dp", "2"],
    ["--ep", "2", "--fsdp", "2", "--zero", "1"],
    ["--ep", "2", "--pp", "2", "--microbatches", "2"],  # no --fsdp for the stages' others
]

#: --ep on the reference tiny-moe (6 experts) beside pipeline stages: one line naming --ep.
IMPOSSIBLE_EP_STAGES = [
    ["--ep", "4", "--pp", "2", "--fsdp", "2", "--microbatches", "2"],  # 4 does not divide 6
    ["--ep", "2", "--pp", "2", "--microbatches", "2"],
    ["--ep", "2", "--pp", "2", "--dp", "2", "--microbatches", "2"],
    ["--ep", "2", "--tp", "2", "--sp"],
    ["--ep", "2", "--tp", "2", "--fsdp", "2", "--zero", "1"],
]


@pytest.mark.parametrize("extra", IMPOSSIBLE_EP_STAGES, ids=" ".join)
def test_impossible_expert_parallel_stages(extra: list[str], hostile_files: dict[str, str],
                                           isolated: None) -> None:
    with _place(hostile_files) as place:
        outcome = run_case(["trace", "--model", "tiny-moe", "--batch", "2", "--seq", "4",
                            *extra], place)
    assert outcome.code == 2 and len(outcome.stderr.strip().splitlines()) == 1, outcome
    assert "--ep" in outcome.stderr, outcome


#: --etp (issue 38, expert tensor parallelism) on the reference tiny-moe: 1 or the --tp degree,
#: beside --ep and --tp; one line naming --etp, exit 2, nothing built.
IMPOSSIBLE_ETP = [
    ["--etp", "2"],  # neither --ep nor --tp
    ["--etp", "2", "--ep", "2"],  # no --tp
    ["--etp", "2", "--tp", "2"],  # no --ep
    ["--etp", "4", "--ep", "2", "--tp", "2"],  # not the --tp degree
    ["--etp", "2", "--ep", "2", "--tp", "4"],
    ["--etp", "0", "--ep", "2", "--tp", "2"],
    ["--etp", "-2", "--ep", "2", "--tp", "2"],
    ["--etp", str(2**63), "--ep", "2", "--tp", "2"],
]


@pytest.mark.parametrize("extra", IMPOSSIBLE_ETP, ids=" ".join)
def test_impossible_expert_tensor_parallel_layouts(extra: list[str],
                                                   hostile_files: dict[str, str],
                                                   isolated: None) -> None:
    with _place(hostile_files) as place:
        outcome = run_case(["trace", "--model", "tiny-moe", "--batch", "2", "--seq", "4",
                            *extra], place)
    assert outcome.code == 2 and len(outcome.stderr.strip().splitlines()) == 1, outcome
    assert "--etp" in outcome.stderr, outcome


@pytest.mark.parametrize("extra", IMPOSSIBLE_EP, ids=" ".join)
@pytest.mark.parametrize("command", ["trace", "memory"])
def test_impossible_expert_parallel_layouts(extra: list[str], command: str, tmp_path: Path,
                                            hostile_files: dict[str, str], isolated: None
                                            ) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MOE_CONFIG))
    with _place(hostile_files) as place:
        outcome = run_case([command, "--model", str(config), "--batch", "2", "--seq", "4",
                            *extra], place)
    assert outcome.code == 2 and len(outcome.stderr.strip().splitlines()) == 1, outcome
    assert "--ep" in outcome.stderr, outcome


def test_expert_parallel_on_a_dense_model_is_one_line(hostile_files: dict[str, str],
                                                      isolated: None) -> None:
    with _place(hostile_files) as place:
        outcome = run_case(["trace", "--model", "tiny", "--ep", "2"], place)
    assert outcome.code == 2 and "--ep 2" in outcome.stderr and "experts" in outcome.stderr
