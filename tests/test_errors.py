"""Unknown names suggest the nearest known ones (issue 41): every registry benefits, since the
suggestion is built once, in :class:`tensorledger.errors.UnknownNameError`."""

from __future__ import annotations

from typing import Any

import pytest

from tensorledger.errors import UnknownNameError, nearest_names
from tests.conftest import assert_one_line_error


def test_a_near_miss_is_suggested_before_the_list() -> None:
    error = UnknownNameError("model", "llama3-8b", ["tiny", "llama-3-8b", "gpt2", "llama-2-7b"])
    # llama3-8b against llama-3-8b with the dashes out: "llama38b" == "llama38b", ratio 1.0;
    # against llama-2-7b: "llama38b" vs "llama27b", 6 of 8 characters in common, ratio 0.75
    assert error.suggestions == ("llama-3-8b", "llama-2-7b")
    assert str(error) == ("unknown model 'llama3-8b'; did you mean llama-3-8b, llama-2-7b? "
                          "known: gpt2, llama-2-7b, llama-3-8b, tiny")


def test_no_suggestion_where_nothing_is_near() -> None:
    assert str(UnknownNameError("dtype", "qq", ["bf16", "fp32"])) == (
        "unknown dtype 'qq'; known: bf16, fp32")
    assert str(UnknownNameError("dtype", "", ["bf16", "fp32"])) == (
        "unknown dtype ''; known: bf16, fp32")


@pytest.mark.parametrize(("name", "known", "expected"), [
    # case and separators do not count: "Llama_3_8B" keys to "llama38b" as llama-3-8b does
    ("Llama_3_8B", ["llama-3-8b", "llama-3-70b"], ("llama-3-8b", "llama-3-70b")),
    # names that begin with the typed one come first, shortest first
    ("h100", ["a100-80gb", "h100-pcie", "h100-sxm", "h200"], ("h100-sxm", "h100-pcie", "h200")),
    ("adan", ["adagrad", "adam", "adamw", "sgd"], ("adam", "adamw")),
    ("zzz", ["gpt2", "tiny"], ()),
])
def test_nearest_names(name: str, known: list[str], expected: tuple[str, ...]) -> None:
    assert nearest_names(name, known) == expected


@pytest.mark.parametrize(("args", "fragments"), [
    (("time", "--model", "llama3-8b", "--tokens", "1T"),
     ("unknown model", "'llama3-8b'; did you mean llama-3-8b", "known: ", "gpt2, ")),
    (("roofline", "--model", "gpt2", "--hardware", "h1000"),
     ("unknown hardware 'h1000'; did you mean h100", "known: ")),
    (("tensor", "4x4", "bf61"), ("unknown dtype 'bf61'; did you mean ", "bf16", "known: ")),
])
def test_the_cli_suggests(cli: Any, args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    assert_one_line_error(cli(*args), *fragments)
