"""The one exception tree of tensorledger.

Every error a user can cause derives from :class:`TensorLedgerError`; the CLI prints it as one
line on stderr and exits with status 2.  Messages say what was wrong and what would be right.

::

    TensorLedgerError
    ├── InputError                 malformed input from a user
    │   ├── UnitError              a quantity that does not parse ("70Q", "3.35TB")
    │   ├── ShapeError             a malformed shape or a shape that does not fit
    │   ├── EinsumError            a malformed einsum pattern or missing axis sizes
    │   └── UnknownNameError       a name not in a registry (hardware, dtype, format, model, ...)
    ├── ConfigError                a file that does not load (hardware TOML, config.json, tensors)
    ├── ModelError                 a model that cannot be built (factory raised, bad config)
    ├── TraceError                 a step that cannot be traced
    └── DeviceError                a device that is missing or cannot do what was asked
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "ConfigError",
    "DeviceError",
    "EinsumError",
    "InputError",
    "ModelError",
    "ShapeError",
    "TensorLedgerError",
    "TraceError",
    "UnitError",
    "UnknownNameError",
]


class TensorLedgerError(Exception):
    """Base of every error tensorledger raises on purpose."""


class InputError(TensorLedgerError, ValueError):
    """Input from a user that is malformed."""


class UnitError(InputError):
    """A quantity (count, bytes, rate, duration) that does not parse."""


class ShapeError(InputError):
    """A shape that is malformed or does not fit the operation."""


class EinsumError(InputError):
    """A malformed einsum pattern, or axis sizes that are missing or inconsistent."""


class UnknownNameError(InputError, KeyError):
    """A name that is not in a registry; the message suggests the nearest known names, then
    lists them all.

    >>> str(UnknownNameError("model", "llama3-8b", ["gpt2", "llama-3-8b", "llama-3-70b"]))
    "unknown model 'llama3-8b'; did you mean llama-3-8b, llama-3-70b? known: gpt2, llama-3-70b, llama-3-8b"
    """  # noqa: E501

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = tuple(sorted(known))
        self.suggestions = nearest_names(name, self.known)
        hint = f"did you mean {', '.join(self.suggestions)}? " if self.suggestions else ""
        super().__init__(f"unknown {kind} {name!r}; {hint}known: {', '.join(self.known)}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def nearest_names(name: str, known: Iterable[str], limit: int = 3) -> tuple[str, ...]:
    """The known names nearest to a mistyped one, at most ``limit``: difflib's similarity ratio
    (at least 0.6), on names lower-cased and with ``-``, ``_`` and spaces taken out so that
    ``llama3-8b``, ``Llama_3_8B`` and ``llama-3-8b`` meet; known names that begin with the
    mistyped one come first (``h100`` finds ``h100-sxm``).  Empty when nothing is near.

    >>> nearest_names("H100", ["a100-80gb", "h100-pcie", "h100-sxm", "h200"])
    ('h100-sxm', 'h100-pcie', 'h200')
    >>> nearest_names("zzz", ["gpt2", "tiny"])
    ()
    """
    def key(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch not in "-_ ")

    wanted = key(name)
    if not wanted:
        return ()
    by_key: dict[str, list[str]] = {}
    for known_name in known:
        by_key.setdefault(key(known_name), []).append(known_name)
    close = sorted((k for k in by_key if k.startswith(wanted)), key=lambda k: (len(k), k))
    close += [k for k in difflib.get_close_matches(wanted, list(by_key), n=limit, cutoff=0.6)
              if k not in close]
    return tuple(n for k in close for n in by_key[k])[:limit]


class ConfigError(TensorLedgerError):
    """A configuration or data file that cannot be read or validated."""


class ModelError(TensorLedgerError):
    """A model that cannot be built: a factory raised, or a config is invalid."""


class TraceError(TensorLedgerError):
    """A step that cannot be traced."""


class DeviceError(TensorLedgerError):
    """A device that is not available or cannot run what was asked."""
