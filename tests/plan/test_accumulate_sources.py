"""``accumulate`` for any model source: a measured profile in place of the reference model's
closed form, priced at the chip's published efficiency with the ideal bound beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.plan import plan_accumulation
from tensorledger.plan.profile import ModelProfile, Split
from tests.plan.made_up import made_up_profile

H100 = get_hardware("h100")
FACTORY = Path(__file__).resolve().parents[2] / "examples" / "own_model.py"


def _profile() -> ModelProfile:
    """The made-up model (tests/plan/made_up.py) at 512 tokens in bf16-master: 100 bytes saved
    a token and block, 50 outside them."""
    return made_up_profile(seq_len=512, precision="bf16-master",
                           block_saved={(False, False): Split(100.0)},
                           other_saved={False: Split(50.0)}, whole=True)


def test_a_profile_is_split_and_priced_by_hand() -> None:
    profile = _profile()
    assert profile.params() == 2_700 and profile.flops_per_token() == 10_200
    plan = plan_accumulation(profile, H100, seq_len=512, global_batch_seqs=4, count=1)
    assert [(o.micro_batch, o.accumulation) for o in plan.options] == [(1, 4), (2, 2), (4, 1)]
    one = plan.options[0]
    # one micro-batch of 512 tokens: 512 · (4 · 100 + 50) saved + 8 · 512 token ids
    assert one.activation_bytes == 512 * 450 + 8 * 512 == 234_496
    # FLOPs of one micro-batch 10,200 · 512 = 5,222,400 over its weight traffic, the
    # parameters read in forward and backward and the gradient accumulated: bf16-master
    # 2,700 · 2 · (2 + 2) = 21,600 bytes
    assert one.intensity_flop_per_byte == pytest.approx(5_222_400 / 21_600, rel=1e-12)
    # the ideal bound: the dense peak (989.5 TFLOP/s) against 3.35 TB/s, ridge ≈ 295 FLOP/B:
    # 241.8 is below it, so each micro-batch takes its weight traffic's time, four of them
    peak = H100.peak_flop_per_s("bf16")
    bandwidth = H100.memory_bandwidth_bytes_per_s
    assert 5_222_400 / peak < 21_600 / bandwidth
    assert one.ideal_step_s == pytest.approx(4 * 21_600 / bandwidth, rel=1e-12)
    # the expected step: the chip's published fraction at the largest matmul of the
    # micro-batch, 1 · 512 · 200 = 102,400 FLOPs (a small matmul: a few percent)
    published = H100.efficiency
    assert published is not None
    fraction = published.matmul_fraction("bf16", 102_400)
    assert one.efficiency == fraction < 0.1
    assert one.step_s == pytest.approx(
        4 * max(5_222_400 / (peak * fraction), 21_600 / bandwidth), rel=1e-12)
    assert one.mfu == pytest.approx(4 * 5_222_400 / (one.step_s * peak), rel=1e-12)
    assert plan.efficiency is None and plan.profiled and plan.peak_flop_per_s == peak
    # --efficiency overrides the published fraction; the bound stays the same
    given = plan_accumulation(profile, H100, seq_len=512, global_batch_seqs=4, count=1,
                              efficiency=0.5)
    assert given.efficiency == 0.5 and {o.efficiency for o in given.options} == {0.5}
    assert [o.ideal_step_s for o in given.options] == [o.ideal_step_s for o in plan.options]
    for option in (*plan.options, *given.options):
        assert option.ideal_step_s <= option.step_s


def test_a_preset_defaults_to_the_published_efficiency() -> None:
    from tensorledger.napkin.transformer import get_preset

    plan = plan_accumulation(get_preset("llama-3-8b"), H100, seq_len=4096,
                             global_batch_seqs=64, count=8, zero=3)
    published = H100.efficiency
    assert published is not None
    # the largest matmul of one sequence: the MLP's up-projection, 2 · 4096 · 4096 · 14,336
    chosen = plan.chosen
    assert chosen.micro_batch == 1
    assert chosen.efficiency == published.matmul_fraction("bf16", 2 * 4096 * 4096 * 14_336)
    assert chosen.efficiency < 1 and chosen.ideal_step_s < chosen.step_s
    assert not plan.profiled


# the factory's attention reshapes a linear layer's output, which FSDP2 warns of (a view)
@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module")
def test_the_cli_takes_a_factory(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("accumulate", "--model", f"{FACTORY}:make_model", "--count", "2", "--seq",
                 "64", "--global-batch", "16seq", "--json")
    assert result.code == 0, result.stderr
    payload = json.loads(result.stdout)
    options = payload["options"]
    assert [(o["micro_batch"], o["accumulation"]) for o in options] == [
        (1, 8), (2, 4), (4, 2), (8, 1)]
    # the weight traffic is fixed, the FLOPs grow with the micro-batch: intensity ∝ b
    first = options[0]["intensity_flop_per_byte"]
    assert [o["intensity_flop_per_byte"] for o in options] == pytest.approx(
        [first, 2 * first, 4 * first, 8 * first], rel=1e-12)
    assert payload["profiled"] and payload["efficiency"] is None
    assert all(o["ideal_step_s"] <= o["step_s"] for o in options)
    table = cli("accumulate", "--model", f"{FACTORY}:make_model", "--count", "2", "--seq",
                "64", "--global-batch", "16seq", "--efficiency", "0.5")
    assert table.code == 0, table.stderr
    text = " ".join(table.stdout.split())  # the terminal wraps long lines
    assert "efficiency 0.5 (--efficiency)" in text and "the model from its traced profile" in text
