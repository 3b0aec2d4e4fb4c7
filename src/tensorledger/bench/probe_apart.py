""":func:`~tensorledger.bench.probe.probe` in a process of its own, for a caller that goes on
to time whole steps in this one (``tensorledger probe --calibrate``).

The probe checks a CPU thread team's figures against one thread (``probe_noise.one_thread``),
which changes the process's thread count and back.  After that, torch's CPU flash attention
runs slower for the rest of the process: on a 2-core EPYC its forward over 32 tokens of width
16 at 16 heads took 21 µs before ``torch.set_num_threads(1)`` and back, 40 µs after (at 128
tokens and 64 heads, 1.8 and 2.1 ms), where matmuls, norms and elementwise ops ran as before.
Steps timed after an in-process probe would run their attention that much slower than the
user's own process does, and a calibration fitted on them would price it so.  A spawned process
starts a fresh interpreter (no thread count inherited, nothing of torch's state shared); the
probe's progress comes back line by line, its result or its error when it ends.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import queue
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensorledger.bench.probe import ProbeResult

__all__ = ["probe_apart"]

_LINES: Any = None  # the child's queue of progress lines


def _start(lines: Any) -> None:
    """The spawned process's set-up: where its progress goes; torch's warnings and logs
    silenced (the parent's output stays its own)."""
    global _LINES
    _LINES = lines
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)


def _probe(options: dict[str, Any]) -> ProbeResult:
    from tensorledger.bench.probe import probe

    return probe(progress=_LINES.put, **options)


def probe_apart(progress: Callable[[str], None] | None = None, **options: Any) -> ProbeResult:
    """``probe(**options)`` run in a spawned process; ``progress`` is told each of its steps
    here.  Its error (a ``DeviceError``, say) is raised here."""
    say = progress or (lambda _: None)
    context = multiprocessing.get_context("spawn")
    lines = context.Queue()
    with ProcessPoolExecutor(1, mp_context=context, initializer=_start,
                             initargs=(lines,)) as pool:
        future = pool.submit(_probe, options)
        while not future.done():
            with contextlib.suppress(queue.Empty):
                say(lines.get(timeout=0.1))
        result = future.result()  # raises the child's error
    while True:  # the lines still on their way when it ended
        try:
            say(lines.get(timeout=0.1))
        except queue.Empty:
            return result
