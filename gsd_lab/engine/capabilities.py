"""What the lab asks of a rule beyond gsd_core's ``masses`` and ``residual_weights``: optional
capabilities, one generic function each, dispatched on the rule's class
(``functools.singledispatch``; a subclass gets its base's registration).

    unscaled(rule)              the rule under Amplify's scaling        generic: the rule itself
    uses_support(rule)          verify reads ``support=`` ids           generic: False
    window_masses(...)          (P, Q) of verify's drafts               generic: rule.masses
    support_masses(...)         (P, Q) of tokens on q's support         generic: rule.masses
    member_slots(rule, V)       members per token, M (support laws)     generic: None (enumerate)
    embedding_filter(rule)      (embeddings, d) of a [V, V] table       generic: None
    direct_tv(rule, p, q)       TV(out, p) without the law              generic: None (the law's)
    rows_of(rule, index)        the rule of some of its rows            generic: rule.rows or itself
    cluster_residual(rule)      the rule with the cluster-exact residual generic: ValueError
    coupling(rule)              the clusters coupling the emitted token with a Y ~ p
                                                                        generic: None (undefined)

Generic paths, Amplify, a rule's rows (``rows_of``, ``slice_rows``): docs/decoding.md. A rule
family's registrations live in its module of ``gsd_lab.rules`` (GSD's clusters:
``rules.clusters``), loaded by the first dispatch that reaches a generic path (docs/lab.md).
"""

from __future__ import annotations

import functools
import importlib
import threading
from dataclasses import fields, replace
from typing import Any, Callable

from torch import Tensor

from gsd_core import SD, Amplify, OptimalRelaxation

from .ranking import SupportSize

Masses = tuple[Tensor, Tensor]  # (P, Q) [..., T]: p(C(x)) and q(C(x)) of tokens x

# The modules whose import registers the rule families' capabilities (the layer above the
# engine, named, imported at run time: ``load_families``).
FAMILY_MODULES = ("gsd_lab.rules",)
_LOADED = threading.Event()
_IMPORTING = threading.local()


def load_families() -> bool:
    """Import ``FAMILY_MODULES`` (their registrations) unless done; True when this call found
    them unloaded and left them loaded (its caller dispatches again). A re-entry from the thread
    importing them gets False (the generic path); another thread's concurrent call waits in the
    import system's own module lock and gets True; a failed import raises and is tried again on
    the next call. No lock of ours is held across the import."""
    if _LOADED.is_set() or getattr(_IMPORTING, "active", False):
        return False
    _IMPORTING.active = True
    try:
        for name in FAMILY_MODULES:
            importlib.import_module(name)
    finally:
        _IMPORTING.active = False
    _LOADED.set()
    return True


def dispatch(generic: Callable[..., Any]) -> Any:
    """``functools.singledispatch`` on ``generic`` whose generic path first loads the families
    (``load_families``) and, where that call loaded them, dispatches again: a family's
    registration answers even where nothing imported its module before the first call."""

    @functools.wraps(generic)
    def first(*args: Any, **kwargs: Any) -> Any:
        if load_families():
            return function(*args, **kwargs)
        return generic(*args, **kwargs)

    function = functools.singledispatch(first)
    return function


# --- Amplify's scaling ---------------------------------------------------------------------------


@dispatch
def unscaled(rule: object) -> object:
    """The rule under any ``Amplify`` (GSD's clusters of an amplified method)."""
    return rule


unscaled.register(Amplify, lambda rule: unscaled(rule.rule))


# --- verify's window -----------------------------------------------------------------------------


@dispatch
def uses_support(rule: object) -> bool:
    """Whether ``engine.verify(..., rule, support=ids)`` uses the ids (and may read a support
    size in its one host sync); other rules ignore them."""
    return False


uses_support.register(Amplify, lambda rule: uses_support(rule.rule))


@dispatch
def window_masses(
    rule: Any, p: Tensor, q: Tensor, drafts: Tensor, support: Tensor | SupportSize | None
) -> Masses:
    """(P, Q) of the drafts [..., L] against rows p, q [..., L, V], bit for bit the rule's own
    ``masses``: [..., L, 1] (``masses`` of ``drafts.unsqueeze(-1)``, as gsd_core's ``verify``
    takes them), or [..., L] from a registered fast path. ``support``: ``uses_support``."""
    return rule.masses(p, q, drafts.unsqueeze(-1))


@window_masses.register
def _(rule: Amplify, p: Tensor, q: Tensor, drafts: Tensor, support: Any) -> Masses:
    credited, charged = window_masses(rule.rule, p, q, drafts, support)
    return rule.scale * credited, charged  # the ops of gsd_core's Amplify.masses


# --- a(x) on the support of q (the exact accounting) ---------------------------------------------


@dispatch
def support_masses(
    rule: Any,
    p: Tensor,
    q: Tensor,
    tokens: Tensor,
    *,
    adjacency: Tensor | None = None,
    chunk_elements: int = 1 << 24,
) -> Masses:
    """(P, Q) [N, T] of tokens [N, T] against rows p, q [N, V], bit for bit the rule's own
    ``masses``, at most ``chunk_elements`` gathered entries at a time where the rule gathers
    members. ``adjacency``: the bool table [V, V] of ``embedding_filter``. Generic: the rule's
    ``masses`` of all tokens at once (a partition's cluster masses are O(V) per row)."""
    no_adjacency(rule, adjacency)
    if tokens.shape[-1] == 0:
        return p.new_empty(tokens.shape), q.new_empty(tokens.shape)
    return rule.masses(p, q, tokens)


