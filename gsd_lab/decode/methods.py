"""One description of a decoding method: what AR, SJD, GSD, Amplify and LANTERN differ by.

``DecodingMethod`` is a frozen, JSON-able spec that ``gsd_lab.decode.loop.generate``, the command
line, the experiments (``experiments.runs.MethodSpec``: a spec with a label) and the run
identity of ``evaluate`` share. Its fields:

- kind: "ar" (one token per forward), "sjd" (verify token by token) or "gsd" (verify clusters);
- ``acceptance``: the acceptance rule, one spec of ``gsd_lab.decode.acceptance`` (SD, Amplify k,
  GSD's clusters, LANTERN, the TV-optimal relaxation, the transport relaxation, the certified
  dial; each spec's docstring states its rule). It is also given and read by the flat fields
  of earlier methods (``acceptance_scale``, ``clusters``, ``group_size``, ``lantern_k``,
  ``lantern_delta``, ``relaxation_delta``, ``budget``, ``budget_measure``, ``budget_policy``,
  ``budget_cap``, ``transport_eps``, ``transport_k``: ``acceptance.from_flat``), which are
  also what ``to_dict`` stores for the package's rules, so every earlier key stays;
- filters: GSD's filters of the dynamic kinds (``FILTER_KINDS``; None: the model's default,
  ``FilterSettings.for_model``);
- residual: "token" (norm((p - q)+)) or "cluster" (cluster-exact; partitions only);
- drafting: ``draft`` (``DRAFTS``: how a position left after a pass is re-drafted from the pass's
  row: "independent", each drawn on its own (SJD, GSD); "maximal" or "gumbel", coupled to the
  draft it held (MC-SJD / SCD, ``decode.coupling``; lossless for SJD, proofs/09); kinds "sjd"
  and "gsd") and ``init`` (fresh drafts: "random", uniform over the allowed tokens;
  "repeat_row": the token one image row up);
- ``verifier`` (``VERIFIERS``): "token" (``gsd_core.verify``, left to right) or "block"
  (``gsd_core.verify_block``, Sun et al.'s block verification; kind "sjd" with independent
  drafts and no relaxation only: with coupled drafts it is not lossless, proofs/14);
- window: drafts L per forward (ignored by AR);
- ``candidates`` k (1: one draft per position): k candidates for the first undecided position,
  each followed by the window's other drafts, verified in one tree forward by recursive rejection
  sampling (``gsd_core.multidraft``, ``gsd_lab.models.tree``; lossless, proofs/15); kind "sjd"
  with the SD rule (any ``draft``), the eager runner only; stored by ``to_dict`` only when > 1;
- ``tree`` (k_1, .., k_D) (None: ``(candidates,)``): a token tree, k_d candidates for position
  n + d - 1 under every node of depth d - 1 (one candidate set per depth, its first the window's
  draft), then the window's other drafts under every deepest node; verified top-down by recursive
  rejection at every node (``gsd_core.token_tree``; lossless, proofs/16); the same kinds and
  runner as ``candidates``, which it replaces (``candidates=k`` is the shape (k,));
  ``tree_shape`` reads either; stored by ``to_dict`` only when set;
- preset: "default" (the package's own exact variant) or "release" (the GSD release's window,
  Jacobi interval, random drafts at forced positions and bf16 distance filter;
  ``gsd_lab.decode.presets``).

Adding a value (a drafting scheme, a cluster kind) is one entry in its tuple in
``gsd_lab.decode.choices`` (validation, JSON and the command line's choices follow) plus its
behaviour where it acts; adding an acceptance rule is its gsd_core rule plus one registered spec
(``gsd_lab.decode.acceptance``). ``resolve`` builds the one rule ``verify`` takes for one model
(``ResolvedMethod.rule``: the spec's ``build``; the LANTERN table, O(V^2 log V), and the
distance threshold cached). This module imports no torch until ``resolve`` runs (or a preset
other than "default" is named), so the command line checks a spec without importing torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from .acceptance import (ALWAYS_STORED, AcceptanceSpec, SDAcceptance, choice, flat_fields,
                         from_flat)
from .acceptance import FLAT_FIELDS as FLAT_DEFAULTS
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


@dataclass(frozen=True, init=False)
class DecodingMethod:
    """A decoding method (module docstring): ``kind``, ``window``, ``init``, ``draft``,
    ``residual``, ``filters``, ``preset`` and the ``acceptance`` rule, one spec of
    ``gsd_lab.decode.acceptance``. Invalid combinations raise ``ValueError`` naming the field;
    numbers are normalised (``acceptance_scale=2`` equals ``2.0``), so equal methods have equal
    ``key``s.

    The acceptance rule is given as a spec (``acceptance=LanternAcceptance(1001, 0.1)``) or by
    the flat fields earlier methods had (``lantern_k=1001, lantern_delta=0.1``;
    ``acceptance.FLAT_FIELDS``), which are read into the spec and read back from it as
    attributes (``method.lantern_k``). ``dataclasses.replace`` takes either."""

    kind: str
    window: int
    init: str
    draft: str
    residual: str
    filters: FilterSettings | None
    preset: str
    acceptance: AcceptanceSpec
    verifier: str
    candidates: int
    tree: tuple[int, ...] | None

    def __init__(
        self,
        kind: str,
        window: int = 16,
        init: str = "random",
        draft: str = "independent",
        acceptance_scale: float = FLAT_DEFAULTS["acceptance_scale"],
        clusters: str | None = None,
        group_size: int = 0,
        residual: str = "token",
        lantern_k: int = 0,
        lantern_delta: float = FLAT_DEFAULTS["lantern_delta"],
        filters: FilterSettings | None = None,
        preset: str = "default",
        relaxation_delta: float = FLAT_DEFAULTS["relaxation_delta"],
        budget: float | None = None,
        budget_measure: str = "tv",
        budget_policy: str = "cap",
        budget_cap: float = FLAT_DEFAULTS["budget_cap"],
        transport_eps: float | None = None,
        transport_k: int = FLAT_DEFAULTS["transport_k"],
        *,
        acceptance: AcceptanceSpec | None = None,
        verifier: str = "token",
        candidates: int = 1,
        tree: tuple[int, ...] | list[int] | None = None,
    ) -> None:
        flat = dict(
            acceptance_scale=acceptance_scale,
            clusters=clusters,
            group_size=group_size,
            lantern_k=lantern_k,
            lantern_delta=lantern_delta,
            relaxation_delta=relaxation_delta,
            budget=budget,
            budget_measure=budget_measure,
            budget_policy=budget_policy,
            budget_cap=budget_cap,
            transport_eps=transport_eps,
            transport_k=transport_k,
        )
        for name, value in (("kind", kind), ("window", window), ("init", init)):
            object.__setattr__(self, name, value)
        for name, value in (("draft", draft), ("residual", residual), ("filters", filters)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "acceptance", self._acceptance(acceptance, flat))
        object.__setattr__(self, "verifier", verifier)
        object.__setattr__(self, "candidates", candidates)
        object.__setattr__(self, "tree", None if tree is None else _shape(tree))
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

    def _acceptance(
        self, acceptance: AcceptanceSpec | None, flat: dict[str, Any]
    ) -> AcceptanceSpec:
        """The spec given, or the one of the flat fields; both: the spec's flat fields with the
        ones given changed (``dataclasses.replace`` with a flat field; a flat field left out is
        its default object itself, so one given equal to its default still counts)."""
        changed = {k: v for k, v in flat.items() if v is not FLAT_DEFAULTS[k]}
        if acceptance is None:
            return from_flat(changed, self.kind)
        if not isinstance(acceptance, AcceptanceSpec):
            raise ValueError(
                "acceptance must be a gsd_lab.decode.acceptance spec (AcceptanceSpec), got "
                f"{type(acceptance).__name__}"
            )
        if not changed:
            return acceptance
        if acceptance.legacy_fields() is None:
            raise ValueError(
                f"the flat fields {sorted(changed)} do not apply to acceptance rule "
                f"{acceptance.name!r}: give its spec"
            )
        return from_flat({**acceptance.legacy_fields(), **changed}, self.kind)

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
                f"{PARTITION_KINDS}), got method {self.kind!r} with clusters {self.clusters!r}"
            )
        if self.filters is not None:
            if not isinstance(self.filters, FilterSettings):
                raise ValueError(
                    f"filters must be a FilterSettings or None, got {type(self.filters).__name__}"
                )
            if not rule.uses_filters:
                raise ValueError(
                    f"filters apply to clusters {FILTER_KINDS} only, got clusters {self.clusters!r}"
                )

    def _check_preset(self) -> None:
        if self.preset == "default":
            return
        from .presets import preset  # the named presets (imports torch)

        fixed = preset(self.preset).window  # raises for an unknown preset
        if fixed is not None and self.kind != "ar" and self.window != fixed:
            raise ValueError(
                f"preset {self.preset!r} fixes the window at "
                f"{fixed} drafts, got window={self.window}"
            )

    def __getattr__(self, name: str) -> Any:
        """The flat fields of earlier methods (``acceptance.FLAT_FIELDS``), read from the spec."""
        if name in FLAT_DEFAULTS:
            return flat_fields(self.acceptance)[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def uses_transport(self) -> bool:
        """Whether this method verifies by the transport relaxation (``transport_eps``, or the W1
        dial): it needs the codes' content neighbours (``resolve``)."""
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
        """JSON-ready: the method's fields (``filters``: a dict or None) and its acceptance rule,
        as the flat fields earlier methods stored (``acceptance.ALWAYS_STORED`` always, the
        others when set: the keys of earlier methods stay) or, for a rule with none, tagged
        ({"acceptance": {"rule": name, ...}})."""
        data: dict[str, Any] = {
            "kind": self.kind,
            "window": self.window,
            "init": self.init,
            "draft": self.draft,
            "residual": self.residual,
            "filters": None if self.filters is None else asdict(self.filters),
            "preset": self.preset,
        }
        if self.verifier != "token":  # only when set: the keys of earlier methods stay
            data["verifier"] = self.verifier
        if self.candidates != 1:  # stored only when set: the keys of earlier methods stay
            data["candidates"] = self.candidates
        if self.tree is not None:
            data["tree"] = list(self.tree)
        flat = self.acceptance.legacy_fields()
        if flat is None:
            return {**data, "acceptance": self.acceptance.to_dict()}
        stored = {name: FLAT_DEFAULTS[name] for name in ALWAYS_STORED}
        return {**data, **stored, **flat}

    def all_fields(self) -> dict[str, Any]:
        """Every field with every flat field (``acceptance.FLAT_FIELDS``, defaults included),
        as the figures' JSON sidecars list a method (and "acceptance", tagged, for a rule with
        no flat fields)."""
        return {**self.to_dict(), **flat_fields(self.acceptance)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DecodingMethod":
        """The inverse of ``to_dict`` (missing fields take their defaults; unknown ones raise)."""
        if not isinstance(data, dict):
            raise ValueError(f"a decoding method is a dict, got {type(data).__name__}")
        unknown = sorted(set(data) - _METHOD_FIELDS - set(FLAT_DEFAULTS))
        if unknown:
            raise ValueError(f"unknown decoding method fields {unknown}")
        data = dict(data)
        filters = data.pop("filters", None)
        filters = None if filters is None else FilterSettings(**filters)
        if "acceptance" in data:
            data["acceptance"] = acceptance_from_dict(data["acceptance"])
        return cls(**data, filters=filters)

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

        GSD: the gsd_core rule of ``clusters`` (``DynamicClusters``, ``RankBinnedClusters`` or a
        ``FixedPartition`` from k-means, seed 0) with filters ``self.filters`` or, when None,
        ``FilterSettings.for_model(model_name)``. LANTERN: ``gsd_core.Lantern`` with neighbourhoods
        of ``lantern_k`` tokens by Euclidean distance between embedding rows (the paper uses VQ
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

            neighbours = content_neighbours_of(adapter, method.transport_k)
        return ResolvedMethod(method, rule=rule, neighbours=neighbours)


_METHOD_FIELDS = {
    "kind", "window", "init", "draft", "residual", "filters", "preset", "acceptance", "verifier",
    "candidates", "tree",
}


@dataclass(frozen=True, init=False)
class ResolvedMethod:
    """A ``DecodingMethod`` with its runtime ``rule``: the one gsd_core rule ``verify`` and
    ``accounting.distortion`` take (``OptimalRelaxation(relaxation_delta)`` for the relaxation;
    with a budget SD, which ``decode.budget.BudgetDial`` replaces window by window). Build it
    with ``DecodingMethod.resolve``, or from the parts of the package's rules: ``clusters`` (a
    gsd_core rule or partition; exactly for kind "gsd"), ``lantern`` (a ``gsd_core.Lantern``;
    exactly when ``method.lantern_k`` > 0, with its budget) and ``neighbours`` (a
    ``ContentNeighbours``; exactly when the method transports: ``transport_eps`` or the W1
    dial), which are also read back as attributes."""

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
                f"transports (transport_eps {method.transport_eps}, budget_measure "
                f"{method.budget_measure!r})"
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
        return self.rule if self.method.lantern_k else None


def _rule_of_parts(method: DecodingMethod, clusters: Any, lantern: Any, neighbours: Any) -> Any:
    """The rule of the package's specs from given parts (``ResolvedMethod``), each checked."""
    if (clusters is not None) != (method.kind == "gsd"):
        raise ValueError(
            f"clusters must be given exactly for method 'gsd' (method {method.kind!r}, "
            f"clusters {type(clusters).__name__})"
        )
    if (lantern is not None) != bool(method.lantern_k):
        raise ValueError(
            f"lantern must be given exactly when lantern_k > 0 (lantern_k {method.lantern_k})"
        )
    spec = method.acceptance
    if lantern is not None:
        spec.check_rule(lantern)
        return lantern
    if spec.legacy_fields() is None:
        raise ValueError(
            f"acceptance rule {spec.name!r} has no parts: resolve the method, or give its rule"
        )
    if method.transport_eps is not None:
        from .relaxation_w1 import TRANSPORT_SOLVER, TransportRelaxation

        return TransportRelaxation(neighbours, method.transport_eps, TRANSPORT_SOLVER)
    if method.relaxation_delta:
        from gsd_core import OptimalRelaxation

        return OptimalRelaxation(method.relaxation_delta)
    return method_rule(clusters, method.residual, method.acceptance_scale)
