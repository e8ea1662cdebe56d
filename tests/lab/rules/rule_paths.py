"""A rule's lab paths against its gsd_core reference: which path diverged, and at which case."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

# (name, path, reference name, reference, tolerance): a path's output must equal its
# reference's bit for bit (tolerance 0) or within ``tolerance`` absolute.
RulePath = tuple[str, Callable[[Any], Tensor], str, Callable[[Any], Tensor], float]


def divergences(paths: Sequence[RulePath], cases: Sequence[Any]) -> list[str]:
    """Each path that is not its reference, named with its first differing case."""
    found = []
    for name, path, reference_name, reference, tolerance in paths:
        for i, case in enumerate(cases):
            got, want = path(case), reference(case)
            same = got.shape == want.shape and got.dtype == want.dtype and (
                torch.equal(got, want) if tolerance == 0
                else torch.allclose(got, want, rtol=0, atol=tolerance))
            if not same:
                within = "" if tolerance == 0 else f" by more than {tolerance}"
                found.append(f"{name} differs from {reference_name}{within} at case {i} ({case})")
                break
    return found
