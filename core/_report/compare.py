"""Comparing two runs: flips, rate and cost deltas, and whether the change in
completion is more than noise."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from evalctl._report.results import ERROR, NOT_RUN, RunResult, TaskAggregate
from evalctl._report.stats import bootstrap_interval, mcnemar_exact
from evalctl._text import money, percent

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else round(after - before, 6)


@dataclass
class Comparison:
    """Two runs compared: which tasks flipped, how each rate moved, and whether the
    change in completion is more than noise.

    `newly_failing` / `newly_passing` are task ids in both runs whose every attempt
    passed before and not now (and the reverse); `added` / `removed` are in one run
    only and are not compared. `test` is the paired test's verdict: `method`,
    `p_value` (exact McNemar, one attempt per task) or `interval` (bootstrap, with
    repeats), `alpha`, `significant` and a one-line `statement`. `discordant()` lists
    the pairs that evidence rests on. Reporters get one as `RunResult.comparison` when
    the run had `--baseline`, or from `evalctl compare --html`.
    """

    baseline: RunResult
    current: RunResult
    alpha: float
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    # In both runs, but with no graded attempt in one of them (errors, not run): left
    # out of the comparison, since an error says nothing about the agent.
    not_compared: list[str] = field(default_factory=list)
    # The tasks every attempt of which passed in the baseline and some attempt of which
    # was not graded now (an error, or not run): whether they still pass every time is
    # unknown, and an agent that ends a failing attempt in an error would otherwise keep
    # its regressions out of the gate (and its other attempts' passes in).
    unverified: list[str] = field(default_factory=list)
    newly_failing: list[str] = field(default_factory=list)
    newly_passing: list[str] = field(default_factory=list)
    common: int = 0
    # The ids of the tasks compared (in both runs, graded in both): every rate the
    # comparison shows is over these, as the headline's completion is (found by a
    # newcomer: a task added in the new run moved the table's completion, pass@k and
    # pass^k while the headline, over the common tasks, said otherwise).
    common_ids: list[str] = field(default_factory=list)
    common_completion: tuple[float | None, float | None] = (None, None)
    test: dict[str, Any] = field(default_factory=dict)
    # Why `run --baseline`'s gate failed the run (empty: it passed); None when no gate
    # judged it (`evalctl compare`). Set, every report of the run says the gate's verdict,
    # the one its exit code gives.
    gate_reasons: list[str] | None = None
    # The entry-point names of installed plugins that provide nothing either run used
    # (`plugins_unused`): their versions are not looked at. A plugin not installed now
    # cannot be told, and is.
    plugins_unused: frozenset[str] = frozenset()

    @property
    def completion_drop(self) -> float:
        before, after = self.common_completion
        if before is None or after is None:
            return 0.0
        return max(0.0, round(before - after, 6))

    def unverified_reason(self) -> str | None:
        """Why no regression can be ruled out though completion did not drop: the
        unverified tasks, named; None when there are none."""
        if not self.unverified:
            return None
        return ("tasks that passed in the baseline were not graded now (an error, or not "
                "run), so they may have regressed: " + ", ".join(self.unverified))

    @property
    def regression(self) -> bool:
        """A drop in completion over the common tasks that is more than noise."""
        return self.completion_drop > 0 and bool(self.test.get("significant"))

    def verdict(self) -> tuple[str, str]:
        """(kind, headline) of the comparison, the same in every report: kind is
        "regression", "uncertain" or "no-regression". With `gate_reasons` it is the gate's
        verdict; without, whether completion dropped more than noise would, and a drop
        too small to tell from noise is not called "no regression"."""
        if self.gate_reasons is not None:
            return ("regression", "Regression against the baseline") if self.gate_reasons \
                else ("no-regression", "No regression against the baseline")
        if self.regression:
            return "regression", "Regression"
        if self.unverified:
            return "uncertain", "A regression cannot be ruled out"
        if self.newly_failing or self.completion_drop > 0:
            return "uncertain", "No significant regression"
        return "no-regression", "No regression"

    def warnings(self) -> list[str]:
        """What makes the comparison weaker than it looks: the suites differ, or the runs
        differ in the agent and in the model at once."""
        before, after = self.baseline, self.current
        found = []
        model_before = f"{before.provider} {before.model or ''}".strip()
        model_after = f"{after.provider} {after.model or ''}".strip()
        if before.agent_label != after.agent_label and model_before != model_after:
            found.append(f"the runs differ in the agent ({before.agent_label}, then "
                         f"{after.agent_label}) and in the model ({model_before}, then "
                         f"{model_after}): a difference cannot be put down to either")
        if before.repeat != after.repeat:
            # Found by a newcomer: "input tokens 1496 -> 4488" beside "No regression", the
            # second run having made three attempts a task, not one.
            found.append(f"the runs' repeat counts differ ({before.repeat} attempt(s) a "
                         f"task in the baseline, {after.repeat} now): tokens and cost are "
                         "each run's totals, so compare them an attempt (the rows below)")
        return found + self._suite_warnings() + self._version_warnings()

    def _version_warnings(self) -> list[str]:
        """A plugin (or evalctl, whose built-in graders change with it) of another version
        in each run: a check it grades may pass or fail for that reason, not the agent's
        work (found by a newcomer: a changed grader plugin's verdicts were reported as
        the agent's regression, with no warning)."""
        before, after = self.baseline, self.current
        found = []
        if before.evalctl_version and after.evalctl_version and \
                before.evalctl_version != after.evalctl_version:
            found.append(f"evalctl differs between the runs ({before.evalctl_version} in the "
                         f"baseline, {after.evalctl_version} now): its built-in graders may "
                         "grade differently, so a change may not be the agent's")
        for name in sorted(set(before.plugin_versions) & set(after.plugin_versions)):
            if name in self.plugins_unused:
                continue
            dist_before = before.plugin_distributions.get(name)
            dist_after = after.plugin_distributions.get(name)
            if "evalctl" in (dist_before, dist_after) and dist_before == dist_after:
                continue  # a built-in: evalctl's version says it
            version_before = before.plugin_versions.get(name)
            version_after = after.plugin_versions.get(name)
            if version_before == version_after and dist_before == dist_after:
                continue
            def side(dist: str | None, version: str | None) -> str:
                return f"{dist or 'no distribution'} {version or '(no version)'}"
            found.append(f"plugin '{name}' differs between the runs "
                         f"({side(dist_before, version_before)} in the baseline, "
                         f"{side(dist_after, version_after)} now): what it provides (a "
                         "grader, say) may judge differently, so a change in the checks it "
                         "grades may not be the agent's")
        return found

    def _suite_warnings(self) -> list[str]:
        before, after = self.baseline, self.current
        if before.suite_sha256 == after.suite_sha256:
            return []
        if before.suite_name == after.suite_name:
            return [f"the suite changed between the runs ({after.suite_name}, sha256 "
                    f"{before.suite_sha256[:12]} then {after.suite_sha256[:12]})"]
        return [f"the runs are of different suites: baseline {before.suite_path} (sha256 "
                f"{before.suite_sha256[:12]}), current {after.suite_path} (sha256 "
                f"{after.suite_sha256[:12]}); only the tasks in both are compared"]

    def nothing_in_common(self) -> str | None:
        """Why the runs cannot be compared at all, or None when they can."""
        if self.common:
            return None
        if self.not_compared:
            return ("nothing to compare: no task was graded in both runs (in error or not run "
                    f"in one of them: {', '.join(self.not_compared[:10])}"
                    f"{', ...' if len(self.not_compared) > 10 else ''})")
        return ("nothing to compare: no task is in both runs (baseline "
                f"{_tasks_of(self.baseline)}, current {_tasks_of(self.current)})")

    def discordant(self) -> list[dict[str, Any]]:
        """The common tasks whose outcome differs between the runs: the evidence the
        test weighs (tasks with the same outcome in both runs carry none). Each is the
        task `id` with `baseline` and `current` as [attempts passed, attempts run]."""
        before = {t.task_id: t for t in self.baseline.by_task()}
        after = {t.task_id: t for t in self.current.by_task()}
        return [{"id": i, "baseline": [before[i].passed, before[i].ran],
                 "current": [after[i].passed, after[i].ran]}
                for i in before if i in after
                and before[i].passed * after[i].ran != after[i].passed * before[i].ran]

    def rates(self) -> dict[str, dict[str, float | None]]:
        """Each rate of each run over the common tasks only, as the headline is."""
        ids = set(self.common_ids)
        before, after = (_rates(replace(run, tasks=[t for t in run.tasks if t.task_id in ids]))
                         for run in (self.baseline, self.current))
        names = list(dict.fromkeys([*before, *after]))
        return {name: {"baseline": before.get(name), "current": after.get(name),
                       "delta": _delta(before.get(name), after.get(name))} for name in names}

    def spend(self) -> dict[str, dict[str, float | None]]:
        out: dict[str, dict[str, float | None]] = {}
        before_usage, after_usage = self.baseline.usage.to_dict(), self.current.usage.to_dict()
        for key in USAGE_KEYS:
            out[key] = {"baseline": before_usage[key], "current": after_usage[key],
                        "delta": after_usage[key] - before_usage[key]}
        before, after = self.baseline.cost, self.current.cost
        out["cost"] = {"baseline": before, "current": after, "delta": _delta(before, after)}
        # An attempt's share, comparable when the runs made different numbers of attempts
        # (a repeat count, tasks added or not run), which the totals are not (found by a
        # newcomer: only the totals were shown, with a warning not to compare them).
        per_attempt = [(len(run.ran()), run.usage, run.cost)
                       for run in (self.baseline, self.current)]
        tokens = [round((usage.input_tokens + usage.output_tokens) / count, 1) if count
                  else None for count, usage, _ in per_attempt]
        costs = [round(cost / count, 6) if count and cost is not None else None
                 for count, _, cost in per_attempt]
        out["attempts"] = {"baseline": per_attempt[0][0], "current": per_attempt[1][0],
                           "delta": per_attempt[1][0] - per_attempt[0][0]}
        out["tokens_per_attempt"] = {"baseline": tokens[0], "current": tokens[1],
                                     "delta": _delta(*tokens)}
        out["cost_per_attempt"] = {"baseline": costs[0], "current": costs[1],
                                   "delta": _delta(*costs)}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "evalctl-compare/1",
            "baseline": _identity(self.baseline),
            "current": _identity(self.current),
            "regression": self.regression,
            "verdict": dict(zip(("kind", "headline"), self.verdict(), strict=True)),
            "gate_reasons": self.gate_reasons,
            "rates": self.rates(),
            "common_tasks": self.common,
            "common_completion": {"baseline": self.common_completion[0],
                                  "current": self.common_completion[1]},
            "newly_failing": self.newly_failing,
            "newly_passing": self.newly_passing,
            "added": self.added,
            "removed": self.removed,
            "warnings": self.warnings(),
            "not_compared": self.not_compared,
            "unverified": self.unverified,
            "significance": self.test,
            "spend": self.spend(),
        }

    def verdict_text(self) -> tuple[str, str]:
        """The headline, ending in its punctuation, and what it rests on."""
        kind, headline = self.verdict()
        statement = self.test.get("statement", "")
        if self.gate_reasons:
            return f"{headline}:", f"{'; '.join(self.gate_reasons)}.\n\n{statement}"
        if kind == "uncertain" and self.unverified and not self.regression:
            return f"{headline}:", (f"{len(self.unverified)} task(s) that passed in the "
                                    "baseline were not graded now (an error, or not run). "
                                    f"{statement}")
        if kind == "uncertain":
            return f"{headline}:", (f"{len(self.newly_failing)} task(s) newly failing, too "
                                    "few to tell from chance (`run --baseline` fails on any "
                                    f"task that passed before and fails now). {statement}")
        return f"{headline}.", statement

    def to_markdown(self, gate_reasons: list[str] | None = None) -> str:
        """The comparison for people, headed by `verdict()`. `gate_reasons` (from `gate`,
        for `run --baseline`) stands for the comparison's own when given."""
        def points(value: float | None) -> str:
            return "n/a" if value is None else f"{value * 100:+.1f} pts"

        if gate_reasons is not None and gate_reasons != self.gate_reasons:
            return replace(self, gate_reasons=gate_reasons).to_markdown()
        headline, detail = self.verdict_text()
        verdict = f"**{headline}** {detail}".rstrip()
        lines = ["## evalctl compare", ""]
        lines += [f"> **Warning:** {warning}\n" for warning in self.warnings()]
        lines += [verdict, "", "| | baseline | current | change |", "|---|---:|---:|---:|"]
        for label, before, after in (
                ("agent", self.baseline.agent_label, self.current.agent_label),
                ("model", _model_of(self.baseline), _model_of(self.current))):
            lines.append(f"| {label} | {before} | {after} | "
                         f"{'same' if before == after else 'different'} |")
        labels = {"completion_rate": "completion", "judge_rate": "judge (apart)",
                  "pass_at_k": "pass@k", "pass_hat_k": "pass^k"}
        for name, row in self.rates().items():
            if row["baseline"] is None and row["current"] is None:
                continue
            label = labels.get(name, name.removesuffix("_rate"))
            lines.append(f"| {label} | {percent(row['baseline'])} | "
                         f"{percent(row['current'])} | {points(row['delta'])} |")
        def shown(value: float | None) -> str:
            return "n/a" if value is None else f"{value:g}"

        for key, row in self.spend().items():
            delta = row["delta"]
            if key in ("cost", "cost_per_attempt"):
                label = "cost" if key == "cost" else "cost an attempt"
                lines.append(f"| {label} | {money(row['baseline'])} | "
                             f"{money(row['current'])} | "
                             f"{'n/a' if delta is None else f'{delta:+.4f}'} |")
            elif key == "tokens_per_attempt":
                lines.append(f"| tokens an attempt (input + output) | "
                             f"{shown(row['baseline'])} | {shown(row['current'])} | "
                             f"{'n/a' if delta is None else f'{delta:+g}'} |")
            else:
                lines.append(f"| {key.replace('_', ' ')} | {row['baseline']} | "
                             f"{row['current']} | {delta:+d} |")
        lines += ["", f"Rates are over the {self.common} task{'' if self.common == 1 else 's'} "
                  "graded in both runs, as the headline is; tokens and cost are each whole "
                  "run's, and an attempt's share of them over the attempts each run ran."]
        for title, ids in (("Newly failing", self.newly_failing),
                           ("Passed in the baseline, not graded now", self.unverified),
                           ("Newly passing", self.newly_passing),
                           ("Added tasks (not compared)", self.added),
                           ("Removed tasks (not compared)", self.removed),
                           ("Errors or not run in one run (not compared)",
                            self.not_compared)):
            if ids:
                lines += ["", f"### {title} ({len(ids)})", ""] + [f"- `{i}`" for i in ids]
        return "\n".join(lines) + "\n"


