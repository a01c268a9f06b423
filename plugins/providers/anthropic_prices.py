"""USD per million tokens for Anthropic models, from the public pricing page.

PRICES_AS_OF is the day the table was checked. To update: edit the rows, bump the
date, and run the tests (test_anthropic_prices checks the shape). A model whose id
matches no row is reported as unpriced (cost null), never as $0.
"""

from __future__ import annotations

from typing import NamedTuple

import evalctl

PRICES_AS_OF = "2026-11-29"


class Price(NamedTuple):
    input: float
    output: float
    cache_write: float  # 5-minute cache writes
    cache_read: float


# Model-id prefix -> price; the longest matching prefix wins.
PRICES: dict[str, Price] = {
    "claude-opus-5": Price(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-8": Price(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-7": Price(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-6": Price(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-5": Price(5.00, 25.00, 6.25, 0.50),
    "claude-opus-4-1": Price(15.00, 75.00, 18.75, 1.50),
    "claude-opus-4": Price(15.00, 75.00, 18.75, 1.50),
    "claude-sonnet-4": Price(3.00, 15.00, 3.75, 0.30),
    "claude-haiku-4-5": Price(1.00, 5.00, 1.25, 0.10),
    "claude-3-5-haiku": Price(0.80, 4.00, 1.00, 0.08),
}


def price_for(model: str) -> Price | None:
    matches = [prefix for prefix in PRICES if model.startswith(prefix)]
    return PRICES[max(matches, key=len)] if matches else None


def cost_of(model: str, usage: evalctl.TokenUsage) -> float | None:
    price = price_for(model)
    if price is None:
        return None
    return (usage.input_tokens * price.input + usage.output_tokens * price.output
            + usage.cache_write_tokens * price.cache_write
            + usage.cache_read_tokens * price.cache_read) / 1_000_000
