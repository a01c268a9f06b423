"""Built-in providers: scripted (deterministic) and anthropic (live)."""
