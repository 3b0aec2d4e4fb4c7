"""Reading a user's text files safely: only regular files, up to a stated size, UTF-8 or refused.

A path a user names may be a FIFO (reading it hangs), a device such as ``/dev/zero`` (reading
it never ends), a folder, or a file of another encoding.  :func:`read_text_file` refuses each
before reading more than ``max_bytes`` and names the file in a :class:`ConfigError`.  The
parse helpers bound nesting, so 100,000 nested brackets are refused instead of exhausting the
interpreter's stack.  Nothing here imports torch.

>>> import tempfile, os
>>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
...     _ = f.write('{"n_layer": 2}')
>>> parse_json_text(read_text_file(f.name, what="model config", max_bytes=2**20), where=f.name)
{'n_layer': 2}
>>> os.unlink(f.name)
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from tensorledger.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["MAX_CONFIG_BYTES", "MAX_NESTING", "check_nesting", "parse_json_text",
           "parse_toml_text", "read_text_file"]

#: The largest configuration file read (hardware TOML, config.json): 16 MiB.
MAX_CONFIG_BYTES = 16 * 2**20
#: The deepest nesting of tables and lists accepted in a configuration file.
MAX_NESTING = 64


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size(count: int) -> str:
    return f"{count / 2**20:.3g} MiB" if count >= 2**20 else f"{count:,} bytes"


def read_text_file(path: str | Path, *, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """The text of ``path``, a regular file of at most ``max_bytes`` bytes in UTF-8.

    Anything else — missing, a folder, a FIFO, a device, too large, unreadable, not UTF-8 — is
    a :class:`ConfigError` that names ``what`` and the file.  The file is opened without
    blocking and checked on the open descriptor, so a FIFO never hangs and a file swapped for a
    device between the check and the read is still refused.
    """
    where = str(path)
    try:
        descriptor = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise ConfigError(f"{what} {where} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {where} is a folder; expected a file") from None
    except OSError as error:
        raise ConfigError(f"cannot read {what} {where}: {error.strerror or error}") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} {where} is {_kind(info.st_mode)}; expected a regular "
                              "file")
        if info.st_size > max_bytes:
            raise ConfigError(f"{what} {where} has {_size(info.st_size)}; at most "
                              f"{_size(max_bytes)} are read")
        chunks: list[bytes] = []
        total = 0
        while True:  # read at most max_bytes + 1, whatever st_size claimed
            chunk = os.read(descriptor, min(2**20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise ConfigError(f"{what} {where} has more than {_size(max_bytes)}; at most "
                                  f"{_size(max_bytes)} are read")
    except OSError as error:
        raise ConfigError(f"cannot read {what} {where}: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{what} {where} is not UTF-8 text (byte {error.start} cannot be "
                          "decoded); expected a UTF-8 text file") from None


def check_nesting(value: Any, *, where: str, max_depth: int = MAX_NESTING) -> Any:
    """``value`` unchanged if its lists and tables nest at most ``max_depth`` deep (walked
    without recursion), else a :class:`ConfigError` naming ``where``."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= max_depth:
                raise ConfigError(f"{where}: lists and tables nest deeper than {max_depth} "
                                  "levels; expected a flat configuration")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value


def _bracket_depth(text: str) -> int:
    """An upper bound on the nesting of ``text``: brackets counted outside nothing, so a
    string full of brackets may overstate it, never understate it."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def _first_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    if "Exceeds the limit" in text:
        return "it holds an integer of more than 4300 digits"
    return text if len(text) <= 200 else text[:199] + "…"


def parse_json_text(text: str, *, where: str, max_depth: int = MAX_NESTING) -> Any:
    """JSON text parsed, with nesting deeper than ``max_depth`` and malformed text refused as a
    :class:`ConfigError` naming ``where``; NaN and Infinity literals are refused too."""

    def no_constant(name: str) -> Any:
        raise ConfigError(f"{where}: {name} is not a JSON number; expected finite numbers")

    try:
        value = json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{where}: not valid JSON: {error.msg} at line {error.lineno}, "
                          f"column {error.colno}") from None
    except ValueError as error:  # an integer of more than 4300 digits
        raise ConfigError(f"{where}: cannot be read: {_first_line(error)}; expected numbers of "
                          "ordinary size") from None
    except RecursionError:
        raise ConfigError(f"{where}: lists and tables nest too deep; expected at most "
                          f"{max_depth} levels") from None
    check_nesting(value, where=where, max_depth=max_depth)
    return value


def parse_toml_text(text: str, *, where: str, max_depth: int = MAX_NESTING) -> dict[str, Any]:
    """TOML text parsed, with nesting deeper than ``max_depth`` and malformed text refused as a
    :class:`ConfigError` naming ``where``."""
    if _bracket_depth(text) > 4 * max_depth:  # refuse before the parser's own recursion
        raise ConfigError(f"{where}: lists and tables nest too deep; expected at most "
                          f"{max_depth} levels")
    try:
        value: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{where}: not valid TOML: {_first_line(error)}") from None
    except ValueError as error:  # an integer of more than 4300 digits
        raise ConfigError(f"{where}: cannot be read: {_first_line(error)}; expected numbers of "
                          "ordinary size") from None
    except RecursionError:
        raise ConfigError(f"{where}: lists and tables nest too deep; expected at most "
                          f"{max_depth} levels") from None
    check_nesting(value, where=where, max_depth=max_depth)
    return value
