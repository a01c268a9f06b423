"""The built-in real-repository suite, and `evalctl import swebench`: a real project at a
real commit, offline, refereed by its own tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalctl
import evalctl.testing
from evalctl._cli import cli
from evalctl._suite.yamlsource import parse
from evalctl._suite.yamlwrite import dump

from .conftest import SUITES, run_cli
from .test_sources import BUGGY, FIXED, TEST_ADD, TEST_ZERO, commit, git

REALREPO = SUITES / "realrepo.yaml"


def without_script(tmp_path: Path) -> Path:
    """The realrepo suite as a lazy agent meets it: no trajectory, so the scripted
    provider's stand-in claims success and changes nothing."""
    text = REALREPO.read_text()
    text = text[:text.index("    script:\n")]
    text = text.replace("git: realrepo/", f"git: {SUITES / 'realrepo'}/")
    path = tmp_path / "realrepo-lazy.yaml"
    path.write_text(text)
    return path


@pytest.fixture(params=["local", "bwrap"])
def sandbox_name(request):
    if request.param == "bwrap":
        request.getfixturevalue("require_bwrap")
    return request.param


def test_realrepo_passes_with_the_real_fix_and_fails_without_it(tmp_path, sandbox_name):
    fixed = run_cli(tmp_path, "realrepo", "--sandbox", sandbox_name, "--report", "fixed.json")
    assert fixed.exit_code == 0, fixed.output
    task = json.loads((tmp_path / "fixed.json").read_text())["tasks"][0]
    tests_pass = next(c for c in task["checks"] if c["type"] == "tests_pass")
    # Five node ids and a file: the tests they select, not "6 named test(s)".
    assert "all the tests the 6 name(s) in `tests:` select passed" in tests_pass["detail"]
    events = [json.loads(line) for line in Path(task["ledger"]).read_text().splitlines()]
    setup = [e for e in events if e["event"] == "setup_command"]
    assert "parse 1.20.0 on Python" in setup[0]["output"]
    assert "46 passed, 1 skipped" in setup[1]["output"]

    lazy = run_cli(tmp_path, str(without_script(tmp_path)), "--sandbox", sandbox_name,
                   "--report", "lazy.json")
    assert lazy.exit_code == 1, lazy.output
    task = json.loads((tmp_path / "lazy.json").read_text())["tasks"][0]
    assert task["status"] == "failed"
    detail = next(c for c in task["checks"] if c["type"] == "tests_pass")["detail"]
    assert detail.startswith("1 of the tests the 6 name(s) in `tests:` select did not pass: "
                             "tests/test_parse.py::"
                             "test_datetime_with_various_subsecond_precision (failed)"), detail


def test_realrepo_hides_its_test_and_its_bundle_from_the_agent(tmp_path, require_bwrap):
    """The regression test is not in the workspace during the agent's turn, and the
    built-in suite directory (the bundle, the suite with its verify_patch) is not
    mounted in the sandbox."""
    peek = (f"grep -c subsecond tests/test_parse.py; ls {SUITES}/realrepo; "
            f"cat {SUITES}/realrepo.yaml | head -3; git log --all --oneline | wc -l")
    text = without_script(tmp_path).read_text() + (
        "    script:\n      - tool_calls:\n          - tool: bash\n            input:\n"
        f"              command: {json.dumps(peek)}\n      - text: Looked.\n")
    suite = tmp_path / "peek.yaml"
    suite.write_text(text)
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox="bwrap")
    events = [json.loads(line) for line in Path(run.tasks[0].ledger).read_text().splitlines()]
    seen = next(e for e in events if e["event"] == "tool_result")["content"]
    lines = seen.splitlines()
    assert lines[1] == "0", seen  # grep -c: no subsecond test yet
    assert "No such file or directory" in seen and "parse-1.20.0.bundle" not in seen
    assert "verify_patch" not in seen and lines[-1] == "1"  # one commit: nothing after it


