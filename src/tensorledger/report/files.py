"""Writing output files whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tensorledger.errors import InputError

__all__ = ["check_output_path", "write_atomic"]


def _display(path: Path, limit: int = 120) -> str:
    """A path for a message, its middle elided when long."""
    text = str(path)
    return text if len(text) <= limit else text[:limit // 2] + "…" + text[-limit // 2:]


def _nearest_existing(folder: Path) -> Path:
    """``folder`` or its nearest ancestor that exists (as anything)."""
    current = folder
    while not os.path.lexists(current) and current != current.parent:
        current = current.parent
    return current


def check_output_path(path: str | Path, suffixes: tuple[str, ...] = (), *,
                      make_folder: bool = False, what: str = "") -> Path:
    """Refuse, before any work is done, an output file that could not be written.

    Refused, each in one line naming the path: a name without one of ``suffixes``; a target
    that is a folder or not a regular file; a folder that does not exist (unless
    ``make_folder``: then its nearest existing ancestor must be a folder we can write in); a
    parent that is a file; a folder without write permission; a name the system cannot hold
    (NUL bytes, too long).  ``what`` prefixes the message (``"TENSORLEDGER_HOME=/x: "``).
    """
    target = Path(path)
    name = f"{what}cannot write {_display(target)}"
    folder = target.parent if str(target.parent) else Path(".")
    try:
        if len(os.fsencode(target.name)) > 255:
            raise InputError(f"{name}: the file name is longer than 255 bytes")
        if target.is_dir():
            raise InputError(f"{name}: it is a folder; give a file name inside it")
        if suffixes and target.suffix.lower() not in suffixes:
            raise InputError(f"{name}: use a name ending in {', '.join(suffixes)}")
        if os.path.lexists(target) and not target.is_file():
            raise InputError(f"{name}: it exists and is not a regular file")
        existing = _nearest_existing(folder)
        if existing != folder and not make_folder and existing.is_dir():
            raise InputError(f"{name}: folder {folder} does not exist")
        if not existing.is_dir():
            raise InputError(f"{name}: {existing} is a file, not a folder")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise InputError(f"{name}: folder {existing} is not writable")
    except InputError:
        raise
    except (OSError, ValueError) as error:  # a NUL byte, a name too long, a loop of links
        reason = getattr(error, "strerror", None) or str(error)
        raise InputError(f"{name}: {reason}") from None
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
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name[:200]}.", dir=folder)
    except OSError as error:
        raise InputError(f"cannot write {target}: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(payload)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; a new file follows umask
        os.replace(temporary, target)
    except OSError as error:  # a full disk, a folder gone read-only meanwhile
        Path(temporary).unlink(missing_ok=True)
        raise InputError(f"cannot write {target}: {error.strerror or error}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
