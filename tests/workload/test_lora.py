"""LoRA through peft: trainable parameters against peft's own count and a hand derivation,
gradients and optimizer state for the adapters alone, the traced memory on fake tensors
against MemTracker on a real CPU run, and bad adapter options refused in one line."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest
from torch.distributed._tools.mem_tracker import _MemRefType

from tensorledger.errors import InputError
from tensorledger.memory import build_timeline
from tensorledger.models import get_preset
from tensorledger.workload import placement, prepare, resolve_workload, trace_workload
from tensorledger.workload.spec import Lora, Workload, resolve_lora
from tests.conftest import assert_one_line_error
from tests.workload.hf_configs import TINY, write_config
from tests.workload.test_memory_oracle import _memtracker_peak

pytest.importorskip("peft")
pytest.importorskip("transformers")

LLAMA = TINY["llama"]  # hidden 40, 4 heads × head_dim 12, 2 kv heads, d_ff 72, 2 layers
RANK = 3
TARGETS = "q_proj,v_proj,down_proj"
# r · (d_in + d_out) per adapted linear, every layer:
#   q_proj 40 → 4·12 = 48: 3 · (40 + 48) = 264
#   v_proj 40 → 2·12 = 24: 3 · (40 + 24) = 192
#   down_proj 72 → 40:     3 · (72 + 40) = 336
# (264 + 192 + 336) · 2 layers = 1,584
HAND_TRAINABLE = (RANK * (40 + 48) + RANK * (40 + 24) + RANK * (72 + 40)) * 2
ADAPTER_TENSORS = 2 * 3 * 2  # A and B · 3 targets · 2 layers


def _peft_count(config: Path) -> tuple[int, int]:
    """peft's own count, on a real CPU model built straight from transformers (a second
    path: not tensorledger's build, not its fake tensors)."""
    import peft
    import transformers

    raw = {k: v for k, v in LLAMA.items() if k != "model_type"}
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        wrapped = peft.get_peft_model(model, peft.LoraConfig(
            r=RANK, lora_alpha=RANK, target_modules=TARGETS.split(",")))
    trainable, total = wrapped.get_nb_trainable_parameters()
    return trainable, total


def _work(tmp_path: Path, **changes: object) -> Workload:
    path = write_config(tmp_path, "llama")
    options: dict[str, object] = {"batch": 2, "seq": 12, "precision": "fp32",
                                  "device": "fake", "lora": resolve_lora(RANK, TARGETS)}
    return resolve_workload(str(path), **(options | changes))  # type: ignore[arg-type]


def test_trainable_parameters_equal_peft_and_the_hand_count(tmp_path: Path) -> None:
    run = trace_workload(_work(tmp_path))
    peft_trainable, peft_total = _peft_count(tmp_path / "config.json")
    assert HAND_TRAINABLE == 1_584
    assert peft_trainable == HAND_TRAINABLE
    assert run.trainable_params == HAND_TRAINABLE
    # every weight is still there, frozen: the model's own plus the adapters
    assert run.params == peft_total
    assert dict(run.param_parts)["lora adapters"] == HAND_TRAINABLE
    assert any("1,584 trainable parameters of" in note for note in run.assumptions)


def test_default_targets_are_peft_s_for_the_model_type_and_said(tmp_path: Path) -> None:
    run = trace_workload(_work(tmp_path, lora=resolve_lora(RANK)))
    # peft's defaults for llama: q_proj, v_proj; (264 + 192) · 2 layers = 912
    assert run.trainable_params == (RANK * (40 + 48) + RANK * (40 + 24)) * 2 == 912
    assert any("q_proj, v_proj (peft's defaults for llama)" in note
               for note in run.assumptions)


def test_the_reference_preset_takes_query_and_value() -> None:
    tiny = get_preset("tiny")
    work = resolve_workload("tiny", batch=2, seq=8, precision="fp32", device="fake",
                            lora=resolve_lora(5))
    run = trace_workload(work)
    per_layer = 5 * (tiny.d_model + tiny.q_dim) + 5 * (tiny.d_model + tiny.kv_dim)
    assert run.trainable_params == per_layer * tiny.n_layers


