"""`verify_patch:` — a benchmark's test patch, turned into the files it produces.

The patch is applied to the seed (the source at its commit plus `files:`), never to
what the agent left: the files it touches are copied from the seed into a scratch
directory, `git apply` runs there with no configuration of anyone's, and the result
(each path's new content, or its deletion) is written into the workspace after the
agent, exactly as `verify_files` are. So the agent cannot make the patch fail to apply
by editing the tests, nor plant a filter or hook that runs while it is applied; and a
path that leaves the workspace is refused when the suite is loaded, and again by git.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from evalctl._files import ConfinementError, open_confined, resolve_inside
from evalctl._sources.git import SourceError, _failed, _neutral_environment, git

_BINARY_PATCH = re.compile(r"^GIT binary patch$|^Binary files .* differ$", re.MULTILINE)
_HEADER = re.compile(r"^(?:--- |\+\+\+ )(.*?)(?:\t.*)?$")
_RENAME = re.compile(r"^(?:rename|copy) (?:from|to) (.*)$")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "a": "\a", "b": "\b", "f": "\f",
            "v": "\v", "r": "\r"}


def _unquote(path: str) -> str:
    """git's C-style quoting of unusual paths ("a/t\\303\\251st.py")."""
    if not (len(path) >= 2 and path.startswith('"') and path.endswith('"')):
        return path
    body, out, index = path[1:-1], bytearray(), 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body):
            following = body[index + 1]
            digits = body[index + 1:index + 4]
            if len(digits) == 3 and all(d in "01234567" for d in digits):
                out.append(int(digits, 8))
                index += 4
                continue
            out += _ESCAPES.get(following, following).encode()
            index += 2
            continue
        out += char.encode()
        index += 1
    return out.decode("utf-8", "replace")


def patch_paths(patch: str) -> list[str]:
    """Every path a unified (git) diff touches, old names and new, without the a/ and b/
    prefixes, in order of appearance."""
    found: dict[str, None] = {}
    for line in patch.splitlines():
        match = _HEADER.match(line) or _RENAME.match(line)
        if match is None:
            continue
        path = _unquote(match.group(1).strip())
        if path == "/dev/null":
            continue
        if line.startswith(("--- ", "+++ ")) and path[:2] in ("a/", "b/"):
            path = path[2:]
        found[path] = None
    return list(found)


def patch_problems(patch: str) -> list[str]:
    """What makes a patch unusable, known without applying it."""
    paths = patch_paths(patch)
    if not paths:
        return ["it touches no file: expected a unified diff (git diff output) with "
                "'--- a/PATH' and '+++ b/PATH' lines"]
    problems = [f"{path!r} leaves the workspace (an absolute path or '..')" for path in paths
                if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts
                or "\\" in path]
    # A repository's own directory is not a task's file: a patch that wrote .git/config
    # or a hook would plant a command git runs on the host.
    problems += [f"{path!r} is inside a repository's .git directory" for path in paths
                 if ".git" in PurePosixPath(path).parts]
    # Verify files are text; a binary patch is refused (found by an attacker round: a
    # 230-byte binary delta made git apply write a gigabyte before any check could read
    # the result).
    if _BINARY_PATCH.search(patch):
        problems.append("it holds a binary patch ('GIT binary patch'); verify files are "
                        "text")
    return problems


def _inside(seed: Path, relative: str) -> Path:
    """`relative` in `seed`, its directories resolved there: a link among them that
    leads out (a repository may hold `procself -> /proc/self`) is refused, never followed
    to copy a file of the host's (evalctl's own environment, say) into the workspace.
    The last component is not followed: a link there is left out, as before."""
    path = PurePosixPath(relative)
    try:
        parent = resolve_inside(seed, str(path.parent)) if path.parent.parts else seed
    except ConfinementError as exc:
        raise SourceError(f"verify_patch: {relative!r} is reached through a link that "
                          f"leads out of the source ({exc})") from None
    return Path(parent) / path.name


