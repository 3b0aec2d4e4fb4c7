"""Writing output files whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tensorledger.errors import InputError

__all__ = ["write_atomic"]


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write to a temporary file beside ``path`` and rename it into place, so a failure never
    leaves a half-written file behind."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: folder {folder} does not exist")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(payload)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
