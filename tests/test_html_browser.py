"""The HTML report in a real browser: Debian's headless Chromium, driven by Playwright's
Python API (no browser download). The page is opened from file://, as a user opens it.

Without Chromium or Playwright these tests skip with the reason, except in CI (the
`CI` variable set), where they fail: CI must run them. Screenshots are written to
test-artifacts/ (or $EVALCTL_TEST_ARTIFACTS) for a person to look at.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import evalctl

from .conftest import ROOT
from .viewer_run import ViewerRun, run_evalctl, viewer_run

CHROMIUM = Path(os.environ.get("EVALCTL_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]
ARTIFACTS = Path(os.environ.get("EVALCTL_TEST_ARTIFACTS", ROOT / "test-artifacts"))


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright's Python package is not installed (pip install -e '.[test]')"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


@pytest.fixture(scope="module")
def browser():
    missing = _missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the HTML report's browser tests cannot run: {missing}. CI must run "
                        "them: install what is missing in .ci/run.", pytrace=False)
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                                              timeout=60_000)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> ViewerRun:
    return viewer_run(tmp_path_factory.mktemp("viewer"))


def wait_for(tab, expression: str, timeout: float = 20.0) -> None:
    """Poll a JavaScript expression from here until it is truthy. (Playwright's
    wait_for_function evaluates its predicate with eval inside the page, which the
    report's Content-Security-Policy rightly forbids; evaluate() goes through the
    debugging protocol instead.)"""
    deadline = time.monotonic() + timeout
    while not tab.evaluate(f"() => Boolean({expression})"):
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} s: {expression}")
        time.sleep(0.01)


class Page:
    """A browser tab that records anything the report should never do: a script error,
    a console error (a Content-Security-Policy violation is one), a dialog, a request
    off the machine."""

    def __init__(self, browser):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.tab = self.context.new_page()
        self.tab.set_default_timeout(20_000)
        self.problems: list[str] = []
        self.tab.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.tab.on("console", lambda message: self.problems.append(
            f"console {message.type}: {message.text}") if message.type == "error" else None)
        self.tab.on("dialog", self._dialog)
        self.tab.on("request", lambda request: None if request.url.startswith(
            ("file:", "about:")) else self.problems.append(f"request to {request.url}"))

    def _dialog(self, dialog) -> None:
        self.problems.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    def open(self, path: Path, fragment: str = "") -> None:
        self.tab.goto("about:blank")  # a fresh load, even when only the fragment differs
        self.tab.goto(path.as_uri() + fragment)
        wait_for(self.tab, "window.evalctlTiming && window.evalctlTiming.ready")

    def figures(self) -> dict[str, str]:
        return dict(self.tab.locator("[data-figure]").evaluate_all(
            "nodes => nodes.map(n => [n.dataset.figure, n.textContent.trim()])"))

    def rows(self) -> list[str]:
        return self.tab.locator("#task-table tbody tr.row").evaluate_all(
            "rows => rows.map(r => r.dataset.key)")

    def fragment(self) -> str:
        return self.tab.evaluate("location.hash")

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        target = ARTIFACTS / name
        self.tab.screenshot(path=str(target), full_page=True)
        return target


@pytest.fixture
def page(browser):
    tab = Page(browser)
    yield tab
    tab.context.close()


def ids(report: dict, status: str | None = None) -> list[str]:
    return [t["id"] for t in report["tasks"] if status is None or t["status"] == status]


def test_the_overview_shows_the_json_reports_numbers(page, run):
    page.open(run.html_path)
    figures = page.figures()
    summary = run.report["summary"]
    assert figures["completion_rate"] == evalctl.format_percent(summary["completion_rate"])
    assert figures["completion_rate"] == "40.0%"  # 2 of 5 graded: the error is left out
    assert figures["gaming"] == "1"
    for name in ("passed", "failed", "errors", "not_run", "total"):
        assert figures[name] == str(summary[name]), name
    assert figures["graded"] == str(summary["passed"] + summary["failed"])
    assert figures["grounding_rate"] == evalctl.format_percent(summary["grounding_rate"])
    assert figures["input_tokens"] == f"{summary['usage']['input_tokens']:,}"
    assert figures["output_tokens"] == f"{summary['usage']['output_tokens']:,}"
    assert figures["cost"] == evalctl.format_money(summary["cost"])
    assert "judge_rate" not in figures  # no judge ran: no judge figure to mistake for one
    header = page.tab.locator("header").inner_text()
    assert "sandbox local" in header and run.report["provider"] in header
    assert page.tab.locator("#overview svg").count() == 2  # by tag, duration (cost is $0)
    shot = page.screenshot("html-report-overview.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert page.problems == []


def test_filters_and_sorting_live_in_the_fragment_so_a_link_keeps_the_view(page, run, browser):
    page.open(run.html_path)
    assert page.rows() == ids(run.report)
    page.tab.select_option("#f-status", "failed")
    assert page.rows() == ids(run.report, "failed") == ["evil", "lazy", "gamer"]
    assert "status=failed" in page.fragment()
    page.tab.select_option("#f-tag", "files")
    assert page.rows() == ["lazy"]
    page.tab.click("#f-reset")
    page.tab.select_option("#f-check", "!file_exists")  # the file_exists check failed
    assert page.rows() == ["lazy", "runs-out"]
    page.tab.click("#f-reset")
    page.tab.fill("#f-q", "script_error")
    assert page.rows() == ["runs-out"]
    page.tab.click("#f-reset")
    page.tab.select_option("#f-tag", "<b>bold</b>")  # a tag is text, even in a fragment
    assert page.rows() == ["evil"]
    page.tab.click("#f-reset")
    page.tab.click("#task-table th[data-sort=tokens] button")
    page.tab.click("#task-table th[data-sort=tokens] button")  # a second click: descending
    by_tokens = sorted(run.report["tasks"], key=lambda t: -(t["usage"]["input_tokens"]
                                                             + t["usage"]["output_tokens"]))
    assert page.rows() == [t["id"] for t in by_tokens]
    page.tab.select_option("#f-status", "failed")
    link = page.tab.url
    assert "sort=tokens" in link and "dir=desc" in link and "status=failed" in link

    again = Page(browser)  # the link, opened afresh, shows the same view
    try:
        again.tab.goto(link)
        wait_for(again.tab, "window.evalctlTiming && window.evalctlTiming.ready")
        assert again.rows() == [t["id"] for t in by_tokens if t["status"] == "failed"]
        assert again.tab.input_value("#f-status") == "failed"
        assert again.tab.get_attribute("#task-table th[data-sort=tokens]",
                                       "aria-sort") == "descending"
        assert again.problems == []
    finally:
        again.context.close()
    assert page.problems == []


def test_a_task_page_shows_the_prompt_checks_transcript_and_changes(page, run):
    page.open(run.html_path, "#status=passed")
    page.tab.click("#task-table tr[data-key=tools] td.why")  # anywhere on the row
    page.tab.wait_for_selector("#task h2")
    assert "task=tools" in page.fragment() and "status=passed" in page.fragment()
    task = page.tab.locator("#task")
    assert task.locator("h2").inner_text().startswith("tools")
    assert "Write notes.txt saying hello" in task.locator("pre.prompt").inner_text()
    checks = task.locator("li.check .check-head").all_inner_texts()
    assert checks == ["pass file_contains", "pass grounding feeds grounding_rate"]

    calls = task.locator("details.call")
    assert calls.locator(".tool").all_inner_texts() == ["write_file", "edit_file", "bash"]
    bash = calls.nth(2)
    assert "command: cat notes.txt; echo marker-from-bash" in bash.inner_text()
    assert "hello from the agent\nmarker-from-bash" in bash.locator("pre").nth(1).inner_text()
    turns = task.locator("article.turn")
    assert turns.count() == 3 and "I will write the notes first." in turns.nth(0).inner_text()
    assert "Wrote notes.txt and changed seed.txt." in turns.nth(2).inner_text()

    changes = task.locator("details.file")
    assert changes.locator("summary").all_inner_texts() == ["created notes.txt",
                                                           "modified seed.txt"]
    assert changes.nth(1).locator("span.del").all_inner_texts() == ["-two"]
    assert changes.nth(1).locator("span.add").all_inner_texts() == ["+TWO"]
    ledger = task.locator(".links a").first
    assert ledger.get_attribute("href").startswith("./workspaces-")
    assert ledger.inner_text() == run.task("tools")["ledger"]
    page.screenshot("html-report-task.png")

    page.tab.click("#back")  # back to the table, its filter kept
    page.tab.wait_for_selector("#tasks:not([hidden])")
    assert page.rows() == ids(run.report, "passed")
    assert page.problems == []


def test_errors_denials_and_failed_checks_are_marked(page, run):
    page.open(run.html_path, "#task=read-only")
    page.tab.wait_for_selector("#task h2")
    write = page.tab.locator("details.call").first
    assert "failed" in write.get_attribute("class")
    assert "denied" in write.locator("summary").inner_text()
    assert "Denied: permission denied" in write.inner_text()

    page.open(run.html_path, "#task=runs-out")
    page.tab.wait_for_selector("#task h2")
    assert "has 1 turn(s)" in page.tab.locator("#task .banner.error").inner_text()
    assert "exit status\nscript_error" in page.tab.locator("#task dl").inner_text()
    notes = page.tab.locator("#task p.note.error").all_inner_texts()
    assert any("provider error (script_error)" in n for n in notes), notes

    page.open(run.html_path, "#task=gamer")
    page.tab.wait_for_selector("#task h2")
    check = page.tab.locator("#task li.check")
    assert "gaming" in check.get_attribute("class")
    assert "⚠ suspected gaming" in check.locator(".check-head").inner_text()

    page.open(run.html_path, "#task=lazy")
    page.tab.wait_for_selector("#task h2")
    check = page.tab.locator("#task li.check")
    assert "s-failed" in check.get_attribute("class")
    assert "result.txt does not exist" in check.inner_text()
    assert page.problems == []


def test_markup_and_javascript_links_in_run_data_stay_text(page, run):
    page.tab.add_init_script("window.__pwned = undefined;")
    page.open(run.html_path, "#task=evil")
    page.tab.wait_for_selector("#task h2")
    task = page.tab.locator("#task")
    text = task.inner_text()
    assert "Say <script>window.__pwned = 'prompt'</script> and stop." in text
    assert "<script>window.__pwned = 'text'</script><img src=x onerror=" in text
    assert "Done. </script><script>window.__pwned = 'final'</script>" in text
    assert "<script>window.__pwned = 'detail'</script>" in text  # a check's detail
    assert "+</script><script>window.__pwned = 'diff'</script>" in text  # a diff line
    assert "<img src=x onerror=window.__pwned='name'>.txt" in text  # a file name
    assert 'exit code 3\n<script>window.__pwned = "bash"</script>' in text  # tool output
    assert "tool error" in task.locator("details.call.failed summary").inner_text()
    assert task.locator("span.tag").inner_text() == "<b>bold</b>"

    assert page.tab.evaluate("window.__pwned") is None
    assert page.tab.locator("script:not([type])").count() == 1  # the report's own
    assert page.tab.locator("img, iframe, object, embed, b").count() == 0
    assert page.tab.locator("a[href^='javascript:' i]").count() == 0
    page.tab.click("#back")
    page.tab.wait_for_selector("#tasks:not([hidden])")
    assert "<b>bold</b>" in page.tab.locator("#overview svg").first.text_content()
    assert page.tab.evaluate("window.__pwned") is None
    assert page.problems == []


def test_compare_html_shows_the_verdict_and_its_evidence(page, run, tmp_path):
    baseline = json.loads(json.dumps(run.report))
    for task in baseline["tasks"]:  # the baseline: lazy passed, tools failed
        if task["id"] in ("lazy", "tools"):
            task["status"] = "passed" if task["id"] == "lazy" else "failed"
            task["passed"] = task["id"] == "lazy"
    (tmp_path / "base.json").write_text(json.dumps(baseline))
    done = run_evalctl(tmp_path, "compare", "base.json", str(run.report_path), "--html",
                       "compare.html")
    assert done.returncode == 0, done.stdout + done.stderr  # one flip each way: noise
    assert done.stdout.startswith("## evalctl compare")  # stdout stays the Markdown

    page.open(tmp_path / "compare.html")
    figures = page.figures()
    assert figures["verdict"] == "No significant regression"  # a task newly fails
    assert figures["p_value"] == "1.0"
    lists = {name: page.tab.locator(f"[data-list={name}] a").all_inner_texts()
             for name in ("newly_failing", "newly_passing", "discordant")}
    assert lists == {"newly_failing": ["lazy"], "newly_passing": ["tools"],
                     "discordant": ["tools", "lazy"]}
    assert figures["common"] == "5"  # the errored task is not compared
    assert "exact McNemar" in page.tab.locator("#compare").inner_text()
    page.tab.click("[data-list=newly_failing] a")
    page.tab.wait_for_selector("#task h2")
    assert page.tab.locator("#task h2").inner_text().startswith("lazy")
    page.screenshot("html-report-compare-task.png")
    assert page.problems == []


BIDI_SUITE = """\
- id: bidi
  prompt: Write answer.txt.
  checks:
    - type: file_contains
      path: answer.txt
      text: done
  script:
    - text: "thinking \\u202eevil"
      tool_calls:
        - tool: write_file
          input:
            path: answer.txt
            content: "x\\u2066z\\u2069 done \\U000e0041\\n"
    - text: Done.
