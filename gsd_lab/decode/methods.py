"""One description of a decoding method: what AR, SJD, GSD, Amplify and LANTERN differ by.

``DecodingMethod(kind, acceptance=..., window=..., ...)`` is a frozen, JSON-able spec shared by
``decode.loop.generate``, the command line, the experiments (``experiments.runs.MethodSpec``)
and ``evaluate``'s run identity. ``kind`` is "ar", "sjd" or "gsd"; ``acceptance`` is one spec
of ``gsd_lab.decode.acceptance`` (re-exported here), by default ``SDAcceptance()`` for "ar"
and "sjd" and GSD's clusters ``ClusterAcceptance()`` (dynamic, G = 25) for "gsd"; the other
fields (``window``, ``init``, ``draft``, ``residual``, ``filters``, ``preset``, ``verifier``,
``candidates``, ``tree``, ``side_tail``) are keyword-only and their values listed in
``decode.choices``.

- ``DecodingMethod``: the spec; ``to_dict`` / ``from_dict`` / ``key`` (canonical JSON);
- ``ResolvedMethod``: a method with its gsd_core rule (``DecodingMethod.resolve``);
- ``FilterSettings``: GSD's cluster filters, and the distance quantile they default to.

Field by field, with the checks and what each value means: docs/methods.md. This module
imports no torch until ``resolve`` runs (or a preset other than "default" is named).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from .acceptance import (  # noqa: F401 (re-exported: a method's call site names its rule)
    DEFAULT_TRANSPORT_K,
    AcceptanceSpec,
    AmplifyAcceptance,
    BudgetAcceptance,
    ClusterAcceptance,
    LanternAcceptance,
    RelaxationAcceptance,
    SDAcceptance,
    TransportAcceptance,
    choice,
)
from .acceptance import from_dict as acceptance_from_dict
from .choices import (  # noqa: F401 (re-exported: the names callers import from here)
    BUDGET_MEASURES,
    BUDGET_POLICIES,
    CLUSTER_KINDS,
    DRAFTS,
    FILTER_KINDS,
    INITS,
    KINDS,
    PARTITION_KINDS,
    RESIDUALS,
    VERIFIERS,
)
from .rule_parts import method_rule  # noqa: F401 (re-exported: callers import it here)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape(tree: object) -> tuple[int, ...]:
    """A tree shape as a tuple of ints >= 1 (ValueError naming the problem otherwise)."""
    if isinstance(tree, (str, bytes)) or not hasattr(tree, "__iter__"):
        raise ValueError(f"tree must be a sequence of ints >= 1 (children per depth), got {tree!r}")
    shape = tuple(tree)
    if not shape or not all(_is_int(k) and k >= 1 for k in shape):
        raise ValueError(f"tree must be a sequence of ints >= 1 (children per depth), got {tree!r}")
    return shape


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class FilterSettings:
    """GSD's cluster filters (paper Algorithm 3): keep y in C(x) only if |p(y) - p(x)| <=
    max_prob_gap and ||e_y - e_x||^2 <= max_embedding_distance (input embeddings e).

    The released code uses 0.15 and 0.5 on Lumina-mGPT's embeddings. The squared-distance scale
    depends on the model, so for other models the threshold is the ``distance_quantile`` of the
    squared distances between image-token embedding pairs (``resolve``), unless given."""

    max_prob_gap: float = 0.15
    max_embedding_distance: float | None = None
    distance_quantile: float = 0.9

    def __post_init__(self) -> None:
        if not (_is_number(self.max_prob_gap) and self.max_prob_gap >= 0):
            raise ValueError(
                f"max_prob_gap must be a finite number >= 0, got {self.max_prob_gap!r}"
            )
        distance = self.max_embedding_distance
        if distance is not None and not (_is_number(distance) and distance >= 0):
            raise ValueError(
                f"max_embedding_distance must be a finite number >= 0 or None, got {distance!r}"
            )
        if not (_is_number(self.distance_quantile) and 0 < self.distance_quantile <= 1):
            raise ValueError(
                f"distance_quantile must lie in (0, 1], got {self.distance_quantile!r}"
            )
        object.__setattr__(self, "max_prob_gap", float(self.max_prob_gap))
        object.__setattr__(self, "distance_quantile", float(self.distance_quantile))
        if distance is not None:
            object.__setattr__(self, "max_embedding_distance", float(distance))

    @classmethod
    def for_model(cls, name: str) -> "FilterSettings":
        """The released code's d = 0.5 for Lumina-mGPT; the quantile rule for other models."""
        return cls(max_embedding_distance=0.5) if name.startswith("lumina-mgpt") else cls()

    def resolve(
        self, embeddings: Any, image_tokens: Any, *, seed: int = 0, known: Any = None
    ) -> float:
        """The squared-distance threshold: given, or the quantile over pairs of distinct image
        tokens (all pairs up to 4096 tokens, else 10^6 random pairs). ``known``: stored values
        of that quantile (``distance_quantile_entry`` records, e.g. from the weights' manifest);
        one whose embeddings digest, quantile and seed match is returned instead of recomputed."""
        import torch

        if self.max_embedding_distance is not None:
            return float(self.max_embedding_distance)
        emb = embeddings[image_tokens.to(embeddings.device)].detach().to(torch.float64).cpu()
        if known:
            digest = embeddings_digest(emb)
            for entry in known:
                if (entry["embeddings_sha256"], entry["quantile"], entry["seed"]) == (
                    digest,
                    self.distance_quantile,
                    seed,
                ):
                    return float(entry["value"])
        return distance_quantile(emb, self.distance_quantile, seed=seed)


