"""Claude Code as the proof that any agent speaking the Messages API can be evaluated:
the real CLI (npm @anthropic-ai/claude-code), headless in the bwrap sandbox, its model
played by the scripted provider through evalctl's model proxy.

.ci/run installs it into .cache/claude-code (never globally). Outside CI these tests skip
with the command that installs it; in CI a missing install fails them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import evalctl
from evalctl._agent.ledger import read_events
from evalctl.testing import run_suite

ROOT = Path(__file__).resolve().parent.parent
CLAUDE_CODE_VERSION = "2.1.332"
INSTALL = Path(os.environ.get("EVALCTL_CLAUDE_CODE_DIR") or ROOT / ".cache" / "claude-code")
INSTALL_COMMAND = (f"npm install --prefix {INSTALL} "
                   f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}")
SECRET = "sk-ant-the-users-real-key-9b7d"

SUITE = """\
name: claude-code-proof
tasks:
  - id: write-with-write
    prompt: Create hello.txt containing the word hello.
    agent_script:
      - text: I'll create the file.
        tool_calls:
          - tool: Write
            input:
              file_path: hello.txt
              content: "hello\\n"
      - text: Created hello.txt.
    checks:
      - type: file_contains
        path: hello.txt
        text: hello
  - id: write-with-bash
    prompt: Record the environment in env.txt and write bash.txt.
    agent_script:
      - tool_calls:
          - tool: Bash
            input:
              command: |
                env > env.txt; cat /proc/[0-9]*/environ >> env.txt 2>/dev/null
                echo from-bash > bash.txt
              description: Record the environment
      - text: Done.
    checks:
      - type: file_contains
        path: bash.txt
        text: from-bash
  - id: does-nothing-useful
    prompt: Create done.txt.
    agent_script:
      - text: The file is created.
    checks:
      - type: file_exists
        path: done.txt
  - id: over-its-cost-limit
    prompt: Create a.txt, then b.txt.
    limits:
      cost: 0.5
    agent_script:
      - tool_calls:
          - tool: Write
            input:
              file_path: a.txt
              content: "a\\n"
        cost: 0.75
      - tool_calls:
          - tool: Write
            input:
              file_path: b.txt
              content: "b\\n"
      - text: Both written.
    checks:
      - type: file_exists
        path: b.txt
"""


@pytest.fixture(scope="module")
def claude_code() -> Path:
    """The directory holding Claude Code's npm install, or a skip (a failure in CI)."""
    manifest = INSTALL / "node_modules" / "@anthropic-ai" / "claude-code" / "package.json"
    executable = INSTALL / "node_modules" / ".bin" / "claude"
    problem = None
    if not executable.exists() or not manifest.exists():
        problem = f"Claude Code is not installed in {INSTALL}; install it with: {INSTALL_COMMAND}"
    elif json.loads(manifest.read_text())["version"] != CLAUDE_CODE_VERSION:
        problem = (f"{INSTALL} holds Claude Code "
                   f"{json.loads(manifest.read_text())['version']}, these tests pin "
                   f"{CLAUDE_CODE_VERSION}; install it with: {INSTALL_COMMAND}")
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Claude Code must be installed in CI: {problem}")
        pytest.skip(problem)
    return INSTALL


@pytest.fixture(scope="module")
def proof_run(claude_code, tmp_path_factory):
    from evalctl.plugins.sandboxes.bwrap_jail import probe

    reason = probe()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"bubblewrap must work in CI: {reason}")
        pytest.skip(f"bubblewrap unusable here: {reason}")
    out = tmp_path_factory.mktemp("claude-code")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANTHROPIC_API_KEY", SECRET)
        run = run_suite(
            SUITE, sandbox="bwrap", agent="claude-code", out_dir=out, concurrency=2,
            reporters=["json", "markdown", "html"],
            agent_options={"path": [str(claude_code / "node_modules" / ".bin")],
                           "version": CLAUDE_CODE_VERSION},
            sandbox_options={"ro_paths": [str(claude_code)]})
    return run, out


def by_id(run) -> dict:
    return {task.task_id: task for task in run.tasks}


def test_claude_code_writes_a_file_with_its_own_write_tool(proof_run):
    run, _ = proof_run
    task = by_id(run)["write-with-write"]
    assert task.status == "passed", (task.error, task.checks)
    assert (task.exit_status, task.turns, task.tool_calls) == ("completed", 2, 1)
    events = read_events(Path(task.ledger))
    turns = [e for e in events if e["event"] == "model_turn"]
    assert [t["tool_calls"][0]["name"] for t in turns[:1]] == ["Write"]
    assert all(t["via"] == "proxy" and t["stream"] for t in turns)
    assert all(t["requested_model"].startswith("claude") for t in turns)
    exit_event = next(e for e in events if e["event"] == "agent_exit")
    assert exit_event["exit_code"] == 0
    own = json.loads(exit_event["stdout"])  # Claude Code's own account of the session
    assert own["result"] == "Created hello.txt." and own["num_turns"] >= 1
    assert own["usage"]["input_tokens"] == task.usage.input_tokens > 0
    assert own["usage"]["output_tokens"] == task.usage.output_tokens > 0


