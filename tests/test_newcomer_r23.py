"""A newcomer's round (r23) on this session's changes: what it found small enough to
fix at once."""

from __future__ import annotations

import sys

import pytest

from evalctl._suite.provided import asks_for

from .conftest import run_cli
from .test_newcomer_r22 import WRITE_HELLO


@pytest.mark.parametrize("argv", [
    f"argv={sys.executable} agent.py 'unterminated {{prompt}}",
    f"argv={sys.executable} agent.py \\"])
def test_an_argv_that_cannot_be_split_is_refused_before_any_task(tmp_path, write_suite,
                                                                  argv):
    """Every attempt was an internal error, which a resume cannot fix (it refuses changed
    options)."""
    suite = write_suite(WRITE_HELLO)
    result = run_cli(tmp_path, str(suite), "--agent", "command", "--agent-option", argv,
                     "--sandbox", "local")
    assert result.exit_code == 2, result.output
    assert "cannot be split into words" in result.output
    assert not list((tmp_path / "eval_reports").glob("workspaces-*"))  # no task ran


@pytest.mark.parametrize("prompt, asked", [
    ("Write a regression test as ./tests/test_regress.py.", True),
    ("Add a test module tests/test_regress next to the others.", True),
    ("Run it as python -m tests.test_regress.", True),
    ("Write tests/test_regress.py.", True),
    ("Write test_regress.py in tests/.", True),
    ("Do not touch vendor/tests/test_regress.py.", False),
    ("Write tests/test_other.py.", False),
    ("Look at foo./tests/test_regress.py.", False),
])
def test_a_prompt_asks_for_a_test_file_however_it_writes_its_path(prompt, asked):
    """`./tests/x.py` and `tests/x` (a module) were taken for a file nothing asked for,
    and the task refused as naming a test file the task gives nowhere."""
    assert asks_for(prompt, "tests/test_regress.py") is asked


def test_a_resume_says_when_it_keeps_the_runs_concurrency_over_the_configs(tmp_path,
                                                                          write_suite):
    from .test_journal import JOURNAL_NAME

    suite = write_suite(WRITE_HELLO)
    first = run_cli(tmp_path, str(suite), "--concurrency", "1", "--sandbox", "local")
    assert first.exit_code in (0, 1), first.output  # the built-in loop has no script here
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))
    journal = run_dir / JOURNAL_NAME
    journal.write_text(journal.read_text().splitlines(keepends=True)[0])  # killed
    (tmp_path / "evalctl.toml").write_text("concurrency = 6\n")
    resumed = run_cli(tmp_path, "--resume", str(run_dir))
    assert resumed.exit_code in (0, 1), resumed.output
    assert "note: resuming at the run's concurrency, 1 (evalctl.toml says 6; " \
           "--concurrency 6 to use it)" in resumed.output
