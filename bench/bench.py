"""evalctl benchmarks: prints figures and their ratio to the targets.

    python bench/bench.py            # everything (a few minutes)
    python bench/bench.py startup load run

Medians over several runs; these machines are shared, so read ratios, not digits: each
figure is printed with its ratio to its target, and the per-task figures against the
floor (what the same file-system and process work costs without evalctl), measured in
the same run.
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVALCTL = [sys.executable, "-m", "evalctl"]


def wall(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
         repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=env, cwd=cwd)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def report(name: str, value: float, target: float, unit: str = "s") -> None:
    ratio = value / target
    verdict = "ok" if ratio <= 1 else "OVER"
    shown = f"{value * 1000:.0f} ms" if unit == "ms" else f"{value:.0f} B" if unit == "B" \
        else f"{value:.3f} {unit}"
    target_shown = f"{target * 1000:.0f} ms" if unit == "ms" else f"{target:g} {unit}"
    print(f"{name:<58} {shown:>12}  target {target_shown:>9}  ratio {ratio:5.2f}  {verdict}",
          flush=True)


def report_against(name: str, value: float, reference: float, target_ratio: float,
                   what: str = "the floor") -> None:
    """A figure as a ratio to a reference measured in the same run (the floor, say)."""
    ratio = value / reference
    verdict = "ok" if ratio <= target_ratio else "OVER"
    print(f"{name:<58} {value * 1000:9.2f} ms  = {ratio:5.2f}x {what}, target "
          f"<= {target_ratio:g}x  {verdict}", flush=True)


def task_yaml(index: int) -> str:
    return f"""\
- id: task-{index}
  prompt: Write out-{index}.txt containing the word done.
  files:
    seed.txt: |
      seeded line one
      seeded line two
  checks:
    - type: file_exists
      path: out-{index}.txt
    - type: command
      command: grep -q done out-{index}.txt
  script:
    - tool_calls:
        - tool: bash
          input:
            command: echo done > out-{index}.txt
    - text: Wrote out-{index}.txt.
"""


def latency_task_yaml(index: int) -> str:
    return f"""\
- id: wait-{index}
  prompt: Three turns.
  checks:
    - type: file_exists
      path: x.txt
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: x.txt
            content: x
    - tool_calls:
        - tool: glob
          input:
            pattern: "*"
    - text: Wrote x.txt.
"""


def environment(cache: Path) -> dict[str, str]:
    # An installed evalctl has its bytecode: a shell that sets PYTHONDONTWRITEBYTECODE
    # would have every run compile evalctl's modules again (about 45 ms more start-up).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EVALCTL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["EVALCTL_CACHE_DIR"] = str(cache)
    return env


FLOOR_ITERATIONS = 1000


def _floor_task(base: Path, index: int) -> None:
    """What one agent-shaped task must do at the least: a directory, a spawn that writes
    a file (the agent's bash call), a second spawn (the command check)."""
    directory = base / f"t{index}"
    directory.mkdir()
    subprocess.run(["bash", "-c", "echo x > out.txt"], cwd=directory, check=True,
                   stdin=subprocess.DEVNULL)
    subprocess.run(["bash", "-c", "grep -q x out.txt"], cwd=directory, check=True,
                   stdin=subprocess.DEVNULL)


@functools.cache
def _system_links() -> tuple[str, ...]:
    """bwrap arguments recreating the merged-/usr links; looked up once, outside the
    timed floor."""
    return tuple(arg for link in ("bin", "sbin", "lib", "lib64") if os.path.islink(f"/{link}")
                 for arg in ("--symlink", f"usr/{link}", f"/{link}"))


def _bwrap_floor_argv(directory: Path, script: str) -> list[str]:
    """The least a bubblewrap sandbox for one command is: new namespaces (network off),
    the system read-only, /proc and /dev, the directory writable. No cgroups, /etc,
    Python installation or limits: what evalctl adds on top is what the ratio shows."""
    return ["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr", *_system_links(), "--proc", "/proc", "--dev", "/dev",
            "--bind", str(directory), str(directory), "--chdir", str(directory),
            "bash", "-c", script]


def _bwrap_floor_task(base: Path, index: int) -> None:
    """The floor with each spawn in a bubblewrap sandbox of its own."""
    directory = base / f"t{index}"
    directory.mkdir()
    subprocess.run(_bwrap_floor_argv(directory, "echo x > out.txt"), check=True, env={},
                   stdin=subprocess.DEVNULL)
    subprocess.run(_bwrap_floor_argv(directory, "grep -q x out.txt"), check=True, env={},
                   stdin=subprocess.DEVNULL)


def floor(work: Path, threads: int, bwrap: bool = False) -> float:
    """Seconds per task of the floor, serially (1 thread) or on `threads` threads, with
    plain spawns or bubblewrap ones. The machine is shared: each figure measures it
    right beside itself, and both take the best of the same number of tries.

    Its directories stay in `work` until the bench ends, as evalctl's run directories
    do: ext4 without a journal passes over inodes freed in the last minutes when it
    allocates one (`recently_deleted`), so removing a thousand directories here made
    every file the next measurement created cost up to twice as much."""
    task = _bwrap_floor_task if bwrap else _floor_task
    _system_links()
    base = Path(tempfile.mkdtemp(prefix="floor-", dir=work))
    before = os.times()
    started = time.perf_counter()
    if threads == 1:
        for index in range(FLOOR_ITERATIONS):
            task(base, index)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(functools.partial(task, base), range(FLOOR_ITERATIONS)))
    seconds = (time.perf_counter() - started) / FLOOR_ITERATIONS
    after = os.times()
    label = ("bwrap, " if bwrap else "") + ("serially" if threads == 1 else f"on {threads} threads")
    own = after.user - before.user + after.system - before.system
    children = (after.children_user - before.children_user + after.children_system
                - before.children_system)
    print(f"{'  floor: mkdir + bash writes a file + a 2nd spawn, ' + label:<58} "
          f"{seconds * 1000:9.2f} ms  (CPU a task: {own * 1000 / FLOOR_ITERATIONS:.2f} ms own, "
          f"{children * 1000 / FLOOR_ITERATIONS:.2f} ms in its commands)", flush=True)
    return seconds


