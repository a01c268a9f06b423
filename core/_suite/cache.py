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

# 3: source_lines; 4: entries carry their key and a digest; 5: the digest is of the
# value's stored text (a header line, then the value), so checking it re-encodes nothing;
# 6: suites read by the libyaml fast path — an entry that a version with a hole in it
# validated (a byte-order mark inside the file, say) is not trusted; 7: numbers no JSON
# holds, names no workspace can hold and regexes refused: what 6 found valid is not;
# 8: lone surrogates, and a NUL in a setup command, refused; 9: checks built-in graders'
# preflights refuse (python code that does not compile, regexes RE2 cannot match);
# 10: task ids a run directory holds already (journal.jsonl) refused
FORMAT = "10"


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


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def read(key: str) -> dict[str, Any] | None:
    """The cached value for `key`, or None: absent, unreadable, or failing verification.

    An entry is a header line (`{"key": ..., "digest": ...}`) and the value's JSON text
    after it; the digest is of that text as stored, so a 10,000-task entry is checked
    by hashing its bytes, not by encoding the whole value again."""
    if os.environ.get("EVALCTL_NO_CACHE"):
        return None
    try:
        text = (cache_dir() / f"{key}.json").read_text(encoding="utf-8")
        header_text, _, value_text = text.partition("\n")
        header = json.loads(header_text)
        if not isinstance(header, dict) or header.get("key") != key or \
                header.get("digest") != _digest(value_text):
            return None
        value = json.loads(value_text)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write(key: str, value: dict[str, Any]) -> None:
    if os.environ.get("EVALCTL_NO_CACHE"):
        return
    from evalctl._files import write_atomically

    # A cache that cannot be written only costs speed.
    with contextlib.suppress(OSError, ValueError):
        value_text = json.dumps(value)  # ASCII: no newline can appear inside it
        header = json.dumps({"key": key, "digest": _digest(value_text)})
        write_atomically(cache_dir() / f"{key}.json", header + "\n" + value_text)
