"""Rendering the HTML report with Jinja2, every value escaped by the template engine.

Two layers keep what a run recorded (model text, tool output, file names, tags) from
ever running in the reader's browser. Autoescaping escapes everything the template
prints, and the page's data travels as JSON inside `<script type="application/json">`
with `<`, `>`, `&` and `'` escaped (Jinja's `tojson`), which the page's own script
puts on screen only as text (`textContent`), never as markup. Behind that, the page
carries a Content-Security-Policy that lets only its own script and style run, by
hash, and lets the page fetch nothing: even a bug in the first layer could not run an
injected script or reach the network.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import evalctl

from . import page

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _csp_hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2  # here, not at import: `evalctl --help` and list-plugins stay fast

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template here is HTML
        undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )


def _renderer_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("evalctl")
    except PackageNotFoundError:
        return "unknown"


def render_report(run: evalctl.RunResult, path: Path) -> Iterator[str]:
    """The page for `run`, to be written at `path` (links are relative to it), in
    pieces as the template produces them: a 10,000-task page is never one string."""
    script = (TEMPLATES / "report.js").read_text(encoding="utf-8")
    style = (TEMPLATES / "report.css").read_text(encoding="utf-8")
    csp = (f"default-src 'none'; script-src '{_csp_hash(script)}'; "
           f"style-src '{_csp_hash(style)}'; base-uri 'none'; form-action 'none'")
    from markupsafe import Markup  # Jinja2's own dependency

    pieces = _environment().get_template("report.html.j2").generate(
        title=f"evalctl: {run.suite_name}",
        csp=csp, script=Markup(script), style=Markup(style),
        identity=page.identity(run), overview=page.overview(run), charts=page.charts(run),
        comparison=page.comparison(run), rows=page.rows(run),
        details=page.details(run, Path(path).resolve().parent),
        renderer=_renderer_version(),
    )
    for piece in pieces:
        # A lone surrogate that reached a value printed as HTML (JSON escapes its own)
        # would make the file unwritable as UTF-8; it is shown as "?" instead.
        yield piece.encode("utf-8", "replace").decode("utf-8")
