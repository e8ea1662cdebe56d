"""The runtime pieces the package's acceptance specs build (``gsd_lab.decode.acceptance``):
GSD's cluster rule of a cluster kind, the static k-means partition, the content neighbour tables
of the transport relaxation (cached per process) and ``method_rule``, the composition of
clusters, residual and Amplify. Torch is imported when a piece is built, not with the module.
"""

from __future__ import annotations

from typing import Any

from .choices import RESIDUALS


def cached(cache: dict, key: tuple, build: Any) -> Any:
    """``cache[key]``, built by ``build()`` the first time."""
    if key not in cache:
        cache[key] = build()
    return cache[key]


def cluster_rule(spec: Any, method: Any, adapter: Any, embeddings: Any, cache: dict) -> object:
    """The gsd_core rule of a ``ClusterAcceptance`` (its kind and G) for ``method`` (filters,
    preset) on ``adapter``: ``DynamicClusters``, the release's distance clusters,
    ``RankBinnedClusters`` or the static partition (``cache``: thresholds, tables)."""
    from gsd_core import DynamicClusters, RankBinnedClusters

    kind, size, filters = spec.clusters, spec.group_size, method.filters
    if kind in ("dynamic", "dynamic-distance"):
        image_tokens = adapter.allowed_tokens.cpu()
        known = getattr(adapter, "distance_quantiles", None)
        distance = cached(
            cache,
            ("distance", filters),
            lambda: filters.resolve(embeddings, image_tokens, known=known),
        )
        gap = filters.max_prob_gap if kind == "dynamic" else None
        if method.preset != "default":
            from ..rules.clusters import ReleaseDistanceClusters, release_distance_table
            from .presets import preset

            if preset(method.preset).release_distance:
                table = cached(
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
    return cached(cache, ("static", size), lambda: _static_partition(adapter, embeddings, size))


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


# Content neighbour tables, keyed by (SHA-256 of the float64 content rows and their token ids,
# V, k): one per model's content and k, built once per process.
_NEIGHBOUR_CACHE: dict[tuple[str, int, int], Any] = {}


def content_neighbours_of(adapter: Any, k: int) -> Any:
    """The ``ContentNeighbours`` of the adapter's ``code_content()`` / ``allowed_tokens`` with
    ``k`` neighbours per code; cached by content."""
    import hashlib

    import torch

    from .relaxation_w1 import content_neighbours

    content = adapter.code_content()
    if content is None:
        raise ValueError(
            "the transport relaxation (TransportAcceptance, or a budget of measure 'w1') needs an "
            "adapter whose code_content() gives its codes' decoded content"
        )
    tokens = adapter.allowed_tokens.detach().cpu().long()
    rows = content.detach().to("cpu", torch.float64).contiguous()
    digest = hashlib.sha256(
        repr(tuple(rows.shape)).encode() + rows.numpy().tobytes() + tokens.numpy().tobytes()
    ).hexdigest()
    key = (digest, int(adapter.vocab_size), k)
    if key not in _NEIGHBOUR_CACHE:
        _NEIGHBOUR_CACHE[key] = content_neighbours(rows, tokens, adapter.vocab_size, k)
    return _NEIGHBOUR_CACHE[key]


def method_rule(clusters: object = None, residual: str = "token", amplify: float = 1.0) -> Any:
    """The gsd_core rule of a method's parts: ``clusters`` (None, partition labels [V] or a
    rule), with the cluster-exact residual for residual="cluster" (partitions only; SD's
    singletons keep the token residual, which is the same: ``capabilities.cluster_residual``),
    wrapped in ``Amplify(amplify)`` (k = ``amplify``, min(1, k P / Q)) when k is not 1."""
    from gsd_core import Amplify
    from gsd_core import as_rule

    from .. import rules  # noqa: F401 (the partitions' cluster-exact residual)
    from ..engine.capabilities import cluster_residual

    if residual not in RESIDUALS:
        raise ValueError(f"unknown residual mode {residual!r}; expected one of {RESIDUALS}")
    rule = as_rule(clusters)
    rule = cluster_residual(rule) if residual == "cluster" else rule
    return rule if amplify == 1.0 else Amplify(amplify, rule)
