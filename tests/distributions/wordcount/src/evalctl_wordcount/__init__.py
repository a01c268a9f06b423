"""An evalctl grader: does a file in the workspace have between min and max words?"""

import evalctl

MAX_BYTES = 10_000_000  # the file is the agent's: it may be 2 GB, so read at most this


def grade_word_count(check, workspace, result) -> evalctl.CheckResult:
    path = check["path"]
    # Whatever the agent left at `path` is its work: anything unreadable fails the check
    # (an exception would make it an error, left out of completion: never the agent's
    # way out of a failure).
    try:
        with evalctl.open_in_workspace(workspace, path) as file:
            data = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return evalctl.CheckResult(False, f"{path} does not exist")
    except (evalctl.ConfinementError, OSError) as exc:  # outside, a FIFO, a directory
        return evalctl.CheckResult(False, f"{path} cannot be read: {exc}")
    if len(data) > MAX_BYTES:
        return evalctl.CheckResult(False, f"{path} is over {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return evalctl.CheckResult(False, f"{path} is not UTF-8 text "
                                          f"(byte {exc.start}: {exc.reason})")
    words = len(text.split())
    low, high = check.get("min", 0), check.get("max")
    if words < low or (high is not None and words > high):
        upper = "any" if high is None else high
        return evalctl.CheckResult(False, f"{path} has {words} words; "
                                          f"expected {low} to {upper}")
    return evalctl.CheckResult(True, f"{path} has {words} words")


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
        description="Does the file at `path` have between `min` and `max` words? "
                    "A file that is not UTF-8 text, or is over 10 MB, fails.",
    ))