def bench_startup(work: Path) -> None:
    env = environment(work / "cache")
    subprocess.run([*EVALCTL, "list-plugins"], env=env, check=True, capture_output=True)
    commands = {"pass": [sys.executable, "-c", "pass"], "help": [*EVALCTL, "--help"],
                "list": [*EVALCTL, "list-plugins"]}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(5):  # interleaved, so the three see the same load
        for name, command in commands.items():
            times[name].append(wall(command, env, repeat=1))
    bare, shown = statistics.median(times["pass"]), {}
    for name in ("help", "list"):
        shown[name] = statistics.median(times[name])
    print(f"{'  reference: python -c pass (wall, median of 5)':<58} {bare * 1000:9.0f} ms")
    report(f"evalctl --help (wall; {shown['help'] / bare:.1f}x python -c pass)",
           shown["help"], 0.100, "ms")
    report(f"evalctl list-plugins (wall; {shown['list'] / bare:.1f}x python -c pass)",
           shown["list"], 0.150, "ms")


LOAD_PROBE = """
import sys, time
from evalctl._plugin.registry import get_registry
from evalctl._suite.loader import load_suite, validate_suite
registry = get_registry()
started = time.perf_counter()
if sys.argv[2] == "validate":
    problems = validate_suite(sys.argv[1], registry)
    assert not [p for p in problems if p.severity == "error"], problems
    count = -1
else:
    count = len(load_suite(sys.argv[1], registry).tasks)
print(time.perf_counter() - started, count)
"""


def load_seconds(suite: Path, env: dict[str, str], how: str = "load") -> float:
    out = subprocess.run([sys.executable, "-c", LOAD_PROBE, str(suite), how], env=env,
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[0])


