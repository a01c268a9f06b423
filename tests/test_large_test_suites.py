"""A task whose tests are many: found while measuring the witness, an honest suite of
3,000 tests was called gaming ("the witness never reported": its report, one line of
about 70 bytes a test, lost its start to the 30,000 bytes of output kept), and the
witness's checks grew with the square of a module's tests."""

from __future__ import annotations

import json

import evalctl.testing
from evalctl._process import _HeadTail

MANY = 1500


def test_an_honest_suite_of_thousands_of_tests_passes(tmp_path):
    tests = "from calc import add\n\n" + "".join(
        f"def test_{i}():\n    assert add({i}, 1) == {i + 1}\n\n" for i in range(MANY))
    param = ("import pytest\nfrom calc import add\n\n"
             f"@pytest.mark.parametrize('a,b', [(i, i + 1) for i in range({MANY})])\n"
             "def test_p(a, b):\n    assert add(a, 1) == b\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "- id: many\n  prompt: Nothing to do.\n  files:\n"
        f"    calc.py: {json.dumps('def add(a, b):' + chr(10) + '    return a + b' + chr(10))}\n"
        f"    tests/test_many.py: {json.dumps(tests)}\n"
        f"    tests/test_param.py: {json.dumps(param)}\n"
        "  checks:\n    - type: tests_pass\n      tests:\n        - tests/test_many.py\n"
        "        - tests/test_param.py\n  script:\n    - text: Nothing to do.\n")
    run = evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out")
    (task,) = run.tasks
    assert task.status == "passed", task.checks[0].detail[:500]
    assert f"saw {2 * MANY} of {2 * MANY} collected test(s) run" in task.checks[0].detail


def test_output_is_kept_head_and_tail_whatever_the_chunks():
    data = bytes(range(256)) * 400  # 102,400 bytes
    for limit in (10, 1000, 30_000, 200_000):
        for size in (1, 7, 4096, 65536):
            kept = _HeadTail(limit)
            for start in range(0, len(data), size):
                kept.feed(data[start:start + size])
            half = limit // 2
            head, tail = data[:half], data[max(half, len(data) - half):]
            if len(data) <= 2 * half:
                assert kept.total == len(data)
                assert kept.head + b"".join(kept.tail) == data
            else:
                assert bytes(kept.head) == head
                assert b"".join(kept.tail)[-half:] == tail
                assert f"[... {len(data) - 2 * half} bytes elided ...]" in kept.text()
