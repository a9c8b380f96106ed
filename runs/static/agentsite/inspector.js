/* Agentsite context inspector: what the next model call would see, against the raw ledger.
   Reads GET /api/sessions/<id>/context/ and draws, per past model call, raw-ledger tokens
   against sent tokens, marking where a summary advanced or tool results were compacted. */
(() => {
  "use strict";
  // Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
  const gettext = window.gettext || ((text) => text);
  const ngettext = window.ngettext || ((one, other, count) => (count === 1 ? one : other));
  const interpolate = window.interpolate || ((format, values) => format.replace(/%\((\w+)\)s/g, (_, key) => values[key]));
  const format = (text, values) => interpolate(text, values, true);

  const section = document.getElementById("context-inspector");
  if (!section) return;
  const status = document.getElementById("context-status");
  const totals = document.getElementById("context-totals");
  const figure = document.getElementById("context-chart-figure");
  const chart = document.getElementById("context-chart");
  const blocksHeading = document.getElementById("context-blocks-heading");
  const blocks = document.getElementById("context-blocks");
  const pinnedHeading = document.getElementById("context-pinned-heading");
  const pinned = document.getElementById("context-pinned");
  const manifestHeading = document.getElementById("context-manifest-heading");
  const manifestTable = document.getElementById("context-manifest");
  const SVG = "http://www.w3.org/2000/svg";

  function el(tag, attrs = {}, text) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svg(tag, attrs = {}, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  const number = (value) => (typeof value === "number" ? value.toLocaleString() : "–");

  function showTotals(report) {
    const t = report.totals;
    if (!t) return;
    const saved = t.raw_tokens > 0 ? Math.round((100 * t.saved_tokens) / t.raw_tokens) : 0;
    const tokens = (value) => format(gettext("%(count)s tokens"), { count: number(value) });
    const facts = [
      [gettext("Next call sends"), tokens(t.sent_tokens)],
      [gettext("Raw ledger"), format(gettext("%(count)s tokens (%(saved)s saved)"), { count: number(t.raw_tokens), saved: `${saved}%` })],
      [gettext("Context window"), tokens(report.context_window)],
      [gettext("Ledger events"), number(t.ledger_events)],
      [gettext("Behind the summary"), format(gettext("%(count)s events"), { count: number(t.hidden_events) })],
      [gettext("Summary boundary"), report.boundary ? format(gettext("seq %(seq)s"), { seq: report.boundary.last_seq }) : gettext("none yet")],
    ];
    const list = el("dl");
    for (const [term, value] of facts) {
      list.append(el("dt", {}, term), el("dd", {}, value));
    }
    totals.replaceChildren(list);
    totals.hidden = false;
  }

  function drawChart(calls) {
    if (!calls.length) return;
    const width = 720;
    const height = 240;
    const pad = { left: 56, right: 16, top: 16, bottom: 32 };
    const max = Math.max(1, ...calls.map((c) => Math.max(c.raw_tokens || 0, c.sent_tokens || 0)));
    const x = (i) => pad.left + (calls.length === 1 ? 0 : (i * (width - pad.left - pad.right)) / (calls.length - 1));
    const y = (v) => height - pad.bottom - ((v || 0) * (height - pad.top - pad.bottom)) / max;
    const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "context-svg", "aria-hidden": "true" });
    for (const fraction of [0, 0.5, 1]) {
      const value = Math.round(max * fraction);
      root.append(
        svg("line", { x1: pad.left, x2: width - pad.right, y1: y(value), y2: y(value), class: "grid" }),
        svg("text", { x: pad.left - 6, y: y(value) + 4, "text-anchor": "end", class: "axis" }, value.toLocaleString()),
      );
    }
    const line = (key, cls) =>
      svg("polyline", { points: calls.map((c, i) => `${x(i)},${y(c[key])}`).join(" "), class: cls, fill: "none" });
    root.append(line("raw_tokens", "raw"), line("sent_tokens", "sent"));
    let previousVersion = null;
    calls.forEach((call, i) => {
      const version = call.summary ? call.summary.version : null;
      if (version !== null && version !== previousVersion) {
        root.append(svg("text", { x: x(i), y: y(call.sent_tokens) - 8, "text-anchor": "middle", class: "mark-summary" }, "◆"));
      }
      previousVersion = version;
      const precall = call.precall || {};
      if ((precall.wait_ms || 0) > 0) {
        // Issue 12, C5: the call waited for a summary (the synchronous fallback or one in flight).
        const mark = svg("text", { x: x(i), y: pad.top + 2, "text-anchor": "middle", class: "mark-stall" }, "●");
        mark.append(svg("title", {}, format(gettext("waited %(ms)s ms for a summary"), { ms: number(Math.round(precall.wait_ms)) })));
        root.append(mark);
      }
      if (call.intra_run_summary) {
        // Issue 18: a summary made inside this run hides its earlier rounds (resume tail shown).
        const mark = svg("text", { x: x(i), y: y(call.sent_tokens) + 16, "text-anchor": "middle", class: "mark-summary" }, "◇");
        mark.append(svg("title", {}, gettext("intra-run summary: the run's earlier rounds are summarized")));
        root.append(mark);
      }
      const compaction = call.compaction || {};
      if ((compaction.pass0 || 0) + (compaction.pass1 || 0) + (compaction.pass2 || 0) + (compaction.resume_tail || 0) + (compaction.fallback || 0) > 0) {
        root.append(svg("text", { x: x(i), y: height - pad.bottom + 14, "text-anchor": "middle", class: "mark-compaction" }, "▲"));
      }
    });
    root.append(
      svg("text", { x: pad.left + 8, y: pad.top + 4, class: "legend raw" }, gettext("- - raw ledger")),
      svg("text", { x: pad.left + 8, y: pad.top + 20, class: "legend sent" }, gettext("—— sent")),
    );
    chart.replaceChildren(root);
    const last = calls[calls.length - 1];
    const waited = calls.filter((c) => ((c.precall || {}).wait_ms || 0) > 0).length;
    chart.setAttribute(
      "aria-label",
      format(gettext("%(calls)s model calls; the last sent %(sent)s of %(raw)s raw tokens; %(waited)s waited for a summary."), {
        calls: calls.length, sent: number(last.sent_tokens), raw: number(last.raw_tokens), waited,
      }),
    );
    figure.hidden = false;
  }

  // Issue 20: a message's images and files, each counted at a fixed estimate; stored ones
  // link to their artifact (GET /api/sessions/<id>/artifacts/<name>?version=).
  const artifactsUrl = section.dataset.url.replace(/context\/?$/, "artifacts/");

  function attachmentList(attachments) {
    const list = el("ul", { class: "attachments" });
    for (const file of attachments) {
      const entry = el("li", { class: "attachment" });
      const href = file.artifact
        ? `${artifactsUrl}${encodeURIComponent(file.artifact.filename)}?version=${file.artifact.version}`
        : file.url;
      const link = el("a", file.artifact ? { href, download: "" } : { href, rel: "noopener noreferrer", target: "_blank" });
      if (file.artifact && file.type === "image") link.append(el("img", { class: "attachment-thumb", src: href, alt: "", loading: "lazy" }));
      link.append(document.createTextNode(file.name || gettext("attachment")));
      const tokens = format(gettext("~%(count)s tokens"), { count: number(file.tokens) });
      entry.append(link, el("span", { class: "muted" }, `${file.mime || gettext("image by URL")} · ${tokens}`));
      list.append(entry);
    }
    return list;
  }

  function showBlocks(items) {
    for (const block of items) {
      const item = el("li", { class: `context-block kind-${block.kind}` });
      const head = el("div", { class: "context-block-head" });
      head.append(el("span", { class: "badge" }, block.kind), el("span", { class: "muted" }, block.role || ""));
      // Issue 18: where a shown event comes from, beyond its kind.
      if (block.resume_tail) head.append(el("span", { class: "badge" }, gettext("resume tail")));
      if (block.seeded) head.append(el("span", { class: "badge" }, gettext("seeded history")));
      if (block.merged_events) head.append(el("span", { class: "badge" }, format(gettext("%(count)s events merged"), { count: block.merged_events })));
      if (block.kind === "summary" && block.intra_run) head.append(el("span", { class: "badge" }, gettext("intra-run")));
      head.append(el("span", { class: "tokens" }, format(gettext("%(count)s tokens"), { count: number(block.tokens) })));
      item.append(head);
      if (block.preview) item.append(el("p", { class: "context-preview" }, block.preview));
      if (block.attachments && block.attachments.length) item.append(attachmentList(block.attachments));
      blocks.append(item);
    }
    blocksHeading.hidden = !items.length;
  }

  // Issue 12, C3: what each disposition means for the model, and how it gets the rest back.
  const WAY_BACK = {
    verbatim: gettext("in the request as recorded"),
    truncated: gettext("head and tail shown; session_load with the event_id pages through the rest"),
    placeholder: gettext("session_load with the event_id in the placeholder"),
    withheld: gettext("left out by the tool policy on purpose"),
    summarized: gettext("the summary stands for it; session_search scope current_hidden, then session_load"),
    gap: gettext("not loaded (announced); session_load with seq"),
    silent: gettext("nothing to show a model (completion marker, state change)"),
    foreign: gettext("another branch of the session"),
    // Issue 21: a turn the user regenerated or edited; the newer version replaces it.
    superseded: gettext("replaced by a regenerated or edited turn; the ledger keeps it"),
  };

  function showManifest(manifest) {
    if (!manifest || !pinned || !manifestTable) return;
    const body = manifestTable.querySelector("tbody");
    body.replaceChildren();
    for (const [disposition, first, last] of manifest.ranges || []) {
      const row = el("tr", { class: `manifest-${disposition}` });
      row.append(
        el("td", {}, first === last ? `${first}` : `${first}–${last}`),
        el("td", {}, disposition),
        el("td", { class: "muted" }, WAY_BACK[disposition] || ""),
      );
      body.append(row);
    }
    const counts = Object.entries(manifest.counts || {}).map(([k, v]) => `${v} ${k}`).join(", ");
    manifestHeading.textContent = format(gettext("Manifest: %(coverage)s of %(events)s ledger events accounted for (%(counts)s)"), {
      coverage: `${Math.round(100 * (manifest.coverage ?? 0))}%`, events: number(manifest.last_seq), counts,
    });
    manifestHeading.hidden = false;
    manifestTable.hidden = false;
  }

  function showPinned(items) {
    if (!pinned) return;
    const block = items.find((b) => b.kind === "pinned");
    pinned.replaceChildren();
    if (!block) return;
    for (const pin of block.pins || []) {
      const item = el("li", {});
      item.append(el("span", { class: "badge" }, pin.kind), document.createTextNode(` ${pin.text} `),
        el("span", { class: "muted" }, format(gettext("(event seq %(seq)s)"), { seq: pin.source_seq })));
      pinned.append(item);
    }
    if ((block.omitted || []).length) pinned.append(el("li", { class: "muted" }, format(gettext("%(count)s more over the pinned budget"), { count: block.omitted.length })));
    pinnedHeading.hidden = false;
  }

  async function load() {
    try {
      const response = await fetch(section.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      const report = await response.json();
      if (!response.ok) throw new Error((report.error && report.error.message) || response.statusText);
      const calls = (report.calls || []).filter((c) => typeof c.sent_tokens === "number");
      showTotals(report);
      drawChart(calls);
      showPinned(report.blocks || []);
      showManifest(report.manifest);
      showBlocks(report.blocks || []);
      status.textContent = calls.length
        ? format(gettext("%(count)s model call(s) recorded; the chart shows each one."), { count: calls.length })
        : gettext("No model call recorded yet: the chart appears after the first run.");
    } catch (error) {
      status.textContent = format(gettext("The context inspector could not load: %(error)s"), { error: error.message });
      status.classList.add("error-text");
    }
  }

  load();
})();
