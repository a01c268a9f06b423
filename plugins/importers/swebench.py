"""`swebench`: SWE-bench-format instances (one JSON object a line) as a suite.

Each instance becomes a task: the repository at `base_commit` as its `source:`, the
`problem_statement` as the prompt, `test_patch` as `verify_patch:` (applied after the
agent), and a `tests_pass` check naming `FAIL_TO_PASS` and `PASS_TO_PASS`, each of
which must run and pass. With `oracle=true` the reference `patch` becomes a scripted
trajectory that applies it, so `evalctl run` of the suite checks the suite itself (a
task that fails with its own fix is a broken task).

Uses the public API only, like any third-party importer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import evalctl

REPO_URL = "https://github.com/{repo}.git"
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
COMMIT = r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$"
# An instance's repo is GitHub's owner/name: it is put into the repo_url template, and
# anything else ('../t1/repo', a third part) would make a local mirror's template
# (/mirrors/{repo}) name a repository outside the mirror. Used with fullmatch: `$`
# would let a "\n" after it through.
REPO = re.compile(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+")
GOLD_PATCH_FILE = ".evalctl-reference.patch"

TEST_IDS = {"oneOf": [{"type": "array", "items": {"type": "string", "minLength": 1}},
                      {"type": "string"}]}
INSTANCE = {
    "type": "object",
    "properties": {
        "instance_id": {"type": "string", "minLength": 1},
        "repo": {"type": "string", "minLength": 1},
        "base_commit": {"type": "string", "pattern": COMMIT},
        "problem_statement": {"type": "string", "minLength": 1},
        "test_patch": {"type": "string", "minLength": 1},
        "patch": {"type": "string"},
        "FAIL_TO_PASS": TEST_IDS,
        "PASS_TO_PASS": TEST_IDS,
    },
    "required": ["instance_id", "repo", "base_commit", "problem_statement", "test_patch",
                 "FAIL_TO_PASS", "PASS_TO_PASS"],
}

OPTIONS = {
    "type": "object",
    "properties": {
        "repo_url": {"type": "string", "pattern": r"\{repo\}",
                     "description": "Where an instance's repo (owner/name) is fetched from; "
                                    "{repo} is replaced (default https://github.com/{repo}.git; "
                                    "a local mirror: /mirrors/{repo})."},
        "oracle": {"type": "boolean",
                   "description": "Add each instance's reference patch as a scripted "
                                  "trajectory, to check the suite itself (default false)."},
        "setup": {"type": "string", "minLength": 1,
                  "description": "A setup command for every task (install the project, "
                                 "say), run with the network before the agent starts."},
        "python": {"type": "string", "minLength": 1,
                   "description": "The interpreter tests_pass runs pytest under (the "
                                  "environment setup made: .venv/bin/python)."},
        "name": {"type": "string", "minLength": 1, "description": "The suite's name."},
    },
}


def _test_ids(value: Any, key: str) -> tuple[list[str], str | None]:
    """The instance's test ids (a list, or the JSON text of one, as the datasets store
    them), or a problem."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except (ValueError, RecursionError):  # not JSON, or nested past reading
            return [], f"{key} is text that is not a JSON list of test ids"
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            return [], f"{key} must be a list of test ids"
    not_pytest = [t for t in value if "::" not in t and not t.split("[")[0].endswith(".py")]
    if not_pytest:
        return [], (f"{key} names {not_pytest[0]!r}, which is not a pytest node id "
                    "(path.py::test): tests_pass runs pytest, and this instance's project "
                    "names its tests its own way")
    return list(value), None


def _instance_problems(instance: Any) -> list[str]:
    from jsonschema import Draft202012Validator

    if not isinstance(instance, dict):
        return ["not a SWE-bench instance: expected a JSON object"]
    missing = [key for key in INSTANCE["required"] if key not in instance]
    if missing:
        return [f"not a SWE-bench instance: it lacks {', '.join(missing)}"]
    problems = []
    for error in sorted(Draft202012Validator(INSTANCE).iter_errors(instance),
                        key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in error.path)
        if where == "base_commit":
            problems.append(f"base_commit {error.instance!r} is not a full commit id (40 "
                            "hexadecimal digits)")
        else:
            problems.append(f"{where or 'instance'}: {error.message}")
    repo = instance.get("repo")
    if isinstance(repo, str) and repo and (
            not REPO.fullmatch(repo) or any(part in (".", "..") for part in repo.split("/"))):
        problems.append(f"repo {repo!r} is not a repository's owner/name (letters, digits, "
                        "'.', '_' and '-', neither part '.' or '..')")
    instance_id = instance.get("instance_id")
    if isinstance(instance_id, str) and instance_id and not TASK_ID.fullmatch(instance_id):
        problems.append(f"instance_id {instance_id!r} cannot name a task (letters, digits, "
                        "'.', '_' and '-', starting with a letter or digit)")
    return problems


