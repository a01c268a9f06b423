"""The overview's pictures, as geometry for inline SVG: outcomes by tag, and the
distributions of duration and cost. Computed here, drawn by the template, so the page
needs no charting library, no script and no network to show them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import evalctl

STATUSES = ("passed", "failed", "error", "not_run")
MAX_TAGS = 15
BINS = 20
WIDTH = 390


@dataclass
class Chart:
    """Rectangles and labels in a `width` x `height` box; `empty` when there is nothing
    to draw, and `description` for screen readers."""

    title: str
    description: str
    width: int = WIDTH
    height: int = 0
    rects: list[dict[str, Any]] = field(default_factory=list)
    texts: list[dict[str, Any]] = field(default_factory=list)
    empty: str | None = None


def _shorten(text: str, limit: int) -> str:
    return evalctl.truncate(text, limit, keep="head")


def outcomes_by_tag(tasks: Sequence[evalctl.TaskResult]) -> Chart:
    """One stacked bar per tag (the most used first): the share of its attempts that
    passed, failed, errored or did not run, and its completion (over its graded
    attempts: errors and attempts not run are left out, as in completion_rate)."""
    counts: dict[str, dict[str, int]] = {}
    for task in tasks:
        for tag in task.tags or ("(no tag)",):
            row = counts.setdefault(tag, dict.fromkeys(STATUSES, 0))
            row[task.status] = row.get(task.status, 0) + 1
    rows = sorted(counts.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    if len(rows) > MAX_TAGS:
        rest: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for _, row in rows[MAX_TAGS - 1:]:
            for status, count in row.items():
                rest[status] = rest.get(status, 0) + count
        rows = rows[:MAX_TAGS - 1] + [(f"{len(rows) - MAX_TAGS + 1} other tags", rest)]
    chart = Chart("Outcomes by tag", f"Outcomes of the attempts of each of {len(rows)} tags")
    if not rows:
        chart.empty = "no attempts"
        return chart
    label_width, bar_width, row_height = 140, 150, 24
    for index, (tag, row) in enumerate(rows):
        y = 4 + index * row_height
        total = sum(row.values())
        graded = row.get("passed", 0) + row.get("failed", 0)
        chart.texts.append({"x": label_width - 8, "y": y + 15, "anchor": "end",
                            "text": _shorten(tag, 20), "title": tag})
        x = float(label_width)
        parts = ", ".join(f"{row[s]} {s.replace('_', ' ')}" for s in STATUSES if row.get(s))
        for status in STATUSES:
            if not row.get(status):
                continue
            width = bar_width * row[status] / total
            chart.rects.append({"x": round(x, 2), "y": y + 3, "w": round(width, 2),
                                "h": row_height - 8, "cls": f"s-{status}",
                                "title": f"{tag}: {parts}"})
            x += width
        shown = evalctl.format_percent(row["passed"] / graded if graded else None)
        chart.texts.append({"x": label_width + bar_width + 8, "y": y + 15, "anchor": "start",
                            "text": f"{shown} ({row['passed']}/{graded})", "title": parts})
    chart.height = 8 + len(rows) * row_height
    return chart


def histogram(title: str, values: Sequence[tuple[float, bool]],
              show: Callable[[float], str], empty: str) -> Chart:
    """A histogram of (value, passed) pairs, passed attempts stacked under the rest."""
    chart = Chart(title, f"{title} of {len(values)} attempts, passed ones stacked below")
    if not values:
        chart.empty = empty
        return chart
    low = min(v for v, _ in values)
    high = max(v for v, _ in values)
    bins = BINS if high > low else 1
    step = (high - low) / bins if high > low else 1.0
    passed = [0] * bins
    other = [0] * bins
    for value, ok in values:
        index = min(int((value - low) / step), bins - 1) if high > low else 0
        (passed if ok else other)[index] += 1
    tallest = max(p + o for p, o in zip(passed, other, strict=True))
    left, top, plot_width, plot_height = 40, 10, WIDTH - 56, 110
    chart.height = top + plot_height + 30
    bar = plot_width / bins
    for index in range(bins):
        start = low + index * step
        span = f"{show(start)} to {show(start + step)}" if high > low else show(low)
        base = top + plot_height
        for count, cls, what in ((passed[index], "s-passed", "passed"),
                                 (other[index], "s-failed", "did not pass")):
            if not count:
                continue
            height = plot_height * count / tallest
            base -= height
            chart.rects.append({"x": round(left + index * bar + 1, 2), "y": round(base, 2),
                                "w": round(max(bar - 2, 1), 2), "h": round(height, 2),
                                "cls": cls, "title": f"{span}: {count} {what}"})
    chart.texts += [
        {"x": left - 6, "y": top + 8, "anchor": "end", "text": str(tallest), "title": "attempts"},
        {"x": left - 6, "y": top + plot_height, "anchor": "end", "text": "0", "title": ""},
        {"x": left, "y": top + plot_height + 18, "anchor": "start", "text": show(low),
         "title": "lowest"},
        {"x": left + plot_width, "y": top + plot_height + 18, "anchor": "end",
         "text": show(high), "title": "highest"},
    ]
    chart.rects.append({"x": left, "y": top + plot_height, "w": plot_width, "h": 1,
                        "cls": "axis", "title": ""})
    return chart


def seconds(value: float) -> str:
    """A duration as a person reads it: milliseconds under a second."""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def duration_chart(tasks: Sequence[evalctl.TaskResult]) -> Chart:
    values = [(t.duration, t.passed) for t in tasks if t.status != "not_run"]
    return histogram("Duration", values, seconds, "no attempt ran")


def cost_chart(tasks: Sequence[evalctl.TaskResult]) -> Chart:
    ran = [t for t in tasks if t.status != "not_run"]
    values = [(t.cost, t.passed) for t in ran if t.cost is not None]
    chart = histogram("Cost", values, evalctl.format_money,
                      "unpriced: the model has no price, so there is no cost to show"
                      if ran else "no attempt ran")
    if values and max(v for v, _ in values) == 0:
        chart.rects, chart.texts = [], []
        chart.empty = f"every attempt cost {evalctl.format_money(0.0)}"
    return chart
