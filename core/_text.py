"""How rates and money read in every human-facing output (tables, Markdown, compare)."""

from __future__ import annotations


def percent(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}%}"


def money(value: float | None) -> str:
    """USD, or "unpriced" for a model with no price: never a silent $0."""
    return "unpriced" if value is None else f"${value:.4f}"
