"""Two small pieces of the cost rules pinned by hand: an einsum's whole cost record, with an axis
of size 1 (allowed: it is a real shape), and how an attention kernel's optional argument is read
when it is absent, None, positional or named."""

from __future__ import annotations

import math

from tensorledger.costs.attention import kwargs_or
from tensorledger.costs.einsum import einsum_cost


def test_einsum_cost_every_field_with_a_unit_axis() -> None:
    sizes = {"b": 1, "m": 3, "k": 5, "n": 7}
    cost = einsum_cost("b m k, b k n -> b m n", sizes)
    # FLOPs 2·b·m·n·k = 2·1·3·7·5 = 210; fp32 reads (1·3·5 + 1·5·7)·4 = 200, writes 1·3·7·4 = 84
    assert (cost.pattern, cost.sizes, cost.dtype) == ("b m k, b k n -> b m n", sizes, "fp32")
    assert (cost.flops, cost.bytes_read, cost.bytes_written, cost.bytes) == (210, 200, 84, 284)
    assert math.isclose(cost.intensity_flop_per_byte, 210 / 284)


def test_an_optional_attention_argument() -> None:
    assert kwargs_or((10, 20), {}, 2, "mask") == 0  # past the end: absent
    assert kwargs_or((10, None, 30), {}, 1, "mask") == 0  # given as None: absent
    assert kwargs_or((10, 20, 30), {}, 2, "mask") == 30
    assert kwargs_or((10, 20, 30), {"mask": 4}, 2, "mask") == 4  # by name wins
