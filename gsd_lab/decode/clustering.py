"""Static clusters of the vocabulary by embedding distance (the paper's Table 2, row A).

A fixed partition that does not look at p: seeded k-means (Lloyd's algorithm, k-means++
initialisation) on the rows of an embedding matrix, e.g. the transformer's input embeddings of
the image tokens. It plugs into gsd_core as ``FixedPartition(labels)``; Theorem 1 applies to it
because it is a partition.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gsd_core import FixedPartition


def kmeans(
    points: Tensor, num_clusters: int, *, generator: torch.Generator, iterations: int = 50
) -> Tensor:
    """Labels [N] in [0, num_clusters) minimising sum_i ||x_i - mu_{label(i)}||^2 (a local optimum).

    points: [N, D] float. k-means++ seeding (centres drawn with probability proportional to the
    squared distance to the nearest chosen centre), then Lloyd iterations until the labels stop
    changing. Every label is used (an emptied cluster takes the point farthest from its centre).
    Deterministic given ``generator``.
    """
    if points.ndim != 2 or not points.is_floating_point():
        raise ValueError(
            f"points must be a float tensor [N, D], got {tuple(points.shape)} {points.dtype}"
        )
    n = points.shape[0]
    if not 1 <= num_clusters <= n:
        raise ValueError(f"num_clusters must lie in [1, {n}] for {n} points, got {num_clusters}")
    x = points.detach().to(torch.float64).cpu()
    first = int(torch.randint(n, (1,), generator=generator).item())
    centres = [x[first]]
    nearest = (x - x[first]).square().sum(-1)
    for _ in range(1, num_clusters):
        if float(nearest.sum()) > 0:
            pick = int(torch.multinomial(nearest, 1, generator=generator).item())
        else:  # all remaining points coincide with a centre
            pick = int(torch.randint(n, (1,), generator=generator).item())
        centres.append(x[pick])
        nearest = torch.minimum(nearest, (x - x[pick]).square().sum(-1))
    mu = torch.stack(centres)
    labels = torch.full((n,), -1, dtype=torch.int64)
    for _ in range(iterations):
        distance = torch.cdist(x, mu).square()
        new_labels = distance.argmin(-1)
        counts = torch.bincount(new_labels, minlength=num_clusters)
        for empty in (counts == 0).nonzero().flatten().tolist():
            far = int(distance.gather(1, new_labels[:, None]).squeeze(1).argmax())
            new_labels[far] = empty
            distance[far] = 0
        if torch.equal(new_labels, labels):
            break
        labels = new_labels
        sums = torch.zeros_like(mu).index_add_(0, labels, x)
        mu = sums / torch.bincount(labels, minlength=num_clusters).clamp(min=1).unsqueeze(1).to(
            x.dtype
        )
    return labels


def embedding_partition(
    embeddings: Tensor,
    group_size: int,
    *,
    seed: int = 0,
    tokens: Tensor | None = None,
    vocab_size: int | None = None,
) -> FixedPartition:
    """A static partition of the vocabulary into clusters of about ``group_size`` nearby embeddings.

    embeddings: [V, D] (rows indexed by token id). Only ``tokens`` (default: all V) are clustered,
    into ceil(len(tokens) / group_size) k-means clusters; every other token of the ``vocab_size``
    (default V) vocabulary is a singleton. Returns ``FixedPartition(labels [vocab_size])``.
    """
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if embeddings.ndim != 2:
        raise ValueError(f"embeddings must be [V, D], got {tuple(embeddings.shape)}")
    vocab = embeddings.shape[0] if vocab_size is None else vocab_size
    if tokens is None:
        tokens = torch.arange(min(vocab, embeddings.shape[0]))
    tokens = torch.as_tensor(tokens, dtype=torch.int64).flatten()
    if (
        tokens.numel() == 0
        or int(tokens.min()) < 0
        or int(tokens.max()) >= min(vocab, embeddings.shape[0])
    ):
        raise ValueError(f"tokens must be non-empty ids in [0, {min(vocab, embeddings.shape[0])})")
    num_clusters = math.ceil(tokens.numel() / group_size)
    generator = torch.Generator().manual_seed(seed)
    cluster_of_token = kmeans(embeddings[tokens].float(), num_clusters, generator=generator)
    labels = torch.empty(vocab, dtype=torch.int64)
    others = torch.ones(vocab, dtype=torch.bool)
    others[tokens] = False
    labels[tokens] = cluster_of_token
    labels[others] = num_clusters + torch.arange(int(others.sum()))
    return FixedPartition(labels)
