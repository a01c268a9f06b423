"""The executor plugin kind: attempts scheduled by a plugin, results journaled by the core.

A stand-in for a cluster executor runs every attempt through the portable path (the
attempt pickled, run by `evalctl.run_portable` with a shared throttle, its outcome
accepted back) and must give the same report as `local`, with the files where a local
attempt leaves them.
"""

from __future__ import annotations

import asyncio
import io
import json
import pickle
import tarfile
from pathlib import Path
from typing import Any

import pytest

import evalctl
from evalctl.testing import run_suite

from .conftest import SUITES, registry_with, run_cli

SCRIPTED = """\
- id: writes
  prompt: Write a.txt saying hello.
  checks:
    - type: file_contains
      path: a.txt
      text: hello
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: a.txt
            content: hello
    - text: Wrote a.txt.
- id: lazy
  prompt: Write b.txt.
  checks:
    - type: file_exists
      path: b.txt
- id: shell
  prompt: Count the lines of seed.txt into n.txt.
  files:
    seed.txt: |
      one
      two
  checks:
    - type: command
      command: test "$(cat n.txt)" = 2
  script:
    - tool_calls:
        - tool: bash
          input:
            command: wc -l < seed.txt > n.txt
    - text: Counted.
"""


class RemoteThrottle:
    """What a worker holds: the run's shared throttle, reached as if remotely."""

    def __init__(self, shared: Any):
        self.shared = shared
        self.calls = 0

    async def acquire(self) -> int:
        self.calls += 1
        return await self.shared.acquire()

    async def release(self, generation: int, outcome: str | None) -> int:
        return await self.shared.settle(generation, outcome)


class PortableExecutor:
    """Every attempt through portable(), pickled as a cluster would ship it."""

    def __init__(self, options):
        self.options = dict(options)
        self.throttles: list[RemoteThrottle] = []

    async def execute(self, plan):
        shared = evalctl.call_throttle(plan.model_calls)
        for attempt in plan.attempts:
            if not await attempt.start():
                continue
            payload = pickle.loads(pickle.dumps(attempt.portable()))
            throttle = RemoteThrottle(shared)
            self.throttles.append(throttle)
            outcome = await evalctl.run_portable(
                payload, throttle=throttle, workspace=self.options.get("workspace", True),
                host="worker-1")
            yield await attempt.accept(outcome)


class PortablePlugin:
    created: list[PortableExecutor] = []

    @staticmethod
    def create(options):
        executor = PortableExecutor(options)
        PortablePlugin.created.append(executor)
        return executor

    @evalctl.hookimpl
    def evalctl_register_executors(self, register):
        register(evalctl.ExecutorSpec(
            name="portable", create=PortablePlugin.create,
            options_schema={"type": "object", "properties": {
                "workspace": {"type": "boolean"}}},
            description="Every attempt through evalctl.run_portable."))


def comparable(run: evalctl.RunResult) -> list[dict[str, Any]]:
    """The attempts as a report has them, without what differs by where and when."""
    rows = []
    for task in run.tasks:
        row = task.to_dict()
        for key in ("duration", "host", "workspace", "ledger"):
            row.pop(key, None)
        rows.append(row)
    return rows


def test_an_executor_that_runs_attempts_elsewhere_gives_the_same_report(tmp_path):
    registry = registry_with(("portable", PortablePlugin()))
    local = run_suite(SCRIPTED, registry=registry, sandbox="local", out_dir=tmp_path / "l")
    remote = run_suite(SCRIPTED, registry=registry, sandbox="local", out_dir=tmp_path / "r",
                       executor="portable")
    assert [t.status for t in local.tasks] == ["passed", "failed", "passed"]
    assert comparable(remote) == comparable(local)
    assert local.executor["name"] == "local" and remote.executor["name"] == "portable"
    assert {t.host for t in remote.tasks} == {"worker-1"}
    assert {t.host for t in local.tasks} == {None}
    # The files are where a local attempt leaves them, and the result says so.
    run_dir = Path(remote.run_directory)
    writes = next(t for t in remote.tasks if t.task_id == "writes")
    assert writes.workspace == str(run_dir / "writes")
    assert (run_dir / "writes" / "a.txt").read_text() == "hello"
    assert (run_dir / ".seed" / "shell" / "seed.txt").read_text() == "one\ntwo\n"
    ledger = [json.loads(line) for line in (run_dir / ".ledgers" / "writes.jsonl").open()]
    assert ledger[0]["event"] == "task_start" and ledger[-1]["event"] == "task_end"
    local_dir = Path(local.run_directory)
    for name in ("writes", "shell"):  # the model exchanges, for replays, as a local run's
        assert (run_dir / ".cassettes" / f"{name}.jsonl").read_text().count("\n") == \
            (local_dir / ".cassettes" / f"{name}.jsonl").read_text().count("\n") > 0
    # Every model call went through the run's one throttle.
    executor = PortablePlugin.created[-1]
    assert sum(t.calls for t in executor.throttles) == sum(t.turns for t in remote.tasks) > 0
    # And the journal has each attempt once, with the executor in its header.
    lines = [json.loads(line) for line in (run_dir / "journal.jsonl").open()]
    assert lines[0]["executor"] == {"name": "portable", "options": {}, "chosen_by": "--executor"}
    assert sorted(r["result"]["id"] for r in lines if r["kind"] == "attempt") == \
        ["lazy", "shell", "writes"]


