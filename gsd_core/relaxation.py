"""The TV-optimal relaxation (Yin et al., NeurIPS 2024, arXiv 2411.00841; proofs/10).

One verification with draft law q, target p and T = TV(p, q). Any verifier whose output law r
has TV(r, p) <= delta accepts a draft x ~ q with probability at most

    1 - TV(q, r) <= 1 - T + delta                 (maximal coupling; triangle inequality)

and speculative sampling toward the mixture m = (1 - lam) p + lam q, lam = min(1, delta / T),
attains it:

    a(x) = min(1, lam + (1 - lam) p(x) / q(x)),   residual norm((p - q)+) (SD's: (m - q)+ is
                                                  (1 - lam) (p - q)+),

so alpha = 1 - T + min(delta, T) and the output law is m, at TV(m, p) = min(delta, T). As a
rule (``rules``): P(x) = lam q(x) + (1 - lam) p(x), Q(x) = q(x). delta = 0 is SD bit for bit
(P = p); lam = 1 (delta >= T) accepts every draft.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .exact import fixed_order_sum
from .rules import token_residual


@dataclass(frozen=True, eq=False)
class OptimalRelaxation:
    """The TV-optimal relaxation with budget ``delta`` in [0, 1] (module docstring): a float, or
    a float tensor of one budget per row that broadcasts against p's rows [...] (for ``verify``'s
    window [..., L, V]: [..., L]).

    >>> import torch
    >>> from gsd_core import acceptance_rate, output_distribution, tv_distance
    >>> p = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    >>> q = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    >>> rule = OptimalRelaxation(0.2)  # T = 0.5: alpha = 1 - 0.5 + 0.2
    >>> round(float(acceptance_rate(p, q, rule)), 12)
    0.7
    >>> round(float(tv_distance(output_distribution(p, q, rule), p)), 12)
    0.2
    """

    delta: float | Tensor

    def __post_init__(self) -> None:
        delta = self.delta
        if isinstance(delta, Tensor):
            if not delta.is_floating_point():
                raise ValueError(f"delta must be a float or a floating-point tensor, got "
                                 f"{delta.dtype}")
            if delta.numel() and not bool(((delta >= 0) & (delta <= 1)).all()):
                raise ValueError("delta (a total-variation budget per row) must lie in [0, 1]; "
                                 "NaN is refused")
        elif isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 <= delta <= 1:
            raise ValueError(f"delta (a total-variation budget) must be a number in [0, 1], got "
                             f"{delta!r}")
        else:
            object.__setattr__(self, "delta", float(delta))

    def mixing(self, p: Tensor, q: Tensor) -> Tensor:
        """lam = min(1, delta / T) per row, T = TV(p, q) (1 where T = 0): [..., 1]."""
        total = 0.5 * fixed_order_sum((p - q).abs(), keepdim=True)
        if isinstance(self.delta, Tensor):
            try:
                delta = self.delta.to(device=p.device, dtype=p.dtype).unsqueeze(-1).expand(
                    total.shape)
            except RuntimeError:
                raise ValueError(f"per-row delta of shape {tuple(self.delta.shape)} does not "
                                 f"broadcast against p's rows {tuple(p.shape[:-1])}") from None
        else:  # a tensor: a float over a tensor is computed as float * (1 / tensor), rounded twice
            delta = torch.full_like(total, self.delta)
        ratio = delta / total.clamp(min=torch.finfo(p.dtype).tiny)
        return torch.where(total > delta, ratio, torch.ones_like(ratio))

    def masses(self, p: Tensor, q: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        lam = self.mixing(p, q)
        p_x, q_x = p.gather(-1, x), q.gather(-1, x)
        return lam * q_x + (1 - lam) * p_x, q_x

    def residual_weights(self, p: Tensor, q: Tensor) -> Tensor:
        return token_residual(p, q)