def _tasks_of(run: RunResult) -> str:
    ids = [t.task_id for t in run.by_task()]
    shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
    return f"{run.suite_path} ({len(ids)} task{'' if len(ids) == 1 else 's'}: {shown})"


def _model_of(run: RunResult) -> str:
    return f"{run.provider} ({run.model})" if run.model else run.provider


def _identity(run: RunResult) -> dict[str, Any]:
    return {"suite": {"path": run.suite_path, "name": run.suite_name,
                      "sha256": run.suite_sha256},
            "provider": run.provider, "model": run.model, "agent": run.agent_label}


def plugins_unused(registry: Any, *runs: RunResult) -> frozenset[str]:
    """The entry-point names of the installed plugins that provide nothing any of `runs`
    used: the graders of its checks, its provider, agent (a preset's and its base's),
    sandbox and executor."""
    wanted = [("grader", check.type) for run in runs for task in run.tasks
              for check in task.checks]
    for run in runs:
        wanted += [("provider", run.provider), ("agent", run.agent.get("name")),
                   ("agent", run.agent.get("base")), ("sandbox", run.sandbox.get("name")),
                   ("executor", run.executor.get("name"))]
    used = registry.plugins_providing(wanted)
    return frozenset(record.name for record in registry.plugins
                     if record.status == "ok" and record.name not in used)


