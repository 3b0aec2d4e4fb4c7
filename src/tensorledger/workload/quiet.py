"""What torch says beside an error it raises anyway, held back so that a refusal stays the one
line the error becomes (torch-free: loggers are looked up by name).

FakeTensorMode logs the whole traceback of a meta kernel that failed (``log.exception``, then
``raise``): 20-odd lines on stderr before the step's guard turns the same exception into one.
Those records are dropped; they only ever repeat an exception that propagates.  Warnings raised
inside the block are held: shown after it when it succeeds, dropped when it fails.  Filters that
turn a warning into an error (the tests') still apply, since they act before a warning is held.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

__all__ = ["IMPORT_LOGGERS", "REPEATING_LOGGERS", "quiet_import", "quiet_torch"]

#: Loggers whose records repeat an exception that is raised right after.
REPEATING_LOGGERS = ("torch._subclasses.fake_tensor",)

#: Loggers an optional library's import writes to: torchao's, about its CUDA and CUTLASS
#: extensions that do not load on a machine without that GPU (``Failed to load
#: ..._C_cutlass_90a.abi3.so``), and torch's deprecation of ``register_constant`` on the
#: enums torchao registers.  Nothing of the tool's own question.
IMPORT_LOGGERS = ("torchao", "torch.utils._pytree")


def _drop(record: logging.LogRecord) -> bool:
    return False


@contextmanager
def quiet_torch(inner: AbstractContextManager[object] | None = None) -> Iterator[None]:
    """Run the block (inside ``inner``, if given) with :data:`REPEATING_LOGGERS` silent and its
    warnings held until it has succeeded.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as shown:
    ...     warnings.simplefilter("always")
    ...     try:
    ...         with quiet_torch():
    ...             warnings.warn("about to fail")
    ...             raise ValueError("failed")
    ...     except ValueError:
    ...         pass
    >>> shown
    []
    """
    loggers = [logging.getLogger(name) for name in (*REPEATING_LOGGERS, *IMPORT_LOGGERS)]
    for logger in loggers:
        logger.addFilter(_drop)
    try:
        with warnings.catch_warnings(record=True) as held, inner or nullcontext():
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(_drop)
    for message in held:  # reached only when the block succeeded
        warnings.showwarning(message.message, message.category, message.filename,
                             message.lineno, message.file, message.line)


@contextmanager
def quiet_import() -> Iterator[None]:
    """Import an optional library (torchao) inside this block: the warnings its import logs
    to :data:`IMPORT_LOGGERS` are dropped; errors still pass.

    >>> import logging
    >>> with quiet_import():
    ...     logging.getLogger("torchao").warning("Failed to load _C.so")
    >>> logging.getLogger("torchao").level
    0
    """
    loggers = [logging.getLogger(name) for name in IMPORT_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