def test_realrepo_is_listed_validates_and_ships_its_licence():
    listed = {s["name"]: s for s in json.loads(
        CliRunner().invoke(cli, ["suites", "--json"]).output)}
    assert (listed["realrepo"]["tasks"], listed["realrepo"]["scripted"]) == (1, 1)
    result = CliRunner().invoke(cli, ["validate", "realrepo"])
    assert result.exit_code == 0, result.output
    notice = (SUITES / "realrepo" / "NOTICE").read_text()
    for fact in ("parse", "1.20.0", "Richard Jones", "MIT", "1.20.1"):
        assert fact in notice
    assert "Permission is hereby granted" in (SUITES / "realrepo" / "LICENSE.parse").read_text()
    bundle = SUITES / "realrepo" / "parse-1.20.0.bundle"
    assert bundle.stat().st_size < 64_000
    heads = subprocess.run(["git", "bundle", "list-heads", str(bundle)], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert "c86481b6f07f053d8903e232d23673d1a902eede refs/heads/main" in heads


# --- evalctl import swebench ---------------------------------------------------------

def diff(repo: Path, files: dict[str, str]) -> str:
    for relative, content in files.items():
        (repo / relative).write_text(content)
    patch = git(repo, "diff") + "\n"
    git(repo, "checkout", "-q", "--", ".")
    return patch


@pytest.fixture
def instances(tmp_path) -> Path:
    """A hand-written SWE-bench-format file for a repository made here."""
    repo = tmp_path / "mirror" / "acme" / "calc"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, {"calc.py": BUGGY, "tests/test_calc.py": TEST_ZERO}, "base")
    instance = {
        "instance_id": "acme__calc-1", "repo": "acme/calc", "base_commit": base,
        "problem_statement": "add() subtracts.\r\nIt should add.\r\n",
        "patch": diff(repo, {"calc.py": FIXED}),
        "test_patch": diff(repo, {"tests/test_calc.py": TEST_ADD}),
        # As the datasets store them: JSON text of a list, or a list.
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
        "PASS_TO_PASS": ["tests/test_calc.py::test_zero"],
        "hints_text": "", "created_at": "2024-01-01T00:00:00Z", "version": "1.0",
    }
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(instance) + "\n")
    return path


def import_cli(where: Path, *args: str):
    import os

    previous = Path.cwd()
    os.chdir(where)
    try:
        return CliRunner().invoke(cli, ["import", *args])
    finally:
        os.chdir(previous)


def test_an_imported_suite_validates_and_runs(tmp_path, instances):
    mirror = "repo_url=" + str(tmp_path / "mirror") + "/{repo}"
    made = import_cli(tmp_path, "swebench", str(instances), "-o", "swe.yaml", "--option",
                      mirror, "--option", "oracle=true")
    assert made.exit_code == 0, made.output
    assert "wrote swe.yaml: 1 task(s), validated" in made.output
    suite = tmp_path / "swe.yaml"
    data = parse(suite.read_text(), "swe.yaml").data
    task = data["tasks"][0]
    assert task["id"] == "acme__calc-1" and task["prompt"] == "add() subtracts.\nIt should add.\n"
    assert task["source"] == {"git": str(tmp_path / "mirror" / "acme" / "calc"),
                              "rev": json.loads(instances.read_text())["base_commit"]}
    assert task["checks"] == [{"type": "tests_pass", "tests": [
        "tests/test_calc.py::test_add", "tests/test_calc.py::test_zero"]}]
    assert CliRunner().invoke(cli, ["validate", str(suite)]).exit_code == 0

    # The reference patch as the trajectory: the suite checks itself, and passes.
    oracle = run_cli(tmp_path, "swe.yaml", "--report", "oracle.json")
    assert oracle.exit_code == 0, oracle.output
    # Without it, the agent that does nothing fails on the instance's own tests.
    plain = import_cli(tmp_path, "swebench", str(instances), "-o", "plain.yaml",
                       "--option", mirror)
    assert plain.exit_code == 0, plain.output
    lazy = run_cli(tmp_path, "plain.yaml", "--report", "lazy.json")
    assert lazy.exit_code == 1
    checks = json.loads((tmp_path / "lazy.json").read_text())["tasks"][0]["checks"]
    assert "did not pass: tests/test_calc.py::test_add (failed)" in checks[-1]["detail"]


def test_import_prints_the_suite_and_carries_setup_and_python_options(tmp_path, instances):
    mirror = "repo_url=" + str(tmp_path / "mirror") + "/{repo}"
    printed = import_cli(tmp_path, "swebench", str(instances), "--option", mirror,
                         "--option", "setup=python -m venv .venv", "--option",
                         "python=.venv/bin/python", "--option", "name=mine")
    assert printed.exit_code == 0, printed.output
    data = parse(printed.output, "stdout").data
    assert data["name"] == "mine"
    assert data["defaults"] == {"setup": {"commands": ["python -m venv .venv"],
                                          "network": True}}
    assert data["tasks"][0]["checks"][0]["python"] == ".venv/bin/python"
    assert not list(tmp_path.glob("*.yaml"))  # printed, not written