def test_without_the_workspace_only_the_result_and_ledger_come_back(tmp_path):
    registry = registry_with(("portable", PortablePlugin()))
    run = run_suite(SCRIPTED, registry=registry, sandbox="local", out_dir=tmp_path,
                    executor="portable", executor_options={"workspace": "false"},
                    reporters=("markdown",))
    run_dir = Path(run.run_directory)
    assert run.count("passed") == 2
    assert run.executor["options"] == {"workspace": False}
    markdown = next(tmp_path.glob("report-*.md")).read_text()
    assert "- Executor: portable (workspace=False)" in markdown
    assert not (run_dir / "writes").exists()
    assert (run_dir / ".ledgers" / "writes.jsonl").is_file()


class Misbehaving:
    """An executor that yields one result twice, then fails."""

    def __init__(self, mode: str):
        self.mode = mode

    async def execute(self, plan):
        first = plan.attempts[0]
        await first.start()
        result = await first.run()
        yield result
        if self.mode == "twice":
            yield await first.run()  # refused: an attempt has one result
        if self.mode == "same":
            yield result  # refused: it was reported already
        raise RuntimeError("the cluster went away")


class MisbehavingPlugin:
    def __init__(self, mode: str):
        self.mode = mode

    @evalctl.hookimpl
    def evalctl_register_executors(self, register):
        register(evalctl.ExecutorSpec(name="flaky", create=lambda options: Misbehaving(
            self.mode)))


@pytest.mark.parametrize("mode, message", [
    ("twice", "the flaky executor failed: RuntimeError: attempt writes already has a result"),
    ("fails", "the flaky executor failed: RuntimeError: the cluster went away"),
    ("same", "the flaky executor failed: RuntimeError: it yielded TaskResult(task_id='writes'"),
])
def test_a_failing_executor_keeps_what_finished_and_never_doubles_a_result(
        tmp_path, mode, message):
    registry = registry_with(("flaky", MisbehavingPlugin(mode)))
    run = run_suite(SCRIPTED, registry=registry, sandbox="local", out_dir=tmp_path,
                    executor="flaky")
    assert [t.status for t in run.tasks] == ["passed", "not_run", "not_run"]
    assert run.tasks[1].error.startswith(message)
    journal = [json.loads(line) for line in (Path(run.run_directory) / "journal.jsonl").open()]
    assert [r["result"]["id"] for r in journal if r["kind"] == "attempt"] == ["writes"]
    assert journal[-1]["reason"].startswith(message)


def test_executor_options_are_typed_and_unknown_ones_refused(tmp_path):
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--executor-option", "workers=2")
    assert result.exit_code == 2
    assert "executor 'local' has no option 'workers'; its options: none" in result.output
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--executor", "ray_cluster")
    assert result.exit_code == 2
    assert "unknown executor 'ray_cluster'; installed executors: local" in result.output


def test_the_config_chooses_the_executor_and_the_report_records_it(tmp_path):
    (tmp_path / "evalctl.toml").write_text('executor = "local"\nsandbox = "local"\n')
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--report", "r.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["executor"] == {"name": "local", "options": {}, "chosen_by": "config"}
    assert evalctl.load_report(tmp_path / "r.json").executor["chosen_by"] == "config"
    (tmp_path / "evalctl.toml").write_text('executor = 3\n')
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"))
    assert result.exit_code == 2 and "'executor' must be text" in result.output


