"""Any Hugging Face architecture from a config.json: built by transformers on fake tensors,
counted exactly (FlopCounterMode on real CPU tensors as the oracle for matmuls, the SDPA
formulas by hand for the fused attention kernel it has no rule for)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.trace.aggregate import hand_attention
from tensorledger.workload import placement, prepare, resolve_workload, trace_workload
from tests.workload.hf_configs import TINY, write_config

pytest.importorskip("transformers")

B, S = 2, 12


def _work(path: Path, device: str, step: str = "forward-backward"):  # type: ignore[no-untyped-def]
    return resolve_workload(str(path), batch=B, seq=S, step=step, precision="fp32",
                            device=device)


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_fake_equals_cpu_op_for_op_and_matmuls_equal_flop_counter(
        tmp_path: Path, model_type: str) -> None:
    import transformers

    path = write_config(tmp_path / model_type, model_type)
    fake = trace_workload(_work(path, "fake"))
    cpu = trace_workload(_work(path, "cpu"))
    assert fake.work.source.builder == "transformers"

    def rows(run):  # type: ignore[no-untyped-def]
        return [(r.op, r.module, r.phase, r.category, r.flops, r.flops_causal_halved,
                 r.bytes_read, r.bytes_written, r.output_shapes) for r in run.trace.records]

    assert rows(fake) == rows(cpu)
    assert fake.trace.uncovered == {}
    # Parameters: transformers' own module on real tensors, counted independently.
    config = transformers.AutoConfig.for_model(**TINY[model_type])
    reference = transformers.AutoModelForCausalLM.from_config(config)
    assert fake.params == sum(p.numel() for p in dict.fromkeys(reference.parameters()))
    # Matmul FLOPs of the same forward+backward, real CPU tensors, torch's own counter.
    work = _work(path, "cpu")
    with placement("cpu") as target:
        step = prepare(work, target)
        with FlopCounterMode(display=False) as oracle:
            step.run()
    theirs = {str(op): n for op, n in oracle.get_flop_counts()["Global"].items()}
    ours: Counter[str] = Counter()
    for r in fake.trace.records:
        if r.category == "matmul":
            ours[r.op.rsplit(".", 1)[0]] += r.flops
    assert dict(ours) == theirs


@pytest.mark.parametrize(("model_type", "head_dim"), [
    ("llama", 12), ("qwen2", 10), ("mistral", 12), ("gemma", 12)])
def test_fused_attention_equals_the_sdpa_formula(tmp_path: Path, model_type: str,
                                                 head_dim: int) -> None:
    # FlopCounterMode has no rule for the fused CPU kernel: these FLOPs it would miss.
    run = trace_workload(_work(write_config(tmp_path, model_type), "fake"))
    heads, layers = 4, 2
    forward = sum(r.flops for r in run.trace.records
                  if r.category == "attention" and r.phase == "forward")
    backward = sum(r.flops for r in run.trace.records
                   if r.category == "attention" and r.phase == "backward")
    # Q·Kᵀ and P·V: 2 · (2·B·H·S·S·D) per layer; llama: 4·2·4·12·12·12 = 55,296 per layer.
    assert forward == layers * 4 * B * heads * S * S * head_dim
    assert backward == forward * 5 // 2  # the kernel recomputes the scores: 2.5×
    halved = sum(r.flops_causal_halved for r in run.trace.records if r.category == "attention")
    assert halved * 2 == forward + backward


def test_gpt2_hand_written_attention_is_recognised_and_flagged(tmp_path: Path) -> None:
    run = trace_workload(_work(write_config(tmp_path, "gpt2"), "fake"))
    found = hand_attention(run.trace)
    assert found is not None
    assert found.modules == ("GPT2LMHeadModel.transformer.h.0.attn",
                             "GPT2LMHeadModel.transformer.h.1.attn")
    # Forward: Q·Kᵀ and P·V, 2·B·H·S·S·D each = 2·2·4·12·12·10 = 23,040; backward twice that;
    # two layers: 2 · 3 · 2 · 23,040 = 276,480, none halved.
    assert found.flops == 2 * 3 * 2 * (2 * B * 4 * S * S * 10)
    assert run.trace.flops == run.trace.flops_causal_halved  # nothing halved


def test_llama_config_on_fake_in_mixed_bf16_runs_its_matmuls_in_bf16(tmp_path: Path) -> None:
    work = resolve_workload(str(write_config(tmp_path, "llama")), batch=B, seq=S)
    assert work.device == "fake" and work.precision.name == "mixed-bf16"
    run = trace_workload(work)
    matmuls = [r for r in run.trace.records if r.category == "matmul" and r.phase == "forward"]
    assert matmuls and all(r.output_dtypes == ("bf16",) for r in matmuls)


def test_a_value_asked_for_names_the_module_and_the_device_that_works(  # type: ignore[no-untyped-def]
        tmp_path: Path, cli) -> None:
    from tests.conftest import assert_one_line_error

    factory = tmp_path / "asks.py"
    factory.write_text(
        "import torch\n"
        "class Asks(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.embed = torch.nn.Embedding(11, 6)\n"
        "    def forward(self, ids):\n"
        "        if ids.max().item() > 10:  # data-dependent, as HF masking code is\n"
        "            raise ValueError('id out of range')\n"
        "        return self.embed(ids)\n"
        "def make():\n"
        "    return Asks()\n")
    result = cli("trace", "--model", f"{factory}:make", "--seq", "8", "--precision", "fp32",
                 "--device", "meta")
    assert_one_line_error(result, "in Asks", "meta device cannot answer", "use --device fake",
                          "asks.py:7")
    # A Python `if` on a value: fake tensors cannot answer either, real ones can.
    result = cli("trace", "--model", f"{factory}:make", "--seq", "8", "--precision", "fp32",
                 "--device", "fake")
    assert_one_line_error(result, "DataDependentOutputException", "use --device cpu")
    assert cli("trace", "--model", f"{factory}:make", "--seq", "8", "--precision", "fp32",
               "--device", "cpu", "--json").code == 0


def test_rope_parameters_of_transformers_5_are_read(tmp_path: Path) -> None:
    from tensorledger.workload import resolve_source

    path = write_config(tmp_path, "llama", rope_parameters={"rope_type": "default",
                                                             "rope_theta": 123456.0})
    source = resolve_source(str(path))
    assert source.config is not None and source.config.rope_theta == 123456.0


def test_an_unknown_model_type_is_one_line(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import assert_one_line_error

    path = write_config(tmp_path, "llama", model_type="not-a-model")
    assert_one_line_error(cli("models", str(path)), "'not-a-model' is not known")
    assert_one_line_error(cli("trace", "--model", str(path), "--seq", "8"),
                          "model_type 'not-a-model' is not known to the installed transformers")
