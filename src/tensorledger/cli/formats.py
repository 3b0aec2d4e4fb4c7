"""``tensorledger formats``, ``cast`` and ``quantize``: what each format holds and what
quantization does to a tensor.  ``formats`` and ``cast`` never load torch."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit, integer_parser
from tensorledger.errors import InputError
from tensorledger.formats.spec import (
    FORMATS,
    cast_scalar,
    code_values,
    finite_values,
    format_properties,
    read_cast_input,
    resolve_format,
)
from tensorledger.hostmemory import check_fits_in_memory
from tensorledger.report.files import check_output_path
from tensorledger.report.formats import cast_view, comparison_view, format_view, formats_table
from tensorledger.units import MAX_INT64, parse_shape

__all__ = ["register"]

_SMALL = [name for name, fmt in FORMATS.items() if fmt.layout_bits <= 8 and fmt.signed]


def formats_command(
    name: Annotated[str | None, typer.Argument(help="A format (fp4_e2m1, e4m3, bf16, ...).")]
    = None,
    plot: Annotated[str | None, typer.Option("--plot", help="Write a number line of the values "
                                             "to this .png or .svg file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Every format's properties, or one format and every value it holds."""
    if plot is not None:
        check_output_path(plot, (".png", ".svg"))  # before any work
    if name is None:
        rows = [format_properties(n) for n in FORMATS]
        written = _plot(_SMALL, plot)
        emit("formats", {"formats": rows, "plot": written}, as_json, formats_table(rows),
             *_wrote(written))
        return
    fmt = resolve_format(name)
    props = format_properties(fmt)
    small = fmt.layout_bits <= 8
    codes = code_values(fmt) if small else None
    finite = finite_values(fmt) if small else None
    if plot is not None and not small:
        raise InputError(f"--plot draws every value, which only formats of at most 8 bits "
                         f"allow; {fmt.name} has {fmt.code_count} codes")
    written = _plot([fmt.name], plot)
    emit("formats", {"format": props, "codes": codes, "finite_values": finite, "plot": written},
         as_json, *format_view(props, codes, finite), *_wrote(written))


def _plot(names: list[str], path: str | None) -> str | None:
    if path is None:
        return None
    from tensorledger.report.number_line import number_line

    return str(number_line(names, path))


def _wrote(path: str | None) -> list[str]:
    return [] if path is None else [f"wrote {path}"]


def cast_command(
    value: Annotated[str, typer.Argument(help="The number to round (1e-8, -1.5, 17.00001, "
                                         "inf, nan), in ASCII digits.")],
    to: Annotated[str, typer.Option("--to", help="Target format (fp16, bf16, e4m3, fp4, ...).")],
    saturate: Annotated[bool, typer.Option("--saturate", help="Clamp overflow to ± the largest "
                                           "finite value instead of inf/NaN.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Round one number to a format (nearest, ties to even) and say what happened."""
    number, overflowed, underflowed = read_cast_input(value)
    result = replace(cast_scalar(number, to, saturate=saturate), input_text=value.strip(),
                     input_overflowed=overflowed, input_underflowed=underflowed)
    emit("cast", result, as_json, *cast_view(result))


def quantize_command(
    schemes: Annotated[str, typer.Option("--schemes", help="Comma-separated: nvfp4, "
                                         "nvfp4_16x16, mxfp8, mxfp8_up, mxfp6, mxfp4, fp8 "
                                         "(per-tensor E4M3), or any format name.")]
    = "nvfp4,mxfp4,mxfp8,fp8",
    dist: Annotated[str, typer.Option("--dist", help="normal, uniform or laplace.")] = "normal",
    shape: Annotated[str, typer.Option("--shape", help="Shape of the random tensor, e.g. "
                                       "1024x1024; at most 2^28 elements.")] = "1024x1024",
    seed: Annotated[int, typer.Option("--seed", parser=integer_parser(0, MAX_INT64),
                                      help="Seed of the random tensor and of stochastic "
                                      "rounding, 0 to 2^63 - 1.")] = 0,
    input_path: Annotated[str | None, typer.Option("--input", help="Quantize a tensor from a "
                                                   ".safetensors, .pt or .npy file.")] = None,
    tensor: Annotated[str | None, typer.Option("--tensor", help="Which tensor of --input.")]
    = None,
    axis: Annotated[int, typer.Option("--axis", parser=integer_parser(-64, 63),
                                      help="Axis along which blocks run (-64 to 63).")] = -1,
    stochastic: Annotated[bool, typer.Option("--stochastic", help="Stochastic rounding instead "
                                             "of nearest-even.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Quantize one tensor with several schemes and compare their error and size."""
    from tensorledger.formats.blocks import resolve_scheme
    from tensorledger.formats.metrics import (
        MAX_QUANTIZE_ELEMENTS,
        WORKING_MULTIPLE,
        compare_schemes,
        quantize_memory_bytes,
    )
    from tensorledger.formats.tensors import load_tensor, random_tensor

    names = [s.strip() for s in schemes.split(",") if s.strip()]
    if not names:
        raise InputError("--schemes is empty; give one or more, such as nvfp4,mxfp4,mxfp8,fp8")
    for scheme in names:
        resolve_scheme(scheme)  # unknown names fail before any work
    working = (f"the input and its working memory ({WORKING_MULTIPLE}× its fp32 bytes, one "
               "scheme at a time)")
    if input_path is not None:
        label, x = load_tensor(input_path, tensor)
        source = f"{input_path}:{label}"
        if x.numel() > MAX_QUANTIZE_ELEMENTS:
            raise InputError(f"tensor {label!r} has {x.numel():,} elements; at most 2^28 = "
                             f"{MAX_QUANTIZE_ELEMENTS:,} are quantized")
        check_fits_in_memory(quantize_memory_bytes(x.numel()), f"quantizing {label!r}: "
                             f"{working}", "quantize a slice of the tensor")
    else:
        if tensor is not None:
            raise InputError("--tensor names a tensor of --input; give --input too")
        dims = parse_shape(shape)
        if math.prod(dims) > MAX_QUANTIZE_ELEMENTS:
            raise InputError(f"shape {shape} has {math.prod(dims):,} elements; at most 2^28 = "
                             f"{MAX_QUANTIZE_ELEMENTS:,} are drawn")
        check_fits_in_memory(quantize_memory_bytes(math.prod(dims)),
                             f"quantizing a {shape} tensor: {working}", "give a smaller --shape")
        x = random_tensor(dist, dims, seed)
        source = f"{dist}(seed={seed})"
    comparison = compare_schemes(x, names, source=source, axis=axis,
                                 rounding="stochastic" if stochastic else "nearest",
                                 seed=seed if stochastic else None)
    emit("quantize", comparison, as_json, *comparison_view(comparison))


def register(app: typer.Typer) -> None:
    app.command("formats")(formats_command)
    # a negative number is the value to cast, not an unknown option
    app.command("cast", context_settings={"ignore_unknown_options": True})(cast_command)
    app.command("quantize")(quantize_command)
