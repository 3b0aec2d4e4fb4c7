"""Fixtures the formats tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def float64_default() -> Iterator[None]:
    """torch's default dtype float64 for the test, as it was after."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
