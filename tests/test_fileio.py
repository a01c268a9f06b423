"""Atomic writes."""

from __future__ import annotations

import os
import stat

import pytest

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


def test_write_atomically_streams_pieces_and_keeps_the_old_file_if_they_fail(tmp_path):
    target = tmp_path / "report.html"
    evalctl.write_atomically(target, (f"<p>{n}</p>" for n in range(3)))
    assert target.read_text() == "<p>0</p><p>1</p><p>2</p>"

    def broken():
        yield "half a page"
        raise RuntimeError("the renderer failed")

    with pytest.raises(RuntimeError):
        evalctl.write_atomically(target, broken())
    assert target.read_text() == "<p>0</p><p>1</p><p>2</p>"
    assert list(tmp_path.iterdir()) == [target]
