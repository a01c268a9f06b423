"""An evalctl grader: does a file in the workspace have between min and max words?"""

from pathlib import Path

import evalctl


def grade_word_count(check, workspace: Path, result) -> evalctl.CheckResult:
    try:
        target = evalctl.resolve_in_workspace(workspace, check["path"])
    except evalctl.ConfinementError as exc:
        return evalctl.CheckResult(False, str(exc))
    if not target.is_file():
        return evalctl.CheckResult(False, f"{check['path']} does not exist")
    words = len(target.read_text(encoding="utf-8").split())
    low, high = check.get("min", 0), check.get("max")
    if words < low or (high is not None and words > high):
        upper = "any" if high is None else high
        return evalctl.CheckResult(False, f"{check['path']} has {words} words; "
                                          f"expected {low} to {upper}")
    return evalctl.CheckResult(True, f"{check['path']} has {words} words")


@evalctl.hookimpl
def evalctl_register_graders(register):
    register(evalctl.GraderSpec(
        name="word_count",
        grade=grade_word_count,
        params_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "min": {"type": "integer", "minimum": 0},
                "max": {"type": "integer", "minimum": 0},
            },
            "required": ["path"],
        },
        description="Does the file at `path` have between `min` and `max` words?",
    ))
