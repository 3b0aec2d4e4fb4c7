"""tensorledger.display: the views presentation registers name real types, and an unknown type
is told so."""

from __future__ import annotations

import importlib

import pytest

import tensorledger.report.views  # noqa: F401  registers the views
from tensorledger.display import _VIEWS, type_name, view
from tensorledger.errors import InputError


def test_every_registered_name_is_a_type_that_has_it_under_that_name() -> None:
    assert _VIEWS  # the registrations ran
    for name, _kind in _VIEWS:
        module, _, qualname = name.rpartition(".")
        cls = getattr(importlib.import_module(module), qualname)
        assert isinstance(cls, type)
        assert type_name(cls) == name


def test_an_unknown_type_is_told_with_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"no html view for int; known: Ledger, MemoryLedger, "
                       r"RooflineRun, Trace, TraceReport, TraceSummary$"):
        view("html", 3)


def test_the_results_share_one_workload_header() -> None:
    """TraceReport, RooflineRun and Ledger begin with the same fields, declared once."""
    import dataclasses

    from tensorledger.ledger.account import Ledger
    from tensorledger.ledger.header import WorkloadHeader
    from tensorledger.ledger.roofline import RooflineRun
    from tensorledger.ledger.trace import TraceReport

    header = [f.name for f in dataclasses.fields(WorkloadHeader)]
    assert header == ["model", "built_by", "step", "batch", "seq", "device", "precision",
                      "optimizer", "routing"]  # routing: a mixture of experts' ('' without)
    for result in (TraceReport, RooflineRun, Ledger):
        assert issubclass(result, WorkloadHeader)
        assert [f.name for f in dataclasses.fields(result)][:len(header)] == header
