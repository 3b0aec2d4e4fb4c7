"""The views the core's results show themselves through: their ``__rich__``, Jupyter's
``_repr_html_`` and the live meter's lines, each asking :func:`tensorledger.display.view`.

:mod:`tensorledger.display` imports this module when a result is first shown (the one declared
import from the core into presentation).  It registers each view by the result type's dotted
name and imports the module that draws it when first drawn, so loading it loads no result's
module and no table code: the live meter's first line, written inside the user's loop, costs
its own formatting (:mod:`tensorledger.report.meter`) and no more.
"""

from __future__ import annotations

from typing import Any

from tensorledger.display import register
from tensorledger.report.meter import interval_line, summary_text

__all__: list[str] = []


def _tables(result: Any) -> object:
    """The command's tables (:func:`tensorledger.report.render.render`)."""
    from tensorledger.report.render import render

    return render(result)


def _ledger_tables(ledger: Any) -> object:
    from tensorledger.report.account import ledger_group

    return ledger_group(ledger)


def _ledger_html(ledger: Any) -> str:
    from tensorledger.report.document import ledger_display_html

    return ledger_display_html(ledger)


def _result_html(result: Any) -> str:
    """The command's tables as HTML tables (:func:`tensorledger.report.document`)."""
    from tensorledger.report.document import result_display_html

    return result_display_html(result)


def _trace_html(trace: Any) -> str:
    from tensorledger.report.document import trace_display_html

    return trace_display_html(trace)


for _name in ("tensorledger.ledger.trace.TraceReport", "tensorledger.memory.ledger.MemoryLedger",
              "tensorledger.ledger.roofline.RooflineRun",
              "tensorledger.trace.aggregate.TraceSummary"):
    register("rich", _name, _tables)
    register("html", _name, _result_html)
register("rich", "tensorledger.ledger.account.Ledger", _ledger_tables)
register("html", "tensorledger.ledger.account.Ledger", _ledger_html)
register("html", "tensorledger.trace.records.Trace", _trace_html)
register("text", "tensorledger.bench.meter_records.MeterInterval", interval_line)
register("text", "tensorledger.bench.meter_records.MeterSummary", summary_text)
