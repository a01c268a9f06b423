"""Team defaults for `evalctl run`, from evalctl.toml or [tool.evalctl] in
pyproject.toml (in the current directory). Flags override them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._errors import UsageError

KEYS = {"reporters": list, "provider": str, "model": str, "concurrency": int, "out": str,
        "provider_options": dict, "sandbox": str, "sandbox_options": dict, "agent": str,
        "agent_options": dict, "agents": dict, "executor": str, "executor_options": dict}
_TYPE_WORDS = {list: "a list", str: "text", int: "a whole number", dict: "a table"}


@dataclass
class Config:
    source: str | None = None
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def load_config(directory: Path | None = None) -> Config:
    import tomllib

    directory = directory or Path.cwd()
    candidates = [(directory / "evalctl.toml", ()), (directory / "pyproject.toml", ("tool",
                                                                                       "evalctl"))]
    for path, keys in candidates:
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:
            # ValueError: an integer longer than Python reads (4,300 digits)
            raise UsageError(f"{path}: invalid TOML: {exc}") from None
        for key in keys:
            data = data.get(key, {})
        if not data:
            continue
        where = f"{path}" + (" [tool.evalctl]" if keys else "")
        for key, value in data.items():
            expected = KEYS.get(key)
            if expected is None:
                hint = ""
                if key == "tool" and not keys:
                    hint = ("; [tool.evalctl] belongs in pyproject.toml: in evalctl.toml, "
                            "write the keys at the top level, without a table header")
                raise UsageError(f"{where}: unknown key '{key}'; known: {', '.join(KEYS)}"
                                 + hint)
            if not isinstance(value, expected) or isinstance(value, bool):
                raise UsageError(f"{where}: '{key}' must be {_TYPE_WORDS[expected]}, got "
                                 f"{value!r}")
        if not all(isinstance(r, str) for r in data.get("reporters", [])):
            raise UsageError(f"{where}: 'reporters' must be a list of names")
        return Config(where, dict(data))
    return Config()
