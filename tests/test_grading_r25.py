"""An attacker round against grading (r25): placeholders hidden by a UTF-7 coding line
in a script without a suffix, by "\\r" line ends, by `...;`, and in UTF-16 text; and a
check's program on the host's PATH that the grading sandbox does not mount."""

from __future__ import annotations

import json

import pytest

from .conftest import run_cli
from .test_graders import agent_result, check
from .test_graders import workspace as workspace  # the fixture


def placeholders(registry, workspace):
    return check(registry, workspace, {"type": "no_placeholders"}, agent_result(workspace))


@pytest.mark.parametrize(("name", "content", "said"), [
    # A script without a suffix: Python honours its coding line all the same.
    ("mean", b"#!/usr/bin/env python3\n# -*- coding: utf-7 -*-\ndef mean(xs):\n"
             b"    raise +AE4-otImplementedError\n",
     "mean (its coding line declares utf-7: not read)"),
    # "\r" line ends: Python splits lines there.
    ("stats.py", b"def mean(xs):\r    ...\rdef total(xs):\r    return sum(xs)\r",
     "stats.py:1: a '...' body: ..."),
    # `...;` is a statement of its own.
    ("stats.py", b"def mean(xs): ...;\n", "stats.py:1: a '...' body: def mean(xs): ...;"),
    # UTF-16 text, which an editor shows whole.
    ("USAGE.md", "# Usage\n\nTODO: write the usage.\n".encode("utf-16"),
     "a TODO/FIXME/XXX marker: TODO: write the usage."),
])
def test_a_placeholder_is_found_as_python_and_editors_read_it(registry, workspace, name,
                                                               content, said):
    (workspace.root / name).write_bytes(content)
    outcome = placeholders(registry, workspace)
    assert not outcome.passed, outcome.detail
    assert said in outcome.detail, outcome.detail


def test_a_coding_line_python_reads_as_utf8_text_is_scanned(registry, workspace):
    (workspace.root / "tool").write_bytes(b"#!/usr/bin/env python3\n# coding: latin-1\n"
                                          b"print('ok')\n")
    assert placeholders(registry, workspace).passed


def test_a_checks_program_the_sandbox_does_not_mount_is_an_error(tmp_path, monkeypatch,
                                                                 require_bwrap):
    """Found by an attacker round: `cargo` in ~/.cargo/bin passed the preflight (the host's
    PATH) and then failed every attempt under bwrap, exit 127, counted as the agent's
    failure. A check's exit 127 is now followed by asking a shell of its own, in the
    sandbox, whether the program is there: nothing of the agent's runs in that one."""
    tools = tmp_path / "host-only-bin"
    tools.mkdir()
    tool = tools / "host-only-tool"
    tool.write_text("#!/bin/sh\necho ok\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{__import__('os').environ['PATH']}")
    (tmp_path / "s.yaml").write_text("""\
- id: host-tool
  prompt: Make hello.txt.
  checks:
    - type: file_exists
      path: hello.txt
    - type: command
      command: host-only-tool --version
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: hello.txt
            content: "hi\\n"
    - text: Done.
""")
    result = run_cli(tmp_path, "s.yaml", "--sandbox", "bwrap", "--report", "r.json")
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert task["status"] == "error", (result.output, task)
    assert "the check's program 'host-only-tool' is not found in the sandbox the checks run " \
           "in" in json.dumps(task)
    local = run_cli(tmp_path, "s.yaml", "--sandbox", "local", "--report", "l.json")
    assert local.exit_code == 0, local.output  # where it is found, it runs
