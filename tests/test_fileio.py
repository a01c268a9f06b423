"""Atomic writes."""

from __future__ import annotations

import os
import stat

import evalctl


def test_write_atomically_replaces_whole_files_with_ordinary_permissions(tmp_path):
    target = tmp_path / "deep" / "report.json"
    evalctl.write_atomically(target, "first")
    evalctl.write_atomically(target, "second")
    assert target.read_text() == "second"
    assert list(target.parent.iterdir()) == [target]  # no temporary file left
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
