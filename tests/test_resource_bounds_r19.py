"""Round 19's resource findings: what evalctl itself holds stays bounded whatever the
agent does. The list of changed files (built in evalctl's process and written whole into
the ledger) and the model proxy (request bodies held, and parsed on the event loop every
attempt shares). Each test asserts on the bound itself (entries kept, a ledger line's
size, the proxy's answer, the bytes it let in), never on the machine's memory."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import tracemalloc

import anthropic
import pytest

import evalctl
import evalctl._workspace as workspaces
from evalctl._agent import proxy
from evalctl._agent.runtime import run_agent
from evalctl._files import snapshot
from evalctl._run.integrity import protected_changes
from evalctl._suite.model import Task
from evalctl._workspace import create_workspace, new_run_directory

from .conftest import FakeModel, call, final_turn, sandbox_for, tool_turn
from .test_model_proxy import DONE_TURN, FIRST, Harness, create, through_the_forwarder

# --------------------------------------------------------------------------- changed files


def _make_files(root: os.PathLike[str], count: int, *, depth: int = 0, width: int = 0,
                prefix: str = "f") -> int:
    """`count` empty files in one directory `depth` levels down (names of `width`
    characters each), made as the attacker made them: relative to a descriptor of the
    directory, so their paths may be longer than a path the kernel takes whole. Returns
    the length of one file's path, relative to `root`."""
    parts = [f"D{i}" + "x" * max(0, width - 2) for i in range(depth)]
    directory = os.path.join(root, *parts) if parts else os.fspath(root)
    os.makedirs(directory, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        for n in range(count):
            os.close(os.open(f"{prefix}{n:07d}" + "y" * 90, os.O_CREAT | os.O_WRONLY, 0o644,
                             dir_fd=fd))
    finally:
        os.close(fd)
    return len("/".join([*parts, f"{prefix}0000000" + "y" * 90]))


def _script_creating(count: int, *, depth: int, width: int) -> str:
    return ("python3 - <<'PY'\nimport os\n"
            f"d = '/'.join(('D%d' % i) + 'x' * {width - 2} for i in range({depth}))\n"
            "os.makedirs(d or '.', exist_ok=True)\n"
            "fd = os.open(d or '.', os.O_RDONLY)\n"
            f"for i in range({count}):\n"
            "    os.close(os.open('f%07d' % i + 'y' * 90, os.O_CREAT | os.O_WRONLY, 0o644,"
            " dir_fd=fd))\nPY\n")


def _run_agent(tmp_path, task: Task, script: str, files: dict[str, str]):
    workspace = create_workspace(new_run_directory(tmp_path), task.id, files)
    model = FakeModel([tool_turn(call("bash", command=script, timeout=120)), final_turn()])
    result = asyncio.run(run_agent(task, model, workspace, sandbox_for(workspace)))
    return result, workspace


def test_many_long_paths_leave_a_bounded_list_and_ledger_line(tmp_path):
    """Found by an attacker round: 300,000 empty files under paths of 3,900 bytes took
    evalctl to 5.8 GB and wrote a ledger line of 1.17 GB. Here 4,000 such files (15 MB
    of paths): the list keeps what its bounds allow, counts the rest, and says so in
    the ledger."""
    count = 4_000
    task = Task(id="t", prompt="p", checks=({"type": "command", "command": "true"},))
    result, workspace = _run_agent(tmp_path, task, _script_creating(count, depth=15, width=252),
                                   {"a.txt": "hi"})
    changes = result.files_changed
    lines = workspace.ledger_path.read_bytes().splitlines()
    end = [line for line in lines if b'"task_end"' in line][-1]
    assert len(end) < 5_000_000, len(end)  # a few MB at most
    assert 0 < len(changes) < count and set(changes.values()) == {"created"}
    assert len(end) <= workspaces.MAX_LISTED_BYTES + 10_000, len(end)
    assert len(changes) + changes.omitted == count, (len(changes), changes.omitted)
    event = json.loads(end)
    assert event["files_changed"] == dict(changes)
    assert event["files_changed_omitted"] == changes.omitted
    assert f"{changes.omitted} more changed path(s) are not listed" in \
        event["files_changed_note"]


def test_the_list_of_changed_files_stops_at_its_count(tmp_path):
    workspace = create_workspace(new_run_directory(tmp_path), "t", {"a.txt": "hi"})
    _make_files(workspace.root, 10_500)
    changes = workspace.changed_files()
    assert len(changes) == 10_000
    assert len(changes) == workspaces.MAX_LISTED_CHANGES
    assert changes.omitted == 500
    assert not changes.complete and "500 more changed path(s)" in changes.note()


def test_what_is_held_to_list_the_changes_does_not_grow_with_the_paths(tmp_path):
    """The walk held a DirEntry (which keeps its full path) for every name of the
    directory being listed, and the comparison a snapshot of every path: 3,000 paths of
    3,900 bytes were twice 12 MB. Now only names and the listed changes are held."""
    workspace = create_workspace(new_run_directory(tmp_path), "t", {"a.txt": "hi"})
    length = _make_files(workspace.root, 3_000, depth=14, width=252)
    assert length * 3_000 > 10_000_000
    tracemalloc.start()
    try:
        changes = workspace.changed_files()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 6_000_000, peak
    assert changes.omitted > 0 and peak < 2 * workspaces.MAX_LISTED_BYTES + 2_000_000


def test_a_protected_file_is_listed_wherever_the_list_is_cut(tmp_path, monkeypatch):
    """Junk made to push a created conftest.py (protected) out of a cut list: the
    protected globs' changes are listed first, so the protected-files check still sees
    it; a seeded file changed is listed before created ones."""
    monkeypatch.setattr(workspaces, "MAX_LISTED_CHANGES", 50)
    task = Task(id="t", prompt="p", checks=({"type": "command", "command": "true"},),
                protected=("tests/*",))
    script = (_script_creating(400, depth=0, width=2)
              + "mkdir -p tests zz && echo x > tests/conftest.py && echo y > zz/seeded.txt\n")
    result, workspace = _run_agent(tmp_path, task, script,
                                   {"tests/test_a.py": "t", "zz/seeded.txt": "s"})
    changes = result.files_changed
    assert changes.omitted == 400 + 2 - 50
    assert changes["tests/conftest.py"] == "created"
    assert changes["zz/seeded.txt"] == "modified"
    outcome = protected_changes(task, changes, workspace)
    assert outcome is not None and not outcome.passed
    assert "tests/conftest.py (created)" in outcome.detail


def test_the_changes_of_an_ordinary_workspace_are_what_they_were(tmp_path):
    """What the comparison with a snapshot of the whole workspace gave, for a workspace
    within the bounds: created, changed, deleted, links and a FIFO."""
    files = {"a.txt": "a", "b/c.txt": "c", "gone.txt": "g", "same.txt": "s",
             ".git/config": "x", "link": "l"}
    workspace = create_workspace(new_run_directory(tmp_path), "t", files)
    root = workspace.root
    (root / "a.txt").write_text("changed")
    (root / "gone.txt").unlink()
    (root / "link").unlink()
    (root / "link").symlink_to("a.txt")
    (root / "new" / "deep").mkdir(parents=True)
    (root / "new" / "deep" / "n.py").write_text("n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.pyc").write_bytes(b"c")
    os.mkfifo(root / "fifo")
    now, before = snapshot(root), workspace.seed
    expected = {p: "created" for p in now if p not in before}
    expected |= {p: "modified" for p in now if p in before and now[p] != before[p]}
    expected |= {p: "deleted" for p in before if p not in now}
    changes = workspace.changed_files()
    assert changes == dict(sorted(expected.items()))
    assert list(changes) == sorted(changes) and getattr(changes, "omitted", 0) == 0
    assert changes == {"a.txt": "modified", "fifo": "created", "gone.txt": "deleted",
                       "link": "modified", "new/deep/n.py": "created"}


# --------------------------------------------------------------------------- the proxy


def _raw_request(token: str, body: bytes, path: str = "/v1/messages") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\n"
            f"content-type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


def test_a_body_over_the_limit_is_answered_413_and_the_attempt_goes_on(tmp_path):
    """A body past MAX_BODY_BYTES (8 MB: a context of a million tokens is about 4) is
    refused before it is read, as request_too_large, which the SDK shows the agent; the
    next request is served."""
    harness = Harness(tmp_path, [DONE_TURN])
    big = "x" * (9 * 1024 * 1024)

    async def body(h):
        client = h.client()
        with pytest.raises(anthropic.APIStatusError) as refused:
            await create(client, [{"role": "user", "content": big}])
        return refused.value, await create(client, FIRST)

    refused, reply = harness.run(body)
    assert refused.status_code == 413
    assert "request_too_large" in str(refused.body) or "too large" in str(refused)
    assert reply.content[0].text == "Wrote hello.txt."
    assert harness.events("model_turn")[0]["turn"] == 1  # the refused one took no turn
    assert len(big) > proxy.MAX_BODY_BYTES


def test_the_413_reaches_an_agent_through_the_forwarder(tmp_path):
    """Through the forwarder (TCP in the sandbox), the client is still sending when the
    proxy answers: the body is read and dropped, so the agent hears the 413 rather than
    a reset connection."""
    harness = Harness(tmp_path, [DONE_TURN])
    big = "x" * (9 * 1024 * 1024)

    async def body(h):
        async with through_the_forwarder(h, tmp_path) as client:
            with pytest.raises(anthropic.APIStatusError) as refused:
                await create(client, [{"role": "user", "content": big}])
            return refused.value

    assert harness.run(body).status_code == 413
    assert len(big) > proxy.MAX_BODY_BYTES


def test_a_body_of_too_many_json_values_is_refused_without_being_parsed(tmp_path,
                                                                         monkeypatch):
    """Found by an attacker round: a body of `[],[],...` parses to about 25 times its
    size, and parsing it held the event loop for seconds. Its values are counted
    before it is parsed; past MAX_JSON_VALUES it is a 413 and json.loads never sees
    it. Text full of commas and brackets (code, a JSON file a tool read) is not
    values."""
    parsed = []
    real_loads = json.loads
    monkeypatch.setattr(proxy.json, "loads", lambda text, **kw: parsed.append(len(text))
                        or real_loads(text, **kw))
    harness = Harness(tmp_path, [DONE_TURN])
    junk = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],' \
        b'"metadata":{"junk":[' + b"[]," * 300_000 + b"[]]}}"
    code = "def f(a, b):\n    return {a: [b, (a, b)], 'k': [1, 2, 3]}\n" * 80_000

    async def body(h):
        reader, writer = await asyncio.open_unix_connection(str(h.socket))
        writer.write(_raw_request(h.proxy.token, junk, "/v1/messages/count_tokens"))
        answer = await reader.read()
        writer.close()
        counted = await h.client().messages.count_tokens(
            model="m", messages=[{"role": "user", "content": code}])
        return answer, counted

    answer, counted = harness.run(body)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"JSON values" in answer
    # Only the second request was parsed (json.loads is the SDK's too: its answers are
    # small).
    assert [n for n in parsed if n > 10_000] == [pytest.approx(len(code), rel=0.2)], parsed
    assert counted.input_tokens > len(code) // proxy.CHARS_PER_TOKEN
    assert len(junk) < proxy.MAX_BODY_BYTES
    assert junk.count(b"[") + junk.count(b",") > proxy.MAX_JSON_VALUES
    assert code.count(",") + code.count("[") + code.count("{") > proxy.MAX_JSON_VALUES


def test_the_bytes_one_attempt_holds_are_bounded_whatever_its_connections(tmp_path):
    """Found by an attacker round: 32 connections each sending 63 MB held 2 GB in
    evalctl for one attempt. A request now takes its share of MAX_ATTEMPT_BYTES before
    its body is read, and waits while the others hold the rest: what the clients
    manage to send (into evalctl, or the socket's buffers) stays near one body."""
    harness = Harness(tmp_path, [DONE_TURN])
    length = 8 * 1024 * 1024
    clients = 12
    chunk = b"x" * 65536

    async def body(h):
        loop = asyncio.get_running_loop()
        head = (f"POST /v1/messages HTTP/1.1\r\nx-api-key: {h.proxy.token}\r\n"
                f"Content-Length: {length}\r\n\r\n").encode()
        sockets, sent = [], [0] * clients
        for _ in range(clients):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            await loop.sock_connect(client, str(h.socket))
            await loop.sock_sendall(client, head)
            sockets.append(client)
        stalled_since = loop.time()
        while loop.time() - stalled_since < 1.0:
            progress = False
            for index, client in enumerate(sockets):
                while sent[index] < length - 1:
                    try:
                        done = client.send(chunk[:length - 1 - sent[index]])
                    except BlockingIOError:
                        break
                    sent[index] += done
                    progress = True
            if progress:
                stalled_since = loop.time()
            await asyncio.sleep(0.05)
        for client in sockets:
            client.close()
        return sent

    sent = harness.run(body)
    # One body at a time is let in whole (the largest fits the attempt's budget alone);
    # the others only fill the socket's buffers.
    assert sum(sent) < length + clients * 2 * 1024 * 1024, sent
    assert sum(1 for n in sent if n >= length - 1) <= 1, sent
    assert length <= proxy.MAX_BODY_BYTES
    assert proxy._held_for(length, proxy.MAX_JSON_VALUES) <= proxy.MAX_ATTEMPT_BYTES


def test_closing_the_proxy_mid_request_prints_no_traceback(tmp_path):
    """Found by an attacker round: connections cancelled when the attempt ended left
    'Exception in callback StreamReaderProtocol...' and a CancelledError traceback on
    the user's terminal (asyncio's handler). A connection the close ends now ends
    quietly."""
    harness = Harness(tmp_path, [DONE_TURN])
    reported = []

    async def body(h):
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        waiting = []
        for partial in (b"", b"POST /v1/messages HTTP/1.1\r\n",
                        f"POST /v1/messages HTTP/1.1\r\nx-api-key: {h.proxy.token}\r\n"
                        "Content-Length: 100\r\n\r\n{".encode()):
            reader, writer = await asyncio.open_unix_connection(str(h.socket))
            writer.write(partial)
            await writer.drain()
            waiting.append(writer)
        await asyncio.sleep(0.2)
        await h.proxy.close()
        await asyncio.sleep(0.1)
        for writer in waiting:
            writer.close()

    harness.run(body)
    assert reported == [], [context.get("message") for context in reported]


# --------------------------------------------------------------------- readers of a cut list


def _agent_result(workspace, files_changed, omitted):
    return evalctl.AgentResult(
        final_text="done", exit_status=evalctl.ExitStatus.COMPLETED, turns=1, tool_calls=0,
        usage=evalctl.TokenUsage(), cost=0.0, duration=0.0, files_changed=files_changed,
        ledger_path=None, seed_path=workspace.seed_path, files_changed_omitted=omitted)


def test_no_placeholders_does_not_pass_files_it_was_not_told_of(tmp_path):
    """Past its bound the record of changed files is cut (an agent that leaves 10,001
    files can push its TODO out of the list): no_placeholders then fails, since the
    files it was not told of were not read."""
    from evalctl.plugins.graders.files import grade_no_placeholders

    workspace = create_workspace(new_run_directory(tmp_path), "t", {"a.py": "x = 1\n"})
    (workspace.root / "clean.py").write_text("y = 2\n")
    listed = {"clean.py": "created"}
    whole = grade_no_placeholders({}, workspace.root, _agent_result(workspace, listed, 0))
    assert whole.passed, whole.detail
    cut = grade_no_placeholders({}, workspace.root, _agent_result(workspace, listed, 3))
    assert not cut.passed and "3 not listed" in cut.detail, cut.detail


def test_a_test_interpreter_not_listed_in_a_cut_record_must_be_the_seeds(tmp_path):
    """tests_pass refuses a workspace interpreter the agent changed; with the record cut,
    one it does not list is taken only when it is as the seed has it (a venv's link to
    the same target), not when the agent made it."""
    from evalctl.plugins.graders.tests_pass import _interpreter

    workspace = create_workspace(new_run_directory(tmp_path), "t", {"a.py": "x = 1\n"})
    for top in (workspace.root, workspace.seed_path):
        (top / ".venv" / "bin").mkdir(parents=True)
        (top / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (workspace.root / "tool").mkdir()
    (workspace.root / "tool" / "python").write_text("#!/bin/sh\necho passed\n")
    cut = _agent_result(workspace, {}, 20_000)
    seeded, refusal = _interpreter(".venv/bin/python", workspace.root, cut)
    assert refusal is None and seeded.endswith(".venv/bin/python")
    _, refusal = _interpreter("tool/python", workspace.root, cut)
    assert refusal is not None and refusal.suspected_gaming, refusal
    _, refusal = _interpreter("tool/python", workspace.root, _agent_result(workspace, {}, 0))
    assert refusal is None  # a whole record that does not list it: not the agent's


def test_the_protected_files_snapshot_holds_the_protected_paths_alone(tmp_path):
    """Grading compares the protected files before and after the checks; it took a
    snapshot of the whole workspace (every path, every file hashed), which the agent
    sizes. Only the protected paths are read and kept now."""
    from evalctl._run.integrity import protected_snapshot

    workspace = create_workspace(new_run_directory(tmp_path), "t", {"tests/test_a.py": "x\n"})
    _make_files(workspace.root, 2_000, depth=6, width=200)
    task = Task(id="t", prompt="p", checks=[{"type": "file_exists", "path": "a"}],
                protected=("tests/*",))
    tracemalloc.start()
    try:
        keys = protected_snapshot(task, workspace.root)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert list(keys) == ["tests/test_a.py"]
    assert peak < 1_000_000, peak


def test_the_html_reports_walk_holds_names_and_stops_at_its_bound(tmp_path, monkeypatch):
    """The HTML report's list of changes sorted a DirEntry (its whole path in each) for
    every name of a directory; it now reads no more names than the walk can take, and
    says the walk stopped."""
    from evalctl.plugins.reporters.html import changes

    monkeypatch.setattr(changes, "MAX_ENTRIES", 1_000)
    _make_files(tmp_path, 3_000, depth=12, width=250)
    tracemalloc.start()
    try:
        found, stopped = changes._walk(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stopped and len(found) == 1_000
    kept = sum(len(path) for path in found)  # what it returns: 1,000 paths of 3,000 bytes
    assert peak < kept + 1_500_000, (peak, kept)  # not the 3,000 names' DirEntries


def test_a_request_head_past_its_bound_is_refused_before_more_is_read(tmp_path):
    """Found by an attacker round: headers were held before the attempt's budget for
    bodies was asked, 197 of 64 KB on each of 32 connections (400 MB). A head past
    MAX_HEAD_BYTES is answered 431; the next request is served."""
    harness = Harness(tmp_path, [DONE_TURN])
    padding = b"".join(b"x-pad-%d: %s\r\n" % (n, b"y" * 60_000) for n in range(3))

    async def body(h):
        reader, writer = await asyncio.open_unix_connection(str(h.socket))
        writer.write(b"POST /v1/messages HTTP/1.1\r\n" + padding + b"\r\n")
        answer = await reader.read()
        writer.close()
        return answer, await create(h.client(), FIRST)

    answer, reply = harness.run(body)
    assert len(padding) > proxy.MAX_HEAD_BYTES
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert reply.content[0].text == "Wrote hello.txt."
