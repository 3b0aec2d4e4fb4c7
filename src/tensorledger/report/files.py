"""Writing output files whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tensorledger.errors import InputError

__all__ = ["check_output_path", "write_atomic"]


def check_output_path(path: str | Path, suffixes: tuple[str, ...] = ()) -> Path:
    """Refuse, before any work is done, an output file that could not be written: a folder
    that does not exist, or a name without one of ``suffixes``."""
    target = Path(path)
    if suffixes and target.suffix.lower() not in suffixes:
        raise InputError(f"cannot write {target}: use a name ending in {', '.join(suffixes)}")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: folder {folder} does not exist")
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write to a temporary file beside ``path`` and rename it into place, so a failure never
    leaves a half-written file behind."""
    target = check_output_path(path)
    folder = target.parent if str(target.parent) else Path(".")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(payload)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; a new file follows umask
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