def bench_load(work: Path) -> None:
    """Loading (and `validate`, which uses the same verified cache) in process: cold is
    a fresh cache directory, warm the same file again."""
    for count, cold_target, runs in ((1_000, 0.5, 3), (10_000, 3.0, 1)):
        suite = work / f"load-{count}.yaml"
        suite.write_text("".join(task_yaml(i) for i in range(count)))
        cold, warm, validated, revalidated = [], [], [], []
        for attempt in range(runs):
            env = environment(work / f"load-cache-{count}-{attempt}")
            cold.append(load_seconds(suite, env))
            warm += [load_seconds(suite, env) for _ in range(3)]  # cheap: a median of more
            env = environment(work / f"validate-cache-{count}-{attempt}")
            validated.append(load_seconds(suite, env, "validate"))
            revalidated += [load_seconds(suite, env, "validate") for _ in range(3)]
        report(f"load a {count:,}-task suite, cold (in process)", statistics.median(cold),
               cold_target)
        report(f"validate a {count:,}-task suite, cold (in process)",
               statistics.median(validated), cold_target)
        report(f"load a {count:,}-task suite, unchanged file", statistics.median(warm), 0.2)
        report(f"validate a {count:,}-task suite, unchanged file",
               statistics.median(revalidated), 0.2)
    suite = work / "load-1000.yaml"
    parse = ("import sys, time; from evalctl._suite import yamlsource as y; "
             "text = open(sys.argv[1]).read(); t = time.perf_counter(); "
             "(y.parse if sys.argv[2] == 'fast' else y.parse_document)(text, 's'); "
             "print(time.perf_counter() - t)")
    figures = {how: statistics.median(float(subprocess.run(
        [sys.executable, "-c", parse, str(suite), how], check=True, capture_output=True,
        text=True).stdout) for _ in range(3)) for how in ("fast", "strictyaml")}
    print(f"{'  of which YAML parsing, 1,000 tasks: libyaml':<58} {figures['fast']:9.2f} s; "
          f"strictyaml alone {figures['strictyaml']:.2f} s")


RUN_PROBE = """
import asyncio, json, sys, time
from pathlib import Path
from evalctl._plugin.registry import get_registry
from evalctl._run.runner import RunOptions, execute, prepare_run
from evalctl._suite.loader import load_suite
registry = get_registry()
suite = load_suite(sys.argv[1], registry)
executor = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
options = RunOptions(out_dir=Path(sys.argv[2]), concurrency=int(sys.argv[3]) or None,
                     provider_options={"latency": sys.argv[4]}, sandbox=sys.argv[5],
                     executor=executor.get("name"), executor_options=executor.get("options", {}))
prepared = prepare_run(suite, registry, options)
import os
before = os.times()
started = time.perf_counter()
result = asyncio.run(execute(prepared))
elapsed = time.perf_counter() - started
after = os.times()
import resource
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(elapsed, result.count("passed"), len(result.tasks), peak,
      after.user - before.user + after.system - before.system,
      after.children_user - before.children_user + after.children_system
      - before.children_system)
"""

# CPU seconds of the last in-process run: (evalctl's own, its child processes').
LAST_CPU: dict[str, float] = {}


def run_in_process(suite: Path, out: Path, env: dict[str, str], concurrency: int = 0,
                   latency: float = 0.0, sandbox: str = "local",
                   executor: dict | None = None) -> tuple[float, int, int, float]:
    import json

    done = subprocess.run([sys.executable, "-c", RUN_PROBE, str(suite), str(out),
                           str(concurrency), str(latency), sandbox,
                           json.dumps(executor or {})], env=env, check=True,
                          capture_output=True, text=True)
    elapsed, passed, total, peak, own, children = done.stdout.splitlines()[-1].split()
    LAST_CPU.update(own=float(own), children=float(children))
    return float(elapsed), int(passed), int(total), float(peak)


def bench_run(work: Path) -> None:
    env = environment(work / "run-cache")
    combined = work / "harness-general.yaml"
    tasks = []
    for name in ("harness", "general"):
        text = (ROOT / "suites" / f"{name}.yaml").read_text()
        tasks.append(text[text.index("tasks:\n") + len("tasks:\n"):])
    combined.write_text("tasks:\n" + "".join(tasks))
    subprocess.run([*EVALCTL, "validate", str(combined)], env=env, check=True,
                   capture_output=True)
    walls, inner = [], []
    for attempt in range(5):
        out = work / f"run-{attempt}"
        started = time.perf_counter()
        done = subprocess.run([*EVALCTL, "run", str(combined), "--out", str(out)], env=env,
                              capture_output=True, text=True, cwd=work)
        walls.append(time.perf_counter() - started)
        assert done.returncode == 0, done.stdout + done.stderr
        inner.append(run_in_process(combined, work / f"inner-{attempt}", env)[0])
    report("harness + general (11 tasks), one `evalctl run` (wall)", statistics.median(walls),
           0.5)
    report("harness + general (11 tasks), in-process run", statistics.median(inner), 0.100,
           "ms")
    # Six of those tasks have a `python` check, each a fresh interpreter in the sandbox:
    # their start-up alone, two at a time, is the floor of this figure.
    pythons = [sys.executable, "-I", "-c", "pass"]
    starts = []
    for _ in range(5):
        started = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: subprocess.run(pythons, check=True), range(6)))
        starts.append(time.perf_counter() - started)
    reference = statistics.median(starts)
    print(f"{'  reference: 6 python -I -c pass, 2 at a time':<58} {reference * 1000:9.0f} ms"
          f"  (the run: {statistics.median(inner) / reference:.2f}x that)", flush=True)


