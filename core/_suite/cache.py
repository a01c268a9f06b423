"""A cache of validated suites, keyed by the file's bytes, the schema, the rules and the
plugins loaded.

Parsing YAML dominates loading a large suite; an unchanged file under an unchanged
set of plugins gives the same result, so it is stored once validated. What a plugin's
code decides beyond its schema (a preflight `validate` runs, the paths a check names)
is in the key through each plugin's distribution and version, and, for a plugin whose
code is not an installed copy (an editable install, a path on PYTHONPATH), the times
and sizes of its source files; so is evalctl's own code when it is not an installed
copy (a checkout installed editable, as the README sets it up). An entry is
verified before use — its key, a digest of its content, and its shape — and one that
fails (truncated, edited, written by another version) is a miss: the suite is
validated again and the entry rewritten, never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# 3: source_lines; 4: entries carry their key and a digest; 5: the digest is of the
# value's stored text (a header line, then the value), so checking it re-encodes nothing;
# 6: suites read by the libyaml fast path — an entry that a version with a hole in it
# validated (a byte-order mark inside the file, say) is not trusted; 7: numbers no JSON
# holds, names no workspace can hold and regexes refused: what 6 found valid is not;
# 8: lone surrogates, and a NUL in a setup command, refused; 9: checks built-in graders'
# preflights refuse (python code that does not compile, regexes RE2 cannot match);
# 10: task ids a run directory holds already (journal.jsonl) refused; 11: providers'
# task_problems (a script that runs out) warned of. The plugins loaded are in the key
# itself (plugin_inputs).
FORMAT = "11"


def cache_dir() -> Path:
    explicit = os.environ.get("EVALCTL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "evalctl" / "suites"


def cache_key(raw: bytes, schema_digest: str, rule_inputs: list[str],
              plugin_inputs: Iterable[str] = ()) -> str:
    digest = hashlib.sha256(raw)
    from evalctl._version import __version__

    digest.update(f"\0{FORMAT}\0{__version__}\0{schema_digest}\0{','.join(rule_inputs)}"
                  f"\0{chr(0).join(plugin_inputs)}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


# An installed copy's files change only with its version; evalctl's own code changes
# with evalctl's (and FORMAT above, for what decides validation).
_INSTALLED = ("site-packages", "dist-packages")
BUILTIN_DISTRIBUTION = "evalctl"
# A plugin package walked for its files' times: bounded, as a cache key must be cheap.
MOST_FILES = 500


def plugin_inputs(plugins: Iterable[Any]) -> list[str]:
    """What of the loaded plugins goes into the key: each one's name, distribution and
    version, and for one whose code is not an installed copy (an editable install, a
    directory on PYTHONPATH: changed under one version as it is worked on) the
    modification times and sizes of its Python files (a stat each: the key stays cheap,
    about 2 microseconds a file; a cached 1,000-task suite loads in 11 ms)."""
    found = []
    for plugin in plugins:
        if plugin.status != "ok":
            continue
        line = f"{plugin.name}={plugin.distribution} {plugin.version}"
        origin = plugin.origin
        if origin and plugin.distribution != BUILTIN_DISTRIBUTION and \
                not any(part in _INSTALLED for part in Path(origin).parts):
            line += " " + _code_stamp(Path(origin))
        found.append(line)
    own = own_code_stamp()
    return sorted(found) + ([f"evalctl's own code {own}"] if own else [])


def own_code_stamp(packages: tuple[Path, ...] | None = None) -> str:
    """The times and sizes of evalctl's own Python files (the core and the built-in
    plugins) when they are not an installed copy: a checkout installed editable, worked
    on under one version (found by a newcomer: a validate rule or a built-in grader
    edited there, and the cache kept answering as before). Empty for an installed copy,
    whose files change only with its version. Once a process (about 120 files, a stat
    each), unless `packages` is given."""
    if packages is None:
        return _own_code_stamp_once()
    if any(part in _INSTALLED for package in packages for part in package.parts):
        return ""
    return ",".join(_code_stamp(package / "__init__.py") for package in packages)


@functools.cache
def _own_code_stamp_once() -> str:
    core = Path(__file__).resolve().parent.parent
    return own_code_stamp((core, core.parent / "plugins") if
                          (core.parent / "plugins" / "__init__.py").is_file() else (core,))


def _code_stamp(origin: Path) -> str:
    """The times and sizes of a plugin's Python files: its module's, or every one of
    its package's (the directory of its __init__.py), up to MOST_FILES."""
    files = [origin]
    if origin.name == "__init__.py":
        files = []
        pending = [origin.parent]
        while pending and len(files) < MOST_FILES:
            with contextlib.suppress(OSError), os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                        pending.append(Path(entry.path))
                    elif entry.name.endswith(".py"):
                        files.append(Path(entry.path))
    stamps = []
    for path in sorted(files)[:MOST_FILES]:
        try:
            info = path.stat()
        except OSError:
            stamps.append(f"{path}:-")
            continue
        stamps.append(f"{path}:{info.st_mtime_ns}:{info.st_size}")
    return ",".join(stamps)


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
