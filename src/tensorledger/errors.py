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
    """A name that is not in a registry; the message lists the known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(self.known)}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class ConfigError(TensorLedgerError):
    """A configuration or data file that cannot be read or validated."""


class ModelError(TensorLedgerError):
    """A model that cannot be built: a factory raised, or a config is invalid."""


class TraceError(TensorLedgerError):
    """A step that cannot be traced."""


class DeviceError(TensorLedgerError):
    """A device that is not available or cannot run what was asked."""
