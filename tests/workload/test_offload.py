"""Activation offloading (--offload activations, torch's save_on_cpu): the bytes moved to the
host and back derived by hand on a small net, set against a real CPU run of torch's own
save_on_cpu on a model built straight from transformers, kept apart from the device's memory
and priced on the chip's host link; bad options refused in one line."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.ledger.memory import memory_of
from tensorledger.memory import build_timeline
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.offload import ActivationOffload
from tensorledger.workload.spec import resolve_lora, resolve_offload
from tests.conftest import assert_one_line_error
from tests.workload.hf_configs import TINY, write_config


def test_bytes_each_way_by_hand_on_a_small_net() -> None:
    torch.manual_seed(0)
    first, second = torch.nn.Linear(8, 16), torch.nn.Linear(16, 2)
    x = torch.randn(4, 8)  # no gradient of its own
    offload = ActivationOffload(stand_in=True)
    with offload.hooks():
        loss = second(F.gelu(first(x))).square().sum()
    # what autograd saves, fp32:
    #   first (addmm): x for the weight's gradient (4·8·4 = 128); not its weight (x needs none)
    #   gelu: its input (4·16·4 = 256)
    #   second (addmm): its input (4·16·4 = 256) and its weight, for the input's gradient
    #                   (2·16·4 = 128)
    #   square: its input (4·2·4 = 32)
    hand = 128 + 256 + 256 + 128 + 32
    assert offload.to_host_bytes == hand == 800
    loss.backward()  # type: ignore[no-untyped-call]
    assert offload.to_device_bytes == hand  # each unpacked once, copied back to the device


def _torch_save_on_cpu_bytes(config: dict[str, object], batch: int, seq: int
                             ) -> tuple[int, int]:
    """A real CPU step of the model built straight from transformers (not by tensorledger),
    under torch's own save_on_cpu; the bytes it packed and unpacked, counted around its hooks."""
    import transformers

    raw = {k: v for k, v in config.items() if k != "model_type"}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**raw))
    tokens = torch.zeros(batch, seq, dtype=torch.long)
    hooks = torch.autograd.graph.save_on_cpu(pin_memory=True)
    pack, unpack = hooks.pack_hook, hooks.unpack_hook
    moved = [0, 0]

    def counted_pack(tensor: torch.Tensor) -> object:
        packed = pack(tensor)
        moved[0] += packed[1].untyped_storage().nbytes()
        return packed

    def counted_unpack(packed: tuple[torch.device, torch.Tensor]) -> torch.Tensor:
        moved[1] += packed[1].untyped_storage().nbytes()
        return unpack(packed)

    with torch.autograd.graph.saved_tensors_hooks(counted_pack, counted_unpack):
        logits = model(tokens).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))
    loss.backward()  # type: ignore[no-untyped-call]
    return moved[0], moved[1]


def test_traced_bytes_equal_a_real_cpu_run_of_torch_save_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    path = write_config(tmp_path, "llama")
    work = resolve_workload(str(path), batch=2, seq=12, precision="fp32", device="fake",
                            step="forward-backward", offload=resolve_offload("activations"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        run = trace_workload(work)
    assert run.offloaded_bytes is not None
    to_host, to_device = _torch_save_on_cpu_bytes(TINY["llama"], 2, 12)
    assert run.offloaded_bytes == (to_host, to_device)
    # on the device nothing stays saved; on the host, everything saved is live at once at the
    # end of the forward
    timeline = build_timeline(run.trace, run.tags)
    assert max(p.saved_activation_bytes for p in timeline.points) == 0
    assert timeline.host_peak_bytes == to_host
    assert all(p.total_bytes + p.host_bytes >= p.total_bytes for p in timeline.points)


def test_device_and_host_apart_and_priced_on_the_host_link(tmp_path: Path) -> None:
    path = write_config(tmp_path, "llama")
    # forward and backward of 2 × 48 tokens: the saved activations set the peak
    common = {"batch": 2, "seq": 48, "precision": "fp32", "device": "fake",
              "step": "forward-backward"}
    kept = trace_workload(resolve_workload(str(path), **common))  # type: ignore[arg-type]
    moved = trace_workload(resolve_workload(str(path), offload=("activations",),
                                            **common))  # type: ignore[arg-type]
    h100 = get_hardware("h100")
    ledger = memory_of(moved, h100)
    assert ledger.offload is not None and moved.offloaded_bytes is not None
    to_host, to_device = moved.offloaded_bytes
    # PCIe 5.0 x16: 64 GB/s per direction (the H100 datasheet's 128 GB/s both ways)
    assert ledger.offload.to_host_s == pytest.approx(to_host / 64e9)
    assert ledger.offload.to_device_s == pytest.approx(to_device / 64e9)
    assert ledger.offload.host_link == "PCIe 5.0 x16 of h100-sxm"
    # the device no longer holds the saved activations; the host holds them instead
    assert memory_of(kept, h100).saved_activation_bytes > 0
    assert ledger.saved_activation_bytes == 0 and ledger.host_peak_bytes == to_host
    assert ledger.peak_bytes < memory_of(kept, h100).peak_bytes
    # a chip without a host link: the bytes stand, unpriced
    tpu = memory_of(moved, get_hardware("tpu-v5e"))
    assert tpu.offload is not None and tpu.offload.to_host_s is None


def test_the_spec_checks_offload() -> None:
    assert resolve_offload(None) == ()
    assert resolve_offload(" Activations ,activations") == ("activations",)
    assert resolve_offload("params, activations") == ("params", "activations")
    with pytest.raises(InputError, match="unknown offload 'bogus'"):
        resolve_offload("bogus")
    with pytest.raises(InputError, match="a forward step saves nothing"):
        resolve_workload("tiny", step="forward", offload=("activations",))
    with pytest.raises(InputError, match="use --device fake"):
        resolve_workload("tiny", device="meta", offload=("activations",))
    # a preset without autocast is traced on fake tensors when offloading (meta cannot copy)
    assert resolve_workload("tiny", precision="fp32", offload=("activations",)).device == "fake"
    from tensorledger.workload.layout import resolve_layout

    with pytest.raises(InputError, match="drop --pp or --offload"):
        resolve_workload("tiny", batch=2, layout=resolve_layout(pp=2, microbatches=2),
                         offload=("activations",))
    with pytest.raises(InputError, match="drop --offload or --qlora"):
        resolve_workload("gpt2", offload=("activations",), lora=resolve_lora(8, qlora=True))


def test_bad_options_are_one_line(cli) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("memory", "-m", "tiny", "--offload", "params", "--dp", "2"),
                          "CPUOffloadPolicy")
    assert_one_line_error(cli("trace", "-m", "tiny", "--offload", "disk"), "offload", "disk",
                          "activations")
    result = cli("memory", "-m", "tiny", "--seq", "16", "--offload", "activations",
                 "--hardware", "h100")
    assert result.code == 0, result.stderr
    assert "to the host in forward" in " ".join(result.stdout.split())