def patched_files(seed: Path, patch: str) -> dict[str, str | None]:
    """Path -> the content the patch gives it (None: the patch deletes it), for every
    path the patch touches, applied to the files in `seed`. SourceError when it does
    not apply or produces something that is not UTF-8 text."""
    problems = patch_problems(patch)
    if problems:
        raise SourceError("verify_patch: " + "; ".join(problems))
    paths = patch_paths(patch)
    with tempfile.TemporaryDirectory(prefix="evalctl-patch-") as scratch_name:
        scratch = Path(scratch_name) / "tree"
        scratch.mkdir()
        for relative in paths:
            original = _inside(seed, relative)
            if original.is_file() and not original.is_symlink():
                destination = scratch / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(original, destination)
        change = Path(scratch_name) / "change.patch"  # beside the tree, not in it
        change.write_text(patch if patch.endswith("\n") else patch + "\n", encoding="utf-8")
        env = {**_neutral_environment(Path(scratch_name)),
               "GIT_CEILING_DIRECTORIES": scratch_name}
        # The paths as git reads the patch: one it would touch that evalctl's reading
        # missed (a section with no ---/+++ lines, found by an attacker round) would be
        # applied and never written after the agent, leaving the agent's copy graded.
        listed = git(["apply", "--numstat", "-z", str(change)], cwd=scratch, env=env)
        if listed.returncode == 0:
            unread = sorted(set(_numstat_paths(listed.stdout)) - set(paths))
            if unread:
                raise SourceError("verify_patch: git reads it as touching "
                                  f"{', '.join(map(repr, unread[:5]))} too, which its "
                                  "---/+++ lines do not name; give each file its lines")
        done = git(["apply", "--whitespace=nowarn", str(change)], cwd=scratch, env=env)
        if done.returncode != 0:
            raise SourceError(f"verify_patch does not apply to the source: {_failed(done)}")
        return {relative: _produced(scratch, relative) for relative in paths}


# The most a verify file may hold: the patch's result is read whole.
MAX_PRODUCED_BYTES = 32 * 1024 * 1024


def _numstat_paths(output: str) -> list[str]:
    """The paths of `git apply --numstat -z`: `added\tdeleted\tpath\0`, or for a
    rename or copy `added\tdeleted\t\0old\0new\0`."""
    fields, paths = output.split("\0"), []
    index = 0
    while index < len(fields):
        counts = fields[index].split("\t")
        if len(counts) == 3 and counts[2]:
            paths.append(counts[2])
            index += 1
        elif len(counts) == 3:  # a rename: the two names follow
            paths += [name for name in fields[index + 1:index + 3] if name]
            index += 3
        else:
            index += 1
    return paths


def _produced(scratch: Path, relative: str) -> str | None:
    """What the patch left at `relative` (None: nothing, it deleted it), read as a
    regular file of the scratch tree and never through a link: a patch may make one
    (`new file mode 120000`), and one to /proc/self/environ put evalctl's environment
    (its API key) into the workspace and the report, one to /dev/zero read without end
    (found by an attacker round)."""
    not_text = SourceError(f"verify_patch: {relative} is not a UTF-8 text file after the "
                           "patch (a link, a directory, or binary); verify files are text")
    if not os.path.lexists(scratch / relative):
        return None
    try:
        fd = open_confined(scratch, relative)
    except (ConfinementError, OSError):  # a link out, a directory, a special file
        raise not_text from None
    try:
        if os.path.islink(scratch / relative):
            raise not_text
        data = os.read(fd, MAX_PRODUCED_BYTES + 1)
        while len(data) <= MAX_PRODUCED_BYTES and (more := os.read(fd, 1 << 20)):
            data += more
    finally:
        os.close(fd)
    if len(data) > MAX_PRODUCED_BYTES:
        raise SourceError(f"verify_patch: {relative} holds more than "
                          f"{MAX_PRODUCED_BYTES // 2**20} MB after the patch")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise not_text from None
