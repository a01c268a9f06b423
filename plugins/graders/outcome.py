"""`succeeded`: did the loop complete, without the agent reporting failure?"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import evalctl

FAILURE_PHRASES = re.compile(
    r"\b(?:I|we) (?:could not|couldn't|cannot|can't|was unable to|were unable to|"
    r"am unable to|was not able to|wasn't able to|did not manage to|failed to)\b"
    r"|\bunable to (?:complete|finish)\b|\bgave up\b|\b(?:task|it) (?:failed|is incomplete)\b",
    re.IGNORECASE,
)


async def grade_succeeded(check: dict[str, Any], workspace: Path,
                          result: evalctl.AgentResult) -> evalctl.CheckResult:
    # No file is read: on the event loop, with no trip to a thread.
    if not result.completed:
        detail = f"the agent loop ended with {result.exit_status}"
        return evalctl.CheckResult(False, f"{detail}: {result.error}" if result.error else detail)
    found = FAILURE_PHRASES.search(result.final_text or "")
    if found:
        return evalctl.CheckResult(False, f"the final message reports failure: {found.group(0)!r}")
    return evalctl.CheckResult(True, "the loop completed and the final message reports no failure")


@evalctl.hookimpl
def evalctl_register_graders(register):
    register(evalctl.GraderSpec(
        name="succeeded",
        grade=grade_succeeded,
        params_schema={"type": "object", "properties": {}},
        talk_only=True,
        example="- type: succeeded",
        description="The agent loop completed (not max_turns, timeout or an error) and the "
                    "final message does not report failure.",
        trusts="Trusts the exit status evalctl recorded and the final message's own words; "
               "talk-only: an agent can satisfy it by saying it succeeded.",
    ))
