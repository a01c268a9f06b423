"""The run budget (--max-cost, --max-tokens) and the run's backing off under rate
limits."""

from __future__ import annotations

import asyncio
import json
import types

import evalctl
from evalctl._agent.throttle import CallThrottle
from evalctl._plugin.registry import set_registry

from .conftest import registry_with, run_cli

TASKS = "".join(f"""\
- id: t{i}
  prompt: Write t{i}.txt.
  checks:
    - type: file_exists
      path: t{i}.txt
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: t{i}.txt
            content: hi
      usage:
        input_tokens: 400
        output_tokens: 100
    - text: Wrote t{i}.txt.
      usage:
        input_tokens: 400
        output_tokens: 100
""" for i in range(1, 4))


def test_a_token_budget_stops_new_attempts_and_a_resume_continues_them(tmp_path):
    (tmp_path / "suite.yaml").write_text(TASKS)
    result = run_cli(tmp_path, "suite.yaml", "--concurrency", "1", "--max-tokens", "1500",
                     "--report", "r.json")
    assert result.exit_code == 1, result.output
    assert "attempt(s) not run: the budget was reached" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    # Each attempt uses 1,000 tokens: the second starts (500 left), the third does not.
    assert [t["status"] for t in report["tasks"]] == ["passed", "passed", "not_run"]
    assert report["tasks"][2]["error"] == ("the run's budget was reached: 2000 tokens used of "
                                           "--max-tokens 1500")
    assert report["budget"] == {"max_cost": None, "max_tokens": 1500, "spent_cost": 0.0,
                                "spent_tokens": 2000, "unpriced": False, "reached": True}
    assert report["summary"]["completion_rate"] == 1.0  # not-run attempts are not failures
    assert report["interrupted"] is False
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))

    # Resumed with the same budget, nothing more can start; with a higher one, it does,
    # and the spending of the first session still counts.
    same = run_cli(tmp_path, "--resume", str(run_dir), "--report", "same.json")
    assert same.exit_code == 1 and "budget was reached" in same.output
    assert json.loads((tmp_path / "same.json").read_text())["summary"]["not_run"] == 1
    more = run_cli(tmp_path, "--resume", str(run_dir), "--max-tokens", "5000",
                   "--report", "more.json")
    assert more.exit_code == 0, more.output
    final = json.loads((tmp_path / "more.json").read_text())
    assert [t["status"] for t in final["tasks"]] == ["passed"] * 3
    assert final["budget"]["spent_tokens"] == 3000 and final["budget"]["reached"] is False


def _command_tasks(count: int) -> str:
    return "".join(f"- id: t{i}\n  prompt: p\n  checks:\n    - type: succeeded\n"
                   "    - type: command\n      command: \"true\"\n" for i in range(count))


class PricedModel:
    """Every turn costs a cent: one turn per task."""

    async def complete(self, request):
        return evalctl.ModelTurn(text="Done.", usage=evalctl.TokenUsage(10, 5), cost=0.01,
                                 model="priced-1")


def _plugin(name: str, **providers) -> types.ModuleType:
    @evalctl.hookimpl
    def evalctl_register_providers(register):
        for provider_name, make in providers.items():
            register(evalctl.ProviderSpec(name=provider_name, create=lambda options, m=make: m(),
                                          live=False))

    plugin = types.ModuleType(name)
    plugin.evalctl_register_providers = evalctl_register_providers
    return plugin


def test_a_cost_budget_counts_what_the_run_spent(tmp_path):
    set_registry(registry_with(("priced", _plugin("priced", priced=PricedModel))))
    (tmp_path / "suite.yaml").write_text(_command_tasks(3))
    result = run_cli(tmp_path, "suite.yaml", "--provider", "priced", "--concurrency", "1",
                     "--max-cost", "0.015", "--report", "r.json")
    report = json.loads((tmp_path / "r.json").read_text())
    assert [t["status"] for t in report["tasks"]] == ["passed", "passed", "not_run"], \
        result.output
    assert report["budget"]["spent_cost"] == 0.02 and report["budget"]["reached"] is True
    assert "$0.0200 spent of --max-cost $0.0150" in report["tasks"][2]["error"]


def test_the_throttle_halves_on_refusals_and_grows_back_with_successes():
    throttle = CallThrottle(8)

    async def scenario() -> list[int]:
        seen = []
        async with throttle.slot() as generation:
            pass
        throttle.rate_limited(generation)
        throttle.rate_limited(generation)  # the same burst: counted once
        seen.append(throttle.limit)
        async with throttle.slot() as later:
            pass
        throttle.rate_limited(later)
        seen.append(throttle.limit)
        for _ in range(2 + 3 + 4 + 5 + 6 + 7):
            throttle.succeeded()
        seen.append(throttle.limit)
        return seen

    assert asyncio.run(scenario()) == [4, 2, 8]
    assert throttle.lowest == 2


class CrowdedService:
    """A model service that refuses (429) any call beyond two at once."""

    def __init__(self):
        self.in_flight = 0
        self.refusals = 0
        self.served = 0

    async def complete(self, request):
        self.in_flight += 1
        try:
            if self.in_flight > 2:
                self.refusals += 1
                raise evalctl.RateLimited("HTTP 429: too many requests", retry_after=0.01)
            await asyncio.sleep(0.02)
            self.served += 1
            return evalctl.ModelTurn(text="Done.", usage=evalctl.TokenUsage(10, 5))
        finally:
            self.in_flight -= 1


def test_a_run_backs_off_under_rate_limits_and_every_task_finishes(tmp_path):
    service = CrowdedService()
    set_registry(registry_with(("crowded", _plugin("crowded", crowded=lambda: service))))
    (tmp_path / "suite.yaml").write_text(_command_tasks(12))
    result = run_cli(tmp_path, "suite.yaml", "--provider", "crowded", "--concurrency", "8",
                     "--report", "r.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["passed"] == 12 and report["summary"]["errors"] == 0
    assert service.refusals > 0 and service.served == 12
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))
    waits = [json.loads(line) for ledger in (run_dir / ".ledgers").glob("*.jsonl")
             for line in ledger.read_text().splitlines() if '"rate_limited"' in line]
    assert len(waits) == service.refusals
    assert min(w["concurrency"] for w in waits) < 8  # the run lowered its own concurrency
