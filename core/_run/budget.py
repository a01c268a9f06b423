"""The run's budget: `--max-cost USD` and `--max-tokens N` for the whole run.

Spending is counted as it happens: every model turn of the agent (as it arrives) and
every check that used a model (a judge), plus what earlier sessions of a resumed run
spent. Once either cap is reached no new attempt starts; attempts already running
finish (so a run can end somewhat above its cap, by at most what those attempts
spend), and the rest are reported `not_run` with the reason. `evalctl run --resume`
with a higher cap continues them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalctl._plugin.types import TokenUsage
from evalctl._text import money


def usage_tokens(usage: TokenUsage) -> int:
    """Every token a model processed: input, output, cache reads and writes."""
    return (usage.input_tokens + usage.output_tokens + usage.cache_read_tokens
            + usage.cache_write_tokens)


@dataclass
class RunBudget:
    max_cost: float | None = None
    max_tokens: int | None = None
    spent_cost: float = 0.0  # of the calls that were priced
    spent_tokens: int = 0
    unpriced: bool = False  # some call had no price: the cost counted is a lower bound
    reached_reason: str | None = None  # set once a cap stopped new attempts

    @property
    def capped(self) -> bool:
        return self.max_cost is not None or self.max_tokens is not None

    def charge(self, usage: TokenUsage | None, cost: float | None) -> None:
        if usage is not None:
            self.spent_tokens += usage_tokens(usage)
        if cost is None:
            self.unpriced = self.unpriced or usage is not None
        else:
            self.spent_cost += cost

    def exhausted(self) -> str | None:
        """Why no new attempt may start, or None while the budget lasts."""
        if self.max_cost is not None and self.spent_cost >= self.max_cost:
            note = " (some calls were unpriced and are not counted)" if self.unpriced else ""
            return (f"the run's budget was reached: {money(self.spent_cost)} spent of "
                    f"--max-cost {money(self.max_cost)}{note}")
        if self.max_tokens is not None and self.spent_tokens >= self.max_tokens:
            return (f"the run's budget was reached: {self.spent_tokens} tokens used of "
                    f"--max-tokens {self.max_tokens}")
        return None

    def to_dict(self) -> dict[str, Any] | None:
        """What the report shows, or None for a run without a cap."""
        if not self.capped:
            return None
        return {"max_cost": self.max_cost, "max_tokens": self.max_tokens,
                "spent_cost": round(self.spent_cost, 6), "spent_tokens": self.spent_tokens,
                "unpriced": self.unpriced, "reached": self.reached_reason is not None}
