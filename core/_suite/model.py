"""The suite as the rest of evalctl sees it: tasks, their limits, and the suite itself.

A light model with no loading logic, so that the loader builds it and the agent and
the runner read it without depending on each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._errors import Problem
from evalctl._sources.model import Source

DEFAULT_TURNS = 30
DEFAULT_SECONDS = 600.0


@dataclass(frozen=True)
class Limits:
    turns: int = DEFAULT_TURNS
    seconds: float = DEFAULT_SECONDS
    cost: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"turns": self.turns, "seconds": self.seconds, "cost": self.cost}


DEFAULT_SETUP_SECONDS = 600.0


@dataclass(frozen=True)
class Setup:
    """Commands run in the task's sandbox before the agent starts (create a virtual
    environment, install the project), each with `timeout` seconds, with the network
    only when `network` says so. A failed setup is an error of the attempt."""

    commands: tuple[str, ...]
    timeout: float = DEFAULT_SETUP_SECONDS
    network: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"commands": list(self.commands), "timeout": self.timeout,
                "network": self.network}


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    checks: tuple[Mapping[str, Any], ...]
    files: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    permissions: str = "full"
    limits: Limits = field(default_factory=Limits)
    network: bool = False  # whether the sandbox lets the task reach the network
    # Written only after the agent finished, before grading: the agent never sees them.
    verify_files: Mapping[str, str] = field(default_factory=dict)
    protected: tuple[str, ...] = ()  # globs the agent must leave as seeded
    # Where the workspace starts from (files: go on top), and what runs before the agent.
    source: Source | None = None
    setup: Setup | None = None
    # A unified diff applied to the seed's copies of the files it touches; the results
    # are written after the agent like verify_files (a benchmark's test patch).
    verify_patch: str | None = None
    # Task keys that plugins contribute (a provider's `script:`, say), passed to them as is.
    extra: Mapping[str, Any] = field(default_factory=dict)
    line: int = 1
    check_lines: tuple[int, ...] = ()  # the line of each check, in order (when known)
    # Where the suite is, and the line of each node under the `extra` keys, by its path
    # from the task joined with "/" ("agent_script/0/tool_calls/0/tool"): so a provider
    # can say where a mistake it finds only at run time is written.
    file: str = ""
    extra_lines: Mapping[str, int] = field(default_factory=dict)
    # (check index, workspace path, line of its entry, its key in the check) of each path
    # a check names that the task must provide (GraderSpec.named_paths; _suite.provided).
    named_paths: tuple[tuple[int, str, int, str], ...] = ()

    def locate(self, path: Sequence[str | int]) -> str:
        """"FILE:LINE" of the node at `path` in the task's data (or of its nearest
        ancestor that has a line), "" when the task has no file."""
        if not self.file:
            return ""
        steps = [str(step) for step in path]
        while steps:
            line = self.extra_lines.get("/".join(steps))
            if line:
                return f"{self.file}:{line}"
            steps.pop()
        return f"{self.file}:{self.line}"

    def small_seed(self) -> bool:
        """Whether the attempt's workspace starts small: inline files only, within the
        bounds of work the event loop does itself (evalctl._files.small_tree), and no
        setup that could add to them."""
        from evalctl._files import SMALL_TREE_BYTES, SMALL_TREE_ENTRIES

        return (self.source is None and self.setup is None
                and len(self.files) <= SMALL_TREE_ENTRIES // 2
                and sum(len(text) for text in self.files.values()) <= SMALL_TREE_BYTES // 4)

    def as_request_data(self) -> dict[str, Any]:
        """The task as providers see it in ModelRequest.task: its id, prompt and the
        keys plugins contributed."""
        return {"id": self.id, "prompt": self.prompt, **self.extra}


@dataclass
class Suite:
    path: Path
    tasks: list[Task]
    sha256: str
    name: str = ""
    warnings: list[Problem] = field(default_factory=list)
    sandbox: Any = None  # `defaults: sandbox:` as written: a name, or a mapping with `name`
    sandbox_line: int = 0  # the line of `defaults: sandbox:` (0: not set)
