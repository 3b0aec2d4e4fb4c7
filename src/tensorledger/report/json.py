"""One JSON document per command; keys carry their units (``time_s``, ``flop_per_s``)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["SCHEMA_VERSION", "to_json", "to_jsonable"]

#: Bumped when a key of an existing document changes meaning or disappears.
SCHEMA_VERSION = 1


def to_jsonable(value: Any) -> Any:
    """Dataclasses, mappings and sequences of plain values, made JSON-safe (inf/nan → null)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def to_json(command: str, result: Any) -> str:
    """The document a command prints with ``--json``."""
    body = to_jsonable(result)
    document = {"schema_version": SCHEMA_VERSION, "command": command}
    document.update(body if isinstance(body, dict) else {"result": body})
    return json.dumps(document, indent=2, allow_nan=False)
