"""`evalctl`: the built-in agent loop (six tools, the run's provider), the default agent."""

from __future__ import annotations

import evalctl


async def run(context: evalctl.AgentContext) -> evalctl.AgentOutcome:
    return await context.run_builtin_loop()


@evalctl.hookimpl
def evalctl_register_agents(register):
    register(evalctl.AgentSpec(
        name="evalctl",
        run=run,
        description="evalctl's own loop: the run's provider with the six tools "
                    "(docs/tools.md). The default.",
        version=evalctl.__version__,
    ))