def run_generated(work: Path, name: str, make_task, count: int, concurrency: int = 0,
                  latency: float = 0.0, sandbox: str = "local", executor: dict | None = None,
                  env: dict[str, str] | None = None) -> tuple[float, float]:
    """Write a suite of `count` generated tasks, run it in process, check that every task
    passed, and return (seconds, peak RSS in MB)."""
    suite = work / f"{name}-{count}.yaml"
    suite.write_text("".join(make_task(i) for i in range(count)))
    elapsed, passed, total, peak = run_in_process(suite, work / f"{name}-{sandbox}",
                                                  {**environment(work / f"{name}-cache"),
                                                   **(env or {})},
                                                  concurrency, latency, sandbox, executor)
    assert passed == total == count, (passed, total)
    return elapsed, peak


def bench_overhead(work: Path) -> None:
    floors, runs = [], []
    for _ in range(2):
        floors.append(floor(work, 2))
        runs.append(run_generated(work, "overhead", task_yaml, 1000)[0] / 1000)
    report("per-task overhead, 1,000 tasks (bash + file_exists + command)", min(runs),
           0.015, "ms")
    report_against("  the same, against the floor on two threads", min(runs), min(floors),
                   1.5)


def bench_sandbox(work: Path) -> None:
    """The agent-shaped 1,000-task suite under local and under bwrap, in one run: each task
    runs two sandboxed commands (its bash call, and the command check; file_exists runs in
    process) in two sandboxes (the agent's, then the graders'), so bwrap's cost per task
    is about two bwrap starts and two sets of cgroups. Each is held to 1.5x its own
    two-thread floor, measured beside it: the same directory and spawns without evalctl,
    plain for `local`, each in a minimal bubblewrap sandbox for `bwrap`."""
    figures: dict[str, list[float]] = {}
    for _ in range(2):
        figures.setdefault("serial", []).append(floor(work, 1))
        figures.setdefault("floor", []).append(floor(work, 2))
        figures.setdefault("bwrap floor", []).append(floor(work, 2, bwrap=True))
        for sandbox in ("local", "bwrap"):
            elapsed, _ = run_generated(work, "sandbox", task_yaml, 1000, sandbox=sandbox)
            figures.setdefault(sandbox, []).append(elapsed / 1000)
            print(f"{f'  {sandbox}: CPU a task, evalctl / its commands':<58} "
                  f"{LAST_CPU['own']:9.2f} ms / {LAST_CPU['children']:.2f} ms",  # s / 1,000
                  flush=True)
    local, bwrap, floor_two = min(figures["local"]), min(figures["bwrap"]), min(figures["floor"])
    bwrap_floor = min(figures["bwrap floor"])
    print(f"{'  floor, best of two: serially / on two threads':<58} "
          f"{min(figures['serial']) * 1000:9.2f} ms / {floor_two * 1000:.2f} ms")
    report_against("per task, 1,000 tasks, local sandbox", local, floor_two, 1.5,
                   "the two-thread floor")
    report_against("per task, 1,000 tasks, bwrap sandbox", bwrap, bwrap_floor, 1.5,
                   "the two-thread bwrap floor")
    report("per task, 1,000 tasks, bwrap sandbox", bwrap, 0.025, "ms")
    report("bwrap's cost per task over local", bwrap - local, 0.010, "ms")


def bench_concurrency(work: Path) -> None:
    elapsed, _ = run_generated(work, "latency", latency_task_yaml, 256, concurrency=32,
                               latency=0.2)
    ideal = 256 / 32 * 3 * 0.2
    report("256 tasks x 3 turns at 200 ms, concurrency 32 (vs 4.8 s)", elapsed / ideal, 1.15,
           "x")


