"""Paired tests for "did completion really change?", so one task's wiggle is not
called a regression."""

from __future__ import annotations

import random
from math import comb


def mcnemar_exact(newly_failing: int, newly_passing: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs: under no change, each
    flip is equally likely to go either way (a binomial test with p = 1/2)."""
    flips = newly_failing + newly_passing
    if flips == 0:
        return 1.0
    tail = sum(comb(flips, i) for i in range(min(newly_failing, newly_passing) + 1))
    return min(1.0, 2 * tail / 2**flips)


def bootstrap_interval(differences: list[float], resamples: int = 2000,
                       confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean per-task difference, resampling tasks.
    Seeded, so the same reports always give the same statement."""
    if not differences:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(differences)
    means = sorted(sum(rng.choices(differences, k=n)) / n for _ in range(resamples))
    low_index = int((1 - confidence) / 2 * resamples)
    high_index = min(resamples - 1, int((1 + confidence) / 2 * resamples))
    return means[low_index], means[high_index]
