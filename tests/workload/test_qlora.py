"""QLoRA: LoRA adapters over a base stored in torchao's 4-bit NF4.

The bytes of an NF4 weight derived by hand from the format (codes, block scales, their
double-quantised factors); the traced memory on fake tensors against MemTracker on a real CPU
run; the dequantisation's FLOPs derived by hand op by op; gradients and optimizer state for
the adapters alone; bad options refused in one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from torch.distributed._tools.mem_tracker import _MemRefType

from tensorledger.errors import InputError
from tensorledger.memory import build_timeline
from tensorledger.trace.aggregate import class_total
from tensorledger.workload import placement, prepare, resolve_workload, trace_workload
from tensorledger.workload.qlora import DEQUANTIZE_CLASS, flat_tensors, quantize_base
from tensorledger.workload.spec import Workload, resolve_lora
from tests.conftest import assert_one_line_error
from tests.workload.hf_configs import write_config
from tests.workload.test_memory_oracle import _memtracker_peak

pytest.importorskip("peft")
pytest.importorskip("torchao")
pytest.importorskip("transformers")

# A tiny HF Llama whose linears NF4 can hold (each weight a multiple of 64 · 256 = 16,384
# elements): hidden 128, 4 heads × head_dim 64 = 256 (≠ hidden), 2 kv heads × 64 = 128,
# d_ff 384, vocabulary 97 (the head, kept), 2 layers.
SIZES = {"hidden_size": 128, "intermediate_size": 384, "head_dim": 64}
# elements of each quantised weight, per layer: q 128·256, k 128·128, v 128·128, o 256·128,
# gate, up 128·384, down 384·128
WEIGHTS = (32_768, 16_384, 16_384, 32_768, 49_152, 49_152, 49_152)
LAYERS = 2
RANK = 4
TARGETS = "q_proj,v_proj"
# r · (d_in + d_out): q 4 · (128 + 256) = 1,536, v 4 · (128 + 128) = 1,024; × 2 layers
HAND_TRAINABLE = (RANK * (128 + 256) + RANK * (128 + 128)) * LAYERS
# left in the stored dtype: embeddings and head 97 · 128 each, 2 norms a layer and the final
# one of 128
HAND_KEPT = 2 * 97 * 128 + (2 * LAYERS + 1) * 128


def nf4_bytes(numel: int, itemsize: int) -> int:
    """The bytes torchao's NF4 keeps for a weight of ``numel`` elements built from
    ``itemsize``-byte floats (torchao's defaults: blocks of 64, 256 scales per factor):

    - the codes, 4 bits each, two to a byte:              numel / 2      (uint8)
    - one absmax scale per block of 64, quantised to int8: numel / 64     (int8)
    - one factor per 256 of those scales:                  numel / 16,384 floats, except that
      with exactly one such block torchao keeps the whole expanded row of 256 it took it from
      (``.contiguous()`` of a one-element view of it copies nothing)
    - the mean the scales were centred on:                 1 float
    - the 16-value NF4 code book:                          16 floats
    """
    factors = numel // (64 * 256)
    factor_floats = 256 if factors == 1 else factors
    return numel // 2 + numel // 64 + (factor_floats + 1 + 16) * itemsize


def test_nf4_bytes_per_parameter_by_hand() -> None:
    # an 8B model's 4096 × 14,336 MLP weight in bf16: 58,720,256 elements
    numel = 4096 * 14_336
    hand = numel // 2 + numel // 64 + 2 * (numel // 16_384) + 2 + 2 * 16
    assert hand == 29_360_128 + 917_504 + 7_168 + 34 == 30_284_834
    assert nf4_bytes(numel, 2) == hand
    # 0.5 + 1/64 + 2/16,384 bytes per parameter = 4.1260 bits (bitsandbytes' NF4 with double
    # quantisation: 4 + 8/64 + 32/16,384 = 4.127 bits, its second-level factors in fp32)
    assert hand / numel * 8 == pytest.approx(4 + 8 / 64 + 16 / 16_384, abs=1e-5)
    with placement("fake"):
        layer = torch.nn.Linear(4096, 14_336, bias=False, dtype=torch.bfloat16)
        base = quantize_base(torch.nn.Sequential(layer))
        parts = flat_tensors(layer.weight)
        assert sum(p.untyped_storage().nbytes() for p in parts) == hand
    assert base.quantized == ("0",) and base.quantized_params == numel
    # the small weights of the tests, both branches of the factor count
    for numel, itemsize in ((16_384, 4), (32_768, 4), (49_152, 2)):
        with placement("cpu"):
            weight = torch.nn.Linear(numel // 128, 128, bias=False,
                                     dtype={4: torch.float32, 2: torch.bfloat16}[itemsize])
            quantize_base(torch.nn.Sequential(weight))
            parts = flat_tensors(weight.weight)
            assert sum(p.untyped_storage().nbytes() for p in parts) == \
                nf4_bytes(numel, itemsize), numel


def _work(tmp_path: Path, precision: str = "fp32", **changes: object) -> Workload:
    path = write_config(tmp_path, "llama", **SIZES)
    options: dict[str, object] = {"batch": 2, "seq": 12, "precision": precision,
                                  "device": "fake",
                                  "lora": resolve_lora(RANK, TARGETS, qlora=True)}
    return resolve_workload(str(path), **(options | changes))  # type: ignore[arg-type]


@pytest.mark.parametrize(("precision", "itemsize"), [("fp32", 4), ("bf16", 2)])
def test_parameter_bytes_by_hand(tmp_path: Path, precision: str, itemsize: int) -> None:
    run = trace_workload(_work(tmp_path, precision))
    peak = build_timeline(run.trace, run.tags).peak
    quantized = LAYERS * sum(nf4_bytes(n, itemsize) for n in WEIGHTS)
    # peft keeps the adapters in fp32 whatever the base (its autocast_adapter_dtype)
    hand = quantized + HAND_KEPT * itemsize + HAND_TRAINABLE * 4
    assert peak.parameter_bytes == hand
    if precision == "fp32":
        # codes + scales + factors + mean + code book, a layer:
        #   q, o:            2 · (16,384 + 512 + 2 · 4 + 4 + 16 · 4)     = 33,944
        #   k, v:            2 · (8,192 + 256 + 256 · 4 + 4 + 16 · 4)    = 19,080
        #   gate, up, down:  3 · (24,576 + 768 + 3 · 4 + 4 + 16 · 4)     = 76,272
        # two layers: 2 · 129,296 = 258,592; kept 25,472 · 4; adapters 5,120 · 4
        assert hand == 258_592 + 101_888 + 20_480 == 380_960
    assert run.trainable_params == HAND_TRAINABLE == 5_120
    assert any("14 linears (491,520 parameters) in 4-bit NF4" in note
               and "lm_head (the output head)" in note for note in run.assumptions)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_memory_on_fake_equals_memtracker_on_real_cpu(tmp_path: Path, precision: str) -> None:
    work = _work(tmp_path, precision)
    run = trace_workload(work)
    ours = build_timeline(run.trace, run.tags).peak
    theirs = _memtracker_peak(work, 2)
    assert ours.total_bytes == pytest.approx(theirs["Total"], rel=0.005)
    # the 4-bit base, its scales and the adapters: byte for byte
    assert ours.parameter_bytes == theirs[_MemRefType.PARAM]
    assert ours.gradient_bytes == theirs[_MemRefType.GRAD]
    assert ours.optimizer_state_bytes == theirs[_MemRefType.OPT]


def test_gradients_and_optimizer_state_only_for_the_adapters(tmp_path: Path) -> None:
    work = _work(tmp_path)
    run = trace_workload(work)
    timeline = build_timeline(run.trace, run.tags)
    # fp32 gradients of the 5,120 adapter parameters: 20,480 bytes
    assert max(p.gradient_bytes for p in timeline.points) == 4 * HAND_TRAINABLE
    # AdamW: two fp32 moments (8 · 5,120) and a 4-byte step per adapter tensor (2 · 2 · 2 = 8)
    assert timeline.peak.optimizer_state_bytes == 8 * HAND_TRAINABLE + 4 * 8
    with placement("fake") as target:
        step = prepare(work, target)
        nf4 = [p for p in step.parameters if type(p).__name__ == "NF4Tensor"]
        assert len(nf4) == LAYERS * len(WEIGHTS) and not any(p.requires_grad for p in nf4)


def test_dequantisation_flops_by_hand(tmp_path: Path) -> None:
    run = trace_workload(_work(tmp_path))
    total = class_total(run.trace, DEQUANTIZE_CLASS)
    assert total is not None
    # torchao's get_original_weight on N elements: codes >> 4 and & 0b1111 (N/2 each), the
    # int8 scales divided by their factor and the mean added (N/64 each), each half of the
    # codes times its scale (N/2 each); the casts, look-ups and stack move bytes only:
    # 2·N + N/32 FLOPs a dequantisation
    def once(n: int) -> int:
        return n // 2 + n // 2 + n // 64 + n // 64 + n

    per_layer = sum(once(n) for n in WEIGHTS)
    # every weight in forward; in backward again, but for layer 0's q, k and v, whose input
    # (the embedding of a frozen table) needs no gradient
    assert total.forward_flops == LAYERS * per_layer
    assert total.backward_flops == LAYERS * per_layer - sum(once(n) for n in WEIGHTS[:3])
    assert total.modules == LAYERS * len(WEIGHTS)
    assert any(note.startswith("NF4 dequantisation (14 weights") for note in run.assumptions)


def test_a_model_with_no_linear_nf4_can_hold_is_refused_in_one_line(tmp_path: Path) -> None:
    # the tiny Llama of the LoRA tests: hidden 40, its weights 40 · 48 = 1,920 elements, ...
    path = write_config(tmp_path, "llama")
    work = resolve_workload(str(path), batch=1, seq=4, device="fake",
                            lora=resolve_lora(2, "q_proj", qlora=True))
    with pytest.raises(InputError, match=r"--qlora found no linear of LlamaForCausalLM to "
                                         r"store in NF4 \(model.layers.0.self_attn.q_proj: "
                                         r"1,920 elements, not a multiple of 16,384"):
        trace_workload(work)


def test_the_spec_checks_qlora() -> None:
    assert resolve_lora(8, qlora=True) is not None
    assert resolve_lora(8, qlora=True).nf4  # type: ignore[union-attr]
    assert not resolve_lora(8).nf4  # type: ignore[union-attr]
    with pytest.raises(InputError, match="give the adapters' rank with --lora R too"):
        resolve_lora(None, qlora=True)


def test_bad_options_are_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("trace", "-m", "tiny", "--qlora"), "--qlora",
                          "--lora R")
    assert_one_line_error(cli("memory", "-m", "tiny", "--qlora", "--lora", "0"),
                          "--lora must be between 1")
    assert_one_line_error(cli("trace", "-m", "tiny", "--qlora", "--lora", "8", "--seq", "8"),
                          "--qlora found no linear of TransformerLM",
                          "not a multiple of 16,384")
    assert_one_line_error(cli("account", "-m", "gpt2", "--qlora", "--lora", "8", "--fsdp",
                              "2"), "--qlora is traced on one device")


def test_without_torchao_the_option_names_the_extra(cli, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:  # type: ignore[no-untyped-def]
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchao" else find_spec(name, *a))
    assert_one_line_error(cli("trace", "-m", "gpt2", "--lora", "8", "--qlora"),
                          "pip install 'tensorledger[ao]'")
    # plain LoRA asks nothing of torchao
    assert_one_line_error(cli("trace", "-m", "tiny", "--lora", "0"), "--lora must be")


def test_the_cli_runs_a_qlora_step(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = write_config(tmp_path, "llama", **SIZES)
    for command in ("trace", "memory", "roofline", "account"):
        result = cli(command, "-m", str(config), "--lora", "4", "--lora-targets", TARGETS,
                     "--qlora", "--seq", "12", "--batch", "2")
        assert result.code == 0, (command, result.stderr)
        assert result.stderr == "", command  # torchao's import log held back
        if command in ("trace", "account"):
            text = result.stdout.replace("\n", " ")
            assert "QLoRA through peft" in text and "NF4 dequantisation" in text, command


@pytest.mark.parametrize("qlora", [True, False], ids=["qlora", "lora"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "mixed-bf16"])
def test_the_closed_form_of_the_state_equals_the_trace(tmp_path: Path, precision: str,
                                                       qlora: bool) -> None:
    from tensorledger.ledger.memory import memory_of
    from tensorledger.napkin.adapters import nf4_bytes as napkin_nf4_bytes

    work = _work(tmp_path, precision, lora=resolve_lora(RANK, TARGETS, qlora=qlora))
    ledger = memory_of(trace_workload(work))
    state = {part.category: part for part in ledger.parts()}
    for category in ("parameter", "gradient", "optimizer_state"):
        assert state[category].closed_form_bytes == state[category].measured_bytes, category
    # the napkin's NF4 bytes are this file's hand derivation, both factor branches
    for numel in (*WEIGHTS, 4096 * 14_336):
        for itemsize in (2, 4):
            assert napkin_nf4_bytes(numel, itemsize) == nf4_bytes(numel, itemsize)
    assert state["saved_activation"].closed_form_bytes is None  # a frozen base's: none here
