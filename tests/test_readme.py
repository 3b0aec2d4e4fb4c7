"""The README's "From Python" section runs: its ```python blocks, in order, in one namespace.

Each figure the blocks print is then set beside a second path: hand arithmetic for the FLOPs
of the user's module, the napkin recipe for the memory state, the sum of per-op predictions
for the roofline, and the objects' own fields for what their summaries print.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

from tensorledger.napkin.transformer import forward_flops_per_token

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str, section: str) -> list[str]:
    """The ```python blocks of one ``## `` section of a markdown text, in order."""
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)


@pytest.fixture(scope="module")
def readme_run() -> tuple[dict[str, Any], str]:
    blocks = python_blocks(README.read_text(encoding="utf-8"), "From Python")
    assert len(blocks) == 5
    namespace: dict[str, Any] = {"__name__": "readme"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, str(README), "exec"), namespace)
    return namespace, out.getvalue()


def test_own_module_flops_by_phase_by_hand(readme_run: tuple[dict[str, Any], str]) -> None:
    ns, _ = readme_run
    batch, d_in, d_hidden = 32, 256, 1024
    matmul = 2 * batch * d_in * d_hidden  # one Linear's product: 2·32·256·1024 = 16,777,216
    out, hidden = batch * d_in, batch * d_hidden  # 8,192 and 32,768 elements
    # forward: two addmm (the bias add rides along, as in FlopCounterMode), GELU at 20 FLOPs
    # an element, square and mean at 1 an element of the output
    forward = 2 * matmul + 20 * hidden + out + out  # 33,554,432 + 655,360 + 16,384
    # backward: the second Linear's input and weight gradients and the first's weight
    # gradient (nothing asks for the input's), the mean's div, square's pow and two muls at 1
    # an element, GELU's backward at 30, and the bias gradients' sums (n − 1 adds a column)
    backward = (3 * matmul + 4 * out + 30 * hidden + (batch - 1) * d_in
                + (batch - 1) * d_hidden)
    assert ns["flops_by_phase"] == {"forward": forward, "backward": backward}
    assert forward == 34_226_176 and backward == 51_387_136
    assert sum(ns["flops_by_phase"].values()) == ns["trace"].flops


def test_summaries_print_the_fields(readme_run: tuple[dict[str, Any], str]) -> None:
    ns, printed = readme_run
    trace = ns["trace"]
    line = repr(trace)
    assert line in printed and len(line) < 200
    assert f"{len(trace.records):,} ops" in line
    shown_flops = float(re.search(r"([0-9.e]+) FLOPs", line).group(1))  # type: ignore[union-attr]
    assert shown_flops == pytest.approx(trace.flops, rel=5e-4)  # four significant digits
    memory = ns["memory"]
    assert repr(memory) in printed and len(repr(memory)) < 400
    shown_peak = re.search(r"peak ([0-9.]+) ([KMG]B)", repr(memory))
    assert shown_peak is not None
    scale = {"KB": 1e3, "MB": 1e6, "GB": 1e9}[shown_peak.group(2)]
    assert float(shown_peak.group(1)) * scale == pytest.approx(memory.peak_bytes, rel=5e-4)
    live = memory.by_category()
    for category, nbytes in live.items():  # every category live at the peak, by its bytes
        if nbytes:
            assert re.search(rf"{category} [0-9.]+ [A-Za-z]*B", repr(memory))


def test_memory_by_category_adds_up(readme_run: tuple[dict[str, Any], str]) -> None:
    ns, _ = readme_run
    memory, ledger = ns["memory"], ns["ledger"]
    live = ns["live_at_peak"]
    assert sum(live.values()) == memory.peak_bytes
    assert set(live) == {"parameter", "gradient", "optimizer_state", "saved_activation",
                         "kv_cache", "temporary"}
    assert live["kv_cache"] == 0  # a training step caches no keys and values
    parts = {p.category: p for p in memory.parts()}
    # fp32 AdamW on GPT-2: 4 bytes a parameter each for weights and gradients, 8 for the two
    # moments and a 4-byte step count per tensor: 124,439,808 × 4 = 497,759,232; tensors:
    # 12 layers × (2 norms × 2 + Q, K, V, O × 2 + 2 MLP × 2 = 16) + wte + wpe + 2 = 196
    assert parts["parameter"].measured_bytes == ledger.params * 4 == 497_759_232
    assert parts["gradient"].measured_bytes == ledger.params * 4
    assert parts["optimizer_state"].measured_bytes == ledger.params * 8 + 4 * 196
    for part in ("parameter", "gradient", "optimizer_state"):
        assert parts[part].measured_bytes == parts[part].closed_form_bytes


def test_roofline_is_the_sum_of_its_ops(readme_run: tuple[dict[str, Any], str]) -> None:
    ns, printed = readme_run
    ledger, a100 = ns["ledger"], ns["a100"]
    assert ledger.step_time_s == pytest.approx(sum(o.time_s for o in ledger.roofline.ops))
    assert ledger.roofline.ideal_time_s == pytest.approx(
        sum(o.ideal_time_s for o in ledger.roofline.ops))
    assert ledger.roofline.ideal_time_s <= ledger.step_time_s  # no real step is faster
    assert f"expected {ledger.step_time_s * 1e3:.3f} ms (MFU {ledger.mfu:.3f})" in printed
    assert a100.flops == ns["trace"].flops
    assert a100.time_s == pytest.approx(sum(t.time_s for t in a100.by_category))


def test_the_outputs_shown_are_printed(readme_run: tuple[dict[str, Any], str]) -> None:
    _, printed = readme_run
    shown = []
    for block in python_blocks(README.read_text(encoding="utf-8"), "From Python"):
        # "# → text" starts a shown output, "#   text" continues it
        for line in block.splitlines():
            if line.startswith("# → "):
                shown.append(line.removeprefix("# → "))
            elif line.startswith("#   ") and shown:
                shown[-1] += " " + line.removeprefix("#   ")
    assert len(shown) == 7
    flat = " ".join(printed.split())
    for output in shown:
        assert output in flat


def test_tables_render(readme_run: tuple[dict[str, Any], str]) -> None:
    _, printed = readme_run
    for title in ("Memory of one train step", "Predicted time by category", "By phase"):
        assert title in printed


def test_napkin_days_by_hand(readme_run: tuple[dict[str, Any], str]) -> None:
    ns, _ = readme_run
    # 6 · 70e9 · 15e12 = 6.3e24 FLOPs at 1024 × 0.5 × 989.5e12 FLOP/s (H100 SXM dense bf16)
    seconds = 6 * 70e9 * 15e12 / (1024 * 0.5 * 989.5e12)
    assert ns["days"] == pytest.approx(seconds / 86_400)  # 143.93 days


def test_trace_model_against_the_closed_form(readme_run: tuple[dict[str, Any], str]) -> None:
    ns, printed = readme_run
    run = ns["run"]
    assert repr(run) in printed and len(repr(run)) < 400
    assert f"{run.params:,} params" in repr(run) and repr(run.trace) in repr(run)
    config = run.work.source.config
    per_token = forward_flops_per_token(config, seq_len=run.work.seq, convention="full")
    matrix = (per_token.attention_projections_flops + per_token.attention_scores_flops
              + per_token.attention_values_flops + per_token.mlp_flops + per_token.head_flops)
    traced = sum(r.flops for r in run.trace.records if r.category in ("matmul", "attention"))
    assert traced == matrix * run.tokens


def test_the_readme_quotes_the_real_summary(readme_run: tuple[dict[str, Any], str]) -> None:
    ns, _ = readme_run
    prose = " ".join(README.read_text(encoding="utf-8").split())
    assert f"`print(trace)` below prints `{ns['trace']!r}`" in prose



def _sample_script() -> Any:
    import importlib.util

    path = README.parent / "scripts" / "readme_sample.py"
    spec = importlib.util.spec_from_file_location("readme_sample", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_main_jobs_sample_is_what_the_command_prints() -> None:
    """The README's sample of the main job is the command's output today, at 120 columns
    (``python scripts/readme_sample.py`` writes it anew)."""
    module = _sample_script()
    text = README.read_text(encoding="utf-8")
    assert module.readme_with(module.command_output(), text) == text


def test_the_fine_tune_fit_sample_is_what_the_commands_print() -> None:
    """"Will my fine-tune fit?" quotes the peak and the fit of each of its eight commands as
    they print them today (llama-3-8b on fake or meta tensors: minutes, not seconds)."""
    pytest.importorskip("peft")
    pytest.importorskip("torchao")
    module = _sample_script()
    text = README.read_text(encoding="utf-8")
    assert len(module.FIT_COMMANDS) == 8
    assert module.readme_with(module.fits_sample(), text, module.FIT_MARKER) == text


def test_the_outputs_the_readme_quotes_are_printed(cli: Any) -> None:
    """Every "`tensorledger ARGS` says "QUOTE"" of the README: the command, run, prints the
    quote (whitespace aside)."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    quoted = re.findall(r'`tensorledger ([^`]+)` says "([^"]+)"', text)
    assert quoted, "the README quotes at least one command's output"
    for args, quote in quoted:
        result = cli(*args.split())
        assert result.code == 0, result.stderr
        assert quote in " ".join(result.stdout.split()), (args, quote)
