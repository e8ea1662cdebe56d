"""The roofline cost model of one forward, in weight-read times: the one place it is stated.

A 7B-class forward over W input tokens with a CFG batch of c reads the weights once (b bytes x P
parameters at bandwidth B: the weight-read time t_read = b P / B) and computes 2 x c x P FLOPs per
token (peak F): its time is max(t_read, 2 c P W / F). In weight-read units,

    cost(W) = max(1, W / W_ridge),     W_ridge = t_read F / (2 c P)

flat up to the ridge W_ridge. A decode's modelled time is the sum of cost(W) over its forwards.
The defaults are an H200's data sheet (HBM3e bandwidth, dense bf16 peak) and bf16 weights; P and c
come from a measured shapes record (``benchmarks/results/gpu_lumina_shapes_h200.jsonl``).

>>> model = Roofline(parameters=7_013_158_912, cfg_batch=2)
>>> round(model.ridge_tokens)
103
>>> model.forward_cost(64), round(model.forward_cost(125), 3)
(1.0, 1.209)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

BANDWIDTH = 4.8e12  # H200 HBM3e bytes / s (NVIDIA's data sheet)
PEAK_FLOPS = 989e12  # H200 dense bf16 FLOP / s (NVIDIA's data sheet, without sparsity)
BYTES_PER_PARAMETER = 2  # bf16


@dataclass(frozen=True)
class Roofline:
    """The cost model of the module docstring for P = ``parameters`` and c = ``cfg_batch``."""

    parameters: int
    cfg_batch: int
    bandwidth: float = BANDWIDTH
    peak_flops: float = PEAK_FLOPS
    bytes_per_parameter: int = BYTES_PER_PARAMETER

    @property
    def weight_read_seconds(self) -> float:
        return self.bytes_per_parameter * self.parameters / self.bandwidth

    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.cfg_batch * self.parameters

    @property
    def ridge_tokens(self) -> float:
        """W_ridge: the input tokens at which compute time equals the weight read."""
        return self.weight_read_seconds * self.peak_flops / self.flops_per_token

    def forward_cost(self, tokens: float) -> float:
        """cost(W) = max(1, W / W_ridge), in weight-read times."""
        return max(1.0, tokens / self.ridge_tokens)

    def decode_cost(self, processed: Iterable[float]) -> float:
        """A decode's modelled time: the sum of ``forward_cost`` over its forwards' input tokens."""
        return sum(self.forward_cost(w) for w in processed)

    @classmethod
    def from_record(cls, record: dict) -> "Roofline":
        """From a ``gpu_lumina_shapes`` record ("parameters", "cfg_batch")."""
        return cls(parameters=int(record["parameters"]), cfg_batch=int(record["cfg_batch"]))
