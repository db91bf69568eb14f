"""Several figures of merit at once (`objective.pareto`): losses, the front, hypervolume.

Pure Python and numpy: the coordinator, the results table and the search all use it. Every goal
becomes a loss to minimise (a `maximize` metric is negated), so "better" always means smaller.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Goals = tuple[tuple[str, str], ...]  # (metric, "minimize" | "maximize") pairs, in the user's order
MEASURED = ("params", "duration_s")  # measured by mpiopt for every model trial, not by training
PARAM_GOAL = MEASURED[0]  # a model's weight count; a function's trials have none
AUGMENT = 0.05  # the weight of the sum beside the maximum in the augmented Chebyshev scalarisation


def reported_goal(goals: Goals) -> tuple[str, str] | None:
    """The first (metric, direction) goal that the trials report, not one mpiopt measures: the
    `objective` column's, which --best goes by (None: no such goal)."""
    return next(((m, d) for m, d in goals if m not in MEASURED), None)


def losses(goals: Goals, metrics: dict[str, Any], duration_s: float | None) -> tuple[float, ...] | None:
    """A trial's losses, one a goal; None when one is missing or not finite."""
    out = []
    for metric, direction in goals:
        value = duration_s if metric == "duration_s" else metrics.get(metric)
        if value is None or isinstance(value, bool) or not math.isfinite(float(value)):
            return None
        out.append(float(value) if direction == "minimize" else -float(value))
    return tuple(out)


def front_mask(points: Sequence[Sequence[float]]) -> np.ndarray:
    """Which points no other point dominates (no worse in every loss, better in one).

    Points are visited by their sum of losses: a point can only be dominated by one with a smaller
    sum, so each is compared with the front found so far, O(n x front)."""
    P = np.asarray(points, dtype=float).reshape(len(points), -1)
    mask = np.zeros(len(P), dtype=bool)
    front: list[int] = []
    for i in np.argsort(P.sum(axis=1), kind="stable"):
        F = P[front]
        dominated = bool(np.any(np.all(F <= P[i], axis=1) & np.any(F < P[i], axis=1))) if front else False
        duplicate = bool(np.any(np.all(F == P[i], axis=1))) if front else False
        if not dominated:
            mask[i] = True
            if not duplicate:
                front.append(int(i))
    return mask


def hypervolume_2d(points: Sequence[Sequence[float]], ref: Sequence[float]) -> float:
    """The area dominated by two-loss `points` and bounded by the reference point `ref`."""
    P = np.asarray(points, dtype=float).reshape(-1, 2)
    P = P[np.all(P < np.asarray(ref, dtype=float), axis=1)]
    if not len(P):
        return 0.0
    P = P[front_mask(P)]
    P = P[np.argsort(P[:, 0])]
    area, last_y = 0.0, float(ref[1])
    for x, y in P:
        if y < last_y:
            area += (float(ref[0]) - x) * (last_y - y)
            last_y = y
    return area


def scalarise(vectors: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The augmented Chebyshev scalarisation of ParEGO (Knowles 2006) of loss vectors (rows):
    each loss scaled to [0, 1] over the rows, then max_i w_i f_i + AUGMENT * sum_i w_i f_i."""
    low, high = vectors.min(axis=0), vectors.max(axis=0)
    scaled = (vectors - low) / np.where(high > low, high - low, 1.0)
    weighted = scaled * weights
    return weighted.max(axis=1) + AUGMENT * weighted.sum(axis=1)
