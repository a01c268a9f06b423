"""Built-in agents: evalctl's own loop, and any CLI agent run as a command."""
