"""Jupyter's view of every result (``_repr_html_``): one well-formed HTML fragment (no page, no
script), its tables as ``<table>`` with a header row, its plots inline SVG; a ledger's display
under 300 kB and headed by the answers, each figure equal to the ledger's own field; and the
whole set rendered by headless Chromium."""

from __future__ import annotations

import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import torch

import tensorledger
from tensorledger.hardware import get_hardware
from tensorledger.ledger import memory_report, roofline_report, trace_report
from tensorledger.trace import trace
from tensorledger.units import format_bytes, format_duration, format_sci
from tensorledger.workload import resolve_workload

#: Elements with no end tag in HTML.
VOID = {"br", "hr", "img", "input", "link", "meta", "col", "area", "base", "wbr", "source"}
LEDGER_LIMIT_BYTES = 300_000


class _Outline(HTMLParser):
    """Checks that every element closes in order, and counts what was opened."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.opened: dict[str, int] = {}
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.headers_per_table: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.opened[tag] = self.opened.get(tag, 0) + 1
        self.ids += [v for k, v in attrs if k == "id" and v]
        if tag == "table":
            self.headers_per_table.append(0)
        if tag == "th":
            self.headers_per_table[-1] += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.opened[tag] = self.opened.get(tag, 0) + 1  # <path .../> in SVG: opens and closes

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def outline(html: str) -> _Outline:
    parser = _Outline()
    parser.feed(html)
    parser.close()
    assert parser.errors == [] and parser.stack == [], (parser.errors[:5], parser.stack[-5:])
    return parser


@pytest.fixture(scope="module")
def ledger() -> Any:
    return tensorledger.account("gpt2", "h100", batch=8, seq=1024, count=8, tokens=2e9,
                                usd_per_device_hour=2.5)


@pytest.fixture(scope="module")
def results(ledger: Any) -> dict[str, Any]:
    work = resolve_workload("tiny", batch=2, seq=16)
    chip = get_hardware("h100")
    return {"Ledger": ledger, "MemoryLedger": memory_report(work, chip),
            "TraceReport": trace_report(work), "RooflineRun": roofline_report(work, chip),
            "TraceSummary": ledger.trace,
            "Trace": trace(lambda x: x @ x, torch.ones(4, 4, device="meta"))}


def test_every_result_displays_as_a_well_formed_fragment_of_tables(results: dict[str, Any]
                                                                   ) -> None:
    for name, result in results.items():
        assert type(result).__name__ == name
        html = result._repr_html_()
        assert not html.lstrip().lower().startswith(("<!doctype", "<html")), name
        assert "<script" not in html, name  # renders untrusted, as in any front end
        parts = outline(html)
        assert parts.opened.get("table", 0) >= 1, name
        assert all(headers > 0 for headers in parts.headers_per_table), name


def test_the_ledger_display_is_small_and_has_its_headline_tables_and_plots(ledger: Any) -> None:
    html = ledger._repr_html_()
    # before: the whole report page with plotly inlined, 6,201,787 bytes for this ledger
    assert len(html.encode()) < LEDGER_LIMIT_BYTES
    parts = outline(html)
    assert parts.ids[:1] == ["headline"]
    assert {"roofline", "memory-timeline"} <= set(parts.ids)
    assert parts.opened["svg"] == 2 and parts.opened["table"] >= 5
    # the memory plot keeps its text as text: its title and labels are searchable
    assert "memory over one step" in html and "live memory (GiB)" in html


def _headline(html: str) -> str:
    start = html.index("id='headline'")
    return html[start:html.index("</section>", start)]


def test_the_headline_says_the_ledgers_own_figures(ledger: Any) -> None:
    fit, run = ledger.memory.fit, ledger.run
    # second path: the fields formatted here, found in the first block of the display and of
    # the report page
    usable = fit.device_memory_bytes - fit.reserve_bytes  # 80 GB less the reserve
    expected = [
        "fits" if fit.fits_replicated else "does not fit",
        format_bytes(fit.replica_peak_bytes, "auto"),
        format_bytes(abs(usable - fit.replica_peak_bytes), "auto"),
        format_bytes(usable, "auto"),
        format_bytes(fit.reserve_bytes, "auto"),
        format_duration(ledger.step_time_s) + " expected",
        format_duration(ledger.roofline.ideal_time_s) + " at the roofline bound",
        "MFU</dt><dd>" + format_sci(ledger.mfu, 3) + " expected",
        f"{ledger.cluster_tokens_per_s:,.0f} tokens/s",
        f"{run.days:,.4g} days",
        f"${run.cost_usd:,.2f}",
    ]
    from tensorledger.report.html import ledger_report_html

    for html in (ledger._repr_html_(), ledger_report_html(ledger)):
        head = _headline(html)
        for figure in expected:
            assert figure in head, figure
    # the figures themselves, by hand: the peak fits on an 80 GB device with room to spare
    assert fit.fits_replicated and fit.replica_peak_bytes < usable < 80e9
    assert run.days == pytest.approx(run.time_s / 86_400)


def test_the_report_opens_with_the_headline_and_sets_tables_as_tables(ledger: Any) -> None:
    from tensorledger.report.html import ledger_report_html

    page = ledger_report_html(ledger)
    body = page[page.index("<body"):]
    first_block = body.index("id='headline'")
    assert first_block < body.index("<table") and first_block < body.index("id=\"roofline\"")
    assert "<pre" not in body.split("id=\"roofline\"", 1)[0]  # no terminal text above the plots
    parts = outline(body[body.index(">") + 1:body.rindex("</body>")])
    assert parts.opened["table"] >= 5 and all(h > 0 for h in parts.headers_per_table)


def test_every_display_renders_in_chromium(results: dict[str, Any], tmp_path: Path) -> None:
    from tests.ledger.test_html_report import FLAGS, _chromium

    chromium = _chromium()
    page = tmp_path / "notebook.html"
    page.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
                    + "".join(f"<div class='output' id='out-{name}'>{r._repr_html_()}</div>"
                              for name, r in results.items()) + "</body></html>")
    dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=180, check=True).stdout
    for name in results:
        block = dom.split(f'id="out-{name}"', 1)[1].split("class=\"output\"", 1)[0]
        assert "<table>" in block and "<th" in block, name
    ledger_block = dom.split('id="out-Ledger"', 1)[1].split('id="out-', 1)[0]
    assert ledger_block.count("<svg") == 2


NOTEBOOK_CELLS = [
    "import tensorledger\n"
    "from tensorledger.hardware import get_hardware\n"
    "from tensorledger.ledger import memory_report, roofline_report, trace_report\n"
    "from tensorledger.workload import resolve_workload\n"
    "work = resolve_workload('tiny', batch=2, seq=16, precision='fp32')\n"
    "a100 = get_hardware('a100')",
    "tensorledger.account('tiny', 'a100', batch=2, seq=16)",
    "memory_report(work, a100)",
    "trace_report(work)",
    "trace_report(work).summary",
    "roofline_report(work, a100)",
    "from tensorledger.workload import trace_workload\ntrace_workload(work).trace",
]


def test_a_notebook_run_by_nbclient_displays_every_result() -> None:
    """Each result as the last value of a cell of a notebook executed by nbclient in a fresh
    kernel: each cell's output is Jupyter's ``text/html`` display, with its tables; the
    ledger's under 300 kB."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)
                                               for source in NOTEBOOK_CELLS])
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    displays = []
    for cell in notebook.cells[1:]:
        (output,) = [o for o in cell.outputs if o.output_type == "execute_result"]
        displays.append(output.data["text/html"])
    for html in displays:
        parsed = outline(html)
        assert not parsed.errors and parsed.opened.get("table", 0) >= 1
    assert len(displays[0].encode()) < LEDGER_LIMIT_BYTES
