"""One description of a decoding method: what AR, SJD, GSD, Amplify and LANTERN differ by.

``DecodingMethod`` is a frozen, JSON-able spec that ``gsd_lab.decode.loop.generate``, the command
line, the experiments (``experiments.runs.MethodSpec``: a spec with a label) and the run
identity of ``evaluate`` share. Its fields:

- kind: "ar" (one token per forward), "sjd" (verify token by token) or "gsd" (verify clusters);
- the acceptance rule: ``acceptance_scale`` k (min(1, k p(C)/q(C)); 1 is exact, k > 1 the lossy
  "Amplify"), LANTERN's ``lantern_k`` tokens per neighbourhood and budget ``lantern_delta``
  (kind "sjd" only; 0: no LANTERN), GSD's ``clusters`` kind (``CLUSTER_KINDS``), its group size
  ``group_size`` G and the ``filters`` of the dynamic kinds (``FILTER_KINDS``; None: the
  model's default, ``FilterSettings.for_model``);
- ``relaxation_delta``: the TV-optimal relaxation's per-token budget
  (``gsd_core.OptimalRelaxation``, proofs/10; kind "sjd" only; 0: none);
- ``transport_eps``: the transport relaxation's per-token W1 budget in the content distance's
  units (``gsd_lab.decode.relaxation_w1``, proofs/12; None: none; 0 is SJD bit for bit), on each
  code's ``transport_k`` nearest codes by decoded content (``content_neighbours`` of the adapter's
  ``code_content()``, cached per process by the content's SHA-256, V and k); kind "sjd" only;
- the certified dial: ``budget`` B (None: none) in ``budget_measure`` ("tv", or "w1": B and
  ``budget_cap`` in content units, verified by the transport relaxation with ``transport_k``
  neighbours, proofs/13: per-path charges bound each token's W1, not the joint W1), spent by
  ``budget_policy`` ("cap": each position's allowance min(``budget_cap``, what is left); "sure":
  a position gets exactly TV(p_i, q_i), a certain acceptance, when that is at most
  min(``budget_cap``, what is left), else 0) through the relaxation; on every path the emitted
  tokens' distortions sum to at most B, so the image's law is within B of the model's (TV;
  proofs/11, ``gsd_lab.decode.budget``); kind "sjd" only;
- residual: "token" (norm((p - q)+)) or "cluster" (cluster-exact; partitions only);
- drafting: ``draft`` (``DRAFTS``: how a position left after a pass is re-drafted from the pass's
  row: "independent", each drawn on its own (SJD, GSD); "maximal" or "gumbel", coupled to the
  draft it held (MC-SJD / SCD, ``decode.coupling``; lossless for SJD, proofs/09); kinds "sjd"
  and "gsd") and ``init`` (fresh drafts: "random", uniform over the allowed tokens;
  "repeat_row": the token one image row up);
- window: drafts L per forward (ignored by AR);
- ``candidates`` k (1: one draft per position): k candidates for the first undecided position,
  each followed by the window's other drafts, verified in one tree forward by recursive rejection
  sampling (``gsd_core.multidraft``, ``gsd_lab.models.tree``; lossless, proofs/15); plain SJD
  (any ``draft``), the eager runner only;
- preset: "default" (the package's own exact variant) or "release" (the GSD release's window,
  Jacobi interval, random drafts at forced positions and bf16 distance filter;
  ``gsd_lab.decode.presets``).

Adding a value (a drafting scheme, a cluster kind) is one entry in its tuple here (validation,
JSON and the command line's choices follow) plus its behaviour where it acts (``resolve`` for a
rule, ``gsd_lab.decode.loop`` for drafting). ``resolve`` builds the runtime objects for one model:
the gsd_core cluster rule and the ``gsd_core.Lantern`` table (O(V^2 log V), cached), composed into
the one rule ``verify`` takes (``ResolvedMethod.rule``). This module imports no torch until
``resolve`` runs (or a preset other than "default" is named), so the command line checks a spec
in milliseconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

KINDS = ("ar", "sjd", "gsd")
INITS = ("random", "repeat_row")
DRAFTS = ("independent", "maximal", "gumbel")
RESIDUALS = ("token", "cluster")
# "dynamic": the paper's rule (rank window of G tokens by p, probability-gap and distance
# filters); "dynamic-gap" / "dynamic-distance": one filter; "dynamic-nofilter": no filter;
# "dynamic-q": ranked by the draft q, no filter; "rank-binned": our partition of rank bins;
# "static": k-means on the input embeddings (a fixed partition, the paper's Table 2 row A).
CLUSTER_KINDS = (
    "dynamic",
    "dynamic-gap",
    "dynamic-distance",
    "dynamic-nofilter",
    "dynamic-q",
    "rank-binned",
    "static",
)
FILTER_KINDS = ("dynamic", "dynamic-gap", "dynamic-distance")
PARTITION_KINDS = ("rank-binned", "static")
BUDGET_MEASURES = ("tv", "w1")
BUDGET_POLICIES = ("cap", "sure")
# The transport plan's solver in decoding (gsd_lab.decode.relaxation_w1.SOLVERS).
TRANSPORT_SOLVER = "ranked"
# Fields left out of ``to_dict`` at these defaults, so that the keys of earlier methods stay.
_OPTIONAL_FIELDS = {
    "relaxation_delta": 0.0,
    "budget": None,
    "budget_measure": "tv",
    "budget_policy": "cap",
    "budget_cap": 1.0,
    "transport_eps": None,
    "transport_k": 16,
    "candidates": 1,
}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
        # [10^6, D] difference, without its 2 x 2 GB of temporaries.
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


def _choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; expected one of {choices}")


@dataclass(frozen=True)
class DecodingMethod:
    """A decoding method (module docstring). Invalid combinations raise ``ValueError`` naming
    the field; numbers are normalised (``acceptance_scale=2`` equals ``2.0``), so equal methods
    have equal ``key``s."""

    kind: str
    window: int = 16
    init: str = "random"
    draft: str = "independent"
    acceptance_scale: float = 1.0
    clusters: str | None = None
    group_size: int = 0
    residual: str = "token"
    lantern_k: int = 0
    lantern_delta: float = 0.0
    filters: FilterSettings | None = None
    preset: str = "default"
    relaxation_delta: float = 0.0
    budget: float | None = None
    budget_measure: str = "tv"
    budget_policy: str = "cap"
    budget_cap: float = 1.0
    transport_eps: float | None = None
    transport_k: int = 16
    candidates: int = 1

    def __post_init__(self) -> None:
        _choice("method kind", self.kind, KINDS)
        if not (_is_int(self.window) and self.window >= 1):
            raise ValueError(f"window must be an int >= 1, got {self.window!r}")
        self._check_preset()
        _choice("init", self.init, INITS)
        _choice("draft", self.draft, DRAFTS)
        if self.kind == "ar" and self.draft != "independent":
            raise ValueError(
                f"draft {self.draft!r} couples Jacobi re-drafts: "
                "methods 'sjd' and 'gsd' only (AR drafts nothing)"
            )
        _choice("residual", self.residual, RESIDUALS)
        self._check_acceptance()
        self._check_clusters()
        self._check_lantern()
        self._check_relaxation()
        self._check_transport()
        self._check_candidates()
        object.__setattr__(self, "acceptance_scale", float(self.acceptance_scale))
        object.__setattr__(self, "lantern_delta", float(self.lantern_delta))

    def _check_candidates(self) -> None:
        """k candidates at the first undecided position, verified by recursive rejection
        sampling in one tree forward (``gsd_lab.decode.loop``, proofs/15): plain SJD only."""
        if not (_is_int(self.candidates) and self.candidates >= 1):
            raise ValueError(f"candidates must be an int >= 1, got {self.candidates!r}")
        if self.candidates == 1:
            return
        plain = (
            self.kind == "sjd"
            and self.acceptance_scale == 1
            and self.lantern_k == 0
            and self.relaxation_delta == 0
            and self.budget is None
            and self.transport_eps is None
            and self.preset == "default"
        )
        if not plain:
            raise ValueError(
                "candidates > 1 (multiple drafts, recursive rejection sampling) is exact for "
                "plain SJD only: kind 'sjd', acceptance_scale 1, no LANTERN, relaxation, budget "
                "or transport, preset 'default'"
            )

    def _check_acceptance(self) -> None:
        if not (_is_number(self.acceptance_scale) and self.acceptance_scale > 0):
            raise ValueError(
                f"acceptance_scale must be a finite number > 0, got {self.acceptance_scale!r}"
            )
        if self.kind == "ar" and self.acceptance_scale != 1:
            raise ValueError(
                "acceptance_scale applies to methods 'sjd' and 'gsd' (AR has no acceptance test)"
            )

    def _check_clusters(self) -> None:
        if self.kind != "gsd":
            if self.clusters is not None or self.group_size != 0:
                raise ValueError(
                    f"method {self.kind!r} verifies token by token: clusters and group_size belong "
                    f"to method 'gsd' (got clusters {self.clusters!r}, "
                    f"group_size {self.group_size!r})"
                )
        else:
            if self.clusters is None:
                raise ValueError(f"method 'gsd' needs clusters, one of {CLUSTER_KINDS}")
            _choice("clusters", self.clusters, CLUSTER_KINDS)
            if not (_is_int(self.group_size) and self.group_size >= 1):
                raise ValueError(
                    "group_size (G, tokens per cluster) must "
                    f"be an int >= 1, got {self.group_size!r}"
                )
        if self.residual == "cluster" and self.clusters not in PARTITION_KINDS:
            raise ValueError(
                f"residual 'cluster' needs a partition (method 'gsd' with clusters one of "
                f"{PARTITION_KINDS}), got method {self.kind!r} with clusters {self.clusters!r}"
            )
        if self.filters is not None:
            if not isinstance(self.filters, FilterSettings):
                raise ValueError(
                    f"filters must be a FilterSettings or None, got {type(self.filters).__name__}"
                )
            if self.clusters not in FILTER_KINDS:
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

    def _check_lantern(self) -> None:
        if not (_is_int(self.lantern_k) and self.lantern_k >= 0):
            raise ValueError(
                f"lantern_k must be an int >= 0 (0: no LANTERN), got {self.lantern_k!r}"
            )
        if not (_is_number(self.lantern_delta) and 0 <= self.lantern_delta <= 1):
            raise ValueError(
                f"lantern_delta must be a number in [0, 1], got {self.lantern_delta!r}"
            )
        if self.lantern_delta and not self.lantern_k:
            raise ValueError(
                f"lantern_delta {self.lantern_delta!r} needs "
                "lantern_k > 0 (LANTERN's neighbourhoods)"
            )
        if self.lantern_k and (
            self.kind != "sjd" or self.residual != "token" or self.acceptance_scale != 1
        ):
            raise ValueError(
                "LANTERN (lantern_k > 0) replaces SJD's acceptance test: use method 'sjd' with "
                f"residual 'token' and acceptance_scale 1 (got method {self.kind!r}, residual "
                f"{self.residual!r}, acceptance_scale {self.acceptance_scale!r})"
            )

    def _check_relaxation(self) -> None:
        delta, budget, cap = self.relaxation_delta, self.budget, self.budget_cap
        if not (_is_number(delta) and 0 <= delta <= 1):
            raise ValueError(f"relaxation_delta must be a number in [0, 1], got {delta!r}")
        if budget is not None and not (_is_number(budget) and budget >= 0):
            raise ValueError(f"budget must be a finite number >= 0 or None, got {budget!r}")
        _choice("budget measure", self.budget_measure, BUDGET_MEASURES)
        _choice("budget policy", self.budget_policy, BUDGET_POLICIES)
        if self.budget_measure == "tv" and not (_is_number(cap) and 0 < cap <= 1):
            raise ValueError(f"budget_cap (TV) must be a number in (0, 1], got {cap!r}")
        if self.budget_measure == "w1" and not (_is_number(cap) and cap > 0):
            raise ValueError(
                f"budget_cap (W1, the content distance's units) must be a finite number > 0, "
                f"got {cap!r}"
            )
        if budget is None and (self.budget_measure, self.budget_policy, float(cap)) != (
            "tv",
            "cap",
            1.0,
        ):
            raise ValueError(
                "budget_measure, budget_policy and budget_cap belong to a budget: set budget=B"
            )
        relaxed = bool(delta) or budget is not None
        plain_sjd = (
            self.kind == "sjd"
            and not self.lantern_k
            and self.acceptance_scale == 1
            and self.residual == "token"
        )
        if relaxed and not plain_sjd:
            raise ValueError(
                "the TV-optimal relaxation (relaxation_delta > 0 or a budget) replaces SJD's "
                "acceptance test: use method 'sjd' with no LANTERN, acceptance_scale 1 and "
                f"residual 'token' (got method {self.kind!r}, lantern_k {self.lantern_k}, "
                f"acceptance_scale {self.acceptance_scale!r})"
            )
        if delta and budget is not None:
            raise ValueError("relaxation_delta and budget are two ways to relax: give one")
        if self.transport_eps is not None and (delta or budget is not None):
            raise ValueError(
                "transport_eps, relaxation_delta and budget are ways to relax: give one "
                "(the W1 dial is budget_measure='w1', with transport_k neighbours)"
            )
        object.__setattr__(self, "relaxation_delta", float(delta))
        object.__setattr__(self, "budget_cap", float(cap))
        if budget is not None:
            object.__setattr__(self, "budget", float(budget))

    def _check_transport(self) -> None:
        eps, k = self.transport_eps, self.transport_k
        if eps is not None and not (_is_number(eps) and eps >= 0):
            raise ValueError(
                f"transport_eps (a W1 budget per token) must be a finite number >= 0 or None, "
                f"got {eps!r}"
            )
        if not (_is_int(k) and k >= 1):
            raise ValueError(f"transport_k (neighbours per code) must be an int >= 1, got {k!r}")
        if k != 16 and not self.uses_transport:
            raise ValueError(
                "transport_k belongs to the transport relaxation: set transport_eps, or a budget "
                "with budget_measure='w1'"
            )
        if eps is not None:
            plain_sjd = (
                self.kind == "sjd"
                and not self.lantern_k
                and self.acceptance_scale == 1
                and self.residual == "token"
            )
            if not plain_sjd:
                raise ValueError(
                    "the transport relaxation (transport_eps) replaces SJD's acceptance test: use "
                    "method 'sjd' with no LANTERN, acceptance_scale 1 and residual 'token' (got "
                    f"method {self.kind!r}, lantern_k {self.lantern_k}, acceptance_scale "
                    f"{self.acceptance_scale!r})"
                )
            object.__setattr__(self, "transport_eps", float(eps))

    @property
    def uses_transport(self) -> bool:
        """Whether this method verifies by the transport relaxation (``transport_eps``, or the W1
        dial): it needs the codes' content neighbours (``resolve``)."""
        return self.transport_eps is not None or (
            self.budget is not None and self.budget_measure == "w1"
        )

    @property
    def uses_filters(self) -> bool:
        return self.clusters in FILTER_KINDS

    def with_filters(self, default: FilterSettings) -> "DecodingMethod":
        """This method with ``default`` filters where it uses filters and names none."""
        return (
            replace(self, filters=default) if self.uses_filters and self.filters is None else self
        )

    def for_model(self, model_name: str) -> "DecodingMethod":
        """This method with the model's default filters (``FilterSettings.for_model``) filled in."""
        return self.with_filters(FilterSettings.for_model(model_name))

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (``filters``: a dict or None); the relaxation's and the
        budget's fields only when not at their defaults (earlier methods keep their keys)."""
        data = asdict(self)
        return {
            k: v for k, v in data.items() if k not in _OPTIONAL_FIELDS or v != _OPTIONAL_FIELDS[k]
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DecodingMethod":
        """The inverse of ``to_dict`` (missing fields take their defaults; unknown ones raise)."""
        if not isinstance(data, dict):
            raise ValueError(f"a decoding method is a dict, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown decoding method fields {unknown}")
        filters = data.get("filters")
        return cls(**{**data, "filters": None if filters is None else FilterSettings(**filters)})

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
        """The runtime objects of this method for ``adapter`` (a ``CausalLMAdapter``).

        GSD: the gsd_core rule of ``clusters`` (``DynamicClusters``, ``RankBinnedClusters`` or a
        ``FixedPartition`` from k-means, seed 0) with filters ``self.filters`` or, when None,
        ``FilterSettings.for_model(model_name)``. LANTERN: ``gsd_core.Lantern`` with neighbourhoods
        of ``lantern_k`` tokens by Euclidean distance between embedding rows (the paper uses VQ
        codebook latents; the input embeddings are what every model here exposes, and what GSD's
        distance filter uses). ``embeddings`` [V, D]: the rows that define distances (default
        ``adapter.embeddings``). ``cache``: a dict kept by the caller for one adapter and one set
        of embeddings, so that the LANTERN table, the distance threshold and the k-means
        partition are built once (LANTERN at V = 8192 takes about 12 s)."""
        method = self.for_model(model_name)
        cache = {} if cache is None else cache
        emb = adapter.embeddings if embeddings is None else embeddings
        return ResolvedMethod(
            method,
            clusters=_cluster_rule(method, adapter, emb, cache),
            lantern=_lantern_rule(method, emb, cache),
            neighbours=_neighbours(method, adapter),
        )


def _cached(cache: dict, key: tuple, build: Any) -> Any:
    if key not in cache:
        cache[key] = build()
    return cache[key]


def _cluster_rule(method: DecodingMethod, adapter: Any, embeddings: Any, cache: dict) -> object:
    from gsd_core import DynamicClusters, RankBinnedClusters

    kind, size, filters = method.clusters, method.group_size, method.filters
    if kind is None:
        return None
    if kind in ("dynamic", "dynamic-distance"):
        image_tokens = adapter.allowed_tokens.cpu()
        known = getattr(adapter, "distance_quantiles", None)
        distance = _cached(
            cache,
            ("distance", filters),
            lambda: filters.resolve(embeddings, image_tokens, known=known),
        )
        gap = filters.max_prob_gap if kind == "dynamic" else None
        if method.preset != "default":
            from .presets import ReleaseDistanceClusters, preset, release_distance_table

            if preset(method.preset).release_distance:
                table = _cached(
                    cache,
                    ("release distance", distance),
                    lambda: release_distance_table(embeddings, distance).to(adapter.device),
                )
                return ReleaseDistanceClusters(size, table, gap)
        return DynamicClusters(
            size, max_embedding_distance=distance, max_prob_gap=gap, embeddings=embeddings
        )
    if kind == "dynamic-gap":
        return DynamicClusters(size, max_prob_gap=filters.max_prob_gap)
    if kind == "dynamic-nofilter":
        return DynamicClusters(size)
    if kind == "dynamic-q":
        return DynamicClusters(size, rank_by="q")
    if kind == "rank-binned":
        return RankBinnedClusters(size)
    return _cached(cache, ("static", size), lambda: _static_partition(adapter, embeddings, size))


def _static_partition(adapter: Any, embeddings: Any, size: int) -> object:
    from .clustering import embedding_partition

    partition = embedding_partition(
        embeddings.cpu(),
        size,
        seed=0,
        tokens=adapter.allowed_tokens.cpu(),
        vocab_size=adapter.vocab_size,
    )
    return type(partition)(partition.labels.to(adapter.device))


def _lantern_rule(method: DecodingMethod, embeddings: Any, cache: dict) -> object:
    if not method.lantern_k:
        return None
    import torch
    from gsd_core import Lantern, latent_neighbourhoods

    k = method.lantern_k
    table = _cached(
        cache,
        ("lantern", k),
        lambda: latent_neighbourhoods(embeddings.detach().to(torch.float64), k),
    )
    return Lantern(table, method.lantern_delta)


# Content neighbour tables, keyed by (SHA-256 of the float64 content rows and their token ids,
# V, k): one per model's content and k, built once per process (10-35 s at V = 8192, measured
# on a shared CPU).
_NEIGHBOUR_CACHE: dict[tuple[str, int, int], Any] = {}


def _neighbours(method: DecodingMethod, adapter: Any) -> Any:
    """The ``ContentNeighbours`` of the adapter's ``code_content()`` / ``allowed_tokens`` with
    ``transport_k`` neighbours, for a method that transports (else None); cached by content."""
    if not method.uses_transport:
        return None
    import hashlib

    import torch

    from .relaxation_w1 import content_neighbours

    content = adapter.code_content()
    if content is None:
        raise ValueError(
            "the transport relaxation (transport_eps, or budget_measure 'w1') needs an adapter "
            "whose code_content() gives its codes' decoded content"
        )
    tokens = adapter.allowed_tokens.detach().cpu().long()
    rows = content.detach().to("cpu", torch.float64).contiguous()
    digest = hashlib.sha256(
        repr(tuple(rows.shape)).encode() + rows.numpy().tobytes() + tokens.numpy().tobytes()
    ).hexdigest()
    key = (digest, int(adapter.vocab_size), method.transport_k)
    if key not in _NEIGHBOUR_CACHE:
        _NEIGHBOUR_CACHE[key] = content_neighbours(
            rows, tokens, adapter.vocab_size, method.transport_k
        )
    return _NEIGHBOUR_CACHE[key]


@dataclass(frozen=True)
class ResolvedMethod:
    """A ``DecodingMethod`` with its runtime objects: ``clusters`` (a gsd_core rule or
    partition; exactly for kind "gsd") and ``lantern`` (a ``gsd_core.Lantern``; exactly when
    ``method.lantern_k`` > 0, with its budget) and ``neighbours`` (a ``ContentNeighbours``;
    exactly when the method transports: ``transport_eps`` or the W1 dial). Build it with
    ``DecodingMethod.resolve``."""

    method: DecodingMethod
    clusters: object = None
    lantern: Any = None
    neighbours: Any = None

    def __post_init__(self) -> None:
        method = self.method
        if not isinstance(method, DecodingMethod):
            raise ValueError(f"method must be a DecodingMethod, got {type(method).__name__}")
        if (self.neighbours is not None) != method.uses_transport:
            raise ValueError(
                "neighbours (a ContentNeighbours) must be given exactly when the method "
                f"transports (transport_eps {method.transport_eps}, budget_measure "
                f"{method.budget_measure!r})"
            )
        if (self.clusters is not None) != (method.kind == "gsd"):
            raise ValueError(
                f"clusters must be given exactly for method 'gsd' (method {method.kind!r}, "
                f"clusters {type(self.clusters).__name__})"
            )
        if (self.lantern is not None) != bool(method.lantern_k):
            raise ValueError(
                f"lantern must be given exactly when lantern_k > 0 (lantern_k {method.lantern_k})"
            )
        if self.lantern is not None:
            from gsd_core import Lantern

            if not isinstance(self.lantern, Lantern):
                raise ValueError(
                    f"lantern must be a gsd_core.Lantern, got {type(self.lantern).__name__}"
                )
            hood = self.lantern.neighbourhoods
            if self.lantern.delta != method.lantern_delta or hood.k != min(
                method.lantern_k, hood.vocab_size
            ):
                raise ValueError(
                    f"the Lantern rule (k {hood.k}, delta {self.lantern.delta}) is not the "
                    f"method's (lantern_k {method.lantern_k}, lantern_delta {method.lantern_delta})"
                )

    @property
    def rule(self) -> Any:
        """The one gsd_core rule ``verify`` and ``accounting.distortion`` take (``method_rule``);
        ``OptimalRelaxation(relaxation_delta)`` for the relaxation. With a budget: SD, which
        ``decode.budget.BudgetDial`` replaces step by step with the step's allowances."""
        method = self.method
        if method.relaxation_delta:
            from gsd_core import OptimalRelaxation

            return OptimalRelaxation(method.relaxation_delta)
        if method.transport_eps is not None:
            from .relaxation_w1 import TransportRelaxation

            return TransportRelaxation(self.neighbours, method.transport_eps, TRANSPORT_SOLVER)
        return method_rule(self.clusters, method.residual, method.acceptance_scale, self.lantern)


def method_rule(
    clusters: object = None,
    residual: str = "token",
    acceptance_scale: float = 1.0,
    lantern: Any = None,
) -> Any:
    """The gsd_core rule of a method's parts: ``lantern`` or ``clusters`` (None, partition labels
    [V] or a rule), with the cluster-exact residual for residual="cluster" (partitions only;
    SD's singletons keep the token residual, which is the same), wrapped in
    ``Amplify(acceptance_scale)`` when the scale is not 1."""
    from gsd_core import Amplify
    from gsd_core.rules import Partition, as_rule

    rule = as_rule(lantern if lantern is not None else clusters)
    if residual == "cluster" and not isinstance(rule, Partition) and clusters is not None:
        raise ValueError(
            f"the cluster-exact residual needs a partition; {type(rule).__name__} is not one "
            "(use residual='token', or a partition such as RankBinnedClusters or labels)"
        )
    if residual == "cluster" and isinstance(rule, Partition):
        rule = replace(rule, residual="cluster")
    elif residual not in RESIDUALS:
        raise ValueError(f"unknown residual mode {residual!r}; expected one of {RESIDUALS}")
    return rule if acceptance_scale == 1.0 else Amplify(acceptance_scale, rule)
