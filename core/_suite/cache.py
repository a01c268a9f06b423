"""A cache of validated suites, keyed by the file's bytes, the schema and the rules.

Parsing YAML dominates loading a large suite; an unchanged file under an unchanged
set of plugins gives the same result, so it is stored once validated.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

FORMAT = "3"  # 3: source_lines


def cache_dir() -> Path:
    explicit = os.environ.get("EVALCTL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "evalctl" / "suites"


def cache_key(raw: bytes, schema_digest: str, rule_inputs: list[str]) -> str:
    digest = hashlib.sha256(raw)
    from evalctl._version import __version__

    digest.update(f"\0{FORMAT}\0{__version__}\0{schema_digest}\0{','.join(rule_inputs)}".encode())
    return digest.hexdigest()


def read(key: str) -> dict[str, Any] | None:
    if os.environ.get("EVALCTL_NO_CACHE"):
        return None
    try:
        return json.loads((cache_dir() / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write(key: str, value: dict[str, Any]) -> None:
    if os.environ.get("EVALCTL_NO_CACHE"):
        return
    from evalctl._files import write_atomically

    with contextlib.suppress(OSError):  # a cache that cannot be written only costs speed
        write_atomically(cache_dir() / f"{key}.json", json.dumps(value))