"""


def test_bidi_controls_in_a_transcript_or_diff_are_shown_escaped(page, tmp_path):
    (tmp_path / "bidi.yaml").write_text(BIDI_SUITE, encoding="utf-8")
    done = run_evalctl(tmp_path, "run", "bidi.yaml", "--reporter", "html", "--sandbox", "local")
    assert done.returncode == 0, done.stdout + done.stderr
    page.open(next((tmp_path / "eval_reports").glob("report-*.html")), "#task=bidi")
    page.tab.wait_for_selector("#task h2")
    text = page.tab.locator("#task").inner_text()
    assert "thinking \\u202eevil" in text  # the model's text
    assert "x\\u2066z\\u2069 done \\U000e0041" in text  # the diff, and the tool's input
    assert not any(raw in text for raw in "\u202e\u2066\u2069\U000e0041")
    assert page.problems == []


GIT_SOURCE_SUITE = """\
- id: git-task
  prompt: sub() in calc.py adds instead of subtracting. Fix it.
  source:
    git: proj
    rev: {rev}
  verify_files:
    tests/test_sub.py: |
      from calc import sub

      def test_sub():
          assert sub(3, 2) == 1
  checks:
    - type: tests_pass
      tests:
        - tests/test_sub.py
  script:
    - tool_calls:
        - tool: edit_file
          input:
            path: calc.py
            old_text: a + b
            new_text: a - b
    - text: Fixed sub.