def embeddings_digest(emb: Any) -> str:
    """SHA-256 of float64 embedding rows [n, D] (shape, then the little-endian bytes)."""
    import hashlib

    rows = emb.detach().cpu().double().contiguous().numpy().astype("<f8", copy=False)
    return hashlib.sha256(repr(tuple(rows.shape)).encode() + rows.tobytes()).hexdigest()


def distance_quantile(emb: Any, quantile: float, *, seed: int = 0) -> float:
    """The ``quantile`` of the squared distances ||e_a - e_b||^2 between rows of ``emb`` [n, D]
    (float64): over all pairs a < b when n <= 4096, else over 10^6 random pairs (a != b kept;
    ``torch.Generator`` seeded ``seed``); taken in float32 as ``torch.quantile``."""
    import torch

    n = emb.shape[0]
    if n <= 4096:
        distance = torch.cdist(emb, emb).square()
        distance = distance[torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)]
    else:
        generator = torch.Generator().manual_seed(seed)
        a, b = torch.randint(n, (2, 1_000_000), generator=generator)
        keep = a != b
        a, b = a[keep], b[keep]
        # In chunks of rows: each row's sum is taken alone, so the values are those of one
        # [10^6, D] difference, without its temporaries of that size.
        distance = torch.cat(
            [
                (emb[a[i : i + 65536]] - emb[b[i : i + 65536]]).square().sum(-1)
                for i in range(0, a.numel(), 65536)
            ]
        )
    return float(torch.quantile(distance.float(), quantile))


def distance_quantile_entry(
    embeddings: Any, image_tokens: Any, quantile: float = 0.9, seed: int = 0
) -> dict:
    """A record of the distance quantile of these embeddings (``FilterSettings.resolve``'s
    ``known``): the digest of the float64 rows, the quantile, the seed and the value."""
    import torch

    emb = embeddings[image_tokens.to(embeddings.device)].detach().to(torch.float64).cpu()
    return {
        "embeddings_sha256": embeddings_digest(emb),
        "quantile": float(quantile),
        "seed": int(seed),
        "value": distance_quantile(emb, float(quantile), seed=seed),
    }


