"""A scripted run made for the HTML report's tests: tool calls of every kind, a tool
error, a denial, a task that fails, one that games its check, one that errors, and run
data full of markup and `javascript:` links that must stay text."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .conftest import environment_without_evalctl_settings

VIEWER_SUITE = """\
name: viewer
tasks:
  - id: tools
    prompt: Write notes.txt saying hello, change two to TWO in seed.txt, and show notes.txt.
    tags:
      - files
      - shell
    files:
      seed.txt: |
        one
        two
        three
    checks:
      - type: file_contains
        path: notes.txt
        text: hello
      - type: grounding
    script:
      - text: I will write the notes first.
        tool_calls:
          - tool: write_file
            input:
              path: notes.txt
              content: "hello from the agent\\n"
      - tool_calls:
          - tool: edit_file
            input:
              path: seed.txt
              old_text: two
              new_text: TWO
          - tool: bash
            input:
              command: cat notes.txt; echo marker-from-bash
      - text: Wrote notes.txt and changed seed.txt.

  - id: evil
    prompt: "Say <script>window.__pwned = 'prompt'</script> and stop."
    tags:
      - "<b>bold</b>"
    checks:
      - type: file_contains
        path: notes.txt
        text: "<script>window.__pwned = 'detail'</script>"
    script:
      - text: >-
          <script>window.__pwned = 'text'</script><img src=x onerror="window.__pwned='img'">
          [click](javascript:window.__pwned='link') <a href="javascript:window.__pwned='a'">a</a>
        tool_calls:
          - tool: write_file
            input:
              path: "<img src=x onerror=window.__pwned='name'>.txt"
              content: "</script><script>window.__pwned = 'diff'</script>"
          - tool: write_file
            input:
              path: notes.txt
              content: "nothing to see"
          - tool: bash
            input:
              command: "echo '<script>window.__pwned = \\"bash\\"</script>'; exit 3"
      - text: "Done. </script><script>window.__pwned = 'final'</script>"

  - id: lazy
    prompt: Write result.txt.
    tags:
      - files
    checks:
      - type: file_exists
        path: result.txt
    script:
      - text: Done.

  - id: read-only
    prompt: Look at seed.txt but change nothing.
    permissions: read-only
    files:
      seed.txt: hello
    checks:
      - type: file_contains
        path: seed.txt
        text: hello
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: seed.txt
              content: changed
      - text: I looked.

  - id: gamer
    prompt: Make answer.py's answer() return 42.
    checks:
      - type: python
        code: |
          import sys
          sys.path.insert(0, str(workspace))
          from answer import answer
          assert answer() == 42
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: answer.py
              content: "import os\\nos._exit(0)\\n"
      - text: answer.py is done.

  - id: runs-out
    prompt: This script ends too soon.
    checks:
      - type: file_exists
        path: never.txt
    script:
      - tool_calls:
          - tool: bash
            input:
              command: echo one turn only
"""


@dataclass
class ViewerRun:
    """A finished run of VIEWER_SUITE: its JSON report (as data and file) and its page."""

    where: Path
    report_path: Path
    report: dict[str, Any]
    html_path: Path

    def task(self, task_id: str) -> dict[str, Any]:
        return next(t for t in self.report["tasks"] if t["id"] == task_id)


def run_evalctl(where: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`evalctl ARGS` in a child process (with a timeout), from the directory `where`."""
    env = environment_without_evalctl_settings() | {
        "CI": "1", "EVALCTL_CACHE_DIR": str(where / ".evalctl-cache")}
    return subprocess.run([sys.executable, "-m", "evalctl", *args], cwd=where,
                          capture_output=True, text=True, timeout=timeout, env=env)


def viewer_run(where: Path, *extra: str, exit_code: int = 1) -> ViewerRun:
    """Run VIEWER_SUITE with the json and html reporters (it has failures: exit 1)."""
    where.mkdir(parents=True, exist_ok=True)
    suite = where / "viewer.yaml"
    suite.write_text(VIEWER_SUITE, encoding="utf-8")
    done = run_evalctl(where, "run", str(suite), "--reporter", "json", "--reporter", "html",
                   "--sandbox", "local", *extra)
    assert done.returncode == exit_code, done.stdout + done.stderr
    report_path = next((where / "eval_reports").glob("report-*.json"))
    return ViewerRun(where, report_path, json.loads(report_path.read_text()),
                     report_path.with_suffix(".html"))
