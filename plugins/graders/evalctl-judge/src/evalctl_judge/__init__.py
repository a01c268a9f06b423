"""The `judge` grader: a model's yes/no verdict on the agent's work, reported apart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import evalctl

DEFAULT_SHOW = ("summary", "diff")
# A workspace path: relative, no `..` segment, no backslash or drive letter (refused by
# `evalctl validate`, not only when the judge would read it).
INSIDE_WORKSPACE = r"^(?![/~])(?![A-Za-z]:)(?!(?:.*/)?\.\.(?:/|$))[^\\\x00]*[^/\\\x00]$"
EVIDENCE_LIMIT = 40_000
READ_LIMIT_BYTES = 4 * EVIDENCE_LIMIT  # never read more of one file than could be shown
DEFAULT_PROVIDER = "anthropic"
PROBE_SYSTEM = "You are checked for availability. Reply with the single word: ok"

SYSTEM = """\
You review an AI agent's work. You are given a yes/no question and evidence: the \
agent's final summary, files from its workspace and/or a diff against the files it \
started with. Judge only from the evidence; a claim in the summary that the files do \
not back up does not count. Answer by calling record_verdict with verdict "pass" (the \
answer is yes) or "fail", and a one-sentence reason. If the evidence is insufficient, \
fail."""

VERDICT_TOOL = evalctl.ToolDefinition(
    "record_verdict",
    "Record your verdict on the question.",
    {
        "type": "object",
        "properties": {
            "verdict": {"enum": ["pass", "fail"]},
            "reason": {"type": "string"},
        },
        "required": ["verdict", "reason"],
        "additionalProperties": False,
    },
)


class JudgeError(Exception):
    """The judge gave no usable verdict: an error for the check, never a pass."""


def _workspace_diff(workspace: Path, result: evalctl.AgentResult) -> str:
    import difflib

    seed = result.seed_path
    chunks = []
    for relative, change in sorted(result.files_changed.items()):
        before = (seed / relative) if seed and change != "created" else None
        after = workspace / relative if change != "deleted" else None
        old = _text(before) if before else ""
        new = _text(after) if after else ""
        if old is None or new is None:
            chunks.append(f"Binary file {relative} {change}\n")
            continue
        chunks.extend(difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True),
            fromfile=f"a/{relative}" if change != "created" else "/dev/null",
            tofile=f"b/{relative}" if change != "deleted" else "/dev/null"))
    if result.files_changed_omitted:
        # The record of changed files is bounded: the judge is told what it was not shown.
        chunks.append(f"\n({result.files_changed_omitted} more changed file(s) are not "
                      "listed: the record of changed files was cut at its bound)\n")
    return "".join(chunks) or "(no files changed)"


def _text(path: Path | None) -> str | None:
    if path is None or not path.is_file():
        return ""  # absent, a directory, or a FIFO or device: never opened
    size = path.stat().st_size
    with open(path, "rb") as handle:
        data = handle.read(READ_LIMIT_BYTES)
    if evalctl.looks_binary(data):
        return None
    text = data.decode("utf-8", errors="replace")
    return text if size <= READ_LIMIT_BYTES else text + f"\n[... cut: the file has {size} bytes]"


def build_prompt(check: dict[str, Any], workspace: Path, result: evalctl.AgentResult) -> str:
    show = check.get("show", list(DEFAULT_SHOW))
    parts = [f"Question: {check['rubric']}"]
    if "summary" in show:
        parts.append(f"## The agent's final summary\n\n{result.final_text or '(none)'}")
    if "files" in show:
        for relative in check.get("files", []):
            target = workspace / relative
            content = _text(target) if target.is_file() else None
            shown = "(does not exist)" if not target.is_file() else \
                "(binary)" if content is None else evalctl.truncate(content, EVIDENCE_LIMIT)
            parts.append(f"## File {relative}\n\n```\n{shown}\n```")
    if "diff" in show:
        parts.append(f"## Diff of the workspace against its seed\n\n```diff\n"
                     f"{evalctl.truncate(_workspace_diff(workspace, result), EVIDENCE_LIMIT)}\n```")
    return "\n\n".join(parts)


_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_verdict(turn: evalctl.ModelTurn) -> tuple[bool, str]:
    for call in turn.tool_calls:
        if call.name == VERDICT_TOOL.name:
            return _read(call.arguments)
    found = _JSON_OBJECT.search(turn.text or "")
    if found:
        try:
            return _read(json.loads(found.group(0)))
        except (ValueError, RecursionError):  # not JSON, or nested past reading
            pass
    raise JudgeError(f"the judge gave no verdict: {(turn.text or '(no text)')[:200]!r}")


def _read(answer: Any) -> tuple[bool, str]:
    if not isinstance(answer, dict) or answer.get("verdict") not in ("pass", "fail"):
        raise JudgeError(f"the judge's verdict is not 'pass' or 'fail': {answer!r}"[:300])
    return answer["verdict"] == "pass", str(answer.get("reason", "")).strip()


def _model_options(check: dict[str, Any]) -> dict[str, Any]:
    return {"model": check["model"]} if "model" in check else {}


async def preflight_judge(checks: list[dict[str, Any]]) -> None:
    """Before any task: can each judge model the suite names be used at all? Creating
    its provider finds a missing API key or an unknown provider; one short request
    (a few dozen tokens, per distinct provider and model) finds a rejected key or an
    unknown model. Either stops the run with exit 2 instead of erroring every task. A
    service that is only busy (rate limited) does not stop it."""
    seen: set[tuple[str, str | None]] = set()
    for check in checks:
        name = check.get("provider", DEFAULT_PROVIDER)
        model = check.get("model")
        if (name, model) in seen:
            continue
        seen.add((name, model))
        label = f"the judge's provider '{name}'" + (f" with model '{model}'" if model else "")
        try:
            provider = evalctl.create_provider(name, _model_options(check))
        except evalctl.UsageError as exc:
            raise evalctl.UsageError(f"{label} cannot be used: {exc}") from None
        try:
            await provider.complete(evalctl.ModelRequest(
                system=PROBE_SYSTEM, messages=[evalctl.UserMessage("ok?")], tools=[],
                task={"id": "judge-preflight"}))
        except evalctl.RateLimited:
            pass
        except evalctl.ProviderError as exc:
            raise evalctl.UsageError(f"{label} cannot be used: {exc}; fix the check's "
                                     "provider, model or API key") from None
        finally:
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()


async def grade_judge(check: dict[str, Any], workspace: Path,
                      result: evalctl.AgentResult) -> evalctl.CheckResult:
    provider = evalctl.create_provider(check.get("provider", DEFAULT_PROVIDER),
                                       _model_options(check))
    request = evalctl.ModelRequest(
        system=SYSTEM,
        messages=[evalctl.UserMessage(build_prompt(check, workspace, result))],
        tools=[VERDICT_TOOL],
        task={"id": "judge", "script": check.get("script")},
    )
    try:
        turn = await provider.complete(request)
    except evalctl.ProviderError as exc:
        raise JudgeError(f"the judge's model could not be reached: {exc}") from None
    finally:
        close = getattr(provider, "aclose", None)
        if close is not None:
            await close()
    passed, reason = parse_verdict(turn)
    return evalctl.CheckResult(passed, reason or ("pass" if passed else "fail"),
                               usage=turn.usage, cost=turn.cost)


@evalctl.hookimpl
def evalctl_register_graders(register):
    register(evalctl.GraderSpec(
        name="judge",
        grade=grade_judge,
        preflight=preflight_judge,
        kind="judge",
        talk_only=True,
        params_schema={
            "type": "object",
            "properties": {
                "rubric": {"type": "string", "minLength": 1,
                           "description": "A yes/no question about the work."},
                "show": {"type": "array", "uniqueItems": True, "minItems": 1,
                         "items": {"enum": ["summary", "files", "diff"]},
                         "description": "What the judge sees (default: summary and diff)."},
                "files": {"type": "array", "items": {"type": "string", "minLength": 1,
                                                     "pattern": INSIDE_WORKSPACE},
                          "description": "Workspace files to show with `show: [files]`."},
                "provider": {"type": "string", "minLength": 1,
                             "description": "The judge's provider plugin (default anthropic)."},
                "model": {"type": "string", "minLength": 1, "description": "The judge's model."},
                "script": {"type": "array", "items": {"type": "object"},
                           "description": "With provider scripted: the judge's turns."},
            },
            "required": ["rubric"],
        },
        description="A model's yes/no verdict on the agent's work (evalctl-judge). Reported "
                    "apart from completion; never the check that keeps a task honest.",
        example="- type: judge\n  rubric: Does summary.md state the launch date?\n"
                "  show:\n    - files\n  files:\n    - summary.md",
        trusts="Trusts a model's verdict on the evidence it is shown (the summary, files, "
               "the diff), so it can be argued with: never decides a task, reported apart.",
    ))
