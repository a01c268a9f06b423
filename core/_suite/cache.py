"""A cache of validated suites, keyed by the file's bytes, the schema and the rules.

Parsing YAML dominates loading a large suite; an unchanged file under an unchanged
set of plugins gives the same result, so it is stored once validated. An entry is
verified before use — its key, a digest of its content, and its shape — and one that
fails (truncated, edited, written by another version) is a miss: the suite is
validated again and the entry rewritten, never a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

FORMAT = "4"  # 3: source_lines; 4: entries carry their key and a digest


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


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def read(key: str) -> dict[str, Any] | None:
    """The cached value for `key`, or None: absent, unreadable, or failing verification."""
    if os.environ.get("EVALCTL_NO_CACHE"):
        return None
    try:
        entry = json.loads((cache_dir() / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None
    value = entry.get("value")
    if not isinstance(value, dict) or entry.get("digest") != _digest(value):
        return None
    return value


def write(key: str, value: dict[str, Any]) -> None:
    if os.environ.get("EVALCTL_NO_CACHE"):
        return
    from evalctl._files import write_atomically

    entry = {"key": key, "digest": _digest(value), "value": value}
    # A cache that cannot be written only costs speed.
    with contextlib.suppress(OSError, ValueError):
        write_atomically(cache_dir() / f"{key}.json", json.dumps(entry))
