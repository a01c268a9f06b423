"""The architecture holds by machine, not by review: import-linter's contracts in
pyproject.toml, run over the package laid out as it installs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import evalctl

from .conftest import ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PLUGIN_PACKAGES = [ROOT / "plugins" / "graders" / "evalctl-judge" / "src" / "evalctl_judge",
                   ROOT / "plugins" / "executors" / "evalctl-ray" / "src" / "evalctl_ray",
                   ROOT / "tests" / "distributions" / "wordcount" / "src" / "evalctl_wordcount",
                   ROOT / "tests" / "distributions" / "extras" / "src" / "evalctl_extras"]


def assemble(target: Path) -> Path:
    """The packages as a wheel lays them out: core/ is evalctl, plugins/ evalctl.plugins."""
    skip = shutil.ignore_patterns("__pycache__", "evalctl-*", "tests")
    shutil.copytree(ROOT / "core", target / "evalctl", ignore=skip)
    shutil.copytree(ROOT / "plugins", target / "evalctl" / "plugins", ignore=skip)
    for package in PLUGIN_PACKAGES:
        shutil.copytree(package, target / package.name, ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    return target


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, capture_output=True,
                          text=True, timeout=120,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})


def test_the_contracts_hold(tmp_path):
    result = lint(assemble(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout, result.stdout


@pytest.mark.parametrize("module, line, broken", [
    ("evalctl/plugins/graders/files.py", "from evalctl._files import resolve_inside",
     "Built-in plugins use only the public API"),
    ("evalctl_judge/__init__.py", "from evalctl._report import results",
     "Built-in plugins use only the public API"),
    ("evalctl_extras/__init__.py", "import evalctl._run.runner",
     "Built-in plugins use only the public API"),
    ("evalctl_ray/executor.py", "from evalctl._run import portable",
     "Built-in plugins use only the public API"),
    ("evalctl/_suite/rules.py", "from evalctl._run import runner",
     "The core's layers import downward only"),
    ("evalctl/_text.py", "from evalctl import _plugin",
     "The core's layers import downward only"),
])
def test_a_forbidden_import_breaks_the_build(tmp_path, module, line, broken):
    tree = assemble(tmp_path)
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    result = lint(tree)
    assert result.returncode != 0
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout, result.stdout


def test_every_private_module_is_under_a_contract():
    """A new private module must be named in the contracts, or plugins could use it."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    forbidden = set(config["contracts"][0]["forbidden_modules"])
    layered = {name.strip() for layer in config["contracts"][1]["layers"]
               for name in layer.split("|")}
    private = {f"evalctl.{p.stem if p.is_file() else p.name}" for p in (ROOT / "core").iterdir()
               if p.name.startswith("_") and not p.name.startswith("__")
               and (p.suffix == ".py" or p.is_dir())}
    assert private == forbidden, private ^ forbidden
    assert private - {"evalctl._cli"} <= layered | {"evalctl._cli"}
    assert private <= layered, private - layered


def test_the_public_api_is_exactly_what_evalctl_exports():
    assert sorted(evalctl.__all__) == sorted(set(evalctl.__all__))
    for name in evalctl.__all__:
        value = getattr(evalctl, name)
        doc = getattr(value, "__doc__", None)
        members = getattr(value, "__args__", None)  # a Union alias: its members' docs
        if members and type(value).__name__ == "UnionType":
            assert all(m.__doc__ for m in members), name
            continue
        plain_value = type(value).__module__ == "builtins" and not callable(value)
        assert doc and not plain_value, f"evalctl.{name} has no docstring of its own"


def test_docs_plugins_documents_exactly_the_public_api():
    import re

    text = (ROOT / "docs" / "plugins.md").read_text()
    documented = set(re.findall(r"`evalctl\.([A-Za-z_][A-Za-z0-9_]*)", text))
    documented -= {"testing", "plugins", "__all__", "_"}
    assert documented == set(evalctl.__all__), documented ^ set(evalctl.__all__)
