"""The version of evalctl, in one place (pyproject.toml reads it from here too)."""

__version__ = "0.1.0"