def test_malformed_instances_are_reported_at_their_lines_and_nothing_is_written(tmp_path,
                                                                              instances):
    good = json.loads(instances.read_text())
    lines = [json.dumps(good), "", "{not json",
             json.dumps({**good, "instance_id": "x y", "base_commit": "main"}),
             json.dumps({"instance_id": "unknown"}),
             json.dumps({**good, "instance_id": "other", "FAIL_TO_PASS": ["test_add (calc.Test)"]}),
             json.dumps(good)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    result = import_cli(tmp_path, "swebench", str(bad), "-o", "out.yaml")
    assert result.exit_code == 2
    output = result.output
    assert f"{bad}:3: error: not JSON" in output
    assert (f"{bad}:4: error: instance 'x y': base_commit 'main' is not a full commit id"
            in output)
    assert f"{bad}:4: error: instance 'x y': instance_id 'x y' cannot name a task" in output
    assert (f"{bad}:5: error: instance 'unknown': not a SWE-bench instance: it lacks repo, "
            "base_commit") in output
    assert (f"{bad}:6: error: instance 'other': FAIL_TO_PASS names 'test_add (calc.Test)', "
            "which is not a pytest node id") in output
    assert f"{bad}:7: error: instance 'acme__calc-1': instance_id 'acme__calc-1' is also on " \
           "line 1" in output
    assert not (tmp_path / "out.yaml").exists()


def test_a_repo_that_is_not_owner_name_is_refused_at_its_line(tmp_path, instances):
    """Found by an attacker round: `repo` went into the repo_url template unchecked, so
    with a mirror's template '../t1/repo' named a repository outside the mirror (here one
    that exists, so the suite validated). Only owner/name is a repository's name."""
    outside = tmp_path / "t1" / "repo"
    outside.mkdir(parents=True)
    git(outside, "init", "-q", "-b", "main")
    good = json.loads(instances.read_text())
    commit(outside, {"calc.py": BUGGY}, "elsewhere")
    bad_repos = ["../t1/repo", "acme/..", "./calc", "acme/calc/more", "acme", "acme/calc\n",
                 "acme/c alc", "/abs/path"]
    lines = [json.dumps({**good, "instance_id": f"i{n}", "repo": repo})
             for n, repo in enumerate(bad_repos, 1)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    result = import_cli(tmp_path, "swebench", str(bad), "-o", "out.yaml", "--option",
                        "repo_url=" + str(tmp_path / "mirror") + "/{repo}")
    assert result.exit_code == 2, result.output
    for number, repo in enumerate(bad_repos, 1):
        assert (f"{bad}:{number}: error: instance 'i{number}': repo {repo!r} is not a "
                "repository's owner/name") in result.output, result.output
    assert not (tmp_path / "out.yaml").exists()
    # An owner/name still imports.
    fine = tmp_path / "fine.jsonl"
    fine.write_text(json.dumps({**good, "repo": "acme/calc"}) + "\n")
    assert import_cli(tmp_path, "swebench", str(fine), "--option",
                      "repo_url=" + str(tmp_path / "mirror") + "/{repo}").exit_code == 0


def test_line_separators_inside_json_strings_do_not_split_an_instance(tmp_path, instances):
    """Found by an attacker round: the input was split with str.splitlines(), which also
    splits at U+2028, U+2029 and U+0085, legal raw inside a JSON string, so such an
    instance was refused as "not JSON" (and the lines after it numbered wrong). Lines
    end at "\\n", a "\\r" before it dropped."""
    good = json.loads(instances.read_text())
    first = {**good, "problem_statement": "add() subtracts\u2028badly.\u2029Fix\u0085it.\n"}
    second = {**good, "instance_id": "acme__calc-2", "problem_statement": "Again\u2028."}
    text = (json.dumps(first, ensure_ascii=False) + "\r\n\n"
            + json.dumps(second, ensure_ascii=False) + "\r\n")
    seps = tmp_path / "seps.jsonl"
    seps.write_text(text + "{not json\n", encoding="utf-8", newline="")
    mirror = "repo_url=" + str(tmp_path / "mirror") + "/{repo}"
    refused = import_cli(tmp_path, "swebench", str(seps), "--option", mirror)
    assert refused.exit_code == 2
    # The one bad line, at its own number: the instances before it were read whole.
    assert refused.output.count("error:") == 1, refused.output
    assert f"{seps}:4: error: not JSON" in refused.output
    seps.write_text(text, encoding="utf-8", newline="")
    made = import_cli(tmp_path, "swebench", str(seps), "--option", mirror)
    assert made.exit_code == 0, made.output
    tasks = parse(made.output, "stdout").data["tasks"]
    assert [t["prompt"] for t in tasks] == ["add() subtracts\u2028badly.\u2029Fix\u0085it.\n",
                                            "Again\u2028.\n"]


def test_a_suite_the_schema_refuses_is_reported_at_the_instance_line(tmp_path, instances):
    """The importer's output is validated like any suite: here the repository the URL
    template names does not exist, found at validation (a local path)."""
    result = import_cli(tmp_path, "swebench", str(instances), "-o", "x.yaml", "--option",
                        "repo_url=" + str(tmp_path / "elsewhere") + "/{repo}")
    assert result.exit_code == 2
    assert f"{instances}:1: error: the imported task 'acme__calc-1' is not a valid suite " \
           "task: source git" in result.output
    assert "does not exist" in result.output and not (tmp_path / "x.yaml").exists()


def test_import_refuses_to_overwrite_and_unknown_formats_and_options(tmp_path, instances):
    (tmp_path / "taken.yaml").write_text("mine\n")
    taken = import_cli(tmp_path, "swebench", str(instances), "-o", "taken.yaml")
    assert taken.exit_code == 2 and "taken.yaml exists; pass --force" in taken.output
    assert (tmp_path / "taken.yaml").read_text() == "mine\n"
    unknown = import_cli(tmp_path, "swebenchh", str(instances))
    assert unknown.exit_code == 2
    assert "unknown importer 'swebenchh' (did you mean 'swebench'?)" in unknown.output
    option = import_cli(tmp_path, "swebench", str(instances), "--option", "repo=x")
    assert option.exit_code == 2
    assert "importer 'swebench' has no option 'repo'" in option.output


def test_an_importer_is_a_plugin_like_any_other(tmp_path):
    """A third party's format, registered through the hook, through the same command."""
    from evalctl._suite.importing import import_suite

    def read(path: Path, options):
        tasks = [{"id": f"line-{n}", "prompt": line,
                  "checks": [{"type": "file_exists", "path": "answer.txt"}]}
                 for n, line in enumerate(path.read_text().splitlines(), 1)]
        return evalctl.ImportedSuite(tasks=tasks, lines=list(range(1, len(tasks) + 1)),
                                     problems=[evalctl.ImportProblem(2, "odd", "warning")])

    class Plugin:
        @evalctl.hookimpl
        def evalctl_register_importers(self, register):
            register(evalctl.ImporterSpec(name="lines", read=read, description="one a line"))

    registry = evalctl.testing.registry_with([Plugin()])
    source = tmp_path / "prompts.txt"
    source.write_text("Write the answer.\nWrite it again.\n")
    result = import_suite(registry, "lines", source, tmp_path / "s.yaml", {})
    assert result.tasks == 2 and [str(w) for w in result.warnings] == \
        [f"{source}:2: warning: odd"]
    assert parse(result.text, "s").data["tasks"][1]["prompt"] == "Write it again."


@pytest.mark.parametrize("text", [
    "plain", "12345", "true", "null", "- dash", "# hash", "a: b", "tab\there", " lead",
    "trail ", "", "multi\nline\n", "no final newline\nend", "three\n\n\n", " indented\nfirst\n",
    "quote \"and\" 'single'", "é ü ✓", "control \x01 and \x7f", "crlf\r\nline\r\n",
    "line sep \u2028 here", "  \n \nspaces only lines\n", "[flow]", "{flow}", "*alias", "&anchor",
    "!tag", "%directive", "@at", "`tick", "|pipe", ">fold", "0x1F", "1e3", ".inf", "~",
])
def test_written_suites_read_back_as_the_same_data(text):
    data = {"tasks": [{"id": "t", "prompt": text, "files": {text or "empty": text}}]}
    if not text:
        data["tasks"][0]["files"] = {"empty": text}
    written = dump(data)
    assert parse(written, "w").data == data, written
