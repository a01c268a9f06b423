"""`evalctl view`: the HTML report of a run, rendered when missing or stale, opened in
the user's browser where there is one to open.

The page is written by the reporter registered as `html` (a plugin, like every
reporter); this module only decides whether to render, and whether a browser can show
the result or the path should be printed instead (CI, an SSH session).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from evalctl._errors import UsageError
from evalctl._plugin.registry import Registry
from evalctl._report.rundir import StoredRun

HTML_REPORTER = "html"


def html_report(stored: StoredRun, registry: Registry, rerender: bool = False
                ) -> tuple[Path, bool, str | None]:
    """The run's HTML report: (path, reused, why it is not beside the run). An existing
    one is reused unless it is older than what it was rendered from, or `rerender` asks
    for a fresh one. Where it cannot be written beside the run (a read-only file system,
    another user's directory) it is rendered into a private directory of this user's
    under the temporary directory instead: found by a tester, `evalctl view` of a run on
    a read-only file system ended in a traceback."""
    spec = registry.get("reporter", HTML_REPORTER)
    target = stored.derived(spec.extension)
    if not rerender and target.is_file() and \
            target.stat().st_mtime >= stored.source.stat().st_mtime:
        return target, True, None
    try:
        return Path(spec.write(stored.run, target)), False, None
    except OSError as exc:
        why = f"{target.parent} cannot be written ({exc.strerror or exc})"
    try:
        elsewhere = _private_directory() / target.name
        return Path(spec.write(stored.run, elsewhere)), False, why
    except OSError as exc:
        raise UsageError(f"cannot write the HTML report: {why}, nor "
                         f"{exc.filename or 'a temporary directory'} "
                         f"({exc.strerror or exc}); set TMPDIR to a writable "
                         "directory") from None


def _private_directory() -> Path:
    """evalctl-view-<uid> under the temporary directory: made mode 0700 if missing,
    and used only while it is a directory (not a link) this user owns and alone may
    write (another user could have made it first, to read or swap the pages)."""
    import stat
    import tempfile

    directory = Path(tempfile.gettempdir()) / f"evalctl-view-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700)
    status = os.lstat(directory)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid() or \
            status.st_mode & 0o022:
        raise OSError(errno.EPERM, "not a private directory of this user's", str(directory))
    return directory


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
