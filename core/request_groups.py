"""Requests that ask the same thing, grouped by the closeness of their masked questions' vectors.

Pure: vectors in, groups of indices out. Greedy single pass in the order given (oldest first), so
a group keeps the id of its first request however many join it later."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def group_vectors(vectors: Sequence[Sequence[float] | None], threshold: float) -> list[list[int]]:
    """Indices grouped: each item joins the first group whose first item is at least `threshold`
    close (cosine); an item without a vector (not embedded yet) stands alone. Groups come largest
    first, then in the order of their first item."""
    groups: list[list[int]] = []
    heads: list[np.ndarray] = []
    for i, vector in enumerate(vectors):
        if vector is None or len(vector) == 0:
            groups.append([i])
            heads.append(np.zeros(0))
            continue
        v = np.asarray(vector, dtype=float)
        v = v / (np.linalg.norm(v) or 1.0)
        for group, head in zip(groups, heads, strict=True):
            if head.shape == v.shape and float(head @ v) >= threshold:
                group.append(i)
                break
        else:
            groups.append([i])
            heads.append(v)
    return sorted(groups, key=lambda g: (-len(g), g[0]))