def test_an_outcome_that_is_not_the_attempts_is_an_error_not_a_crash(tmp_path):
    class Forger:
        async def execute(self, plan):
            first, second = plan.attempts[0], plan.attempts[1]
            await first.start()
            outcome = await evalctl.run_portable(first.portable())
            await second.start()
            yield await second.accept(outcome)  # another attempt's outcome
            await first.start()
            yield await first.accept(b"not a tar")

    class Plugin:
        @evalctl.hookimpl
        def evalctl_register_executors(self, register):
            register(evalctl.ExecutorSpec(name="forger", create=lambda options: Forger()))

    run = run_suite(SCRIPTED, registry=registry_with(("forger", Plugin())), sandbox="local",
                    out_dir=tmp_path, executor="forger")
    by_id = {t.task_id: t for t in run.tasks}
    assert by_id["lazy"].status == "error" and by_id["lazy"].error_kind == "executor"
    assert "the outcome is of writes #1, not of lazy #1" in by_id["lazy"].error
    assert by_id["writes"].status == "error"
    assert "the attempt's outcome is not readable" in by_id["writes"].error


def test_an_outcome_cannot_write_outside_its_attempt(tmp_path):
    """A worker's outcome is data from elsewhere: members outside the attempt's places,
    and links out of the workspace, are left out."""
    class Smuggler:
        async def execute(self, plan):
            attempt = plan.attempts[0]
            await attempt.start()
            real = await evalctl.run_portable(attempt.portable())
            with tarfile.open(fileobj=io.BytesIO(real), mode="r:gz") as archive:
                members = [(m, archive.extractfile(m).read() if m.isfile() else None)
                           for m in archive.getmembers()]
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
                for member, data in members:
                    archive.addfile(member, io.BytesIO(data) if data is not None else None)
                for name, data in (("../escaped.txt", b"x"), ("other/evil.txt", b"x")):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
                link = tarfile.TarInfo("workspace/passwd")
                link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
                archive.addfile(link)
            yield await attempt.accept(buffer.getvalue())

    class Plugin:
        @evalctl.hookimpl
        def evalctl_register_executors(self, register):
            register(evalctl.ExecutorSpec(name="smuggler", create=lambda options: Smuggler()))

    run = run_suite(SCRIPTED, registry=registry_with(("smuggler", Plugin())),
                    sandbox="local", out_dir=tmp_path / "out", executor="smuggler", only=(
                        "writes",))
    run_dir = Path(run.run_directory)
    assert run.tasks[0].status == "passed"
    assert (run_dir / "writes" / "a.txt").read_text() == "hello"
    assert not (run_dir / "writes" / "passwd").exists()
    assert not (run_dir / "other").exists() and not (tmp_path / "out" / "escaped.txt").exists()
    assert not list(run_dir.glob(".incoming-*"))


def test_a_worker_with_other_versions_refuses_the_attempt(tmp_path):
    class Stale:
        async def execute(self, plan):
            attempt = plan.attempts[0]
            await attempt.start()
            payload = attempt.portable()
            import dataclasses

            payload = dataclasses.replace(payload, plugins={**payload.plugins, "files": "0.0"})
            yield await attempt.accept(await evalctl.run_portable(payload, host="old-node"))

    class Plugin:
        @evalctl.hookimpl
        def evalctl_register_executors(self, register):
            register(evalctl.ExecutorSpec(name="stale", create=lambda options: Stale()))

    run = run_suite(SCRIPTED, registry=registry_with(("stale", Plugin())), sandbox="local",
                    out_dir=tmp_path, executor="stale", only=("writes",))
    task = run.tasks[0]
    assert task.status == "error" and task.host == "old-node"
    assert task.error_kind == "executor" and task.exit_status == "executor_error"
    assert "plugins differ from the run's: files (run 0.0, here" in task.error


def test_the_budget_gate_holds_whatever_the_executor(tmp_path):
    suite = SCRIPTED.replace("    - text: Wrote a.txt.", "    - text: Wrote a.txt.\n      cost: 1")
    registry = registry_with(("portable", PortablePlugin()))
    run = run_suite(suite, registry=registry, sandbox="local", out_dir=tmp_path,
                    executor="portable", max_cost=0.5)
    assert [t.status for t in run.tasks] == ["passed", "not_run", "not_run"]
    assert run.budget["reached"] and run.budget["spent_cost"] == 1.0