def test_claude_code_runs_bash_in_the_sandbox_and_sees_no_real_key(proof_run):
    run, _ = proof_run
    task = by_id(run)["write-with-bash"]
    assert task.status == "passed", (task.error, task.checks)
    seen = (Path(task.workspace) / "env.txt").read_text()
    assert "ANTHROPIC_API_KEY=evalctl-task-" in seen
    assert SECRET not in seen
    everything = "".join(p.read_text() for p in Path(run.run_directory, ".ledgers").iterdir())
    assert SECRET not in everything


def test_a_script_that_does_nothing_useful_fails_on_its_checks(proof_run):
    run, _ = proof_run
    task = by_id(run)["does-nothing-useful"]
    assert (task.status, task.exit_status, task.turns) == ("failed", "completed", 1)
    assert "done.txt" in task.checks[-1].detail


def test_a_task_over_its_cost_limit_ends_cost_limit(proof_run):
    run, _ = proof_run
    task = by_id(run)["over-its-cost-limit"]
    assert (task.status, task.exit_status) == ("failed", "cost_limit")
    assert task.turns == 1 and task.cost == 0.75
    workspace = Path(task.workspace)
    assert (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()


def test_the_report_names_claude_code_and_counts_its_tokens(proof_run):
    run, out = proof_run
    assert run.agent["name"] == "claude-code" and run.agent["version"] == CLAUDE_CODE_VERSION
    assert run.agent_label == f"claude-code {CLAUDE_CODE_VERSION}"
    report = evalctl.load_report(next(out.glob("report-*.json")))
    assert report.usage == run.usage and report.usage.input_tokens > 1000
    assert sum(t.turns for t in report.tasks) == 6
    markdown = next(out.glob("report-*.md")).read_text()
    assert f"- Agent: claude-code {CLAUDE_CODE_VERSION} (a preset of command)" in markdown
    html = next(out.glob("report-*.html")).read_text()
    assert f"claude-code {CLAUDE_CODE_VERSION} (a preset of command)" in html


def test_the_docs_suite_passes_with_claude_code(claude_code, tmp_path, require_bwrap):
    from tests.test_agents import docs_suite

    run = run_suite(docs_suite(), sandbox="bwrap", agent="claude-code", out_dir=tmp_path,
                    agent_options={"path": [str(claude_code / "node_modules" / ".bin")]},
                    sandbox_options={"ro_paths": [str(claude_code)]})
    task = run.tasks[0]
    assert task.status == "passed", (task.error, task.checks)
    assert task.turns == 2 and task.cost == 0.01


def test_a_recorded_claude_code_run_replays(proof_run, claude_code, tmp_path):
    """The proof run's cassettes, replayed to Claude Code through the model proxy: the
    same outcomes without a model. Its system prompt names its working directory (the
    run directory differs) and the date, which the mask leaves out of the comparison."""
    run, _ = proof_run
    mask = r"[^\s\"'`]*workspaces-[0-9-]+|[0-9]{4}-[0-9]{2}-[0-9]{2}"
    replayed = run_suite(
        SUITE, provider="replay", sandbox="bwrap", agent="claude-code", out_dir=tmp_path,
        provider_options={"cassettes": run.run_directory, "mask": mask}, concurrency=2,
        agent_options={"path": [str(claude_code / "node_modules" / ".bin")],
                       "version": CLAUDE_CODE_VERSION},
        sandbox_options={"ro_paths": [str(claude_code)]})
    outcome = [(t.task_id, t.status, t.exit_status, t.turns, t.tool_calls, t.usage, t.cost,
                [(c.type, c.passed) for c in t.checks]) for t in run.tasks]
    assert [(t.task_id, t.status, t.exit_status, t.turns, t.tool_calls, t.usage, t.cost,
             [(c.type, c.passed) for c in t.checks]) for t in replayed.tasks] == outcome, \
        [t.error for t in replayed.tasks]

    unmasked = run_suite(
        SUITE, provider="replay", sandbox="bwrap", agent="claude-code", out_dir=tmp_path,
        provider_options={"cassettes": run.run_directory}, only=("write-with-write",),
        agent_options={"path": [str(claude_code / "node_modules" / ".bin")]},
        sandbox_options={"ro_paths": [str(claude_code)]})
    task = unmasked.tasks[0]
    assert (task.status, task.exit_status) == ("error", "replay_mismatch")
    assert task.error.startswith("replay mismatch at system[")
    assert "workspaces-" in task.error
