"""``torch_threads(n)``: run a block with ``n`` torch threads (None: unchanged), restoring the old count after."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

__all__ = ["torch_threads"]


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
