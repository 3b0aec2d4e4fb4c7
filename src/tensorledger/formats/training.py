"""The error of an fp8 training recipe's casts, measured by the precision lab on one fixed
test tensor, so that a traced fp8 step can state beside its format what the format costs in
accuracy.

The test tensor stands for activations whose tokens differ in scale: 256 rows of 1,024
values, row *r* drawn from N(0, σ_r²) with log2 σ_r spread evenly over [-8, 8] (seed 0).  One
scale per tensor must fit the largest row, so the small rows lose precision; one scale per row
(``rowwise``) fits each.  The scale is amax / (largest finite value) as the lab's ``fp8``
scheme takes it (torchao also rounds it down to a power of two, which moves the figure by a
fraction of a dB).

>>> e = fp8_recipe_error("rowwise")
>>> e.element_format, e.granularity, round(e.sqnr_db), round(100 * e.mean_rel_error, 1)
('fp8_e4m3fn', 'row', 32, 2.3)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

from tensorledger.errors import UnknownNameError
from tensorledger.formats.blocks import quantize_per_tensor
from tensorledger.formats.metrics import ErrorMetrics, error_metrics

__all__ = ["FP8_RECIPES", "TEST_TENSOR", "Fp8RecipeError", "fp8_recipe_error"]

#: torchao float8 recipe → (the forward operands' format, the gradients' format, scale
#: granularity), from ``Float8LinearConfig.from_recipe_name``.
FP8_RECIPES: dict[str, tuple[str, str, str]] = {
    "tensorwise": ("fp8_e4m3fn", "fp8_e5m2", "tensor"),
    "rowwise": ("fp8_e4m3fn", "fp8_e4m3fn", "row"),
}

#: The test tensor in words, printed beside the figure.
TEST_TENSOR = "256 rows of N(0, σ²), log2 σ evenly over [-8, 8]"
_ROWS, _COLS = 256, 1024


@dataclass(frozen=True)
class Fp8RecipeError:
    """The lab's figure for one recipe: SQNR of its forward cast and of its gradient cast."""

    recipe: str
    element_format: str
    gradient_format: str
    granularity: str  # "tensor" or "row": one scale for each
    sqnr_db: float
    mean_rel_error: float  # over the nonzero values: where the small rows' loss shows
    gradient_sqnr_db: float

    def describe(self) -> str:
        grads = ("" if self.gradient_format == self.element_format else
                 f"; {self.gradient_format} gradients SQNR {self.gradient_sqnr_db:.1f} dB")
        return (f"precision lab: {self.element_format}, one scale per {self.granularity}: "
                f"SQNR {self.sqnr_db:.1f} dB, mean relative error "
                f"{100 * self.mean_rel_error:.2f}%{grads} (on {TEST_TENSOR})")


def _test_tensor() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(_ROWS, _COLS, generator=generator, dtype=torch.float32)
    sigma = torch.exp2(torch.linspace(-8.0, 8.0, _ROWS, dtype=torch.float32))
    return values * sigma[:, None]


def _error(x: torch.Tensor, element: str, granularity: str) -> ErrorMetrics:
    if granularity == "tensor":
        dequantized = quantize_per_tensor(x, element).dequantized
    else:
        dequantized = torch.stack([quantize_per_tensor(row, element).dequantized for row in x])
    return error_metrics(x, dequantized)


@cache
def fp8_recipe_error(recipe: str) -> Fp8RecipeError:
    """The precision lab's SQNR of ``recipe``'s casts on :data:`TEST_TENSOR`."""
    if recipe not in FP8_RECIPES:
        raise UnknownNameError("fp8 recipe", recipe, FP8_RECIPES)
    element, gradient, granularity = FP8_RECIPES[recipe]
    x = _test_tensor()
    forward = _error(x, element, granularity)
    return Fp8RecipeError(recipe=recipe, element_format=element, gradient_format=gradient,
                          granularity=granularity, sqnr_db=forward.sqnr_db,
                          mean_rel_error=forward.mean_rel_error,
                          gradient_sqnr_db=_error(x, gradient, granularity).sqnr_db)
