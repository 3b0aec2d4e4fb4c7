"""Meta-Llama-3-8B's config.json, built by transformers on fake tensors at seq 8192: it runs on
this machine in well under 1.5 GiB and its matmuls equal the llama-3-8b preset's closed form."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tensorledger.napkin.transformer import forward_flops_per_token, get_preset
from tests.models.test_loaders import LLAMA3_JSON

CHILD = """
import json, sys
from contextlib import redirect_stdout
from io import StringIO
from tensorledger.cli import main
out = StringIO()
with redirect_stdout(out):
    code = main(["trace", "--model", sys.argv[1], "--seq", "8192", "--json"])
# VmHWM is this process's own peak (ru_maxrss can carry the parent's over fork and exec)
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
peak = int(status["VmHWM"].split()[0]) * 1024
print(json.dumps({"code": code, "doc": json.loads(out.getvalue()), "peak_rss_bytes": peak}))
"""


def test_llama_3_8b_config_json_traces_on_fake_in_under_1_5_gib(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3_JSON))
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True,
                          text=True, timeout=600, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0
    doc = result["doc"]
    assert doc["built_by"].startswith("Hugging Face transformers") and doc["device"] == "fake"
    assert result["peak_rss_bytes"] < 1.5 * 2**30
    matmul = {c["category"]: c["flops"] for c in doc["summary"]["by_category"]}["matmul"]
    # Forward matmuls per token of the preset (projections, MLP, head; attention apart), and
    # backward twice that: 3 · 8192 tokens · per token.
    closed = forward_flops_per_token(get_preset("llama-3-8b"), 8192, "full")
    per_token = (closed.attention_projections_flops + closed.mlp_flops + closed.head_flops)
    assert matmul == 3 * 8192 * per_token
    assert doc["params"] == 8_030_261_248
