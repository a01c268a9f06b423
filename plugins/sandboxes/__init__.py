"""Built-in sandboxes: where the agent's commands and graders' subprocesses run."""
