"""The HTML report of ``account --html``, opened in headless Chromium (Debian's chromium; CI
installs it): every plot rendered, the screenshot is not blank, and the page asks the network
for nothing (Chromium's own update and account pings aside)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tensorledger.report.html import PLOT_IDS

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=15000")
#: Hosts Chromium itself talks to (component updates, account checks), never the page.
BROWSER_HOSTS = re.compile(r"^(https?://)?([a-z0-9-]+\.)*(google\.com|googleapis\.com|"
                           r"gstatic\.com)(/|$)")


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (see .ci/run)")
        pytest.skip("chromium is not installed here")
    return found


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tensorledger.cli import main

    folder = tmp_path_factory.mktemp("html")
    path = folder / "report.html"
    assert main(["account", "--model", "tiny", "--batch", "2", "--seq", "32", "--hardware",
                 "h100", "--html", str(path)]) == 0
    return path


def test_the_page_is_self_contained(report: Path) -> None:
    text = report.read_text()
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"?https?:|<img[^>]+src=\"?https?:",
                         text)
    for plot in PLOT_IDS:
        assert f'id="{plot}"' in text


def test_every_plot_renders_in_chromium_with_no_network_request(report: Path,
                                                                tmp_path: Path) -> None:
    chromium = _chromium()
    shot, log = tmp_path / "shot.png", tmp_path / "net.json"
    subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'a'}",
                    f"--log-net-log={log}", "--window-size=1280,3600",
                    f"--screenshot={shot}", report.as_uri()],
                   capture_output=True, timeout=180, check=True)
    dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'b'}", "--dump-dom",
                          report.as_uri()], capture_output=True, text=True, timeout=180,
                         check=True).stdout
    # plotly turns each figure's div into a plot container with its SVG layers
    assert dom.count('class="plot-container plotly"') == len(PLOT_IDS)
    for plot in PLOT_IDS:
        div = dom.split(f'id="{plot}"', 1)[1][:4000]
        assert "main-svg" in div, plot
    assert dom.count('class="trace scatter') >= 5  # roofline categories + roof, 5 memory
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1280, 3600)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 200  # text, lines, fills: not blank
    requests = set()
    for event in json.loads(log.read_text()).get("events", []):
        url = str(event.get("params", {}).get("url", ""))
        if url.startswith(("http:", "https:", "ws:", "wss:")):
            requests.add(url)
    assert {u for u in requests if not BROWSER_HOSTS.match(u)} == set()


def test_html_needs_a_writable_path(cli: Any, tmp_path: Path) -> None:
    from tests.conftest import assert_one_line_error

    assert_one_line_error(cli("account", "--model", "tiny", "--seq", "8", "--html",
                              str(tmp_path / "no" / "r.html")), "cannot write")
    assert_one_line_error(cli("account", "--model", "tiny", "--seq", "8", "--html",
                              str(tmp_path / "r.png")), ".html")
