"""How a result shows itself: the core's one door to presentation.

The core computes and never formats; presentation (:mod:`tensorledger.report`) formats and never
computes, and imports the core, never the other way.  Yet a result shows itself where a person
looks at it: ``rich.print(x)`` calls ``x.__rich__()``, Jupyter calls ``x._repr_html_()``, and the
live meter writes its line inside the user's loop, with no CLI above it.  Those methods ask
:func:`view` here, which knows no result type: presentation registers, per type (by its dotted
name, so that registering loads no result's module) and kind, the function that draws it
(:mod:`tensorledger.report.views` does, when it is imported), and :func:`view` imports that
module on first use.  That import is the one dependency of the core
on presentation, declared in the import contract (pyproject's ``ignore_imports``).

The kinds: ``rich`` (a rich renderable, for ``__rich__``), ``html`` (a self-contained HTML
string, for ``_repr_html_``), ``text`` (a plain string, for a line written to a stream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from tensorledger.errors import InputError

__all__ = ["Kind", "register", "type_name", "view"]

Kind = Literal["rich", "html", "text"]

_VIEWS: dict[tuple[str, Kind], Callable[[Any], object]] = {}


def type_name(cls: type) -> str:
    """A type's dotted name, as :func:`register` takes it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def register(kind: Kind, name: str, draw: Callable[[Any], object]) -> None:
    """Draw instances of the type *name* (its :func:`type_name`) and of its subclasses as *kind*
    with *draw*."""
    _VIEWS[(name, kind)] = draw


def view(kind: Kind, result: object) -> Any:
    """*result* drawn as *kind* by the function presentation registered for its type."""
    # The declared door (pyproject's ignore_imports): loading presentation registers its views.
    import tensorledger.report.views  # noqa: F401

    for cls in type(result).__mro__:
        draw = _VIEWS.get((type_name(cls), kind))
        if draw is not None:
            return draw(result)
    known = sorted({name.rpartition(".")[2] for name, k in _VIEWS if k == kind})
    raise InputError(f"no {kind} view for {type(result).__name__}; known: {', '.join(known)}")