def test_list_plugins_shows_executors():
    from click.testing import CliRunner

    from evalctl._cli import cli

    result = CliRunner().invoke(cli, ["list-plugins"])
    assert "executors: local" in result.output


def test_shared_throttle_halves_for_every_worker_on_a_rate_limit():
    async def scenario():
        shared = evalctl.call_throttle(8)
        generation = await shared.acquire()
        assert await shared.settle(generation, "rate_limited") == 4
        other = await shared.acquire()  # a call that started after the halving
        assert await shared.settle(other, "ok") == 4
        return shared.limit

    assert asyncio.run(scenario()) == 4


def test_a_run_resumed_with_another_executor_continues_where_it_stopped(tmp_path):
    """The executor decides where attempts run, not what they mean: a run stopped by its
    budget under local finishes under another executor, each attempt journaled once."""
    from evalctl._plugin.registry import set_registry

    suite = tmp_path / "suite.yaml"
    suite.write_text(SCRIPTED.replace("    - text: Wrote a.txt.",
                                      "    - text: Wrote a.txt.\n      cost: 1"))
    set_registry(registry_with(("portable", PortablePlugin())))
    first = run_cli(tmp_path, str(suite), "--sandbox", "local", "--max-cost", "0.5",
                    "--concurrency", "1", "--report", "first.json")
    assert first.exit_code == 1, first.output
    report = json.loads((tmp_path / "first.json").read_text())
    assert [t["status"] for t in report["tasks"]] == ["passed", "not_run", "not_run"]
    resumed = run_cli(tmp_path, "--resume", report["run_directory"], "--max-cost", "5",
                      "--executor", "portable", "--report", "second.json")
    assert resumed.exit_code == 1, resumed.output  # `lazy` fails, as it should
    second = json.loads((tmp_path / "second.json").read_text())
    assert [t["status"] for t in second["tasks"]] == ["passed", "failed", "passed"]
    assert second["executor"]["name"] == "local"  # the run's first session's
    assert [t.get("host") for t in second["tasks"]] == [None, "worker-1", "worker-1"]
    journal = [json.loads(line) for line in
               (Path(report["run_directory"]) / "journal.jsonl").open()]
    assert [line["executor"]["name"] for line in journal if line["kind"] == "resume"] == \
        ["portable"]
    assert sorted(line["result"]["id"] for line in journal if line["kind"] == "attempt") == \
        ["lazy", "shell", "writes"]


HOSTILE_WORKSPACE = """\
- id: lazy-and-hostile
  prompt: Write done.txt.
  checks:
    - type: file_exists
      path: done.txt
  script:
    - tool_calls:
        - tool: bash
          input:
            command: |
              ln -s .. up; ln -s q/../.. p; ln -s . q; ln -s /etc/passwd abs; ln -s sub ok
              mkdir sub && echo kept > sub/kept.txt
              truncate -s 1000M sparse.bin
              python3 -c "
              import os
              fd = os.open('.', os.O_DIRECTORY)
              for _ in range(17):
                  os.mkdir('a' * 250, dir_fd=fd)
                  fd = os.open('a' * 250, os.O_DIRECTORY, dir_fd=fd)
              os.close(os.open('deep.txt', os.O_CREAT | os.O_WRONLY, dir_fd=fd))
              "
    - text: Done, honestly.
"""


def test_a_hostile_workspace_neither_launders_a_failure_nor_comes_back_whole(tmp_path):
    """Found by an attacker: under a cluster executor, a path too long to pack or unpack
    turned the graded failure into an uncounted executor error (its spending out of the
    budget too); links out of the workspace came back; a sparse file came back dense."""
    registry = registry_with(("portable", PortablePlugin()))
    run = run_suite(HOSTILE_WORKSPACE, registry=registry, sandbox="local",
                    out_dir=tmp_path, executor="portable")
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("failed", "completed"), task.error
    assert task.turns == 2 and task.usage.input_tokens > 0
    workspace = Path(task.workspace)
    assert (workspace / "sub" / "kept.txt").read_text() == "kept\n"
    assert (workspace / "ok").is_symlink()  # a link that stays inside is kept
    for name in ("up", "p", "abs", "sparse.bin"):
        assert not (workspace / name).is_symlink() and not (workspace / name).exists(), name
