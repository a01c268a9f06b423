"""Built-in plugins. Each module is registered through the `evalctl` entry-point group
in pyproject.toml, exactly as a third-party plugin would be."""
