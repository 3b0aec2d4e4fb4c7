"""Napkin commands: time, budget, fit, tensor, zero.  No torch is imported on these paths."""

from __future__ import annotations

from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit, integer_parser, real_parser
from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin import (
    PRESETS,
    ModelParams,
    bytes_per_param,
    devices_for_duration,
    devices_needed,
    flop_budget,
    largest_model,
    largest_model_with_activations,
    preset_params,
    tensor_memory,
    training_time,
    zero_summary,
)
from tensorledger.napkin.arithmetic import MAX_COUNT
from tensorledger.report.models import model_params_note
from tensorledger.report.napkin import (
    budget_view,
    devices_for_duration_view,
    devices_needed_view,
    largest_model_view,
    largest_model_with_activations_view,
    tensor_view,
    training_time_view,
    zero_view,
)
from tensorledger.units import (
    format_count,
    parse_count,
    parse_duration,
    parse_flops,
    parse_real,
    parse_shape,
)

__all__ = ["MAX_DAYS", "register"]

#: The longest --days asked about: a million days, some 2,700 years.
MAX_DAYS = 1e6

HardwareOpt = Annotated[str, typer.Option("--hardware", "-H", help=(
    "Catalog chip (h100, a100, ...), 'local' (the probed profile) or a TOML file: a value with "
    "a '/' or ending in .toml is a file, anything else a chip."))]
