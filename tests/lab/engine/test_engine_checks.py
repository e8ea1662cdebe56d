"""The engine's split checks (gsd_lab.engine.checks: shapes first, then verdicts on the values
read back in one host sync) refuse every bad window gsd_core.check_window refuses, with the same
message; and its plain-Python ``broadcast_shapes`` is torch's."""

from __future__ import annotations

import pytest
import torch

import gsd_core
from gsd_lab.engine import verify
from gsd_lab.engine.checks import broadcast_shapes

P = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]],
                 dtype=torch.float64)  # L + 1 = 3 rows
Q = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]], dtype=torch.float64)
D = torch.tensor([1, 2])
U = torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64)
META = "meta"


def _set(x: torch.Tensor, value: float, dtype: torch.dtype | None = None) -> torch.Tensor:
    y = x.clone()
    y[0, 1] = value
    return y if dtype is None else y.to(dtype)


BAD = {  # name: (p, q, draft_tokens, uniforms, generator)
    "p NaN": (_set(P, float("nan")), Q, D, U, None),
    "q inf": (P, _set(Q, float("inf")), D, U, None),
    "p negative": (_set(P, -0.1), Q, D, U, None),
    "p off float64": (P * (1 + 1e-6), Q, D, U, None),
    "q off float32": (P, (Q * 1.01).float(), D, U, None),
    "q off bfloat16": (P, _set(Q, 0.4, torch.bfloat16), D, U, None),
    "p integers": (P.long(), Q, D, U, None),
    "q a list": (P, Q.tolist(), D, U, None),
    "vocabularies": (P, Q[:, :3] / Q[:, :3].sum(-1, keepdim=True), D, U, None),
    "p one row": (P[0], Q, D, U, None),
    "p L + 2 rows": (torch.cat([P, P[:1]]), Q, D, U, None),
    "drafts shape": (P, Q, D[:1], U, None),
    "drafts floats": (P, Q, D.double(), U, None),
    "draft id V": (P, Q, torch.tensor([1, 4]), U, None),
    "draft id -1": (P, Q, torch.tensor([-1, 2]), U, None),
    "drafts device": (P, Q, D.to(META), U, None),
    "q device": (P, Q.to(META), D, U, None),
    "batch shapes": (P.expand(3, 3, 4), Q.expand(2, 2, 4), D.expand(3, 2), None, None),
    "uniforms shape": (P, Q, D, U[:2], None),
    "uniforms float16": (P, Q, D, U.half(), None),
    "uniform 1": (P, Q, D, torch.tensor([0.5, 1.0, 0.5], dtype=torch.float64), None),
    "uniform NaN": (P, Q, D, torch.tensor([0.5, float("nan"), 0.5]), None),
    "uniforms device": (P, Q, D, U.to(META), None),
    "two sources": (P, Q, D, U, torch.Generator().manual_seed(0)),
    "p complex": (P.to(torch.complex128), Q, D, U, None),
    "drafts bool": (P, Q, torch.tensor([True, False]), U, None),
    "q negative": (P, _set(Q, -0.2), D, U, None),
    "p off float16": (P.half() * 1.05, Q, D, U, None),
    "uniform NaN float32": (P, Q, D, torch.tensor([0.5, float("nan"), 0.5]).float(), None),
    "p inf and vocabularies": (_set(P, float("inf")), Q[:, :3] / Q[:, :3].sum(-1, keepdim=True),
                               D, U, None),
}


def _message(call) -> str:
    with pytest.raises(ValueError) as error:
        call()
    return str(error.value)


@pytest.mark.parametrize("name", list(BAD))
def test_the_engine_refuses_what_gsd_core_refuses_with_its_message(name):
    p, q, drafts, uniforms, generator = BAD[name]
    want = _message(lambda: gsd_core.check_window(p, q, drafts, uniforms, generator))
    assert want == _message(lambda: gsd_core.verify(p, q, drafts, uniforms=uniforms,
                                                    generator=generator))
    assert _message(lambda: verify(p, q, drafts, uniforms=uniforms, generator=generator)) == want


def test_a_good_window_passes_both():
    """Negative control: the bank's base window is valid."""
    gsd_core.check_window(P, Q, D, U)
    expected = gsd_core.verify(P, Q, D, uniforms=U).tokens
    assert torch.equal(verify(P, Q, D, uniforms=U).tokens, expected)


@pytest.mark.parametrize("shapes", [(), ((3,),), ((2, 1, 4), (3, 1)), ((0,), (1,)),
                                    ((5, 0, 2), (1, 2)), ((1,), (4, 1, 1), (1, 6, 1), (7,)),
                                    ((), (2, 3))])
def test_broadcast_shapes_is_torch_s(shapes):
    """Plain Python (no aten op, and torch's own imports SymPy): torch's result, zero sizes and
    mixed ranks included."""
    assert broadcast_shapes(*shapes) == torch.broadcast_shapes(*shapes)


@pytest.mark.parametrize("shapes", [((0,), (3,)), ((2, 3), (4, 3)), ((2,), (1, 3))])
def test_broadcast_shapes_refuses_what_torch_refuses(shapes):
    with pytest.raises(RuntimeError):
        torch.broadcast_shapes(*shapes)
    with pytest.raises(RuntimeError, match="do not broadcast"):
        broadcast_shapes(*shapes)