# The flat fields methods once held a rule's parameters in: the spec and field that hold each
# now, and the flat form's default (a record stored them all, most at that default).
_SPEC_OF = {
    "clusters": ("ClusterAcceptance", "clusters", None),
    "group_size": ("ClusterAcceptance", "group_size", 0),
    "acceptance_scale": ("AmplifyAcceptance", "scale", 1.0),
    "lantern_k": ("LanternAcceptance", "k", 0),
    "lantern_delta": ("LanternAcceptance", "delta", 0.0),
    "relaxation_delta": ("RelaxationAcceptance", "delta", 0.0),
    "transport_eps": ("TransportAcceptance", "eps", None),
    "transport_k": ("TransportAcceptance", "k", DEFAULT_TRANSPORT_K),
    "budget": ("BudgetAcceptance", "budget", None),
    "budget_measure": ("BudgetAcceptance", "measure", "tv"),
    "budget_policy": ("BudgetAcceptance", "policy", "cap"),
    "budget_cap": ("BudgetAcceptance", "cap", 1.0),
}


def default_acceptance(kind: str) -> AcceptanceSpec:
    """The rule of a method that names none: GSD's clusters for "gsd", SD otherwise."""
    return ClusterAcceptance() if kind == "gsd" else SDAcceptance()


@dataclass(frozen=True, init=False)
class DecodingMethod:
    """A decoding method (docs/methods.md): ``kind``, its ``acceptance`` rule (a spec of
    ``gsd_lab.decode.acceptance``; None: ``default_acceptance(kind)``) and the keyword-only
    drafting and verification fields. Invalid combinations raise ``ValueError`` naming the
    field, an unknown field ``TypeError``; numbers are normalised, so equal methods have equal
    ``key``s."""

    kind: str
    acceptance: AcceptanceSpec
    window: int
    init: str
    draft: str
    residual: str
    filters: FilterSettings | None
    preset: str
    verifier: str
    candidates: int
    tree: tuple[int, ...] | None
    side_tail: int | None

    def __init__(
        self,
        kind: str,
        *,
        acceptance: AcceptanceSpec | None = None,
        window: int = 16,
        init: str = "random",
        draft: str = "independent",
        residual: str = "token",
        filters: FilterSettings | None = None,
        preset: str = "default",
        verifier: str = "token",
        candidates: int = 1,
        tree: tuple[int, ...] | list[int] | None = None,
        side_tail: int | None = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise TypeError(_unknown_fields(unknown))
        if acceptance is None:
            acceptance = default_acceptance(kind)
        if not isinstance(acceptance, AcceptanceSpec):
            raise ValueError(
                "acceptance must be a gsd_lab.decode.acceptance spec (AcceptanceSpec), got "
                f"{type(acceptance).__name__}"
            )
        for name, value in (("kind", kind), ("acceptance", acceptance), ("window", window)):
            object.__setattr__(self, name, value)
        for name, value in (("init", init), ("draft", draft), ("residual", residual)):
            object.__setattr__(self, name, value)
        for name, value in (("filters", filters), ("preset", preset), ("verifier", verifier)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "candidates", candidates)
        object.__setattr__(self, "tree", None if tree is None else _shape(tree))
        object.__setattr__(self, "side_tail", side_tail)
        self._check()
        self._check_verifier()
        self._check_candidates()

    def _check_verifier(self) -> None:
        """Block verification (``gsd_core.verify_block``) is SJD's exact rule only, with
        independent drafts: its proof needs the window's drafts to have the joint law
        prod_i q_i given the history, which coupled drafts break, and with maximal or Gumbel
        drafts the decode is not lossless (proofs/14, an exact counterexample)."""
        choice("verifier", self.verifier, VERIFIERS)
        if self.verifier == "token":
            return
        if not (self.kind == "sjd" and self.draft == "independent"
                and self.acceptance == SDAcceptance()):
            raise ValueError(
                "verifier 'block' is lossless SJD only: method 'sjd' with draft 'independent' "
                "and no relaxation, budget, LANTERN or acceptance scale; with coupled drafts "
                "it is not lossless (proofs/14_block_verification.md)"
            )

    def _check_candidates(self) -> None:
        """k candidates at the first undecided position, verified by recursive rejection
        sampling in one tree forward (``gsd_lab.decode.loop``, proofs/15): plain SJD only."""
        if not (_is_int(self.candidates) and self.candidates >= 1):
            raise ValueError(f"candidates must be an int >= 1, got {self.candidates!r}")
        if self.tree is not None and self.candidates != 1:
            raise ValueError(
                f"give tree or candidates, not both (candidates={self.candidates} is the tree "
                f"({self.candidates},)); got tree={self.tree!r}"
            )
        if self.tree is not None and all(k == 1 for k in self.tree):
            raise ValueError(
                f"tree {self.tree!r} has one branch: that is plain SJD, leave it unset"
            )
        if self.tree is not None and len(self.tree) > self.window:
            raise ValueError(
                f"tree {self.tree!r} is {len(self.tree)} levels deep, deeper than the window "
                f"({self.window}): a pass verifies at most window positions"
            )
        if self.side_tail is not None and not (
            _is_int(self.side_tail) and self.side_tail >= 0 and self.branching
        ):
            raise ValueError(
                "side_tail (the chain under each extra candidate of a spine tree) must be an "
                f"int >= 0 with a tree or candidates > 1, got side_tail={self.side_tail!r}"
            )
        plain = (
            self.kind == "sjd" and self.acceptance.name == "sd" and self.preset == "default"
        )
        if self.branching and self.verifier != "token":
            raise ValueError(
                "candidates > 1 verifies the chosen branch token by token; verifier "
                f"{self.verifier!r} with multiple candidates is not built (nor proved)"
            )
        if self.branching and not plain:
            raise ValueError(
                "candidates > 1 (multiple drafts, recursive rejection sampling) is exact for "
                "plain SJD only: kind 'sjd' with the SD acceptance rule (no Amplify, LANTERN, "
                f"relaxation, budget or transport), preset 'default'; got kind {self.kind!r}, "
                f"acceptance {self.acceptance.name!r}, preset {self.preset!r}"
            )

    def _check(self) -> None:
        choice("method kind", self.kind, KINDS)
        if not (_is_int(self.window) and self.window >= 1):
            raise ValueError(f"window must be an int >= 1, got {self.window!r}")
        self._check_preset()
        choice("init", self.init, INITS)
        choice("draft", self.draft, DRAFTS)
        if self.kind == "ar" and self.draft != "independent":
            raise ValueError(
                f"draft {self.draft!r} couples Jacobi re-drafts: "
                "methods 'sjd' and 'gsd' only (AR drafts nothing)"
            )
        choice("residual", self.residual, RESIDUALS)
        rule = self.acceptance
        rule.check(self.kind, self.residual if rule.is_partition else "token")
        if self.residual == "cluster" and not rule.is_partition:
            raise ValueError(
                f"residual 'cluster' needs a partition (method 'gsd' with clusters one of "
                f"{PARTITION_KINDS}), got method {self.kind!r} with rule {rule!r}"
            )
        if self.filters is not None:
            if not isinstance(self.filters, FilterSettings):
                raise ValueError(
                    f"filters must be a FilterSettings or None, got {type(self.filters).__name__}"
                )
            if not rule.uses_filters:
                raise ValueError(
                    f"filters apply to clusters {FILTER_KINDS} only, got rule {rule!r}"
                )

    def _check_preset(self) -> None:
        if self.preset == "default":
            return
        from .presets import preset  # the named presets

        fixed = preset(self.preset).window  # raises for an unknown preset
        if fixed is not None and self.kind != "ar" and self.window != fixed:
            raise ValueError(
                f"preset {self.preset!r} fixes the window at "
                f"{fixed} drafts, got window={self.window}"
            )

    @property
    def uses_transport(self) -> bool:
        """Whether this method verifies by the transport relaxation (``TransportAcceptance``, or
        the W1 dial): it needs the codes' content neighbours (``resolve``)."""
        return self.acceptance.uses_transport

    @property
    def uses_filters(self) -> bool:
        return self.acceptance.uses_filters

    def with_filters(self, default: FilterSettings) -> "DecodingMethod":
        """This method with ``default`` filters where it uses filters and names none."""
        return (
            replace(self, filters=default) if self.uses_filters and self.filters is None else self
        )

    def for_model(self, model_name: str) -> "DecodingMethod":
        """This method with the model's default filters (``FilterSettings.for_model``) filled in."""
        return self.with_filters(FilterSettings.for_model(model_name))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, the rule tagged (``AcceptanceSpec.to_dict``), ``filters`` a
        dict or None, ``tree`` a list or None, ``side_tail`` only when set."""
        return {
            "kind": self.kind,
            "acceptance": self.acceptance.to_dict(),
            "window": self.window,
            "init": self.init,
            "draft": self.draft,
            "residual": self.residual,
            "filters": None if self.filters is None else asdict(self.filters),
            "preset": self.preset,
            "verifier": self.verifier,
            "candidates": self.candidates,
            "tree": None if self.tree is None else list(self.tree),
            # Only when set: every other method keeps its key (run identities, caches).
            **({} if self.side_tail is None else {"side_tail": self.side_tail}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DecodingMethod":
        """The inverse of ``to_dict`` (missing fields take their defaults; unknown ones raise)."""
        if not isinstance(data, dict) or "kind" not in data:
            raise ValueError(f"a decoding method is a dict with a 'kind', got {data!r}")
        data = dict(data)
        filters = data.pop("filters", None)
        filters = None if filters is None else FilterSettings(**filters)
        if "acceptance" in data:
            data["acceptance"] = acceptance_from_dict(data["acceptance"])
        try:
            return cls(**data, filters=filters)
        except TypeError as error:  # an unknown field
            raise ValueError(str(error)) from None

    @property
    def tree_shape(self) -> tuple[int, ...]:
        """The token tree's children per depth: ``tree``, or ``(candidates,)``."""
        return self.tree if self.tree is not None else (self.candidates,)

    @property
    def branching(self) -> bool:
        """Whether a forward verifies a token tree (more than one candidate somewhere)."""
        return any(k > 1 for k in self.tree_shape)

    @property
    def key(self) -> str:
        """Canonical JSON of ``to_dict`` (sorted keys): the same string for equal methods in
        every process, for run identities and caches."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def resolve(
        self,
        adapter: Any,
        *,
        model_name: str = "",
        embeddings: Any = None,
        cache: dict | None = None,
    ) -> "ResolvedMethod":
        """The runtime rule of this method for ``adapter`` (a ``CausalLMAdapter``): its
        acceptance spec's ``build``.

        GSD: the gsd_core rule of its cluster kind (``DynamicClusters``, ``RankBinnedClusters`` or a
        ``FixedPartition`` from k-means, seed 0) with filters ``self.filters`` or, when None,
        ``FilterSettings.for_model(model_name)``. LANTERN: ``gsd_core.Lantern`` with neighbourhoods
        of k tokens by Euclidean distance between embedding rows (the paper uses VQ
        codebook latents; the input embeddings are what every model here exposes, and what GSD's
        distance filter uses). ``embeddings`` [V, D]: the rows that define distances (default
        ``adapter.embeddings``). ``cache``: a dict kept by the caller for one adapter and one set
        of embeddings, so that the LANTERN table, the distance threshold and the k-means
        partition are built once (LANTERN's is O(V^2 D))."""
        method = self.for_model(model_name)
        cache = {} if cache is None else cache
        emb = adapter.embeddings if embeddings is None else embeddings
        rule = method.acceptance.build(adapter, cache, method=method, embeddings=emb)
        neighbours = None
        if method.uses_transport:
            from .rule_parts import content_neighbours_of

            neighbours = content_neighbours_of(adapter, method.acceptance.k)
        return ResolvedMethod(method, rule=rule, neighbours=neighbours)


def _unknown_fields(unknown: dict[str, Any]) -> str:
    """The message for fields a ``DecodingMethod`` does not have. Fields of the old flat form
    (``_SPEC_OF``) say so, and those not at the flat form's default are named with the spec
    that holds them now (``acceptance=ClusterAcceptance(group_size=50)``)."""
    specs: dict[str, list[str]] = {}
    flat = [name for name in unknown if name in _SPEC_OF]
    for name in flat:
        spec, field, default = _SPEC_OF[name]
        if unknown[name] != default:
            specs.setdefault(spec, []).append(f"{field}={unknown[name]!r}")
    message = f"DecodingMethod got unknown fields {sorted(unknown)}"
    if flat:
        message += f" ({', '.join(sorted(flat))}: a rule's fields in the old flat form)"
    hints = [f"write acceptance={spec}({', '.join(args)})" for spec, args in specs.items()]
    if flat and not hints:
        hints = ["at their defaults they say nothing: leave them out"]
    return "; ".join([message, *hints]) + (" (gsd_lab.decode.acceptance)" if specs else "")


@dataclass(frozen=True, init=False)
class ResolvedMethod:
    """A ``DecodingMethod`` with its runtime ``rule``: the one gsd_core rule ``verify`` and
    ``accounting.distortion`` take (``OptimalRelaxation(delta)`` for the relaxation; with a
    budget SD, which ``decode.budget.BudgetDial`` replaces window by window). Build it with
    ``DecodingMethod.resolve``, or from the parts of the package's rules: ``clusters`` (a
    gsd_core rule or partition; exactly for kind "gsd"), ``lantern`` (a ``gsd_core.Lantern``;
    exactly for a ``LanternAcceptance``) and ``neighbours`` (a ``ContentNeighbours``; exactly
    when the method transports: ``TransportAcceptance`` or the W1 dial), which are also read
    back as attributes."""

    method: DecodingMethod
    rule: Any
    neighbours: Any

    def __init__(
        self,
        method: DecodingMethod,
        rule: Any = None,
        *,
        clusters: object = None,
        lantern: Any = None,
        neighbours: Any = None,
    ) -> None:
        if not isinstance(method, DecodingMethod):
            raise ValueError(f"method must be a DecodingMethod, got {type(method).__name__}")
        if (neighbours is not None) != method.uses_transport:
            raise ValueError(
                "neighbours (a ContentNeighbours) must be given exactly when the method "
                f"transports (TransportAcceptance, or BudgetAcceptance with measure 'w1'; "
                f"got {method.acceptance!r})"
            )
        if rule is None:
            rule = _rule_of_parts(method, clusters, lantern, neighbours)
        elif clusters is not None or lantern is not None:
            raise ValueError("give the rule or its parts (clusters, lantern), not both")
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "rule", rule)
        object.__setattr__(self, "neighbours", neighbours)

    @property
    def clusters(self) -> object:
        """GSD's cluster rule (inside any Amplify; None for other kinds)."""
        if self.method.kind != "gsd":
            return None
        from ..engine.capabilities import unscaled

        return unscaled(self.rule)

    @property
    def lantern(self) -> Any:
        """The ``gsd_core.Lantern`` of a LANTERN method, else None."""
        return self.rule if isinstance(self.method.acceptance, LanternAcceptance) else None


def _rule_of_parts(method: DecodingMethod, clusters: Any, lantern: Any, neighbours: Any) -> Any:
    """The rule of the package's specs from given parts (``ResolvedMethod``), each checked."""
    spec = method.acceptance
    if (clusters is not None) != (method.kind == "gsd"):
        raise ValueError(
            f"clusters must be given exactly for method 'gsd' (method {method.kind!r}, "
            f"clusters {type(clusters).__name__})"
        )
    if (lantern is not None) != isinstance(spec, LanternAcceptance):
        raise ValueError(
            f"lantern must be given exactly for a LanternAcceptance (the method's rule: {spec!r})"
        )
    if lantern is not None:
        spec.check_rule(lantern)
        return lantern
    if isinstance(spec, TransportAcceptance):
        from .relaxation_w1 import TRANSPORT_SOLVER, TransportRelaxation

        return TransportRelaxation(neighbours, spec.eps, TRANSPORT_SOLVER)
    if isinstance(spec, RelaxationAcceptance):
        from gsd_core import OptimalRelaxation

        return OptimalRelaxation(spec.delta)
    scale, inner = (spec.scale, spec.inner) if isinstance(spec, AmplifyAcceptance) else (1.0, spec)
    if not isinstance(inner, (SDAcceptance, ClusterAcceptance, BudgetAcceptance)):
        raise ValueError(
            f"acceptance rule {spec.name!r} has no parts: resolve the method, or give its rule"
        )
    return method_rule(clusters, method.residual, scale)
