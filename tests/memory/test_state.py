"""Parameters, gradients, master and optimizer state of a real step equal napkin's recipe
bytes exactly, for every optimizer × precision pair."""

from __future__ import annotations

import pytest
import torch

from tensorledger.models import build_model, get_preset
from tensorledger.napkin import OPTIMIZERS, PRECISIONS, bytes_per_param, recipe_bytes
from tensorledger.workload import resolve_workload
from tensorledger.workload.measured import measure_step_memory
from tensorledger.workload.optimizers import make_optimizer
from tensorledger.workload.precision import RecipeOptimizer, param_dtype
from tensorledger.workload.state import measure_state, state_after_step

PAIRS = [(o, p) for o in OPTIMIZERS for p in PRECISIONS]


def _expected(model: torch.nn.Module, optimizer: str, precision: str) -> tuple[int, ...]:
    r = recipe_bytes(precision, optimizer, [p.numel() for p in model.parameters()])
    return r.params_bytes, r.grads_bytes, r.master_bytes, r.optimizer_bytes, r.total_bytes


@pytest.mark.parametrize(("optimizer", "precision"), PAIRS)
def test_tiny_full_step_on_cpu_matches_recipe(optimizer: str, precision: str) -> None:
    # A whole real step on CPU tensors: forward (autocast for mixed-bf16), loss, backward, step.
    config = get_preset("tiny")
    work = resolve_workload("tiny", batch=2, seq=8, optimizer=optimizer, precision=precision,
                            device="cpu")
    measured = measure_step_memory(work).state
    model = build_model(config, "meta")
    assert (measured.params_bytes, measured.grads_bytes, measured.master_bytes,
            measured.optimizer_bytes, measured.total_bytes) == _expected(model, optimizer,
                                                                          precision)


@pytest.fixture(scope="module")
def llama_8b() -> dict[torch.dtype, torch.nn.Module]:
    config = get_preset("llama-3-8b")
    return {dtype: build_model(config, "meta", dtype) for dtype in (torch.float32,
                                                                    torch.bfloat16)}


@pytest.mark.parametrize(("optimizer", "precision"), PAIRS)
def test_llama_3_8b_on_meta_matches_recipe(llama_8b: dict[torch.dtype, torch.nn.Module],
                                           optimizer: str, precision: str) -> None:
    model = llama_8b[param_dtype(precision)]
    state = state_after_step(model, optimizer, precision)
    assert (state.params_bytes, state.grads_bytes, state.master_bytes, state.optimizer_bytes,
            state.total_bytes) == _expected(model, optimizer, precision)
    # 291 tensors: 32 layers · 9 + token table, final norm, head; 8,030,261,248 parameters.
    assert state.n_tensors == 32 * 9 + 3
    assert state.n_params == 8_030_261_248


def test_recipe_bytes_agrees_with_bytes_per_param_up_to_per_tensor_terms() -> None:
    numels = [4096 * 4096, 4096]
    for optimizer in OPTIMIZERS:
        for precision in PRECISIONS:
            exact = recipe_bytes(precision, optimizer, numels)
            average = bytes_per_param(precision, optimizer)
            per_tensor = exact.step_bytes
            assert exact.total_bytes - per_tensor == pytest.approx(
                average.total_bytes_per_param * sum(numels), rel=1e-3)


def test_lecture_recipe_adamw_bytes_by_hand() -> None:
    # bf16 params 2 + bf16 grads 2 + fp32 moments 4 + 4 = 12 bytes/param, + 4 per step counter.
    model = torch.nn.Linear(10, 10, bias=False, device="meta", dtype=torch.bfloat16)
    state = state_after_step(model, "adamw", "lecture")
    assert (state.params_bytes, state.grads_bytes, state.optimizer_bytes) == (
        2 * 100, 2 * 100, 8 * 100 + 4)


def test_tied_weight_counts_once() -> None:
    config = get_preset("gpt2")
    model = build_model(config, "meta")
    assert model.head.weight is model.token_embedding.weight
    recipe = RecipeOptimizer(model.parameters(), "sgd", "fp32")
    # 124,439,808 parameters · 4 bytes; the shared head adds nothing.
    assert measure_state(model, recipe).params_bytes == 124_439_808 * 4


def test_master_copy_tracks_the_bf16_weights() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8, bias=False, dtype=torch.bfloat16)
    recipe = RecipeOptimizer(model.parameters(), "sgd", "bf16-master", lr=0.5)
    model.weight.grad = torch.ones_like(model.weight)
    before = model.weight.detach().float().clone()
    recipe.step()
    (master,) = recipe.master_tensors()
    torch.testing.assert_close(master, before - 0.5)
    assert torch.equal(model.weight, master.bfloat16())


def test_fp32_states_step_matches_plain_adamw_in_fp32() -> None:
    # bf16-fp32-states: the update computed in fp32 from fp32 states, written into bf16.
    torch.manual_seed(0)
    weight = torch.randn(6, 6)
    grad = torch.randn(6, 6)
    reference = torch.nn.Parameter(weight.bfloat16().float())
    reference.grad = grad.bfloat16().float()
    make_optimizer("adamw", [reference]).step()
    model = torch.nn.Linear(6, 6, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        model.weight.copy_(weight)
    model.weight.grad = grad.bfloat16()
    RecipeOptimizer(model.parameters(), "adamw", "bf16-fp32-states").step()
    assert torch.equal(model.weight, reference.detach().bfloat16())


@pytest.mark.parametrize("name", ["lion", "adam8bit"])
def test_own_optimizers_descend(name: str) -> None:
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.full((3000,), 2.0))
    optimizer = make_optimizer(name, [p], lr=0.05)
    for _ in range(20):
        optimizer.zero_grad()
        (p ** 2).sum().backward()
        optimizer.step()
    assert float(p.detach().abs().max()) < 2.0 - 0.5