def _rates(run: RunResult) -> dict[str, float | None]:
    """The rates a comparison shows, headline first, each side computed the same way."""
    rates: dict[str, float | None] = {"completion_rate": run.completion_rate}
    rates.update({f"{name}_rate": rate.value for name, rate in run.named_rates().items()})
    rates["judge_rate"] = run.judge_rate
    rates["pass_at_k"] = run.pass_at_k()
    rates["pass_hat_k"] = run.pass_hat_k()
    return rates


def compare_reports(baseline: RunResult, current: RunResult,
                    alpha: float = 0.05, registry: Any = None) -> Comparison:
    """The comparison of two runs; with `registry` (the installed plugins), only the
    plugins that provide what the runs used are looked at for changed versions."""
    before = {t.task_id: t for t in baseline.by_task()}
    after = {t.task_id: t for t in current.by_task()}
    common = [i for i in before if i in after]
    result = Comparison(baseline, current, alpha, plugins_unused=frozenset()
                        if registry is None else plugins_unused(registry, baseline, current))
    was = list(dict.fromkeys(t.task_id for t in baseline.tasks))
    now = list(dict.fromkeys(t.task_id for t in current.tasks))
    result.added = [i for i in now if i not in was]
    result.removed = [i for i in was if i not in now]
    result.not_compared = [i for i in was if i in now and i not in common]
    ungraded = {t.task_id for t in current.tasks if t.status in (ERROR, NOT_RUN)}
    result.unverified = [i for i in was if i in ungraded and i in before
                         and before[i].pass_hat_k]
    result.common = len(common)
    result.common_ids = common
    result.newly_failing = [i for i in common if before[i].pass_hat_k and
                            not after[i].pass_hat_k]
    result.newly_passing = [i for i in common if not before[i].pass_hat_k and
                            after[i].pass_hat_k]
    if common:
        result.common_completion = (
            round(sum(before[i].passed for i in common) / sum(before[i].ran for i in common), 6),
            round(sum(after[i].passed for i in common) / sum(after[i].ran for i in common), 6))
    result.test = _significance(result, before, after, common, alpha)
    return result