def bench_latency(work: Path) -> None:
    """Latency-bound: the agent-shaped suite (two model turns a task) with 0.5 s of
    simulated model latency a turn, 1,000 tasks, at concurrency 64 and 256. The ideal is
    tasks x turns x latency / concurrency; the run cannot beat the same run without
    latency either, so the target is 1.15x the larger of the two."""
    count, turns, latency = 1000, 2, 0.5
    for concurrency in (64, 256):
        without, _ = run_generated(work, f"nolatency-{concurrency}", task_yaml, count,
                                   concurrency=concurrency)
        elapsed, _ = run_generated(work, f"latency-{concurrency}", task_yaml, count,
                                   concurrency=concurrency, latency=latency)
        ideal = count * turns * latency / concurrency
        bound = max(ideal, without)
        print(f"{f'  concurrency {concurrency}: ideal {ideal:.1f} s, without latency':<58} "
              f"{without:9.1f} s", flush=True)
        report(f"1,000 tasks x 2 turns at 0.5 s, concurrency {concurrency} "
               f"({elapsed:.1f} s / {bound:.1f} s)", elapsed / bound, 1.15, "x")


def bench_memory(work: Path) -> None:
    elapsed, peak = run_generated(work, "memory", latency_task_yaml, 10_000)
    report(f"10,000-task run, peak RSS ({elapsed:.0f} s)", peak, 200, "MB")


MODULE_LINES = "".join(f"      def step_{n}(value):\n          return value + {n}\n"
                       for n in range(30))


def html_task_yaml(index: int) -> str:
    """A task with a transcript of the usual shape: read a file, edit it, search, say
    what was done; every seventh one fails its check."""
    expected = "never-there" if index % 7 == 0 else "fixed"
    tags = f"\n    - area-{index % 8}" + ("\n    - slow" if index % 5 == 0 else "")
    return f"""\
- id: html-{index}
  prompt: In module.py set value to 1 and mark the line as fixed.
  tags:{tags}
  files:
    module.py: |
      value = 0
{MODULE_LINES}  checks:
    - type: file_contains
      path: module.py
      text: {expected}
  script:
    - text: I will read the module first.
      tool_calls:
        - tool: read_file
          input:
            path: module.py
    - text: Now the fix, and where the steps are.
      tool_calls:
        - tool: edit_file
          input:
            path: module.py
            old_text: value = 0
            new_text: "value = 1  # fixed"
        - tool: grep
          input:
            pattern: "def step_1"
    - text: Set value to 1 in module.py.
"""


HTML_PROBE = """
import asyncio, sys, time
from pathlib import Path
from evalctl._plugin.registry import get_registry
from evalctl._report.writing import write_reports
from evalctl._run.runner import RunOptions, execute, prepare_run
from evalctl._suite.loader import load_suite
registry = get_registry()
out = Path(sys.argv[2])
suite = load_suite(sys.argv[1], registry)
prepared = prepare_run(suite, registry, RunOptions(out_dir=out, sandbox="local"))
result = asyncio.run(execute(prepared))
print(write_reports(result, registry, ["json"], out)[0][0])
"""

# What `evalctl view` does for a run with no page yet: read the run back, render it.
RENDER_PROBE = """
import resource, sys, time
from pathlib import Path
from evalctl._plugin.registry import get_registry
from evalctl._report.rundir import read_run
started = time.perf_counter()
stored = read_run(Path(sys.argv[1]))
html = get_registry().get("reporter", "html").write(stored.run, stored.derived("html"))
elapsed = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(elapsed, peak, len(stored.run.tasks), html)
"""

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]


