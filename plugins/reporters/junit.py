"""`junit`: one testcase per task; failed checks are <failure>, infrastructure
errors <error>, tasks not run <skipped>. Judge checks go to system-out only; a check
that could not run in an attempt another check decided goes to system-err."""

from __future__ import annotations

import math
import re
from pathlib import Path

import evalctl

# XML 1.0 cannot carry most control characters (nor lone surrogates), and agents' output
# has them: they are written as escapes (\x1b), so nothing is lost.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _text(value: object) -> str:
    return _INVALID_XML.sub(_escape, str(value))


def render(run: evalctl.RunResult) -> str:
    import xml.etree.ElementTree as ET

    tasks = run.tasks
    failures, errors = str(run.count("failed")), str(run.count("error"))
    # The suite's time is the sum of its testcases' times as written (whole milliseconds,
    # so that the sum a CI tool makes of the cases is the suite's to the digit): the time
    # the attempts took, not the run's wall time, which concurrency makes shorter.
    total_time = _seconds(sum(_milliseconds(t.duration) for t in tasks))
    root = ET.Element("testsuites", name="evalctl", tests=str(len(tasks)), failures=failures,
                      errors=errors, time=total_time)
    suite = ET.SubElement(root, "testsuite", name=_text(run.suite_name), tests=str(len(tasks)),
                          failures=failures, errors=errors, skipped=str(run.count("not_run")),
                          time=total_time, timestamp=run.started_at[:19])
    properties = ET.SubElement(suite, "properties")
    rates = [(f"{name}_rate", rate.value) for name, rate in run.named_rates().items()]
    for name, value in (("provider", run.provider), ("model", run.model or ""),
                        ("completion_rate", run.completion_rate), *rates,
                        ("judge_rate", run.judge_rate)):
        ET.SubElement(properties, "property", name=name,
                      value=_text("" if value is None else value))
    for task in tasks:
        case = ET.SubElement(suite, "testcase", classname=_text(run.suite_name),
                             name=_text(run.label(task)),
                             time=_seconds(_milliseconds(task.duration)))
        failed = task.failed_checks()
        if task.status == "error":
            detail = task.error_detail()
            element = ET.SubElement(case, "error", message=_text(
                task.error or detail.partition("\n")[0] or "error"),
                type=_text(task.error_kind or task.exit_status or "error"))
            element.text = _text(detail)
        elif task.status == "failed":
            # A check that could not run beside the failure that decided the attempt: one
            # outcome per testcase (the schema's rule, and what CI tools read), so it is
            # named here, not a second <error>, and given whole in <system-err>.
            broken = [c for c in task.checks if c.error and c.kind == "mechanical"]
            element = ET.SubElement(case, "failure", message=_text(
                f"{len(failed)} check(s) failed: {', '.join(c.type for c in failed)}"
                + (f"; {len(broken)} grader error(s), not failures: "
                   f"{', '.join(c.type for c in broken)}" if broken else "")),
                type="check_failed")
            element.text = _text("\n\n".join(
                [f"{c.type}: {_block(c.detail)}" for c in failed]
                + [f"{c.type} (grader error, not a failure): {_block(c.detail)}"
                   for c in broken]))
        elif task.status == "not_run":
            ET.SubElement(case, "skipped", message=_text(task.error or "not run"))
        out = ET.SubElement(case, "system-out")
        judged = task.judge_checks()
        lines = [f"exit status: {task.exit_status}", f"turns: {task.turns}",
                 f"workspace: {task.workspace}"]
        lines += [f"[{_mark(c, 'FAIL')}] {c.type}: {_block(c.detail)}"
                  for c in task.checks if c.kind == "mechanical"]
        if judged:
            lines.append("judge verdicts (reported apart, not part of pass/fail):")
            lines += [f"[{_mark(c, 'fail')}] {c.kind} {c.type}: "
                      f"{_block(c.detail)}" for c in judged]
        out.text = _text("\n".join(lines))
        # The JSON report's check_errors[]: checks that could not run (or crashed) in an
        # attempt that is not itself an error, which its <error> already gives.
        broken = [c for c in task.checks if c.error] if task.status != "error" else []
        if broken:
            err = ET.SubElement(case, "system-err")
            err.text = _text("\n".join(
                f"grader error in {task.status} {run.label(task)}: {c.type}"
                + (f" ({c.kind}, reported apart)" if c.kind != "mechanical" else "")
                + f": {_block(c.detail)}" for c in broken))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _milliseconds(seconds: float) -> int:
    """An attempt's duration in whole milliseconds: never negative (a clock stepped back)
    nor anything but a number (a report read back may hold NaN), so always a decimal."""
    return max(0, round(seconds * 1000)) if math.isfinite(seconds) else 0


def _seconds(milliseconds: int) -> str:
    return f"{milliseconds // 1000}.{milliseconds % 1000:03d}"


def _mark(check: evalctl.CheckOutcome, failed: str) -> str:
    """A check's verdict in system-out: one that could not run is an error, never read
    as the agent's failure."""
    return "ERROR" if check.error else "pass" if check.passed else failed


def _block(detail: str) -> str:
    """A check's detail with every line after its first indented and marked: the output
    it quotes is the agent's, and a line of it must not read as one of the report's own
    (found by an attacker round: a forged "[pass] tests_pass: ..." line)."""
    first, _, rest = detail.partition("\n")
    return first + "".join(f"\n    | {line}" for line in rest.split("\n")) if rest else first


def write_junit(run: evalctl.RunResult, path: Path) -> Path:
    return evalctl.write_atomically(path, render(run))


@evalctl.hookimpl
def evalctl_register_reporters(register):
    register(evalctl.ReporterSpec(
        name="junit", write=write_junit, extension="xml",
        description="JUnit XML for CI: failed checks as <failure>, errors as <error>.",
    ))