def _task(instance: dict[str, Any], options: dict[str, Any], fail: list[str],
          keep: list[str]) -> dict[str, Any]:
    url = options.get("repo_url", REPO_URL).replace("{repo}", instance["repo"])
    task: dict[str, Any] = {
        "id": instance["instance_id"],
        "prompt": instance["problem_statement"].replace("\r\n", "\n").strip() + "\n",
        "tags": [instance["repo"]],
        "source": {"git": url, "rev": instance["base_commit"]},
        "verify_patch": instance["test_patch"],
        "checks": [{"type": "tests_pass", "tests": [*fail, *keep]}],
    }
    if options.get("python"):
        task["checks"][0]["python"] = options["python"]
    if options.get("oracle"):
        task["script"] = [
            {"text": "Applying the reference patch.",
             "tool_calls": [{"tool": "write_file", "input": {"path": GOLD_PATCH_FILE,
                                                               "content": instance["patch"]}}]},
            {"text": "Checking it applies.",
             "tool_calls": [{"tool": "bash", "input": {
                 "command": f"git apply --whitespace=nowarn {GOLD_PATCH_FILE} && "
                            f"rm {GOLD_PATCH_FILE}"}}]},
            {"text": "Applied the reference fix."},
        ]
    return task


def read_instances(path: Path, options: dict[str, Any]) -> evalctl.ImportedSuite:
    suite = evalctl.ImportedSuite(
        name=options.get("name", path.stem),
        description=f"SWE-bench-format instances from {path.name}: each repository at its "
                    "base commit, the test patch applied after the agent, FAIL_TO_PASS and "
                    "PASS_TO_PASS as the check.")
    if options.get("setup"):
        suite.defaults["setup"] = {"commands": [options["setup"]], "network": True}
    seen: dict[str, int] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        suite.problems.append(evalctl.ImportProblem(0, f"cannot read: {exc}"))
        return suite
    if text.lstrip().startswith("["):
        suite.problems.append(evalctl.ImportProblem(1, "a JSON array: expected JSON Lines, "
                                                       "one instance a line"))
        return suite
    # JSON Lines end at "\n" (or "\r\n") alone: splitlines() would also split at
    # U+2028, U+2029 and U+0085, which JSON allows raw inside a string (a problem
    # statement copied from a web page), and refuse the instance's halves as not JSON.
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            instance = json.loads(line)
        except ValueError as exc:
            suite.problems.append(evalctl.ImportProblem(number, f"not JSON: {exc}"))
            continue
        except RecursionError:
            suite.problems.append(evalctl.ImportProblem(number, "not JSON: nested too deeply "
                                                                "to read"))
            continue
        problems = _instance_problems(instance)
        fail, fail_problem = _test_ids(instance.get("FAIL_TO_PASS", []), "FAIL_TO_PASS") \
            if not problems else ([], None)
        keep, keep_problem = _test_ids(instance.get("PASS_TO_PASS", []), "PASS_TO_PASS") \
            if not problems else ([], None)
        problems += [p for p in (fail_problem, keep_problem) if p]
        if not problems and not fail:
            problems.append("FAIL_TO_PASS is empty: no test shows the fix")
        if not problems and options.get("oracle") and not instance.get("patch"):
            problems.append("oracle=true needs the instance's reference patch ('patch')")
        instance_id = instance.get("instance_id") if isinstance(instance, dict) else None
        if isinstance(instance_id, str) and instance_id in seen:
            problems.append(f"instance_id {instance_id!r} is also on line {seen[instance_id]}")
        label = f"instance {instance_id!r}: " if isinstance(instance_id, str) else ""
        for problem in problems:
            suite.problems.append(evalctl.ImportProblem(number, label + problem))
        if problems:
            continue
        seen[instance_id] = number
        suite.tasks.append(_task(instance, options, fail, keep))
        suite.lines.append(number)
    return suite


@evalctl.hookimpl
def evalctl_register_importers(register):
    register(evalctl.ImporterSpec(
        name="swebench",
        read=read_instances,
        description="SWE-bench-format instances, one JSON object a line (repo, base_commit, "
                    "problem_statement, test_patch, FAIL_TO_PASS, PASS_TO_PASS).",
        options_schema=OPTIONS,
    ))
