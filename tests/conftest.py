from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import evalctl
from evalctl._plugin.registry import (
    PluginSource,
    Registry,
    get_registry,
    load_registry,
    set_registry,
)

# The test distributions' own tests run against their real installs, from
# test_entry_points.py, not in this session.
collect_ignore = ["distributions"]

ROOT = Path(__file__).resolve().parent.parent
SUITES = ROOT / "suites"


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path_factory, monkeypatch):
    """Each test gets its own suite cache; no plugin settings leak in from the shell."""
    monkeypatch.setenv("EVALCTL_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    for name in ("EVALCTL_DISABLE_PLUGINS", "EVALCTL_STRICT_PLUGINS", "ANTHROPIC_API_KEY",
                 "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    set_registry(None)
    yield
    set_registry(None)


@pytest.fixture
def require_bwrap() -> None:
    """Tests that need bubblewrap skip where it is missing, but never in CI: there .ci/run
    installs it, and a sandbox test that does not run is a failure."""
    from evalctl.plugins.sandboxes.bwrap_jail import probe

    reason = probe()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"bubblewrap must work in CI: {reason}")
        pytest.skip(f"bubblewrap unusable here: {reason}")


@pytest.fixture
def registry() -> Registry:
    return get_registry()


def sandbox_for(workspace: Any, name: str = "local", **options: Any) -> evalctl.Sandbox:
    """An installed sandbox over a workspace from evalctl._workspace, as a run opens one."""
    from evalctl._workspace import sandbox_environment

    spec = get_registry().sandboxes[name]
    sandbox = spec.create(evalctl.SandboxRequest(
        workspace.root, workspace.home, workspace.tmp,
        sandbox_environment(workspace.home, workspace.tmp), options=options))
    if asyncio.iscoroutine(sandbox):
        sandbox = asyncio.run(sandbox)
    _opened_sandboxes.append(sandbox)
    return sandbox


_opened_sandboxes: list[Any] = []


@pytest.fixture(autouse=True)
def _close_sandboxes():
    """Sandboxes a test opened with sandbox_for are closed after it (a bwrap sandbox holds
    cgroups until then)."""
    yield
    while _opened_sandboxes:
        asyncio.run(_opened_sandboxes.pop().close())


def registry_with(*plugins: tuple[str, Any]) -> Registry:
    """The installed plugins plus extra plugin objects, in a fresh plugin manager."""
    from evalctl._plugin.registry import entry_point_sources

    sources = entry_point_sources() + [PluginSource.from_object(name, obj, "test-dist", "1.0")
                                       for name, obj in plugins]
    return load_registry(sources, disabled=())


@pytest.fixture
def emptied_directory(tmp_path) -> Path:
    """A directory that held 2,000 long names, all removed: on ext4 it keeps its size
    (over 64 KiB), and every listing of it reads all of it. Skips where the file system
    shrinks it."""
    big = tmp_path / "big"
    big.mkdir()
    names = [big / (f"{n:05d}" + "x" * 200) for n in range(2000)]
    for name in names:
        name.touch()
    for name in names:
        name.unlink()
    if big.stat().st_size <= 64 * 1024:
        pytest.skip("this file system shrinks emptied directories")
    return big


@pytest.fixture
def write_suite(tmp_path) -> Callable[[str], Path]:
    def write(text: str, name: str = "suite.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


class FakeModel:
    """A provider that plays a list of turns (or functions of the request)."""

    def __init__(self, turns: list[Any]):
        self.turns = list(turns)
        self.requests: list[evalctl.ModelRequest] = []

    async def complete(self, request: evalctl.ModelRequest) -> evalctl.ModelTurn:
        self.requests.append(request)
        if not self.turns:
            raise evalctl.ProviderError("the fake model has no more turns")
        turn = self.turns.pop(0)
        if callable(turn):
            turn = turn(request)
        if isinstance(turn, BaseException):
            raise turn
        if isinstance(turn, float | int):
            await asyncio.sleep(turn)
            return evalctl.ModelTurn(text="slept")
        return turn


def call(name: str, call_id: str = "c1", **arguments: Any) -> evalctl.ToolCall:
    return evalctl.ToolCall(call_id, name, arguments)


def tool_turn(*calls: evalctl.ToolCall, text: str = "", cost: float | None = 0.0,
              usage: evalctl.TokenUsage | None = None) -> evalctl.ModelTurn:
    return evalctl.ModelTurn(text=text, tool_calls=list(calls),
                             stop_reason=evalctl.StopReason.TOOL_USE, cost=cost,
                             usage=usage or evalctl.TokenUsage(10, 5))


def final_turn(text: str = "done", **kwargs: Any) -> evalctl.ModelTurn:
    return evalctl.ModelTurn(text=text, usage=kwargs.pop("usage", evalctl.TokenUsage(10, 5)),
                             **kwargs)


def run_cli(where: Path, *args: str):
    """`evalctl run ARGS` through CliRunner, from the directory `where`."""
    from click.testing import CliRunner

    from evalctl._cli import cli

    previous = Path.cwd()
    os.chdir(where)
    try:
        return CliRunner().invoke(cli, ["run", *args])
    finally:
        os.chdir(previous)


def environment_without_evalctl_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EVALCTL_")}


class Listener:
    """A TCP listener on a free 127.0.0.1 port that counts who reached it: the target of
    tests that check a sandboxed command cannot reach the network."""

    def __init__(self) -> None:
        import socket
        import threading

        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.server.close()
