"""The planner from a model's traced per-block profile (issue 36, deliver 2).

- llama-3-70b planned from its profile (traced at 1 and 2 blocks, scaled to 80) equals the
  closed-form plan, the oracle, within 1% in every column;
- a Qwen2 config.json (an architecture the closed form does not know) and the README's factory
  plan, and ``--verify 3`` traces their top layouts with the real parallel code: per-rank
  memory and bytes sent within 5% of the profile's prediction;
- the profile's figures against the reference closed form, term by term, on tiny.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.ledger.profile import measure_profile, with_layers
from tensorledger.napkin.activations import activation_memory
from tensorledger.napkin.transformer import get_preset, parameter_count
from tensorledger.plan import FixedDims, LayoutPlan, plan_layouts
from tensorledger.plan.layouts import plan_setup
from tensorledger.plan.profile import ModelProfile
from tensorledger.plan.traffic import sent_bytes
from tensorledger.workload.source import resolve_source
from tests.conftest import assert_one_line_error

H100 = get_hardware("h100")
ROOT = Path(__file__).resolve().parents[2]
FACTORY = ROOT / "examples" / "own_model.py"

#: Qwen2's architecture (q/k/v biases, GQA, SwiGLU, untied head) at test sizes: every size
#: differs (8 heads ≠ 2 KV heads ≠ 4 layers, width 96 ≠ 12·8 head dims ≠ MLP 352 ≠ vocab 520)
QWEN2_SMALL = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 96,
               "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
               "intermediate_size": 352, "vocab_size": 520, "max_position_embeddings": 4096,
               "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": False,
               "hidden_act": "silu"}
#: Qwen2-72B's published sizes (Qwen/Qwen2-72B config.json)
QWEN2_72B = {**QWEN2_SMALL, "hidden_size": 8192, "num_hidden_layers": 80,
             "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 29568,
             "vocab_size": 152064, "max_position_embeddings": 32768}


def _write(folder: Path, config: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def llama70_profile() -> ModelProfile:
    return measure_profile(resolve_source("llama-3-70b"), seq_len=8192,
                           precision="bf16-master")


def _columns(plan: LayoutPlan) -> list[tuple[object, ...]]:
    return [(row.layout, row.choice, row.memory.total_bytes, row.time.step_s,
             row.time.tokens_per_s, row.time.mfu, row.time.hfu) for row in plan.ranked]


def _same_within(closed: LayoutPlan, traced: LayoutPlan, rel: float) -> None:
    assert len(closed.ranked) == len(traced.ranked) > 0
    for a, b in zip(_columns(closed), _columns(traced), strict=True):
        assert a[:2] == b[:2]  # the same layout, micro-batches and checkpointing, in order
        for x, y in zip(a[2:], b[2:], strict=True):
            assert y == pytest.approx(x, rel=rel), (a[0], x, y)


@pytest.mark.parametrize("fixed", [None, FixedDims(tp=8, sp=True), FixedDims(tp=8, sp=False),
                                   FixedDims(tp=4, pp=4)])
def test_llama_3_70b_from_its_profile_equals_the_closed_form(
        llama70_profile: ModelProfile, fixed: FixedDims | None) -> None:
    options = {"seq_len": 8192, "global_batch_seqs": 512, "top": 10, "fixed": fixed}
    closed = plan_layouts(get_preset("llama-3-70b"), H100, 64, **options)  # type: ignore[arg-type]
    traced = plan_layouts(llama70_profile, H100, 64, **options)  # type: ignore[arg-type]
    _same_within(closed, traced, 0.01)
    assert traced.searched == closed.searched and traced.feasible == closed.feasible
    # the bytes a rank sends, the verify column, from the profile's measured collectives
    a = plan_setup(get_preset("llama-3-70b"), H100, 64, seq_len=8192, global_batch_seqs=512)
    b = plan_setup(llama70_profile, H100, 64, seq_len=8192, global_batch_seqs=512)
    for row in closed.ranked:
        assert sent_bytes(b, row.choice).total_bytes == pytest.approx(
            sent_bytes(a, row.choice).total_bytes, rel=0.01)


def test_llama_3_70b_profile_counts(llama70_profile: ModelProfile) -> None:
    counts = parameter_count(get_preset("llama-3-70b"))
    # d = 8192: per block the two RMSNorm scales (2·8192 = 16,384) whole, the rest split
    assert llama70_profile.block.whole == 16_384
    assert llama70_profile.block.split == counts.per_layer_params - 16_384
    assert llama70_profile.params() == counts.total_params == 70_553_706_496
    assert llama70_profile.n_layers == 80


def test_tiny_profile_against_the_closed_form_by_term() -> None:
    profile = measure_profile(resolve_source("tiny"), seq_len=16, precision="fp32")
    tiny = get_preset("tiny")
    for sp in (False, True):
        for checkpointed in (False, True):
            for tp in (1, 2):
                closed = activation_memory(tiny, 1, 16, 4, checkpointed, tp=tp,
                                           sequence_parallel=sp and tp > 1)
                saved = profile.block_saved[(sp, checkpointed)].at(tp)
                assert saved * 16 == closed.per_layer_bytes, (sp, checkpointed, tp)
    # without SP a block sends its 4 all-reduces of n·d·4 (a rank of two: the payload each);
    # checkpointed the attention output's once more: 4·64·4 = 1,024 and 1,280 a token
    assert profile.tp_sent_per_token[(False, False)] == 4 * 64 * 4
    assert profile.tp_sent_per_token[(False, True)] == 5 * 64 * 4
    assert profile.tp_collectives[(False, False)] == 4


def test_with_layers_cuts_per_layer_lists(tmp_path: Path) -> None:
    source = resolve_source(str(_write(tmp_path, {**QWEN2_SMALL,
                                                   "layer_types": ["full_attention"] * 4})))
    one = with_layers(source, 1)
    assert one.hf_config is not None
    assert one.hf_config["num_hidden_layers"] == 1
    assert one.hf_config["layer_types"] == ["full_attention"]


def _verified(cli, argv: list[str]) -> dict[str, object]:  # type: ignore[no-untyped-def]
    result = cli("plan", *argv, "--verify", "3", "--json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _check_verified(payload: dict[str, object], wanted: int) -> None:
    verified = payload["verified"]
    assert isinstance(verified, list) and len(verified) == wanted, payload.get("notes")
    for row in verified:
        for closed, traced in (("closed_total_bytes", "traced_peak_bytes"),
                               ("closed_state_bytes", "traced_state_bytes"),
                               ("closed_sent_bytes", "traced_sent_bytes")):
            assert row[closed] == pytest.approx(row[traced], rel=0.05), (row["layout"], closed)


def test_qwen2_config_plans_and_its_top_3_verify(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = _write(tmp_path / "qwen2-small", QWEN2_SMALL)
    # the default recipe, bf16-master, sharded over 2 (FSDP, as the layouts); the top 60
    # shown, as pipelines of every schedule (which a profiled model cannot trace) rank high
    payload = _verified(cli, ["--model", str(config), "--count", "4", "--seq", "64",
                              "--global-batch", "8seq", "--top", "60", "--fsdp", "2"])
    _check_verified(payload, 3)


# the factory's attention reshapes a linear layer's output, which FSDP2 warns of (a view)
@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module")
def test_factory_plans_and_its_top_3_verify(cli) -> None:  # type: ignore[no-untyped-def]
    payload = _verified(cli, ["--model", f"{FACTORY}:make_model", "--count", "4", "--seq",
                              "64", "--global-batch", "16seq", "--top",
                              "20", "--fsdp", "4"])
    _check_verified(payload, 3)


def test_qwen2_72b_config_plans(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = _write(tmp_path / "qwen2-72b", QWEN2_72B)
    result = cli("plan", "--model", str(config), "--count", "64", "--seq", "2048",
                 "--global-batch", "256seq", "--json")
    assert result.code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["ranked"]
    # 80 blocks of (Q 8192² + K, V 8192·1024 with biases, O 8192², MLP 3·8192·29,568, norms
    # 2·8192) and the embedding and head 152,064·8192 each, with the final norm 8192
    block = (8192 * 8192 + 8192 + 2 * (8192 * 1024 + 1024) + 8192 * 8192
             + 3 * 8192 * 29_568 + 2 * 8192)
    assert 80 * block + 2 * 152_064 * 8192 + 8192 == 72_706_203_648
    assert any("profile" in line for line in payload["assumptions"])


@pytest.mark.parametrize(("argv", "fragments"), [
    (["-m", "nope", "-g", "64seq"], ("unknown model",)),
    (["-m", "missing/config.json", "-g", "64seq"], ("config.json",)),
    (["-m", "missing.py:make", "-g", "64seq"], ("not found",)),
    (["-m", f"{FACTORY}:make_model", "-g", "64seq", "--attention", "eager"], ("--attention",)),
    (["-m", f"{FACTORY}:make_model", "-g", "64seq", "--precision", "fp9"], ("precision",)),
])
def test_bad_sources_keep_their_one_line(cli, argv: list[str], fragments: tuple[str, ...]  # type: ignore[no-untyped-def]
                                         ) -> None:
    assert_one_line_error(cli("plan", *argv), *fragments)


def test_factory_profile_is_the_model_whole() -> None:
    profile = measure_profile(resolve_source(f"{FACTORY}:make_model"), seq_len=32,
                              precision="fp32")
    # embedding 1000·96 = 96,000; qkv 96·288 + 288 = 27,936; out 96·96 + 96 = 9,312; MLP
    # 96·384 + 384 = 37,248 and 384·96 + 96 = 36,960; LayerNorm 2·96 = 192; head 96·1000
    assert 96_000 + 27_936 + 9_312 + 37_248 + 36_960 + 192 + 96_000 == 303_648
    assert profile.params() == 303_648
    assert profile.whole and profile.n_layers == 1 and profile.checkpoints == ("none",)
    assert profile.tp_indivisible(2) == ("tensor-parallel plan", 0)
    assert profile.loss_temporaries  # its own loss's, as measured


def test_qwen2_profile_derives_checkpointed_blocks(tmp_path: Path) -> None:
    source = resolve_source(str(_write(tmp_path, QWEN2_SMALL)))
    profile = measure_profile(source, seq_len=32, precision="bf16-master")
    # the workload checkpoints reference blocks only: a block keeps its input, d = 96 values
    # of 2 bytes (bf16-master) a token, whole on every rank without SP
    assert profile.block_saved[(False, True)].at(2) == 96 * 2
    assert profile.checkpoints == ("none", "full") and not profile.sequence_parallel
    # HF's plan splits the projections: per block the 2·96 RMSNorm scales stay whole, and
    # q 96·96 + 96, k and v 96·24 + 24 each, o 96·96, MLP 3·96·352 split
    assert profile.block.whole == 2 * 96
    assert profile.block.split == 96 * 96 + 96 + 2 * (96 * 24 + 24) + 96 * 96 + 3 * 96 * 352
    # checkpointed, the recomputed forward redoes one of its two all-reduces: 5 of 4
    assert profile.tp_sent_per_token[(False, True)] == profile.tp_sent_per_token[
        (False, False)] * 5 / 4
