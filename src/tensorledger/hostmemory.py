"""Memory this machine has free for new tensors, asked before a real-tensor run allocates.

Torch-free.  ``MemAvailable`` of ``/proc/meminfo`` is the kernel's own estimate of what can be
allocated without swapping; where it is missing (not Linux) the answer is ``None`` and callers
skip the check rather than guess.

>>> free = available_memory_bytes()
>>> free is None or free > 0
True
"""

from __future__ import annotations

from tensorledger.errors import DeviceError

__all__ = ["HEADROOM", "available_memory_bytes", "check_fits_in_memory"]

#: The share of the available memory a run may plan to use; the rest is for everything else.
HEADROOM = 0.8


def available_memory_bytes() -> int | None:
    """Bytes the kernel reports as available (``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as stream:
            for line in stream:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fits_in_memory(needed_bytes: float, what: str, hint: str,
                         available: int | None = None) -> None:
    """Refuse, before allocating, a run that needs more than :data:`HEADROOM` of the memory
    available, with both figures: ``"<what> needs 12.3 GiB but 7.9 GiB are available; <hint>"``.
    ``available`` defaults to :func:`available_memory_bytes` (a device's free memory may be
    given instead)."""
    free = available_memory_bytes() if available is None else available
    if free is None or needed_bytes <= HEADROOM * free:
        return
    raise DeviceError(f"{what} needs {_gib(needed_bytes)} but {_gib(free)} are available (at "
                      f"most {HEADROOM:.0%} of it is used); {hint}")


def _gib(count: float) -> str:
    """``14,901 GiB``, ``21.8 GiB``, ``0.875 GiB``: three figures, no exponent."""
    gib = count / 2**30
    return f"{gib:,.0f} GiB" if gib >= 100 else f"{gib:.3g} GiB"
