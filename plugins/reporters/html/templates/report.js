/* evalctl's HTML report: the task table and the task pages.
 *
 * Everything the run recorded reaches the screen through textContent (el() below),
 * never as markup, and links are only the page's own (#…) or the ones the reporter
 * built to the run's files (./…, ../…, file:). The view lives in the URL fragment, so
 * a link points at one filtered table or one task. Each task's details are inert JSON
 * parsed only when that task is opened.
 */
(function () {
  "use strict";

  const timing = (window.evalctlTiming = { taskRenders: 0 });
  const data = JSON.parse(document.getElementById("run-data").textContent);
  const rows = data.rows;
  const byKey = new Map(rows.map((row) => [row.key, row]));
  const PAGE_SIZE = 100;
  const LONG_CHARS = 1200;
  const LONG_LINES = 20;
  const STATUS_ORDER = { failed: 0, error: 1, not_run: 2, passed: 3 };
  const DEFAULTS = { status: "", tag: "", check: "", q: "", sort: "", dir: "asc", page: "1", task: "" };

  const $ = (id) => document.getElementById(id);
  const tableSection = $("tasks");
  const taskSection = $("task");
  const otherSections = ["overview", "compare"].map($).filter(Boolean);

  // Invisible characters that reorder or hide the text around them (bidirectional
  // controls, zero-width spaces, tag characters), shown as escapes (\u202e) the way
  // evalctl escapes them in every other report, so a transcript or a diff reads as it is.
  const INVISIBLE = /[\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\u{e0000}-\u{e007f}]/gu;
  const shown = (text) => text.replace(INVISIBLE, (c) => {
    const code = c.codePointAt(0).toString(16);
    return code.length > 4 ? "\\U" + code.padStart(8, "0") : "\\u" + code.padStart(4, "0");
  });

  function safeHref(href) {
    return /^(#|\.\/|\.\.\/|file:)/.test(href) ? href : "#";
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "href") node.setAttribute("href", safeHref(String(value)));
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : shown(String(child))); // text, never markup
    }
    return node;
  }

  const statusLabel = (status) => status.replace("_", " ");
  const badge = (text, cls) => el("span", { class: "badge " + cls }, text);
  const money = (cost) => (cost === null || cost === undefined ? "unpriced" : "$" + cost.toFixed(4));
  const seconds = (value) => (value < 1 ? (value * 1000).toFixed(0) + " ms" : value.toFixed(1) + " s");
  const number = (value) => value.toLocaleString("en-US");

  /* ---- the view in the URL fragment ---- */

  function readState() {
    const params = new URLSearchParams(location.hash.slice(1));
    const state = { ...DEFAULTS };
    for (const key of Object.keys(DEFAULTS)) if (params.has(key)) state[key] = params.get(key);
    return state;
  }

  function hashOf(state) {
    const params = new URLSearchParams();
    for (const key of Object.keys(DEFAULTS)) {
      if (state[key] && state[key] !== DEFAULTS[key]) params.set(key, state[key]);
    }
    const text = params.toString();
    return text ? "#" + text : "#";
  }

  let shownHash = null;

  function go(state, replace) {
    const hash = hashOf(state);
    if (hash !== (location.hash || "#")) {
      if (replace) location.replace(hash);
      else location.hash = hash;
    }
    route();
  }

  /* ---- the table ---- */

  function searchText(row) {
    if (row.search === undefined) {
      row.search = [row.label, row.status, row.exit, row.why, ...row.tags, ...row.checks]
        .join(" ").toLowerCase();
    }
    return row.search;
  }

  function filtered(state) {
    const query = state.q.trim().toLowerCase();
    // "!type": that check failed; "?type": it could not run (a grader error); else: has it
    const mark = state.check.charAt(0);
    const among = mark === "!" ? "failed" : mark === "?" ? "errored" : "checks";
    const check = among === "checks" ? state.check : state.check.slice(1);
    const out = rows.filter((row) =>
      (!state.status || row.status === state.status) &&
      (!state.tag || row.tags.includes(state.tag)) &&
      (!check || (row[among] || []).includes(check)) &&
      (!query || searchText(row).includes(query)));
    const key = {
      label: (r) => r.label, status: (r) => STATUS_ORDER[r.status], why: (r) => r.why,
      exit: (r) => r.exit, turns: (r) => r.turns, calls: (r) => r.calls,
      tokens: (r) => r.tokens[0] + r.tokens[1], cost: (r) => (r.cost === null ? -1 : r.cost),
      duration: (r) => r.duration,
    }[state.sort];
    if (key) {
      const sign = state.dir === "desc" ? -1 : 1;
      out.sort((a, b) => {
        const x = key(a), y = key(b);
        return (x < y ? -1 : x > y ? 1 : a.i - b.i) * sign;
      });
    }
    return out;
  }

  function fillSelect(select, options) {
    for (const [value, label] of options) select.append(el("option", { value }, label));
  }

  function setupControls() {
    const tags = [...new Set(rows.flatMap((r) => r.tags))].sort();
    fillSelect($("f-tag"), tags.map((t) => [t, t]));
    const checks = [...new Set(rows.flatMap((r) => r.checks))].sort();
    fillSelect($("f-check"), [
      ...checks.map((c) => ["!" + c, c + " failed"]),
      ...[...new Set(rows.flatMap((r) => r.errored || []))].sort()
        .map((c) => ["?" + c, c + " grader error"]),
      ...checks.map((c) => [c, "has " + c]),
    ]);
    const update = (field, value) => {
      const state = readState();
      state[field] = value;
      state.page = "1";
      go(state, true);
    };
    $("f-status").addEventListener("change", (e) => update("status", e.target.value));
    $("f-tag").addEventListener("change", (e) => update("tag", e.target.value));
    $("f-check").addEventListener("change", (e) => update("check", e.target.value));
    $("f-q").addEventListener("input", (e) => update("q", e.target.value));
    $("f-reset").addEventListener("click", () => go({ ...DEFAULTS }, true));
    for (const th of document.querySelectorAll("#task-table th[data-sort]")) {
      const column = th.dataset.sort;
      const button = el("button", { type: "button", class: "sort" }, th.textContent);
      th.textContent = "";
      th.append(button);
      button.addEventListener("click", () => {
        const state = readState();
        state.dir = state.sort === column && state.dir === "asc" ? "desc" : "asc";
        state.sort = column;
        state.page = "1";
        go(state, true);
      });
    }
  }

  function syncControls(state) {
    $("f-status").value = state.status;
    $("f-tag").value = state.tag;
    $("f-check").value = state.check;
    if ($("f-q").value !== state.q) $("f-q").value = state.q;
    for (const th of document.querySelectorAll("#task-table th[data-sort]")) {
      th.setAttribute("aria-sort", th.dataset.sort === state.sort
        ? (state.dir === "desc" ? "descending" : "ascending") : "none");
    }
  }

  function row(r, state) {
    const link = hashOf({ ...state, task: r.key });
    const tags = r.tags.map((t) => el("span", { class: "tag" }, t));
    const judged = r.judged.length
      ? el("span", { class: "judge-mark", title: "judge verdicts (apart)" },
        "judge " + r.judged.filter(Boolean).length + "/" + r.judged.length) : null;
    return el("tr", { class: "row s-" + r.status, "data-key": r.key, onclick: (event) => {
      if (event.target.closest("a")) return;
      location.hash = link;
    } },
    el("td", null, el("a", { href: link, class: "task-link" }, r.label), " ", tags),
    el("td", null, badge(statusLabel(r.status), "s-" + r.status),
      r.gaming ? badge("gaming?", "gaming") : null),
    el("td", { class: "why" }, r.why, judged ? [" ", judged] : null),
    el("td", null, r.exit),
    el("td", { class: "num" }, r.turns),
    el("td", { class: "num" }, r.calls),
    el("td", { class: "num" }, number(r.tokens[0]) + " / " + number(r.tokens[1])),
    el("td", { class: "num" }, money(r.cost)),
    el("td", { class: "num" }, seconds(r.duration)));
  }

  function renderTable(state) {
    const started = performance.now();
    const list = filtered(state);
    const pages = Math.max(1, Math.ceil(list.length / PAGE_SIZE));
    const page = Math.min(Math.max(1, parseInt(state.page, 10) || 1), pages);
    const first = (page - 1) * PAGE_SIZE;
    const shown = list.slice(first, first + PAGE_SIZE);
    const body = document.querySelector("#task-table tbody");
    body.replaceChildren(...shown.map((r) => row(r, state)));
    if (!shown.length) {
      body.append(el("tr", null, el("td", { colspan: 9, class: "muted" }, "No attempt matches.")));
    }
    $("count").textContent = list.length
      ? `Showing ${number(first + 1)}–${number(first + shown.length)} of ${number(list.length)} attempts` +
        (list.length !== rows.length ? ` (filtered from ${number(rows.length)})` : "")
      : `No attempt of ${number(rows.length)} matches`;
    const pager = $("pager");
    pager.replaceChildren();
    if (pages > 1) {
      const to = (n) => hashOf({ ...state, page: String(n) });
      pager.append(
        page > 1 ? el("a", { href: to(page - 1), rel: "prev" }, "‹ previous") : el("span", { class: "muted" }, "‹ previous"),
        el("span", null, ` page ${page} of ${pages} `),
        page < pages ? el("a", { href: to(page + 1), rel: "next" }, "next ›") : el("span", { class: "muted" }, "next ›"));
    }
    syncControls(state);
    timing.lastTable = performance.now() - started;
  }

  /* ---- a task page ---- */

  function withDetails(index, use) {
    const node = document.getElementById("task-" + index);
    if (node) return use(JSON.parse(node.textContent));
    if (document.readyState === "loading") { // opened by a link before the page finished loading
      document.addEventListener("DOMContentLoaded", () => withDetails(index, use), { once: true });
      return undefined;
    }
    return use(null);
  }

  const isLong = (text) => text.length > LONG_CHARS || text.split("\n").length > LONG_LINES;

  function cutNote(text, details) {
    if (!text.cut) return null;
    const where = details && details.ledger
      ? el("a", { href: details.ledger.href }, "the ledger") : "the ledger";
    return el("p", { class: "cut" }, "Cut to fit; as recorded at line " + text.cut + " of ", where, ".");
  }

  function textBlock(text, details, cls) {
    return [el("pre", { class: cls || null }, text.text), cutNote(text, details)];
  }

  function collapsible(summary, body, open, cls) {
    return el("details", { class: cls || null, open: open }, el("summary", null, summary), body);
  }

  function preview(call) {
    const line = call.input.text.split("\n").find((l) => l.trim()) || "";
    return line.length > 100 ? line.slice(0, 99) + "…" : line;
  }

  function renderCall(call, details) {
    const failed = call.error || call.denied !== null;
    const long = isLong(call.input.text) || (call.output !== null && isLong(call.output.text));
    return collapsible(
      [el("span", { class: "tool" }, call.name), " ", el("span", { class: "preview" }, preview(call)),
        call.error ? badge("tool error", "s-error") : null,
        call.denied !== null ? badge("denied", "s-error") : null],
      el("div", { class: "io" },
        el("h5", null, "input"), textBlock(call.input, details),
        call.denied !== null ? el("p", { class: "denied" }, "Denied: " + call.denied) : null,
        el("h5", null, "output"),
        call.output !== null ? textBlock(call.output, details, call.error ? "error" : null)
          : el("p", { class: "muted" }, "no result recorded")),
      !long, "call" + (failed ? " failed" : ""));
  }

  function renderTranscript(details) {
    const box = el("div", { class: "transcript" });
    for (const item of details.transcript) {
      if (item.k === "note") {
        box.append(el("p", { class: "note " + item.level }, item.text));
        continue;
      }
      const head = [item.n ? "turn " + item.n : "tool calls"];
      if (item.stop) head.push(item.stop);
      if (item.tokens) head.push(number(item.tokens[0]) + " in / " + number(item.tokens[1]) + " out tokens");
      if (item.model) head.push(item.model);
      box.append(el("article", { class: "turn" },
        el("h4", null, head.join(" · ")),
        item.say && item.say.text ? el("div", { class: "say" }, textBlock(item.say, details)) : null,
        item.calls.map((call) => renderCall(call, details))));
    }
    if (details.transcriptProblem) box.append(el("p", { class: "note warn" }, details.transcriptProblem));
    if (!details.transcript.length && !details.transcriptProblem) {
      box.append(el("p", { class: "muted" }, "The ledger holds no model turn."));
    }
    return box;
  }

  function renderDiff(text) {
    return el("pre", { class: "diff" }, text.split("\n").map((line) => {
      const cls = line.startsWith("+++") || line.startsWith("---") ? "file"
        : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : null;
      return el("span", { class: cls }, line); // a block per line: copying keeps the lines
    }));
  }

  function renderChangedFile(file) {
    const body = file.diff !== undefined
      ? (file.diff ? renderDiff(file.diff) : el("p", { class: "muted" }, "empty file"))
      : el("p", { class: "muted" }, file.note);
    return collapsible([badge(file.change, "c-" + file.change), " ", el("code", null, file.path)],
      body, !file.diff || file.diff.split("\n").length <= 80, "file");
  }

  function renderChanges(details) {
    const box = el("div", { class: "changes" });
    // What changed after the agent stopped (the verify files evalctl wrote, what the
    // checks wrote) is not the agent's work: it is listed apart, never as the agent's.
    const agents = details.changes.filter((file) => !file.after);
    const after = details.changes.filter((file) => file.after);
    for (const file of agents) box.append(renderChangedFile(file));
    if (details.changesProblem) box.append(el("p", { class: "note warn" }, details.changesProblem));
    else if (!agents.length) box.append(el("p", { class: "muted" }, "The agent left the seeded files as they were and added none."));
    if (details.changesUnattributed) box.append(el("p", { class: "note warn" }, details.changesUnattributed));
    if (after.length) {
      box.append(el("h4", { class: "changes-after" }, "Written after the agent finished"));
      box.append(el("p", { class: "muted" }, "Not the agent's work: evalctl wrote the task's verify files here after the agent stopped (verify_files, verify_patch), and the checks ran here."));
      for (const file of after) box.append(renderChangedFile(file));
    }
    return box;
  }

  function renderChecks(details) {
    return el("ul", { class: "checks" }, details.checks.map((c) => {
      const state = c.error ? "error" : c.passed ? "passed" : "failed";
      return el("li", { class: "check s-" + state + (c.gaming ? " gaming" : "") },
        el("div", { class: "check-head" },
          badge(c.error ? "grader error" : c.passed ? "pass" : "fail", "s-" + state), " ",
          c.error ? el("span", { class: "kind" }, " could not run or crashed: not a failure of the agent's ") : null,
          el("code", null, c.type),
          c.kind !== "mechanical" ? el("span", { class: "kind" }, " " + c.kind + ", reported apart: does not decide the task") : null,
          c.rate ? el("span", { class: "kind" }, " feeds " + c.rate + "_rate") : null,
          c.gaming ? badge("⚠ suspected gaming", "gaming") : null,
          c.usage ? el("span", { class: "kind" }, ` ${number(c.usage.input_tokens)} in / ${number(c.usage.output_tokens)} out tokens, ${c.cost}`) : null),
        c.detail ? (isLong(c.detail) ? collapsible("detail", el("pre", null, c.detail), false)
          : el("pre", null, c.detail)) : null);
    }));
  }

  function renderTask(r, details, state) {
    const list = filtered({ ...state, task: "" });
    const at = list.findIndex((x) => x.key === r.key);
    const back = hashOf({ ...state, task: "" });
    const nav = el("nav", { class: "task-nav" },
      el("a", { href: back, id: "back" }, "← all tasks"),
      at > 0 ? el("a", { href: hashOf({ ...state, task: list[at - 1].key }), rel: "prev" }, "‹ previous") : null,
      at >= 0 && at < list.length - 1 ? el("a", { href: hashOf({ ...state, task: list[at + 1].key }), rel: "next" }, "next ›") : null,
      at >= 0 ? el("span", { class: "muted" }, `${at + 1} of ${list.length}`) : null);
    const facts = [
      ["exit status", r.exit || "none"], ["turns", r.turns], ["tool calls", r.calls],
      ["tokens in / out", number(r.tokens[0]) + " / " + number(r.tokens[1])],
      ["cost", money(r.cost)], ["time", seconds(r.duration)],
    ];
    const parts = [nav,
      el("h2", null, r.label, " ", badge(statusLabel(r.status), "s-" + r.status)),
      el("p", { class: "tags" }, r.tags.map((t) => el("span", { class: "tag" }, t))),
      el("dl", { class: "facts-inline" }, facts.map(([k, v]) => el("div", null, el("dt", null, k), el("dd", null, String(v)))))];
    if (!details) {
      parts.push(el("p", { class: "banner error" }, "This page has no details for this attempt."));
      return parts;
    }
    if (details.error) parts.push(el("p", { class: "banner error" }, details.error));
    const links = [];
    if (details.ledger) links.push("ledger: ", el("a", { href: details.ledger.href }, details.ledger.path));
    if (details.workspace) links.push(" · workspace: ", el("a", { href: details.workspace.href }, details.workspace.path));
    parts.push(
      el("h3", null, "Prompt"),
      details.prompt !== null ? el("pre", { class: "prompt" }, details.prompt)
        : el("p", { class: "muted" }, "The prompt was not recorded (no ledger)."),
      el("h3", null, "Checks"), renderChecks(details),
      el("h3", null, "Transcript"), renderTranscript(details),
      el("h3", null, "Changes against the seed"), renderChanges(details),
      el("p", { class: "links muted" }, links));
    return parts;
  }

  function showTask(state) {
    const started = performance.now();
    const r = byKey.get(state.task);
    const done = (parts) => {
      taskSection.replaceChildren(...parts);
      taskSection.hidden = false;
      tableSection.hidden = true;
      for (const section of otherSections) section.hidden = true;
      document.title = (r ? r.label + " · " + statusLabel(r.status) : "no such attempt") + " · " + baseTitle;
      window.scrollTo(0, 0);
      timing.lastTask = performance.now() - started;
      timing.taskRenders += 1;
    };
    if (!r) {
      done([el("p", { class: "banner error" }, "No attempt named “" + state.task + "” in this run."),
        el("a", { href: hashOf({ ...state, task: "" }) }, "← all tasks")]);
      return;
    }
    withDetails(r.i, (details) => done(renderTask(r, details, state)));
  }

  /* ---- routing ---- */

  const baseTitle = document.title;
  let tableScroll = null;

  function route() {
    const hash = location.hash || "#";
    if (hash === shownHash) return;
    shownHash = hash;
    const state = readState();
    if (state.task) {
      if (!tableSection.hidden) tableScroll = window.scrollY;
      showTask(state);
      return;
    }
    const wasTask = !taskSection.hidden;
    taskSection.hidden = true;
    taskSection.replaceChildren();
    tableSection.hidden = false;
    for (const section of otherSections) section.hidden = false;
    document.title = baseTitle;
    renderTable(state);
    if (wasTask && tableScroll !== null) window.scrollTo(0, tableScroll);
  }

  setupControls();
  window.addEventListener("hashchange", route);
  route();
  timing.ready = performance.now();
  requestAnimationFrame(() => setTimeout(() => { timing.painted = performance.now(); }, 0));
})();