"""


def test_a_git_source_tasks_page_lists_its_verify_file_and_no_git_internals(page, tmp_path):
    """The workspace of a `source: git:` task holds a .git the seed copy has not: the
    page listed every object, ref and index file under "Written after the agent
    finished", compressed objects as text diffs, and the verify file last (found by a
    newcomer on the realrepo suite). It lists the agent's change and the verify file."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "calc.py").write_text("def sub(a, b):\n    return a + b\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(project)]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run([*git, *step], check=True, capture_output=True)
    rev = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.strip()
    (tmp_path / "git.yaml").write_text(GIT_SOURCE_SUITE.format(rev=rev), encoding="utf-8")
    done = run_evalctl(tmp_path, "run", "git.yaml", "--reporter", "html", "--sandbox", "local")
    assert done.returncode == 0, done.stdout + done.stderr
    page.open(next((tmp_path / "eval_reports").glob("report-*.html")), "#task=git-task")
    page.tab.wait_for_selector("#task h2")
    changes = page.tab.locator("#task .changes")
    assert changes.locator("details.file summary").all_inner_texts() == [
        "modified calc.py", "created tests/test_sub.py"]
    assert changes.locator("h4.changes-after").count() == 1
    assert ".git/" not in changes.inner_text()
    assert page.problems == []
