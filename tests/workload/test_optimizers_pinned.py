"""The optimizers written here (Lion, 8-bit Adam) stepped by hand, their block quantisation,
and ``make_optimizer``'s settings (issue 42's mutation run of
``tensorledger.workload.optimizers``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tensorledger.workload.optimizers import (
    Adam8bit,
    Lion,
    _dequantize,
    _quantize,
    make_optimizer,
    state_tensors,
)


def _param(*values: float) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.tensor(values, dtype=torch.float32))


def test_lion_two_steps_by_hand() -> None:
    p = _param(1.0)
    idle = _param(5.0)  # no gradient: neither stepped nor given state
    opt = Lion([p, idle], lr=0.1, weight_decay=0.1)  # betas (0.9, 0.99)
    p.grad = torch.tensor([0.5])
    opt.step()
    # m = 0: update sign(0 + 0.1·(0.5 − 0)) = +1; p = 1 · (1 − 0.1·0.1) − 0.1 · 1 = 0.89;
    # m = 0 + 0.01 · 0.5 = 0.005
    assert p.item() == pytest.approx(0.89, abs=1e-6)
    assert opt.state[p]["exp_avg"].item() == pytest.approx(0.005, abs=1e-8)
    p.grad = torch.tensor([-1.0])
    opt.step()
    # update sign(0.005 + 0.1·(−1 − 0.005)) = sign(−0.0955) = −1; p = 0.89 · 0.99 + 0.1 =
    # 0.9811; m = 0.005 + 0.01·(−1 − 0.005) = −0.00505
    assert p.item() == pytest.approx(0.9811, abs=1e-6)
    assert opt.state[p]["exp_avg"].item() == pytest.approx(-0.00505, abs=1e-8)
    assert idle.item() == 5.0 and idle not in opt.state


def test_lion_and_adam8bit_defaults() -> None:
    lion = Lion([_param(1.0)])
    assert lion.defaults == {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0}
    adam = Adam8bit([_param(1.0)])
    assert adam.defaults == {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                             "weight_decay": 0.0}


def test_block_quantisation_by_hand() -> None:
    # signed: absmax 1, codes round(v · 127): 127, round(−63.5) = −64 (to even), round(31.75)
    codes, absmax = _quantize(torch.tensor([[1.0], [-0.5], [0.25]]), True)
    assert codes.dtype == torch.int8 and codes.shape == (3, 1)
    assert codes.reshape(-1).tolist() == [127, -64, 32] and absmax.tolist() == [1.0]
    back = _dequantize(codes, absmax, True)
    assert back.shape == (3, 1)
    assert back.reshape(-1).tolist() == pytest.approx([1.0, -64 / 127, 32 / 127])
    # unsigned: absmax 2, codes round(v / 2 · 255): 255, round(127.5) = 128 (to even), 0
    codes, absmax = _quantize(torch.tensor([2.0, 1.0, 0.0]), False)
    assert codes.dtype == torch.uint8 and codes.tolist() == [255, 128, 0]
    assert _dequantize(codes, absmax, False).tolist() == pytest.approx([2.0, 256 / 255, 0.0])
    # zeros keep an absmax of 1e-12 (no division by 0) and codes of 0
    codes, absmax = _quantize(torch.zeros(3), True)
    assert codes.tolist() == [0, 0, 0] and absmax.tolist() == pytest.approx([1e-12])
    # 2,049 values: two blocks of 2,048, each with its own absmax
    values = torch.ones(2049)
    values[-1] = 4.0
    codes, absmax = _quantize(values, True)
    assert absmax.tolist() == [1.0, 4.0] and codes.shape == (2049,)
    assert codes[0].item() == 127 and codes[-1].item() == 127


def _stored(values: list[float], levels: float) -> list[float]:
    """``values`` as block-wise 8-bit codes give them back: round(v / absmax · levels) ·
    absmax / levels (one block)."""
    top = max(abs(v) for v in values)
    return [round(v / top * levels) * top / levels for v in values]


def test_adam8bit_two_steps_by_hand() -> None:
    p = _param(1.0, -2.0)
    opt = Adam8bit([p], lr=0.1, weight_decay=0.1)  # betas (0.9, 0.999), eps 1e-8
    g = [0.5, -1.0]
    p.grad = torch.tensor(g)
    opt.step()
    # step 1: m = 0.1·g, v = 0.001·g²; m / (1 − 0.9) = g, v / (1 − 0.999) = g²: the update is
    # g / (|g| + 1e-8) ≈ sign g; p = p · (1 − 0.01) − 0.1 · sign g = 0.89, −1.88
    assert p.tolist() == pytest.approx([0.89, -1.88], abs=1e-6)
    state = opt.state[p]
    assert state["step"].item() == 1.0
    # m = 0.05, −0.1: absmax 0.1, int8 codes round(0.5 · 127) = 64 (63.5 to even), −127;
    # v = 0.00025, 0.001: absmax 0.001, uint8 codes round(0.25 · 255) = 64, 255
    assert state["exp_avg"].tolist() == [64, -127]
    assert state["exp_avg_sq"].tolist() == [64, 255]
    assert state["exp_avg_absmax"].tolist() == pytest.approx([0.1])
    assert state["exp_avg_sq_absmax"].tolist() == pytest.approx([0.001])
    opt.step()
    # step 2, from the moments the codes give back (a second path: plain floats)
    m = [0.9 * a + 0.1 * b for a, b in zip(_stored([0.05, -0.1], 127), g, strict=True)]
    v = [0.999 * a + 0.001 * b * b for a, b in zip(_stored([0.00025, 0.001], 255), g,
                                                    strict=True)]
    update = [(a / (1 - 0.9 ** 2)) / ((b / (1 - 0.999 ** 2)) ** 0.5 + 1e-8)
              for a, b in zip(m, v, strict=True)]
    expected = [x * 0.99 - 0.1 * u for x, u in zip([0.89, -1.88], update, strict=True)]
    assert p.tolist() == pytest.approx(expected, abs=1e-5)
    assert state["step"].item() == 2.0


@pytest.mark.parametrize(("name", "kind", "settings"), [
    ("sgd", torch.optim.SGD, {"momentum": 0, "foreach": False}),
    ("sgd-momentum", torch.optim.SGD, {"momentum": 0.9, "foreach": False}),
    ("adagrad", torch.optim.Adagrad, {"foreach": False}),
    ("rmsprop", torch.optim.RMSprop, {"foreach": False}),
    ("adam", torch.optim.Adam, {"weight_decay": 0, "foreach": False}),
    ("adamw", torch.optim.AdamW, {"weight_decay": 0.1, "foreach": False}),
    ("lion", Lion, {"weight_decay": 0.1}),
    ("adam8bit", Adam8bit, {"weight_decay": 0.1}),
])
def test_make_optimizer_builds_each_with_its_settings(name: str, kind: type,
                                                      settings: dict[str, object]) -> None:
    opt = make_optimizer(name, [_param(1.0)], lr=0.25)
    assert type(opt) is kind and opt.defaults["lr"] == 0.25
    for key, value in settings.items():
        assert opt.defaults[key] == value, key


def test_make_optimizer_runs_the_kernel_asked_for() -> None:
    assert make_optimizer("adamw", [_param(1.0)], kernel="foreach").defaults["foreach"] is True
    fused = make_optimizer("adamw", [_param(1.0)], kernel="fused").defaults
    assert fused["fused"] is True and fused["foreach"] is None
    assert make_optimizer("adamw", [_param(1.0)]).defaults["foreach"] is False  # for-loop


def test_state_tensors_are_every_tensor_of_the_state() -> None:
    p = _param(1.0)
    opt = Lion([p], lr=0.1)
    p.grad = torch.tensor([1.0])
    opt.step()
    found = state_tensors(opt)
    assert len(found) == 1 and found[0] is opt.state[p]["exp_avg"]
    # a wrapper (ZeroRedundancyOptimizer) holds its rank's optimizer as `optim`
    assert state_tensors(SimpleNamespace(optim=opt)) == found  # type: ignore[arg-type]
    # SGD without momentum keeps a None buffer: no tensor
    sgd = torch.optim.SGD([p], lr=0.1)
    sgd.step()
    assert state_tensors(sgd) == []
