"""evalctl's pytest witness: tells the `tests_pass` grader what pytest actually did.

Loaded into the test run by evalctl (`-p evalctl_pytest_witness`), never by the
workspace. It counts what was collected and the outcome of every test in every phase,
and when pytest unconfigures it writes one line to the file descriptor that was
standard output before pytest captured anything:

    evalctl-witness:<nonce>:<json>

The grader passes a check only on this line, not on pytest's exit status, which a
`pytest_sessionfinish` hook can rewrite. A run that ends before the line is written
(`os._exit(0)` in a test module, say) leaves no line, and the grader says so. This
module imports nothing from evalctl: it runs inside the sandbox, in the test process.
"""

from __future__ import annotations

import json
import os
from typing import Any

_STDOUT = os.dup(1)  # taken at import, before pytest's capture replaces fd 1
_state: dict[str, Any] = {"collected": 0, "collection_errors": [], "outcomes": {}}


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--evalctl-witness", dest="evalctl_witness", default="",
                     help="The nonce evalctl's tests_pass grader expects back.")


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _state["collection_errors"].append(report.nodeid or "<session>")


def pytest_collection_finish(session: Any) -> None:
    _state["collected"] = len(session.items)


def pytest_runtest_logreport(report: Any) -> None:
    outcomes = _state["outcomes"]
    if report.failed:
        outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped and outcomes.get(report.nodeid) not in ("failed", "error"):
        outcomes[report.nodeid] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    elif report.when == "call" and report.passed:
        outcomes[report.nodeid] = "xpassed" if hasattr(report, "wasxfail") else "passed"


def pytest_unconfigure(config: Any) -> None:
    nonce = config.getoption("evalctl_witness", default="")
    if nonce:
        line = f"\nevalctl-witness:{nonce}:{json.dumps(_state)}\n"
        os.write(_STDOUT, line.encode("utf-8", "backslashreplace"))