def test_gradients_and_optimizer_state_only_for_the_adapters(tmp_path: Path) -> None:
    work = _work(tmp_path)
    with placement("fake") as target:
        step = prepare(work, target)
        assert step.optimizer is not None
        # the optimizer holds the adapters alone
        assert sum(p.numel() for p in step.optimizer.params) == HAND_TRAINABLE
        step.run()  # the first step makes AdamW's state
        step.loss().backward()  # type: ignore[no-untyped-call]
        grads = [p.grad for p in step.parameters if p.grad is not None]
        frozen = [p for p in step.parameters if not p.requires_grad]
        assert all(p.grad is None for p in frozen) and frozen
        # fp32 gradients: 4 bytes · 1,584 = 6,336
        assert sum(g.numel() * g.element_size() for g in grads) == 4 * HAND_TRAINABLE
        states = step.optimizer.state_tensors()
        # AdamW's two fp32 moments (8 bytes · 1,584 = 12,672) and one 4-byte step counter
        # per adapter tensor (12 · 4 = 48)
        assert sum(t.numel() * t.element_size() for t in states) == (
            8 * HAND_TRAINABLE + 4 * ADAPTER_TENSORS)
    # the traced step tags them so
    run = trace_workload(work)
    timeline = build_timeline(run.trace, run.tags)
    assert max(p.gradient_bytes for p in timeline.points) == 4 * HAND_TRAINABLE
    assert timeline.peak.optimizer_state_bytes == 8 * HAND_TRAINABLE + 4 * ADAPTER_TENSORS
    # the frozen base is still parameters, in its stored dtype (fp32 here)
    assert timeline.peak.parameter_bytes == 4 * run.params


def test_mixed_bf16_keeps_the_base_in_fp32_and_adapters_trained(tmp_path: Path) -> None:
    run = trace_workload(_work(tmp_path, precision="mixed-bf16"))
    timeline = build_timeline(run.trace, run.tags)
    assert timeline.peak.parameter_bytes == 4 * run.params
    assert max(p.gradient_bytes for p in timeline.points) == 4 * HAND_TRAINABLE




@pytest.mark.parametrize("model", ["llama", "tiny"])
def test_memory_on_fake_equals_memtracker_on_real_cpu(tmp_path: Path, model: str) -> None:
    if model == "llama":
        work = _work(tmp_path)
    else:
        work = resolve_workload("tiny", batch=3, seq=16, precision="fp32", device="fake",
                                lora=resolve_lora(4, "query,value,down"))
    run = trace_workload(work)
    ours = build_timeline(run.trace, run.tags).peak
    theirs = _memtracker_peak(work, 2)
    assert ours.total_bytes == pytest.approx(theirs["Total"], rel=0.005)
    assert ours.parameter_bytes == theirs[_MemRefType.PARAM]
    assert ours.gradient_bytes == theirs[_MemRefType.GRAD]
    assert ours.saved_activation_bytes == pytest.approx(theirs[_MemRefType.ACT], rel=0.005)


def test_the_spec_checks_rank_and_names() -> None:
    assert resolve_lora(None) is None
    assert resolve_lora(16, " q_proj , v_proj,q_proj") == Lora(16, 16, ("q_proj", "v_proj"))
    for rank in (0, -1, 1 << 17):
        with pytest.raises(InputError, match="--lora must be between 1 and 65,536"):
            resolve_lora(rank)
    for bad in ("", "q_proj,", "q proj", "٣"):
        with pytest.raises(InputError, match="--lora-targets takes module names"):
            resolve_lora(8, bad)
    with pytest.raises(InputError, match="give the adapters' rank with --lora R"):
        resolve_lora(None, "q_proj")


def test_bad_options_are_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = write_config(tmp_path, "llama")
    assert_one_line_error(cli("trace", "-m", "tiny", "--lora", "0"), "--lora", "got 0")
    assert_one_line_error(cli("memory", "-m", str(config), "--lora", "8", "--lora-targets",
                              "q_proj,wq"), "no module 'wq'", "q_proj, k_proj, v_proj")
    assert_one_line_error(cli("trace", "-m", "tiny", "--lora", "8", "--lora-targets",
                              "q_proj"), "no module 'q_proj'", "query, key, value")
    assert_one_line_error(cli("trace", "-m", "tiny", "--lora", "8", "--lora-targets",
                              "token_embedding"), "names a Embedding, not a linear layer")
    assert_one_line_error(cli("trace", "-m", "tiny", "--lora", "8", "--tp", "2"),
                          "--lora is traced on one device, under --fsdp or --dp")


def test_without_peft_the_option_names_the_extra(cli, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:  # type: ignore[no-untyped-def]
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "peft" else find_spec(name, *a))
    assert_one_line_error(cli("trace", "-m", "tiny", "--lora", "8"),
                          "pip install 'tensorledger[lora]'")
    # no --lora: nothing asks for peft
    assert cli("trace", "-m", "tiny", "--seq", "8", "--step", "forward").code == 0


def test_the_cli_runs_a_lora_step(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = write_config(tmp_path, "llama")
    result = cli("trace", "-m", str(config), "--lora", "3", "--lora-targets", TARGETS,
                 "--seq", "12", "--batch", "2")
    assert result.code == 0, result.stderr
    assert "1,584 trainable parameters" in result.stdout.replace("\n", " ")
