"""`json`: the whole run, keys in a fixed order, so two runs diff cleanly."""

from __future__ import annotations

import json
from pathlib import Path

import evalctl


def write_json(run: evalctl.RunResult, path: Path) -> Path:
    return evalctl.write_atomically(path, json.dumps(run.to_dict(), indent=2) + "\n")


@evalctl.hookimpl
def evalctl_register_reporters(register):
    register(evalctl.ReporterSpec(
        name="json", write=write_json, extension="json",
        description="The full run as JSON with a stable key order, for diffing and compare.",
    ))
