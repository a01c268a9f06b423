"""evalctl-ray: an evalctl executor that runs each attempt as a task on a Ray cluster.

`evalctl run SUITE --executor ray --executor-option address=auto`: every attempt is a Ray
task that makes its workspace and sandboxes, runs the agent and the graders on a worker,
and sends back its result, ledger and workspace; the run's journal, budget, progress and
reports are the driver's, as with the local executor. Ray is imported only when a run
uses the executor, so `evalctl --help` and `list-plugins` never load it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import evalctl

OPTIONS_SCHEMA = {
    "type": "object",
    "properties": {
        "address": {
            "type": "string", "minLength": 1,
            "description": "The cluster: auto (the one `ray start` started on this machine, "
                           "or RAY_ADDRESS), HOST:PORT of its head, ray://HOST:10001 (Ray "
                           "Client), or local (a one-machine Ray started for this run).",
        },
        "num_cpus": {"type": "number", "exclusiveMinimum": 0,
                     "description": "CPUs an attempt takes on its worker (default 1): how "
                                    "many run at once is what the cluster's CPUs allow."},
        "memory_mb": {"type": "integer", "minimum": 1,
                      "description": "Memory an attempt reserves on its worker, in MB."},
        "max_retries": {"type": "integer", "minimum": 0,
                        "description": "How often an attempt whose worker or node was lost "
                                       "is rerun elsewhere (default 3); then it is an error."},
        "workspace": {"type": "boolean",
                      "description": "Bring each attempt's workspace and seed copy back to "
                                     "the run directory (default true; the result and "
                                     "ledger always come back)."},
        "forward_env": {"type": "array", "items": {"type": "string", "minLength": 1},
                        "description": "Environment variables the workers get from here "
                                       "(a provider's API key, say: ANTHROPIC_API_KEY)."},
    },
}


def create(options: Mapping[str, Any]) -> Any:
    from evalctl_ray.executor import RayExecutor

    return RayExecutor(options)


@evalctl.hookimpl
def evalctl_register_executors(register):
    register(evalctl.ExecutorSpec(
        name="ray",
        create=create,
        options_schema=OPTIONS_SCHEMA,
        description="Runs each attempt as a task on a Ray cluster's workers (address=auto, "
                    "HOST:PORT, ray://HOST:PORT or local).",
    ))
