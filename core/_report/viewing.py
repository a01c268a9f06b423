"""`evalctl view`: the HTML report of a run, rendered when missing or stale, opened in
the user's browser where there is one to open.

The page is written by the reporter registered as `html` (a plugin, like every
reporter); this module only decides whether to render, and whether a browser can show
the result or the path should be printed instead (CI, an SSH session).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from evalctl._plugin.registry import Registry
from evalctl._report.rundir import StoredRun

HTML_REPORTER = "html"


def html_report(stored: StoredRun, registry: Registry, rerender: bool = False) -> tuple[Path, bool]:
    """The run's HTML report: (path, reused). An existing one is reused unless it is
    older than what it was rendered from, or `rerender` asks for a fresh one."""
    spec = registry.get("reporter", HTML_REPORTER)
    target = stored.derived(spec.extension)
    if not rerender and target.is_file() and \
            target.stat().st_mtime >= stored.source.stat().st_mtime:
        return target, True
    return Path(spec.write(stored.run, target)), False


def browser_available(environ: Mapping[str, str] | None = None,
                      platform: str | None = None) -> bool:
    """Whether opening a browser can show the user anything. Not in CI; on Linux and
    other Unixes only with a display (a bare SSH session has none); always when the
    user named one in BROWSER."""
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if environ.get("BROWSER"):
        return True
    if environ.get("CI"):
        return False
    if platform == "darwin" or platform.startswith("win"):
        return True
    return bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def open_in_browser(path: Path) -> bool:
    """Open the file in the user's browser; False when none could be started."""
    import webbrowser

    try:
        return webbrowser.open(path.resolve().as_uri())
    except webbrowser.Error:
        return False