def no_adjacency(rule: object, adjacency: Tensor | None) -> None:
    if adjacency is not None:
        raise ValueError(
            f"adjacency is the dynamic clusters' embedding filter; {type(rule).__name__} has none"
        )


@support_masses.register
def _(rule: Amplify, p: Tensor, q: Tensor, tokens: Tensor, *, adjacency: Any = None,
      chunk_elements: int = 1 << 24) -> Masses:
    credited, charged = support_masses(
        rule.rule, p, q, tokens, adjacency=adjacency, chunk_elements=chunk_elements
    )
    return rule.scale * credited, charged


@dispatch
def member_slots(rule: object, vocab: int) -> int | None:
    """M, the members gathered per token (``support_masses``): a rule with M has its one-step
    law computed on the support of q (``accounting.distortion.support_output_laws``); None: by
    gsd_core's enumeration over the vocabulary."""
    return None


member_slots.register(Amplify, lambda rule, vocab: member_slots(rule.rule, vocab))


@dispatch
def embedding_filter(rule: object) -> tuple[Tensor, float] | None:
    """(embeddings [V', D], d): the rule keeps y in C(x) only where ||e_y - e_x||^2 <= d, read by
    the accounting from a one-off [V, V] table (``accounting.distortion.embedding_adjacency``,
    passed to ``support_masses`` as ``adjacency``); None: no such filter."""
    return None


embedding_filter.register(Amplify, lambda rule: embedding_filter(rule.rule))


@dispatch
def direct_tv(rule: object, p: Tensor, q: Tensor) -> Tensor | None:
    """TV(out_i, p_i) [N] for rows p, q [N, V] float64 without the law out_i, where a rule has an
    identity for it (LANTERN: ``rules.lantern.lantern_distortion``); None: TV of the law.
    Not through Amplify (the identities are the rule's own)."""
    return None


# --- the rows a rule was built for ---------------------------------------------------------------


def rows_of(rule: object, index: slice | list[int]) -> object:
    """The rule of some of the rows it was built for (``index`` along the rows' first dimension):
    the rule's own ``rows(index)`` where its class defines one, else its registration
    (``rows_of.register``), else the rule itself for a rule that holds no tensor (its parameters
    are every row's: SD, rank bins, LANTERN). A rule holding tensors with neither is refused,
    since whether they run over the rows or are shared cannot be told from the tensors."""
    own = getattr(type(rule), "rows", None)
    if callable(own):
        return own(rule, index)
    return _registered_rows(rule, index)


@dispatch
def _registered_rows(rule: object, index: slice | list[int]) -> object:
    held = sorted(
        name
        for name, value in getattr(rule, "__dict__", {}).items()
        if isinstance(value, Tensor) and value.ndim >= 1
    )
    if held:
        raise ValueError(
            f"{type(rule).__name__} holds tensors {held} but has no rows method and registers no "
            "rows_of: define rows(index) on it, or register gsd_lab.engine.capabilities.rows_of "
            "(slice_rows if they run over the rows it was built for, shared_rows if every row "
            "shares them)"
        )
    return rule


rows_of.register = _registered_rows.register  # type: ignore[attr-defined]


def shared_rows(rule: Any, index: slice | list[int]) -> Any:
    """``rows_of`` for a rule whose tensors every row shares: the rule itself."""
    return rule


def slice_rows(rule: Any, index: slice | list[int]) -> Any:
    """``rows_of`` for a dataclass rule whose tensor fields of one dimension or more run over its
    rows: every such field indexed, whatever its name; scalars and other fields kept (the rule
    itself when nothing is sliced)."""
    sliced = {
        f.name: value[index]
        for f in fields(rule)
        if isinstance(value := getattr(rule, f.name), Tensor) and value.ndim >= 1
    }
    return replace(rule, **sliced) if sliced else rule


rows_of.register(OptimalRelaxation, slice_rows)  # delta: a float, or one budget per row


@rows_of.register
def _(rule: Amplify, index: slice | list[int]) -> Amplify:
    inner = rows_of(rule.rule, index)
    return rule if inner is rule.rule else replace(rule, rule=inner)


# --- residuals and couplings ---------------------------------------------------------------------


@dispatch
def cluster_residual(rule: object) -> object:
    """The rule with the cluster-exact residual (proofs/05): a partition's clusters; SD's
    singletons keep the token residual, which is the same. Refused for any other rule."""
    raise ValueError(
        f"the cluster-exact residual needs a partition; {type(rule).__name__} is not one "
        "(use residual='token', or a partition such as RankBinnedClusters or labels)"
    )


cluster_residual.register(SD, lambda rule: rule)


LabelsOf = Callable[[Tensor], "Tensor | None"]


@dispatch
def coupling(rule: object) -> LabelsOf | None:
    """Where the rule's own randomness couples the emitted token with a Y ~ p
    (``accounting.transport``'s substitution cost): a function of the target rows p [..., V]
    giving each token's cluster [..., V] (Y is drawn from p in the emitted token's cluster), or
    None for singletons (Y is the emitted token). None where it does not: generic, and under
    Amplify or LANTERN."""
    return None


coupling.register(SD, lambda rule: lambda p: None)