CountOpt = Annotated[int, typer.Option("--count", "-n", parser=integer_parser(1, MAX_COUNT),
                                        help="Number of devices, 1 to 2^63 - 1.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="Arithmetic whose dense peak is used.")]
JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
OptimizerOpt = Annotated[str, typer.Option("--optimizer", "-o", help=(
    "sgd, momentum, adagrad, rmsprop, adam, adamw, lion or adam8bit."))]
PrecisionOpt = Annotated[str, typer.Option("--precision", "-p", help=(
    "fp32, bf16 (pure), mixed-bf16 (autocast, fp32 weights), bf16-master (bf16 weights + fp32 "
    "master), bf16-fp32-states (the lecture's: bf16 params/grads, fp32 optimizer state), "
    "fp8-tensorwise, fp8-rowwise (bytes per parameter as mixed-bf16)."))]


def time_command(
    params: Annotated[str | None, typer.Option(help="Parameters, e.g. 70B.")] = None,
    tokens: Annotated[str | None, typer.Option(help="Training tokens, e.g. 15T.")] = None,
    flops: Annotated[str | None, typer.Option(help="Total FLOPs, e.g. 3.14e23 (in place of "
                                              "--params × --tokens).")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Take --params from a model: a preset (llama-3-70b), a "
        "config.json or file.py:factory; the count used is printed.")] = None,
    active_params: Annotated[str | None, typer.Option(help=(
        "A mixture of experts: the parameters a token runs (k of E routed experts and the "
        "shared parts), e.g. 12.9B beside --params 46.7B; 6·N_active·D is counted. A --model "
        "with routed experts gives its own."))] = None,
    hardware: HardwareOpt = "h100",
    count: CountOpt = 1,
    mfu: Annotated[float, typer.Option(parser=real_parser(0.0, 1.0, minimum_open=True),
                                       help="Model FLOPs utilisation, in (0, 1].")] = 0.5,
    days: Annotated[str | None, typer.Option(help="Inverse question: devices needed to finish "
                                             "within this many days (above 0, at most "
                                             f"{MAX_DAYS:g}).")] = None,
    dtype: DtypeOpt = "bf16",
    as_json: JsonOpt = False,
) -> None:
    """How long training takes: 6·N·D FLOPs on COUNT devices at an MFU (or devices for --days)."""
    chip = get_hardware(hardware)
    notes: list[str] = []
    if model is not None:
        if params is not None or flops is not None:
            raise InputError("give either --model or --params/--flops, not both")
        used = _model_params(model)
        params = str(used.params)
        notes.append(model_params_note(used))
        if used.active_params is not None and active_params is None:
            active_params = str(used.active_params)
    if active_params is not None and params is None:
        raise InputError("--active-params goes with --params (the total, e.g. --params 46.7B "
                         "--active-params 12.9B) or a --model")
    if flops is not None and (params is not None or tokens is not None):
        raise InputError("give either --flops or --params with --tokens, not both")
    if flops is None and (params is None or tokens is None):
        raise InputError("give --params and --tokens (e.g. --params 70B --tokens 15T), "
                         "or --flops (e.g. --flops 3.14e23)")
    total = parse_flops(flops) if flops is not None else None
    n = parse_count(params) if params is not None else None
    d = parse_count(tokens) if tokens is not None else None
    active = parse_count(active_params) if active_params is not None else None
    if days is not None:
        if count != 1:
            raise InputError("--days asks how many devices; it does not take --count")
        duration_s = parse_real(days, what="--days", minimum=0.0, maximum=MAX_DAYS,
                                minimum_open=True) * 86400.0
        inverse = devices_for_duration(chip, duration_s, mfu, flops=total, params=n, tokens=d,
                                       dtype=dtype, active_params=active)
        emit("time", inverse, as_json, *devices_for_duration_view(inverse), *notes)
        return
    result = training_time(chip, count, mfu, flops=total, params=n, tokens=d, dtype=dtype,
                           active_params=active)
    emit("time", result, as_json, *training_time_view(result), *notes)


def _model_params(text: str) -> ModelParams:
    if text.strip().lower() in PRESETS:
        return preset_params(text)
    from tensorledger.workload import model_params  # torch only for HF configs and factories

    return model_params(text)


def budget_command(
    hardware: HardwareOpt = "h100",
    count: CountOpt = 1,
    duration: Annotated[str, typer.Option(help="How long, e.g. 2w, 14d, 36h.")] = "1d",
    mfu: Annotated[float, typer.Option(parser=real_parser(0.0, 1.0, minimum_open=True),
                                       help="Utilisation in (0, 1]; 1.0 is the dense peak.")]
    = 1.0,
    dtype: DtypeOpt = "bf16",
    as_json: JsonOpt = False,
) -> None:
    """FLOPs that COUNT devices deliver in a DURATION (at the dense peak unless --mfu)."""
    result = flop_budget(get_hardware(hardware), count, parse_duration(duration), mfu, dtype)
    emit("budget", result, as_json, *budget_view(result))


def fit_command(
    hardware: HardwareOpt = "h100",
    count: CountOpt = 1,
    optimizer: OptimizerOpt = "adamw",
    precision: PrecisionOpt = "mixed-bf16",
    params: Annotated[str | None, typer.Option(help="Inverse question: devices this many "
                                               "parameters need, e.g. 70B.")] = None,
    batch: Annotated[int | None, typer.Option("--batch", "-b", parser=integer_parser(
        1, MAX_COUNT), help="With --seq: count the activations of this many sequences.")]
    = None,
    seq: Annotated[int | None, typer.Option("--seq", "-s", parser=integer_parser(
        1, MAX_COUNT), help="With --batch: tokens per sequence.")] = None,
    checkpoint: Annotated[str, typer.Option(help="With --batch and --seq: none (all "
                                            "activations kept) or full (block inputs only)."
                                            )] = "none",
    experts: Annotated[int | None, typer.Option(parser=integer_parser(1, MAX_COUNT), help=(
        "A mixture of experts: E routed experts a layer (with --top-k). Every expert's state "
        "is held, so the total that fits is the same; the answer adds the parameters a token "
        "runs, and with --batch/--seq the family holds E MLPs a layer and keeps the MLP's "
        "activations for each of a token's k experts. --params is a total either way."))]
    = None,
    top_k: Annotated[int | None, typer.Option("--top-k", parser=integer_parser(1, MAX_COUNT),
                                              help="With --experts: experts each token runs, "
                                              "1 to E.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The largest model that fits on COUNT devices (beside the activations of --batch ×
    --seq tokens when given), or the devices --params needs."""
    chip = get_hardware(hardware)
    bytes_per_param(precision, optimizer)  # validates both names before any arithmetic
    if (batch is None) != (seq is None):
        raise InputError("--batch and --seq go together: give both to count activations")
    if (experts is None) != (top_k is None):
        raise InputError("--experts and --top-k go together (e.g. --experts 8 --top-k 2)")
    routed = {} if experts is None or top_k is None else {"experts": experts, "top_k": top_k}
    if batch is not None and seq is not None:
        if params is not None:
            raise InputError("--params asks how many devices; it does not take --batch/--seq")
        fitted = largest_model_with_activations(chip, count, precision, optimizer,
                                                batch=batch, seq_len=seq,
                                                checkpoint=checkpoint.strip().lower(),
                                                **routed)
        emit("fit", fitted, as_json, *largest_model_with_activations_view(fitted))
        return
    if params is not None:
        if count != 1:
            raise InputError("--params asks how many devices; it does not take --count")
        if routed:
            raise InputError("--params is the total, every expert included: the devices it "
                             "needs do not depend on --experts/--top-k; drop them")
        needed = devices_needed(chip, parse_count(params), precision, optimizer)
        emit("fit", needed, as_json, *devices_needed_view(needed))
        return
    result = largest_model(chip, count, precision, optimizer, **routed)
    emit("fit", result, as_json, *largest_model_view(result))


def tensor_command(
    shape: Annotated[str, typer.Argument(help="Shape such as 4x8 or 49152x12288: ASCII digits, "
                                         "at most 64 dimensions and 2^63 - 1 elements.")],
    dtype_arg: Annotated[str | None, typer.Argument(metavar="[DTYPE]",
                                                    help="Element type (or use --dtype).")] = None,
    dtype: Annotated[str | None, typer.Option(
        "--dtype", help="Element type: fp32 (default), bf16, fp8, fp4, ...")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Memory of one dense tensor: elements × bytes per element."""
    if dtype_arg is not None and dtype is not None and dtype_arg != dtype:
        raise InputError(f"give the dtype once: {dtype_arg!r} and --dtype {dtype!r}")
    chosen = dtype_arg if dtype_arg is not None else dtype if dtype is not None else "fp32"
    result = tensor_memory(parse_shape(shape), chosen)  # an empty name is refused, not fp32
    emit("tensor", result, as_json, *tensor_view(result))


def zero_command(
    params: Annotated[str | None, typer.Option(help="Parameters, e.g. 8B.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Take --params from a model: a preset (llama-3-8b), a "
        "config.json or file.py:factory; the count used is printed.")] = None,
    ranks: Annotated[int, typer.Option("--ranks", "-n", parser=integer_parser(1, MAX_COUNT),
                                       help="Data-parallel ranks, 1 to 2^63 - 1.")] = 8,
    precision: PrecisionOpt = "mixed-bf16",
    optimizer: OptimizerOpt = "adamw",
    active_params: Annotated[str | None, typer.Option(help=(
        "A mixture of experts: the parameters a token runs, e.g. 12.9B beside --params 46.7B. "
        "ZeRO shards the state of every parameter, so the bytes stay the total's; the count is "
        "noted beside them (FLOPs and activations scale with it). A --model with routed "
        "experts gives its own."))] = None,
    as_json: JsonOpt = False,
) -> None:
    """Bytes per rank under ZeRO-0/1/2/3 (DDP to FSDP), and what each stage sends per step."""
    notes: list[str] = []
    if (params is None) == (model is None):
        raise InputError("give --params (e.g. --params 8B) or --model (e.g. --model "
                         "llama-3-8b), one of them")
    bytes_per_param(precision, optimizer)  # validates both names before any arithmetic
    if model is not None:
        if active_params is not None:
            raise InputError("--active-params goes with --params; a --model gives its own")
        used = _model_params(model)
        count = used.params
        notes.append(model_params_note(used))
        if used.active_params is not None:
            notes.append(_zero_active_note(count, used.active_params))
    else:
        assert params is not None
        value = parse_count(params)
        if not (1 <= value <= MAX_COUNT) or value != int(value):
            raise InputError(f"--params must be a whole number of parameters from 1 to "
                             f"2^63 - 1, got {params!r}")
        count = int(value)
        if active_params is not None:
            active = parse_count(active_params)
            if not 1 <= active <= count:
                raise InputError(f"--active-params must be from 1 to the --params total "
                                 f"({count:,}), got {active_params!r}")
            notes.append(_zero_active_note(count, active))
    result = zero_summary(count, ranks, precision, optimizer)
    emit("zero", result, as_json, *zero_view(result), *notes)


def _zero_active_note(total: float, active: float) -> str:
    return (f"a mixture of experts: a token runs {format_count(active)} of the "
            f"{format_count(total)} parameters; the bytes above are every parameter's state "
            "(each expert's weights, gradients and optimizer state are held and sharded)")


def register(app: typer.Typer) -> None:
    app.command("time")(time_command)
    app.command("budget")(budget_command)
    app.command("fit")(fit_command)
    app.command("zero")(zero_command)
    # a negative shape is an argument to refuse with a reason, not an unknown option
    app.command("tensor", context_settings={"ignore_unknown_options": True})(tensor_command)
