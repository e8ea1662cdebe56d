"""Total variation distance, the quantity that fixes the acceptance rate of speculative decoding."""

from __future__ import annotations

from torch import Tensor

from ._validation import check_pair


def tv_distance(p: Tensor, q: Tensor) -> Tensor:
    """TV(p, q) = 1/2 * sum_x |p(x) - q(x)| over the last dimension.

    p, q: [..., V] probability vectors (broadcast). Returns [...] in [0, 1]. For standard
    speculative sampling the acceptance rate is exactly 1 - TV(p, q) (proofs/02).
    """
    p, q = check_pair(p, q)
    return 0.5 * (p - q).abs().sum(-1)