def wait_for(page, expression: str, timeout: float = 120.0) -> None:
    """Poll from here: wait_for_function evals in the page, which its CSP forbids."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(f"() => Boolean({expression})"):
        if time.monotonic() > deadline:
            raise TimeoutError(expression)
        time.sleep(0.002)


def bench_html(work: Path) -> None:
    """The HTML report of a 10,000-task run in headless Chromium (Debian's, driven by
    Playwright): time to its overview and table, to a task page, and its size."""
    from playwright.sync_api import sync_playwright

    count = 10_000
    suite = work / f"html-{count}.yaml"
    suite.write_text("".join(html_task_yaml(i) for i in range(count)))
    env = environment(work / "html-cache")
    report_path = subprocess.run([sys.executable, "-c", HTML_PROBE, str(suite),
                                  str(work / "html")], env=env, check=True,
                                 capture_output=True, text=True).stdout.strip()
    done = subprocess.run([sys.executable, "-c", RENDER_PROBE, report_path], env=env,
                          check=True, capture_output=True, text=True)
    render_seconds, peak, tasks, html_path = done.stdout.split()
    html = Path(html_path)
    size = html.stat().st_size
    text = html.read_bytes()
    up_front = text.index(b'id="task-0"')
    per_task = int(tasks)
    print(f"{'  reading the run and rendering its page (evalctl view)':<58} "
          f"{float(render_seconds):9.2f} s, peak RSS {float(peak):.0f} MB")
    report("file size up front (overview, table rows, script) / task", up_front / per_task,
           2048, "B")
    print(f"{'  details (transcripts, checks, diffs), lazily parsed / task':<58} "
          f"{(size - up_front) / per_task:9.0f} B   (file {size / 1e6:.1f} MB)")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=os.environ.get(
            "EVALCTL_CHROMIUM", "/usr/bin/chromium"), args=CHROMIUM_ARGS)
        shown, loaded, walls, tasks_ms, task_walls, filters = [], [], [], [], [], []
        for attempt in range(5):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            started = time.perf_counter()
            page.goto(html.as_uri(), wait_until="commit", timeout=120_000)
            wait_for(page, "window.evalctlTiming && window.evalctlTiming.painted")
            walls.append(time.perf_counter() - started)
            shown.append(page.evaluate("window.evalctlTiming.painted") / 1000)
            page.wait_for_load_state("load", timeout=120_000)
            loaded.append(page.evaluate(
                "performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000)
            rows = page.locator("#task-table tbody tr.row").count()
            assert rows == 100, rows
            for index in (17, 2_500, 5_000, 7_500, 9_999)[attempt:attempt + 1] * 3:
                renders = page.evaluate("window.evalctlTiming.taskRenders")
                begun = time.perf_counter()
                page.evaluate(f"location.hash = '#task=html-{index}'")
                wait_for(page, f"window.evalctlTiming.taskRenders > {renders}")
                task_walls.append(time.perf_counter() - begun)
                tasks_ms.append(page.evaluate("window.evalctlTiming.lastTask") / 1000)
                assert page.locator("#task details.call").count() == 3
                page.evaluate("location.hash = ''")
                page.wait_for_selector("#tasks:not([hidden])")
            page.select_option("#f-status", "failed")
            filters.append(page.evaluate("window.evalctlTiming.lastTable") / 1000)
            assert "of 1,429 attempts" in page.inner_text("#count")
            page.close()
        browser.close()
    report("10,000 tasks: overview and table painted (in page)", statistics.median(shown), 2.0)
    report("10,000 tasks: the same, wall from navigation", statistics.median(walls), 2.0)
    print(f"{'  (the whole file parsed: load event)':<58} {statistics.median(loaded):9.2f} s")
    report("10,000 tasks: a task page rendered (in page)", statistics.median(tasks_ms), 0.200,
           "ms")
    report("10,000 tasks: a task page, wall from the click", statistics.median(task_walls),
           0.200, "ms")
    report("10,000 tasks: filter the table by status (in page)", statistics.median(filters),
           0.200, "ms")

def bench_sources(work: Path) -> None:
    """An attempt's working copy of a git source: a repository of 3,000 files (12 MB) and
    300 commits, cached; evalctl's one-commit fetch from the cache, against a full local
    clone without hard links (what a copy of the whole history costs)."""
    from evalctl._sources.git import SourceCache
    from evalctl._sources.model import Source
    from evalctl._workspace import new_run_directory, new_workspace, seed_workspace

    repo = work / "sources-repo"
    env = {"PATH": os.environ["PATH"], "HOME": str(work), "GIT_AUTHOR_NAME": "b",
           "GIT_AUTHOR_EMAIL": "b@example.invalid", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    for commit in range(300):
        for index in range(commit * 10, commit * 10 + 10):
            path = repo / f"pkg{index % 30}" / f"module_{index}.py"
            path.parent.mkdir(exist_ok=True)
            path.write_text(f"# module {index}\n" + "x = 1\n" * 700)
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
        subprocess.run(["git", "-C", str(repo), "commit", "-qm", f"c{commit}"], check=True,
                       env=env)
    rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD~150"], check=True,
                         env=env, capture_output=True, text=True).stdout.strip()
    cache = SourceCache(work / "sources-cache")
    source = Source("git", str(repo), rev, written="bench")
    cache.ensure(source)

    def median(action, repeat: int = 5) -> float:
        times = []
        for attempt in range(repeat):
            started = time.perf_counter()
            action(attempt)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    one_commit = median(lambda n: cache.check_out(source, work / f"wc-{n}"))

    def full_clone(n: int) -> None:
        target = work / f"full-{n}"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", "--no-checkout",
                        str(cache.repository(str(repo))), str(target)], check=True, env=env)
        subprocess.run(["git", "-C", str(target), "checkout", "-q", "--detach", rev],
                       check=True, env=env)

    full = median(full_clone)
    run_dir = new_run_directory(work / "runs")
    import evalctl._sources.git as git_sources

    git_sources._default = cache
    seeded = median(lambda n: seed_workspace(new_workspace(run_dir, f"a{n}"), {}, source))
    # No target was set for these; 1 s (2 s for both copies) is a yardstick.
    report("git source: one-commit working copy (1,500 files)", one_commit, 1.0, "ms")
    report("git source: full --no-hardlinks clone + checkout, to compare", full, 1.0, "ms")
    report("git source: an attempt's workspace and seed copy", seeded, 2.0, "ms")

    def megabytes(directory: Path) -> float:
        return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 1e6

    print(f"  .git of an attempt: {megabytes(work / 'wc-0' / '.git'):.1f} MB one-commit, "
          f"{megabytes(work / 'full-0' / '.git'):.1f} MB full clone (the cache: "
          f"{megabytes(cache.repository(str(repo))):.1f} MB)")


def bench_executor(work: Path) -> None:
    """The 1,000-task suite with simulated model latency (100 ms a turn, two turns a task),
    16 attempts at once, under `local` and under `ray` (evalctl-ray, a one-machine Ray
    started by the run: address=local, 1/8 CPU an attempt, so 16 fit on 2 cores), in one
    run. What Ray adds per attempt is the difference in wall time over the attempts, times
    the 16 that run at once: shipping the attempt, a worker's scratch directory, the
    shared model-call limit (two actor calls a turn), and the outcome's tar back."""
    try:
        import evalctl_ray  # noqa: F401
    except ImportError:
        print("executor: evalctl-ray is not installed (pip install -e "
              "plugins/executors/evalctl-ray); skipped")
        return
    count, at_once, latency = 1000, 16, 0.1
    ray_env = {"RAY_TMPDIR": str(work / "ray"), "RAY_USAGE_STATS_ENABLED": "0",
               "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    (work / "ray").mkdir(exist_ok=True)
    ray = {"name": "ray", "options": {"address": "local", "num_cpus": 2 / at_once}}
    local, _ = run_generated(work, "executor-local", task_yaml, count, concurrency=at_once,
                             latency=latency)
    remote, _ = run_generated(work, "executor-ray", task_yaml, count, concurrency=at_once,
                              latency=latency, executor=ray, env=ray_env)
    ideal = count / at_once * 2 * latency
    print(f"{'  1,000 tasks x 2 turns at 100 ms, 16 at once (ideal ' + f'{ideal:.1f} s)':<58}"
          f" local {local:.1f} s, ray {remote:.1f} s")
    # No target was set: these are the figures to watch.
    print(f"{'ray over local, same attempts, same concurrency':<58} {remote / local:9.2f} x")
    print(f"{'what ray adds per attempt':<58} {(remote - local) * at_once / count * 1000:9.0f} ms")


BENCHES = {"startup": bench_startup, "load": bench_load, "run": bench_run,
           "overhead": bench_overhead, "sandbox": bench_sandbox,
           "concurrency": bench_concurrency, "latency": bench_latency,
           "memory": bench_memory, "html": bench_html, "sources": bench_sources,
           "executor": bench_executor}


def main() -> None:
    chosen = sys.argv[1:] or list(BENCHES)
    print(f"evalctl benchmarks on {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"load average {os.getloadavg()[0]:.1f}")
    # Outside /tmp, as a run's default ./eval_reports is: under /tmp the bwrap sandbox
    # adds a read-only bind over the path to each workspace (docs/sandboxes.md).
    where = "/var/tmp" if os.path.isdir("/var/tmp") and os.access("/var/tmp", os.W_OK) \
        else None
    with tempfile.TemporaryDirectory(prefix="evalctl-bench-", dir=where) as scratch:
        for name in chosen:
            BENCHES[name](Path(scratch))


if __name__ == "__main__":
    main()
