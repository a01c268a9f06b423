"""Built-in executors: how a run's attempts are scheduled."""