def _significance(result: Comparison, before: dict[str, TaskAggregate],
                  after: dict[str, TaskAggregate], common: list[str],
                  alpha: float) -> dict[str, Any]:
    was, now = result.common_completion
    if not common or was is None or now is None:
        return {"method": None, "significant": False,
                "statement": "No task is in both runs; nothing to compare."}
    direction = "rose" if now > was else "fell" if now < was else "did not change"
    head = (f"Completion over the {len(common)} tasks in both runs {direction}"
            + (f" from {was:.1%} to {now:.1%}" if now != was else f" ({now:.1%})"))
    repeated = any(before[i].ran > 1 or after[i].ran > 1 for i in common)
    if not repeated:
        p = mcnemar_exact(len(result.newly_failing), len(result.newly_passing))
        significant = p < alpha and now != was
        verdict = "significant" if significant else "not significant: consistent with noise"
        return {"method": "exact McNemar test over per-task outcomes", "p_value": round(p, 6),
                "alpha": alpha, "significant": significant,
                "statement": f"{head}; {len(result.newly_failing)} newly failing, "
                             f"{len(result.newly_passing)} newly passing; exact McNemar "
                             f"p = {p:.3g} ({verdict} at {alpha:g})."}
    differences = [after[i].passed / after[i].ran - before[i].passed / before[i].ran
                   for i in common]
    low, high = bootstrap_interval(differences, confidence=1 - alpha)
    significant = low > 0 or high < 0
    verdict = "significant" if significant else "not significant: the interval includes 0"
    return {"method": "bootstrap over tasks of the per-task pass-rate change",
            "interval": [round(low, 6), round(high, 6)], "alpha": alpha,
            "significant": significant,
            "statement": f"{head}; mean per-task change {sum(differences) / len(differences):+.3f}"
                         f", {1 - alpha:.0%} bootstrap interval [{low:+.3f}, {high:+.3f}] "
                         f"({verdict})."}


def gate(comparison: Comparison, max_drop: float, fail_on_flip: bool) -> list[str]:
    """Why a run fails against its baseline (empty: it does not)."""
    reasons = []
    if comparison.completion_drop > max_drop + 1e-9:
        # In percentage points, as --max-drop is (found by a newcomer: "dropped by
        # 33.3%" read as a relative drop).
        reasons.append(f"completion over the common tasks dropped by "
                       f"{comparison.completion_drop * 100:.1f} points, more than the "
                       f"{max_drop * 100:.1f} points allowed")
    if fail_on_flip and comparison.newly_failing:
        reasons.append("tasks that passed in the baseline now fail: "
                       + ", ".join(comparison.newly_failing))
    unverified = comparison.unverified_reason()
    if unverified:  # unknown is not "no regression", flips allowed or not
        reasons.append(unverified)
    return reasons
