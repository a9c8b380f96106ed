/* Agentsite chat: history over REST, live runs over the session's websocket (AG-UI events).
 *
 * What is on screen is keyed by ledger identity: messages by messageId, tool calls by
 * toolCallId, notices by event id. The ledger (GET /api/sessions/<id>/events/) is the
 * truth: it is loaded first, re-read after every run and before every reconnect, and each
 * websocket connects with `after_seq` set to the last seq already shown, so a dropped
 * socket, a replay or a second tab never draws anything twice.
 *
 * Model text is only ever set with textContent / text nodes, never as HTML.
 *
 * While a reply runs, the message box stays open: what is sent then is queued for the run's
 * next model step (SPEC 1.5, a `message` frame) and shown in the tray above the box as
 * "Queued" until the run takes it (`message.consumed`): then it appears in its place in the
 * conversation. Queued messages can be withdrawn (DELETE /api/runs/<id>/messages/); they come
 * back into the message box, as do those a cancel dropped.
 */
(() => {
  "use strict";
  // Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
  const gettext = window.gettext || ((text) => text);
  const interpolate = window.interpolate || ((format, values) => format.replace(/%\((\w+)\)s/g, (_, key) => values[key]));
  const format = (text, values) => interpolate(text, values, true);

  const config = JSON.parse(document.getElementById("chat-config").textContent);
  const $ = (id) => document.getElementById(id);
  const els = {
    shell: $("shell"),
    sidebar: $("sidebar"),
    scrim: $("sidebar-scrim"),
    sidebarToggle: $("sidebar-toggle"),
    sessionList: $("session-list"),
    conversation: $("conversation"),
    messages: $("messages"),
    empty: $("empty-state"),
    historyStatus: $("history-status"),
    form: $("composer"),
    input: $("composer-input"),
    send: $("send-button"),
    agentSelect: $("agent-select"),
    badge: $("model-badge"),
    badgeText: $("model-badge-text"),
    connection: $("connection-status"),
    ledgerLink: $("ledger-link"),
    title: $("chat-title"),
    runStatus: $("run-status"),
    emptyAgentName: $("empty-agent-name"),
    emptyAgentDescription: $("empty-agent-description"),
    queuedTray: $("queued-tray"),
    attachmentTray: $("attachment-tray"),
    attachButton: $("attach-button"),
    attachInput: $("attach-input"),
  };

  const REPAIRED_ERROR_TEXT = gettext("An error occurred during execution. Please contact the service provider.");
  const FATAL_CLOSE_CODES = new Set([4400, 4401, 4403, 4404]);
  const TITLE_CHARS = 80;

  const state = {
    sessionId: config.sessionId,
    agent: config.agent,
    lastSeq: 0,
    socket: null,
    socketReady: false,
    socketEverOpened: false,
    reconnectDelay: 500,
    reconnectTimer: null,
    outbox: [],
    running: false,
    runId: null,
    awaitingAcceptSince: 0,
    cancelRequested: false,
    cancelAfterAccept: false,
    lastFrameAt: 0,
    lastEvent: null,
    messages: new Map(), // messageId -> message record
    tools: new Map(), // toolCallId -> tool record
    notices: new Map(), // key -> element
    artifacts: new Set(),
    graphs: new Map(), // runId -> graph progress card (node steps of a graph run)
    approvals: new Map(), // interruptId -> approval card of a paused graph run
    pendingUsers: [], // user bubbles sent from here, not yet seen in the ledger
    queued: [], // messages sent into the running reply, not yet taken by it (steering)
    attachments: [], // images and files staged for the next message: {name, mime, size, dataUrl, previewUrl}
    steerPending: [], // of those, the ones whose `message` frame awaits its answer, in order
    liveErrors: [], // error notices from the socket, not yet seen in the ledger
    erroredInvocations: new Set(),
    thinking: null,
    syncing: Promise.resolve(),
  };

  // -- small helpers ------------------------------------------------------------------------

  function url(name, params = {}) {
    let value = config.urls[name];
    for (const [key, replacement] of Object.entries(params)) {
      value = value.replace(key, encodeURIComponent(replacement));
    }
    return value;
  }

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  async function api(method, path, body) {
    const response = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: {
        Accept: "application/json",
        ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
        ...(method !== "GET" ? { "X-CSRFToken": csrfToken() } : {}),
      },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      const error = (data && data.error) || {};
      const failure = new Error(error.message || `${method} ${path} answered ${response.status}`);
      failure.code = error.code || String(response.status);
      failure.status = response.status;
      throw failure;
    }
    return data;
  }

  function h(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "className") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function svg(path, size = 14) {
    const ns = "http://www.w3.org/2000/svg";
    const icon = document.createElementNS(ns, "svg");
    icon.setAttribute("viewBox", "0 0 20 20");
    icon.setAttribute("width", size);
    icon.setAttribute("height", size);
    icon.setAttribute("aria-hidden", "true");
    const p = document.createElementNS(ns, "path");
    p.setAttribute("d", path);
    p.setAttribute("fill", "none");
    p.setAttribute("stroke", "currentColor");
    p.setAttribute("stroke-width", "1.8");
    p.setAttribute("stroke-linecap", "round");
    p.setAttribute("stroke-linejoin", "round");
    icon.appendChild(p);
    return icon;
  }

  const ICONS = {
    tool: "M12.5 3.5a4 4 0 0 0-4.9 5.2L3.5 12.8a1.6 1.6 0 0 0 2.3 2.3l4.1-4.1a4 4 0 0 0 5.2-4.9l-2.4 2.4-2-.6-.6-2z",
    check: "M4 10.5l4 4 8-9",
    cross: "M5 5l10 10M15 5L5 15",
    file: "M6 2.5h5l4 4v11H6zM11 2.5v4h4",
    stop: "M10 3a7 7 0 1 0 0 14a7 7 0 1 0 0-14zM5.1 5.1l9.8 9.8",
    pause: "M7 4.5v11M13 4.5v11",
  };

  function prettyJson(text) {
    if (typeof text !== "string") return JSON.stringify(text, null, 2);
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (_) {
      return text;
    }
  }

  function parseJson(text) {
    try {
      return JSON.parse(text);
    } catch (_) {
      return undefined;
    }
  }

  function isErrorResult(content) {
    const value = parseJson(content);
    return Boolean(
      value && typeof value === "object" && !Array.isArray(value) &&
      Object.prototype.hasOwnProperty.call(value, "error") && Object.keys(value).length <= 2
    );
  }

  function relativeTime(date) {
    const seconds = (Date.now() - date.getTime()) / 1000;
    if (seconds < 45) return gettext("just now");
    if (seconds < 3600) return format(gettext("%(count)s min ago"), { count: Math.round(seconds / 60) });
    if (seconds < 86400) return format(gettext("%(count)s h ago"), { count: Math.round(seconds / 3600) });
    if (seconds < 172800) return gettext("yesterday");
    return date.toLocaleDateString(undefined, { month: "short", day: "numeric" });
  }

  function refreshTimes() {
    for (const node of document.querySelectorAll("time.session-time")) {
      const date = new Date(node.getAttribute("datetime"));
      if (!Number.isNaN(date.getTime())) {
        node.textContent = relativeTime(date);
        node.title = date.toLocaleString();
      }
    }
  }

  // -- safe, markdown-ish rendering ---------------------------------------------------------

  function appendInline(parent, text) {
    const pattern = /(`[^`\n]+`|\*\*[^*\n]+\*\*)/g;
    let last = 0;
    let match;
    while ((match = pattern.exec(text))) {
      if (match.index > last) parent.appendChild(document.createTextNode(text.slice(last, match.index)));
      const token = match[0];
      const code = token.startsWith("`");
      parent.appendChild(h(code ? "code" : "strong", { text: code ? token.slice(1, -1) : token.slice(2, -2) }));
      last = pattern.lastIndex;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  function renderRich(target, text) {
    const fragment = document.createDocumentFragment();
    const lines = text.replace(/\r\n?/g, "\n").split("\n");
    let paragraph = [];
    let list = null;
    const flushParagraph = () => {
      if (!paragraph.length) return;
      const p = h("p");
      paragraph.forEach((line, index) => {
        if (index) p.appendChild(h("br"));
        appendInline(p, line);
      });
      fragment.appendChild(p);
      paragraph = [];
    };
    const flushList = () => {
      if (list) fragment.appendChild(list);
      list = null;
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (line.trimStart().startsWith("```")) {
        flushParagraph();
        flushList();
        const body = [];
        i++;
        while (i < lines.length && !lines[i].trimStart().startsWith("```")) body.push(lines[i++]);
        fragment.appendChild(h("pre", { className: "md-code" }, h("code", { text: body.join("\n") })));
        continue;
      }
      const bullet = /^\s*[-*•]\s+(.*)$/.exec(line);
      const numbered = /^\s*(\d{1,3})[.)]\s+(.*)$/.exec(line);
      const heading = /^#{1,6}\s+(.*)$/.exec(line);
      if (bullet || numbered) {
        flushParagraph();
        const tag = bullet ? "ul" : "ol";
        if (!list || list.tagName.toLowerCase() !== tag) {
          flushList();
          list = h(tag, numbered && numbered[1] !== "1" ? { start: numbered[1] } : {});
        }
        const item = h("li");
        appendInline(item, bullet ? bullet[1] : numbered[2]);
        list.appendChild(item);
      } else if (heading) {
        flushParagraph();
        flushList();
        const title = h("h3");
        appendInline(title, heading[1]);
        fragment.appendChild(title);
      } else if (!line.trim()) {
        flushParagraph();
        flushList();
      } else {
        flushList();
        paragraph.push(line);
      }
    }
    flushParagraph();
    flushList();
    if (!fragment.childNodes.length) fragment.appendChild(h("p"));
    target.replaceChildren(fragment);
  }

  // -- scrolling and placement ---------------------------------------------------------------

  function nearBottom() {
    const c = els.conversation;
    return c.scrollHeight - c.scrollTop - c.clientHeight < 140;
  }

  let scrollQueued = false;
  let stickToBottom = true;
  function scrollSoon() {
    if (scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => {
      scrollQueued = false;
      if (stickToBottom) els.conversation.scrollTop = els.conversation.scrollHeight;
    });
  }
  els.conversation.addEventListener("scroll", () => {
    stickToBottom = nearBottom();
  }, { passive: true });

  function place(node) {
    els.empty.hidden = true;
    els.messages.appendChild(node);
    if (state.thinking) els.messages.appendChild(state.thinking);
    scrollSoon();
  }

  function showThinking() {
    if (!state.running) return;
    if (!state.thinking) {
      state.thinking = h("div", { className: "thinking", "aria-hidden": "true" }, h("span"), h("span"), h("span"));
    }
    place(state.thinking);
  }

  function hideThinking() {
    if (state.thinking) state.thinking.remove();
    state.thinking = null;
  }

  // -- messages -------------------------------------------------------------------------------

  const renderQueue = new Set();
  let renderScheduled = false;
  function scheduleRender(record) {
    renderQueue.add(record);
    if (renderScheduled) return;
    renderScheduled = true;
    requestAnimationFrame(() => {
      renderScheduled = false;
      for (const item of renderQueue) {
        if (item.role === "user") item.body.textContent = item.text;
        else renderRich(item.body, item.text);
      }
      renderQueue.clear();
      scrollSoon();
    });
  }

  function createMessage(id, role, author) {
    const user = role === "user";
    const body = h("div", { className: user ? "msg-text" : "md" });
    const element = h(
      "div",
      { className: `msg msg-${user ? "user" : "assistant"}`, dataset: { messageId: id || "" } },
      h("div", { className: "msg-author", text: user ? gettext("You") : author || state.agent || gettext("Assistant") }),
      h("div", { className: "msg-bubble" }, body),
    );
    const record = { id, role: user ? "user" : "assistant", element, body, text: "", ended: false, confirmed: false };
    if (id) state.messages.set(id, record);
    place(element);
    return record;
  }

  function setText(record, text) {
    record.text = text;
    scheduleRender(record);
  }

  function bindMessage(record, id) {
    if (record.id && record.id !== id) state.messages.set(record.id, record);
    record.id = id;
    record.element.dataset.messageId = id;
    record.element.classList.remove("msg-pending");
    state.messages.set(id, record);
  }

  function takePendingUser(text) {
    const index = text === undefined
      ? 0
      : state.pendingUsers.findIndex((r) => r.text.trim() === text.trim());
    if (index < 0 || !state.pendingUsers.length) return null;
    return state.pendingUsers.splice(index, 1)[0];
  }

  function addPendingUser(text, attachments = []) {
    const record = createMessage(null, "user");
    record.element.classList.add("msg-pending");
    setText(record, text);
    if (attachments.length) {
      showAttachments(record, attachments.map((a) => ({ type: a.mime.startsWith("image/") ? "image" : "file", name: a.name, mime: a.mime, size: a.size, href: a.previewUrl })));
    }
    state.pendingUsers.push(record);
    return record;
  }

  function messageStart(id, role) {
    let record = state.messages.get(id);
    if (!record && role === "user") {
      record = takePendingUser();
      if (record) bindMessage(record, id);
    }
    if (!record) record = createMessage(id, role);
    // A start for a message already shown is a replay of its complete text: start over.
    record.text = "";
    record.ended = false;
    if (record.role === "assistant") {
      record.element.classList.add("msg-streaming");
      hideThinking();
    }
    return record;
  }

  function messageContent(id, delta, role) {
    let record = state.messages.get(id);
    if (!record) record = messageStart(id, role || "assistant");
    if (record.role === "assistant") hideThinking();
    setText(record, record.text + (delta || ""));
  }

  function messageEnd(id) {
    const record = state.messages.get(id);
    if (!record) return;
    record.ended = true;
    record.element.classList.remove("msg-streaming");
  }

  // -- tool calls ---------------------------------------------------------------------------

  function setToolStatus(record, status) {
    record.status = status;
    record.card.dataset.status = status;
    const labels = { running: gettext("Running…"), done: gettext("Done"), error: gettext("Failed"), cancelled: gettext("Not completed") };
    const icon = status === "running"
      ? h("span", { className: "spinner", "aria-hidden": "true" })
      : svg(status === "done" ? ICONS.check : status === "error" ? ICONS.cross : ICONS.stop);
    record.stateEl.replaceChildren(icon, h("span", { text: labels[status] }));
  }

  function ensureTool(id, name) {
    let record = state.tools.get(id);
    if (record) {
      if (name && !record.name) {
        record.name = name;
        record.nameEl.textContent = name;
      }
      return record;
    }
    const nameEl = h("span", { className: "tool-name", text: name || "tool" });
    const stateEl = h("span", { className: "tool-state" });
    const argsPre = h("pre", { "aria-label": gettext("Arguments") }, h("code"));
    const args = h("div", { className: "tool-args" }, argsPre);
    const card = h(
      "article",
      { className: "tool-card", dataset: { toolCallId: id, toolName: name || "" }, "aria-label": format(gettext("Tool call %(name)s"), { name: name || "" }) },
      h("header", { className: "tool-head" }, h("span", { className: "tool-icon" }, svg(ICONS.tool)), nameEl, stateEl),
      args,
    );
    record = { id, name, card, nameEl, stateEl, argsPre, args, argsText: "", result: null, status: "running" };
    state.tools.set(id, record);
    setToolStatus(record, "running");
    place(card);
    return record;
  }

  function setToolArgs(record, text) {
    record.argsText = text;
    const shown = text.trim() ? prettyJson(text) : "{}";
    record.argsPre.firstChild.textContent = shown;
  }

  function setToolResult(record, content) {
    const text = typeof content === "string" ? content : JSON.stringify(content);
    const failed = isErrorResult(text);
    const pretty = prettyJson(text);
    const preview = pretty.replace(/\s+/g, " ").slice(0, 120);
    const details = h(
      "details",
      { className: `tool-result${failed ? " is-error" : ""}`, open: failed },
      h("summary", {}, h("span", { text: failed ? gettext("Error") : gettext("Result") }), h("span", { className: "result-preview", text: preview })),
      h("pre", {}, h("code", { text: pretty })),
    );
    if (record.result) record.result.replaceWith(details);
    else record.card.appendChild(details);
    record.result = details;
    setToolStatus(record, failed ? "error" : "done");
    scrollSoon();
  }

  function toolStart(id, name) {
    hideThinking();
    const record = ensureTool(id, name);
    if (!record.result) record.argsText = "";
    return record;
  }

  function toolArgs(id, delta) {
    const record = ensureTool(id);
    if (record.result) return;
    record.argsText += delta || "";
    record.argsPre.firstChild.textContent = record.argsText;
  }

  function toolEnd(id) {
    const record = ensureTool(id);
    setToolArgs(record, record.argsText);
    if (!record.result) showThinking();
  }

  // Issue 21: a long tool's progress (CUSTOM agentsite.tool.progress) as a bar in its card.
  // Live only (never replayed from the ledger); a report for a card that already has its
  // result, or was cancelled, changes nothing, so the bar stays where the cancel stopped it.
  function toolProgress(value) {
    if (!value || !value.toolCallId) return;
    const record = state.tools.get(value.toolCallId);
    if (!record || record.result || record.status !== "running") return;
    const done = Number(value.done) || 0;
    const total = Number(value.total) || 0;
    if (!record.progress) {
      const bar = h("progress", { className: "tool-progress-bar", "aria-label": format(gettext("%(name)s progress"), { name: record.name || gettext("tool") }) });
      const note = h("span", { className: "tool-progress-note" });
      const wrap = h("div", { className: "tool-progress", role: "status", "aria-live": "polite" }, bar, note);
      record.args.after(wrap);
      record.progress = { wrap, bar, note };
    }
    const { bar, note } = record.progress;
    if (total > 0) {
      bar.max = total;
      bar.value = Math.min(done, total);
    } else {
      bar.removeAttribute("value"); // unknown total: an indeterminate bar
    }
    note.textContent = value.note || (total > 0 ? `${done}/${total}` : String(done));
    scrollSoon();
  }

  // -- notices and artifacts ------------------------------------------------------------------

  function notice(key, title, message, { muted = false } = {}) {
    if (state.notices.has(key)) return state.notices.get(key);
    const element = h(
      "div",
      { className: `notice-inline${muted ? " muted-notice" : ""}`, role: muted ? "status" : "alert" },
      h("span", { className: "notice-icon", "aria-hidden": "true" }, svg(muted ? ICONS.stop : ICONS.cross)),
      h("div", {}, h("strong", { text: title }), message ? h("span", { text: message }) : null),
    );
    state.notices.set(key, element);
    place(element);
    return element;
  }

  function errorText(message, code) {
    return code ? `${message} (${code})` : message;
  }

  function liveError(message, code) {
    const key = `live:${state.runId || ""}:${code || ""}:${message}`;
    if (state.notices.has(key)) return;
    const element = notice(key, gettext("The run failed"), errorText(message, code));
    state.liveErrors.push({ message, element });
  }

  function safeHref(value) {
    try {
      const parsed = new URL(String(value), window.location.href);
      return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
    } catch (_) {
      return null;
    }
  }

  function artifact(value) {
    if (!value || typeof value !== "object") return;
    const key = `${value.filename}@${value.version}`;
    if (state.artifacts.has(key)) return;
    state.artifacts.add(key);
    document.dispatchEvent(new CustomEvent("agentsite:artifact", { detail: value })); // artifacts.js
    const href = safeHref(value.url);
    const label = [
      svg(ICONS.file, 16),
      h("span", { text: value.filename || gettext("artifact") }),
      value.version !== undefined ? h("span", { className: "artifact-version", text: `v${value.version}` }) : null,
    ];
    const element = href
      ? h("a", { className: "artifact-link", href, target: "_blank", rel: "noopener" }, ...label)
      : h("span", { className: "artifact-link" }, ...label);
    place(element);
  }

  // -- graph runs: node progress and approvals ------------------------------------------------

  const NODE_LABELS = {
    running: gettext("running"), done: gettext("done"), paused: gettext("waiting for approval"), stopped: gettext("stopped"),
  };

  function graphCard(runId, graphName) {
    let card = state.graphs.get(runId);
    if (card) return card;
    const list = h("ol", { className: "graph-nodes" });
    const element = h(
      "section",
      { className: "graph-card", dataset: { runId }, "aria-label": format(gettext("Progress of the %(name)s run"), { name: graphName || gettext("graph") }) },
      h("header", { className: "graph-head" }, h("span", { className: "graph-title", text: graphName || gettext("graph") }),
        h("span", { className: "graph-sub muted", text: gettext("steps") })),
      list,
    );
    card = { element, list, nodes: new Map() };
    state.graphs.set(runId, card);
    place(element);
    return card;
  }

  function setNode(runId, meta, status) {
    if (!meta || !meta.node) return;
    const card = graphCard(runId || "run", meta.graph);
    let node = card.nodes.get(meta.node);
    if (!node) {
      const stateEl = h("span", { className: "graph-node-state" });
      const element = h("li", { className: "graph-node", dataset: { node: meta.node } },
        h("span", { className: "graph-node-name", text: meta.node }), stateEl);
      node = { element, stateEl };
      card.nodes.set(meta.node, node);
      card.list.appendChild(element);
    }
    node.element.dataset.status = status;
    node.stateEl.replaceChildren(
      status === "running" ? h("span", { className: "spinner", "aria-hidden": "true" })
        : svg(status === "done" ? ICONS.check : status === "paused" ? ICONS.pause : ICONS.stop, 12),
      h("span", { className: "visually-hidden", text: NODE_LABELS[status] }),
    );
    scrollSoon();
  }

  function stopNodes() {
    for (const card of state.graphs.values()) {
      for (const node of card.nodes.values()) {
        if (node.element.dataset.status === "running") node.element.dataset.status = "stopped";
      }
    }
  }

  function resumeUrl(runId) {
    return `${url("runDetail", { RUN_ID: runId })}resume/`;
  }

  /** The approve/reject prompt of a paused graph run; one per interrupt. */
  function approvalCard({ runId, interruptId, message, payload }) {
    const key = interruptId || runId;
    if (!key || state.approvals.has(key)) return state.approvals.get(key);
    const status = h("p", { className: "approval-status muted", role: "status" });
    const approve = h("button", { type: "button", className: "button primary small" }, svg(ICONS.check), h("span", { text: gettext("Approve") }));
    const reject = h("button", { type: "button", className: "button danger small" }, svg(ICONS.cross), h("span", { text: gettext("Reject") }));
    const node = payload && typeof payload === "object" && payload.node ? payload.node : null;
    const element = h(
      "section",
      { className: "approval-card", role: "group", "aria-label": gettext("Approval needed"), dataset: { runId, interruptId: interruptId || "" } },
      h("header", { className: "approval-head" }, h("strong", { text: gettext("Approval needed") }), node ? h("span", { className: "muted", text: node }) : null),
      h("p", { className: "approval-question", text: message || gettext("The run is waiting for your input.") }),
      h("div", { className: "approval-actions" }, approve, reject),
      status,
    );
    const card = { runId, element, approve, reject, status, resolved: false };
    approve.addEventListener("click", () => answerApproval(card, true));
    reject.addEventListener("click", () => answerApproval(card, false));
    state.approvals.set(key, card);
    place(element);
    return card;
  }

  function resolveApproval(card, text) {
    card.resolved = true;
    card.approve.disabled = true;
    card.reject.disabled = true;
    card.element.dataset.state = "resolved";
    card.status.textContent = text;
  }

  async function answerApproval(card, approved) {
    if (card.resolved || state.running) return;
    card.approve.disabled = true;
    card.reject.disabled = true;
    card.status.textContent = gettext("Sending…");
    const message = approved ? gettext("Approve") : gettext("Reject");
    // The bubble goes up before the request: the resumed run's user message can reach the
    // socket before the REST answer does, and it must find this bubble to take its place.
    stickToBottom = true;
    const pending = addPendingUser(message);
    const dropPending = () => {
      state.pendingUsers = state.pendingUsers.filter((record) => record !== pending);
      if (!pending.id) pending.element.remove();
    };
    try {
      const run = await api("POST", resumeUrl(card.runId), { value: { approved }, message });
      resolveApproval(card, approved ? gettext("Approved: the run continues.") : gettext("Rejected: the run continues."));
      state.runId = run.id;
      state.awaitingAcceptSince = 0;
      setRunning(true);
      connect();
    } catch (error) {
      dropPending();
      if (error.status === 409 || error.status === 404) {
        resolveApproval(card, gettext("Already answered."));
      } else {
        card.approve.disabled = false;
        card.reject.disabled = false;
        card.status.textContent = format(gettext("Could not send: %(error)s"), { error: error.message });
      }
    }
  }

  /** After a reload: the session's newest run may still wait for an answer. */
  async function showPendingApproval() {
    try {
      const query = new URLSearchParams({ session_id: state.sessionId, limit: "1" });
      const found = await api("GET", `${config.urls.runs}?${query}`);
      const run = found && found.results && found.results[0];
      if (run && run.interrupt) {
        const interrupt = run.interrupt;
        const payload = interrupt.payload;
        const message = typeof payload === "string" ? payload : (payload && (payload.question || payload.prompt || payload.message)) || "";
        approvalCard({ runId: run.id, interruptId: interrupt.id, message, payload: { ...(typeof payload === "object" ? payload : {}), node: interrupt.node } });
        setRunStatus(gettext("Waiting for your approval"));
      }
    } catch (_) {
      // Not fatal: the run can still be answered through the API.
    }
  }

  // -- run state ------------------------------------------------------------------------------

  function setSendMode(mode) {
    const label = { send: gettext("Send"), cancel: gettext("Cancel"), cancelling: gettext("Cancelling…"), queue: gettext("Queue") }[mode];
    els.send.dataset.mode = mode;
    els.send.classList.toggle("primary", mode === "send" || mode === "queue");
    els.send.classList.toggle("danger", mode === "cancel" || mode === "cancelling");
    els.send.disabled = mode === "cancelling";
    els.send.querySelector(".send-label").textContent = label;
    els.send.setAttribute("aria-label", {
      send: gettext("Send message"), cancel: gettext("Cancel the running reply"), cancelling: gettext("Cancelling"),
      queue: gettext("Queue the message for the running reply"),
    }[mode]);
  }

  /** While a reply runs, the button queues what is typed, or cancels when the box is empty. */
  function updateSendMode() {
    if (!state.running || state.cancelRequested) return;
    setSendMode(els.input.value.trim() ? "queue" : "cancel");
  }

  function setRunStatus(text, busy = false) {
    els.runStatus.replaceChildren(
      ...(busy ? [h("span", { className: "spinner", "aria-hidden": "true" })] : []),
      ...(text ? [h("span", { text })] : []),
    );
  }

  function setRunning(running) {
    if (state.running === running) return;
    state.running = running;
    els.messages.setAttribute("aria-busy", running ? "true" : "false");
    if (running) {
      state.lastFrameAt = Date.now();
      setSendMode("cancel");
      updateSendMode();
      setRunStatus(gettext("Working…"), true);
      showThinking();
    } else {
      state.awaitingAcceptSince = 0;
      setSendMode("send");
      hideThinking();
    }
    // For turns.js and artifacts.js (issue 21): what they offer depends on a reply running.
    document.dispatchEvent(new CustomEvent("agentsite:running", { detail: { running } }));
  }

  function finishRun({ failed = false, waiting = false } = {}) {
    const cancelled = state.cancelRequested;
    if (cancelled || failed) stopNodes();
    for (const record of state.tools.values()) {
      if (record.status === "running") setToolStatus(record, "cancelled");
    }
    for (const record of state.messages.values()) {
      if (!record.ended && record.role === "assistant") messageEnd(record.id);
    }
    if (cancelled && !failed) notice(`cancel:${state.runId || Date.now()}`, gettext("Run cancelled"), "", { muted: true });
    setRunStatus(cancelled ? gettext("Cancelled") : failed ? gettext("Failed") : waiting ? gettext("Waiting for your approval") : gettext("Done"));
    if (window.AgentsiteTrace) window.AgentsiteTrace.link(state.runId);
    if (window.AgentsiteFigures) window.AgentsiteFigures.show(state.runId);
    state.runId = null;
    state.cancelRequested = false;
    state.cancelAfterAccept = false;
    // Queued before the run was even accepted: never sent, so back into the message box.
    returnQueued([], "", "", state.queued.filter((e) => e.deferred));
    setRunning(false);
    touchSidebar();
    syncHistory();
  }

  // -- the ledger (REST) ----------------------------------------------------------------------

  function applyLedgerEvent(event) {
    state.lastSeq = Math.max(state.lastSeq, event.seq || 0);
    state.lastEvent = event;
    const isError = Boolean(event.error) || event.object === "error";
    if (event.object === "runner.completion") {
      if (window.AgentsiteTrace) window.AgentsiteTrace.link(event.run_id);
      if (window.AgentsiteFigures) window.AgentsiteFigures.show(event.run_id);
      for (const record of state.tools.values()) {
        if (record.status === "running" && record.invocationId === event.invocation_id && !state.running) {
          setToolStatus(record, "cancelled");
        }
      }
      if (event.error && !state.erroredInvocations.has(event.invocation_id)) {
        state.erroredInvocations.add(event.invocation_id);
        ledgerError(event);
      }
      return;
    }
    if (isError) {
      state.erroredInvocations.add(event.invocation_id);
      const bubble = state.messages.get(event.id);
      if (bubble) {
        bubble.element.remove();
        state.messages.delete(event.id);
      }
      ledgerError(event);
      return;
    }
    if (event.role === "user" && (event.text || (event.attachments && event.attachments.length))) {
      let record = state.messages.get(event.id) || takePendingUser(event.text || "");
      if (!record) record = createMessage(event.id, "user");
      bindMessage(record, event.id);
      record.confirmed = true;
      record.ended = true;
      // Redone turns (issue 21, turns.js): the earlier user message this one regenerates or edits.
      if (event.regenerates) record.element.dataset.regenerates = event.regenerates;
      if (event.edit_of) record.element.dataset.editOf = event.edit_of;
      setText(record, event.text || "");
      if (event.attachments && event.attachments.length) {
        // The stored artifacts replace the local previews (issue 20).
        showAttachments(record, event.attachments.map((a) => ({ ...a, href: a.download_url || a.url })));
      }
      return;
    }
    if (event.role === "assistant") {
      if (event.text) {
        let record = state.messages.get(event.id);
        if (!record) {
          // A message streamed under another id: adopt it rather than draw it twice.
          record = [...state.messages.values()].find(
            (r) => r.role === "assistant" && !r.confirmed && r.text.trim() === event.text.trim(),
          );
          if (record) bindMessage(record, event.id);
        }
        if (!record) record = createMessage(event.id, "assistant", event.author);
        record.confirmed = true;
        setText(record, event.text);
        messageEnd(event.id);
      }
      for (const call of event.tool_calls || []) {
        const record = ensureTool(call.id, call.name);
        record.invocationId = event.invocation_id;
        if (!record.result) setToolArgs(record, call.arguments || "{}");
      }
      return;
    }
    if (event.role === "tool" && event.tool_call_id) {
      const record = ensureTool(event.tool_call_id, event.tool_name);
      record.invocationId = event.invocation_id;
      setToolResult(record, event.text || "");
    }
  }

  function ledgerError(event) {
    const key = `event:${event.id}`;
    if (state.notices.has(key)) return;
    const error = event.error || {};
    const message = error.message || event.text || REPAIRED_ERROR_TEXT;
    const live = state.liveErrors.findIndex((e) => e.message === message);
    if (live >= 0) {
      state.notices.set(key, state.liveErrors[live].element);
      state.liveErrors.splice(live, 1);
      return;
    }
    notice(key, gettext("The run failed"), errorText(message, error.code || error.type));
  }

  async function loadLedger() {
    if (!state.sessionId) return;
    let path = `${url("events", { SESSION_ID: state.sessionId })}?after_seq=${state.lastSeq}&limit=500`;
    while (path) {
      const page = await api("GET", path);
      for (const event of page.results) applyLedgerEvent(event);
      path = page.next ? new URL(page.next, window.location.href).pathname + new URL(page.next, window.location.href).search : null;
    }
  }

  /** Bring the screen up to the ledger; calls are serialised so two never interleave. */
  function syncHistory() {
    state.syncing = state.syncing.then(loadLedger).catch((error) => {
      if (error.status === 404) {
        connectionState("offline", gettext("Session not found"));
        state.sessionId = null;
      }
    });
    return state.syncing;
  }

  // -- the websocket --------------------------------------------------------------------------

  function connectionState(kind, text) {
    els.connection.dataset.state = kind;
    els.connection.textContent = text || "";
  }

  function connect() {
    if (!state.sessionId || state.socket) return;
    clearTimeout(state.reconnectTimer);
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    const path = url("websocket", { SESSION_ID: state.sessionId });
    const socket = new WebSocket(`${scheme}://${window.location.host}${path}?after_seq=${state.lastSeq}`);
    state.socket = socket;
    connectionState("connecting", state.socketEverOpened ? gettext("Reconnecting…") : gettext("Connecting…"));
    socket.addEventListener("open", () => {
      if (state.socket !== socket) return;
      state.socketReady = true;
      state.socketEverOpened = true;
      state.reconnectDelay = 500;
      connectionState("live", gettext("Live"));
      const queued = state.outbox.splice(0);
      for (const frame of queued) socket.send(JSON.stringify(frame));
    });
    socket.addEventListener("message", (message) => {
      let frame;
      try {
        frame = JSON.parse(message.data);
      } catch (_) {
        return;
      }
      state.lastFrameAt = Date.now();
      try {
        onFrame(frame);
      } catch (error) {
        console.error("agentsite: could not show frame", frame, error);
      }
    });
    socket.addEventListener("close", (event) => {
      if (state.socket !== socket) return;
      state.socket = null;
      state.socketReady = false;
      if (FATAL_CLOSE_CODES.has(event.code)) {
        connectionState("offline", gettext("Disconnected"));
        if (state.running) finishRun({ failed: true });
        return;
      }
      connectionState("connecting", gettext("Reconnecting…"));
      const delay = state.reconnectDelay;
      state.reconnectDelay = Math.min(state.reconnectDelay * 2, 8000);
      state.reconnectTimer = setTimeout(async () => {
        await syncHistory();
        connect();
      }, delay);
    });
  }

  function sendFrame(frame) {
    if (state.socketReady && state.socket) {
      state.socket.send(JSON.stringify(frame));
    } else {
      state.outbox.push(frame);
      connect();
    }
  }

  function onFrame(frame) {
    switch (frame.type) {
      case "run.accepted":
        state.runId = frame.run_id;
        state.awaitingAcceptSince = 0;
        setRunning(true);
        if (state.cancelAfterAccept) requestCancel();
        for (const entry of state.queued.filter((e) => e.deferred)) sendQueued(entry);
        break;
      case "message.queued":
        queuedAccepted(frame);
        break;
      case "message.consumed":
      case "message.withdrawn":
        for (const id of frame.ids || [frame.id]) dropQueued(id);
        break;
      case "message.dropped":
        returnQueued(frame.ids || [], gettext("Queued messages were not sent"), gettext("The run was cancelled; they are back in the message box."));
        break;
      case "error": {
        const error = frame.error || {};
        if (state.steerPending.length && STEER_ERRORS.has(error.code)) {
          // A queued message the server refused: it goes back into the message box.
          const entry = state.steerPending.shift();
          returnQueued([], "", "", [entry]);
          notice(`frame:${Date.now()}:${error.code}`, gettext("The message was not queued"), errorText(error.message || gettext("unknown error"), error.code));
          break;
        }
        if (state.cancelRequested && error.field === "run_id") {
          finishRun(); // the run ended before the cancel reached it
          break;
        }
        notice(`frame:${Date.now()}:${error.code}`, gettext("The server refused that"), errorText(error.message || gettext("unknown error"), error.code));
        if (state.awaitingAcceptSince || state.cancelRequested) {
          const pending = state.pendingUsers.pop();
          if (pending && state.awaitingAcceptSince) pending.element.classList.add("msg-failed");
          state.runId = null;
          state.cancelRequested = false;
          setRunning(false);
          setRunStatus("");
        }
        break;
      }
      case "RUN_STARTED":
        if (!state.runId) state.runId = frame.runId;
        state.awaitingAcceptSince = 0;
        setRunning(true);
        break;
      case "RUN_FINISHED": {
        if (state.runId && frame.runId && frame.runId !== state.runId) break; // an older run's end
        if (frame.outcome && frame.outcome.type === "cancelled") state.cancelRequested = true;
        const interrupts = frame.outcome && frame.outcome.type === "interrupt" ? frame.outcome.interrupts || [] : [];
        for (const interrupt of interrupts) {
          const meta = interrupt.metadata || {};
          approvalCard({ runId: frame.runId, interruptId: interrupt.id, message: interrupt.message, payload: { ...(meta.payload || {}), node: meta.node } });
        }
        finishRun({ waiting: interrupts.length > 0 });
        break;
      }
      case "RUN_ERROR": {
        const cancelled = frame.code === "cancelled" || state.cancelRequested;
        if (cancelled) state.cancelRequested = true;
        else liveError(frame.message || gettext("The run failed"), frame.code);
        finishRun({ failed: !cancelled });
        break;
      }
      case "STEP_STARTED":
        if (frame.metadata && frame.metadata.graph) setNode(frame.runId || state.runId, frame.metadata.graph, "running");
        if (state.running && frame.stepName) setRunStatus(format(gettext("Working: %(step)s"), { step: frame.stepName }), true);
        break;
      case "STEP_FINISHED":
        if (frame.metadata && frame.metadata.graph) {
          // A node that paused for approval or was cut short says so; the others are done.
          const status = { paused: "paused", stopped: "stopped" }[frame.metadata.graph.status] || "done";
          setNode(frame.runId || state.runId, frame.metadata.graph, status);
        }
        break;
      case "TEXT_MESSAGE_START":
        messageStart(frame.messageId, frame.role || "assistant");
        break;
      case "TEXT_MESSAGE_CONTENT":
        messageContent(frame.messageId, frame.delta);
        break;
      case "TEXT_MESSAGE_CHUNK":
        if (frame.messageId) messageContent(frame.messageId, frame.delta, frame.role);
        break;
      case "TEXT_MESSAGE_END":
        messageEnd(frame.messageId);
        break;
      case "TOOL_CALL_START":
        toolStart(frame.toolCallId, frame.toolCallName);
        break;
      case "TOOL_CALL_ARGS":
        toolArgs(frame.toolCallId, frame.delta);
        break;
      case "TOOL_CALL_CHUNK":
        if (frame.toolCallId) {
          ensureTool(frame.toolCallId, frame.toolCallName);
          toolArgs(frame.toolCallId, frame.delta);
        }
        break;
      case "TOOL_CALL_END":
        toolEnd(frame.toolCallId);
        break;
      case "TOOL_CALL_RESULT": {
        const record = ensureTool(frame.toolCallId);
        setToolResult(record, frame.content);
        if (state.running && [...state.tools.values()].every((r) => r.status !== "running")) showThinking();
        break;
      }
      case "MESSAGES_SNAPSHOT":
        for (const message of frame.messages || []) snapshotMessage(message);
        break;
      case "CUSTOM":
        if (frame.name === "agentsite.artifact") artifact(frame.value);
        if (frame.name === "agentsite.tool.progress") toolProgress(frame.value);
        if (frame.name === "agentsite.graph.interrupt" && frame.value) {
          const value = frame.value;
          approvalCard({ runId: value.runId, interruptId: value.interruptId, message: value.message, payload: { ...(value.payload || {}), node: value.node } });
        }
        break;
      default:
        break; // STATE_DELTA, STATE_SNAPSHOT, RAW and the rest change nothing on this page
    }
  }

  function snapshotMessage(message) {
    if (!message || !message.id) return;
    if (message.role === "tool" && message.toolCallId) {
      setToolResult(ensureTool(message.toolCallId), message.content || "");
      return;
    }
    if ((message.role === "user" || message.role === "assistant") && message.content) {
      const record = state.messages.get(message.id) || messageStart(message.id, message.role);
      setText(record, message.content);
      messageEnd(message.id);
    }
    for (const call of message.toolCalls || []) {
      const record = ensureTool(call.id, call.function && call.function.name);
      if (!record.result) setToolArgs(record, (call.function && call.function.arguments) || "{}");
    }
  }

  // -- sending and cancelling -------------------------------------------------------------------

  function sidebarEntry(sessionId, title) {
    const empty = document.getElementById("session-empty");
    if (empty) empty.remove();
    for (const link of els.sessionList.querySelectorAll("[aria-current]")) link.removeAttribute("aria-current");
    const time = h("time", { className: "session-time", datetime: new Date().toISOString() });
    const link = h(
      "a",
      { className: "session-link", href: url("chatSession", { SESSION_ID: sessionId }), "aria-current": "page", dataset: { sessionId } },
      h("span", { className: "session-title", text: title }),
      time,
    );
    els.sessionList.prepend(h("li", {}, link));
    refreshTimes();
  }

  function touchSidebar() {
    if (!state.sessionId) return;
    const link = els.sessionList.querySelector(`[data-session-id="${CSS.escape(state.sessionId)}"]`);
    if (!link) return;
    const time = link.querySelector("time");
    if (time) time.setAttribute("datetime", new Date().toISOString());
    els.sessionList.prepend(link.closest("li"));
    refreshTimes();
  }

  function shortTitle(text) {
    const line = text.trim().split("\n")[0];
    return line.length > TITLE_CHARS ? `${line.slice(0, TITLE_CHARS - 1)}…` : line;
  }

  async function createSession(firstMessage) {
    const title = shortTitle(firstMessage);
    const session = await api("POST", url("sessions"), { agent: state.agent, title });
    state.sessionId = session.id;
    state.lastSeq = 0;
    window.history.pushState({ sessionId: session.id }, "", url("chatSession", { SESSION_ID: session.id }));
    sidebarEntry(session.id, title);
    els.title.textContent = title;
    document.title = `${title} · Agentsite`;
    els.ledgerLink.href = url("ledger", { SESSION_ID: session.id });
    els.ledgerLink.hidden = false;
    connect();
  }

  async function sendMessage(raw) {
    const text = raw.trim();
    if ((!text && !state.attachments.length) || state.running) return;
    const attachments = takeAttachments();
    els.input.value = "";
    autoGrow();
    stickToBottom = true;
    addPendingUser(text, attachments);
    setRunning(true);
    state.awaitingAcceptSince = Date.now();
    if (!state.sessionId) {
      try {
        await createSession(text || attachments.map((a) => a.name).join(", "));
      } catch (error) {
        notice(`create:${Date.now()}`, gettext("Could not start a chat"), error.message);
        state.pendingUsers.pop()?.element.classList.add("msg-failed");
        setRunning(false);
        setRunStatus("");
        return;
      }
    }
    const frame = { type: "run", message: text, agent: state.agent };
    if (attachments.length) {
      frame.attachments = attachments.map((a) => ({
        type: a.mime.startsWith("image/") ? "image" : "file", name: a.name, mime: a.mime, data: a.dataUrl,
      }));
    }
    sendFrame(frame);
  }

  // -- images and files (issue 20): attach button, drag and drop, paste; thumbnails ------------------

  function showAttachments(record, attachments) {
    const bubble = record.element.querySelector(".msg-bubble");
    bubble.querySelector(".attachments")?.remove();
    const list = h("ul", { className: "attachments msg-attachments" });
    for (const file of attachments) {
      // A local preview is a blob: URL of this page; anything else must be http(s).
      const href = String(file.href || "").startsWith("blob:") ? file.href : safeHref(file.href || "") || null;
      const link = h("a", href ? { href, target: "_blank", rel: "noopener noreferrer" } : {});
      if (file.type === "image" && href) link.append(h("img", { className: "attachment-thumb", src: href, alt: file.name || "image" }));
      link.append(document.createTextNode(file.name || "attachment"));
      list.append(h("li", { className: "attachment" }, link, h("span", { className: "muted", text: file.mime || "" })));
    }
    bubble.append(list);
    scrollSoon();
  }

  function readFile(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(String(reader.result));
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }

  async function addFiles(files) {
    for (const file of files) {
      try {
        const dataUrl = await readFile(file);
        const mime = file.type || "application/octet-stream";
        state.attachments.push({
          name: file.name || `pasted.${mime.split("/")[1] || "bin"}`, mime, size: file.size, dataUrl,
          previewUrl: mime.startsWith("image/") ? URL.createObjectURL(file) : null,
        });
      } catch (error) {
        notice(`attach:${Date.now()}`, gettext("Could not read the file"), `${file.name}: ${error && error.message}`);
      }
    }
    renderAttachmentTray();
  }

  function takeAttachments() {
    const taken = state.attachments;
    state.attachments = [];
    renderAttachmentTray();
    return taken;
  }

  function renderAttachmentTray() {
    if (!els.attachmentTray) return;
    els.attachmentTray.hidden = state.attachments.length === 0;
    els.attachmentTray.replaceChildren(...state.attachments.map((file, index) => {
      const remove = h("button", { type: "button", className: "icon-button", "aria-label": format(gettext("Remove %(name)s"), { name: file.name }), text: "×" });
      remove.addEventListener("click", () => {
        state.attachments.splice(index, 1);
        renderAttachmentTray();
      });
      return h(
        "div", { className: "attachment attachment-chip" },
        file.previewUrl ? h("img", { className: "attachment-thumb", src: file.previewUrl, alt: "" }) : null,
        h("span", { text: file.name }), remove,
      );
    }));
  }

  if (els.attachButton && els.attachInput) {
    els.attachButton.addEventListener("click", () => els.attachInput.click());
    els.attachInput.addEventListener("change", () => {
      addFiles([...els.attachInput.files]);
      els.attachInput.value = "";
    });
    for (const zone of [els.form, els.conversation]) {
      zone.addEventListener("dragover", (event) => {
        if (![...(event.dataTransfer?.types || [])].includes("Files")) return;
        event.preventDefault();
        els.form.classList.add("drop-target");
      });
      zone.addEventListener("dragleave", () => els.form.classList.remove("drop-target"));
      zone.addEventListener("drop", (event) => {
        const files = [...(event.dataTransfer?.files || [])];
        els.form.classList.remove("drop-target");
        if (!files.length) return;
        event.preventDefault();
        addFiles(files);
      });
    }
    els.input.addEventListener("paste", (event) => {
      const files = [...(event.clipboardData?.files || [])];
      if (!files.length) return;
      event.preventDefault();
      addFiles(files);
    });
  }

  // -- steering: messages into the running reply ---------------------------------------------------

  const STEER_ERRORS = new Set(["queue_full", "run_not_active", "run_unreachable", "message_too_large", "invalid_frame", "not_found"]);

  function renderTray() {
    els.queuedTray.hidden = state.queued.length === 0;
  }

  function queueMessage(raw) {
    const text = raw.trim();
    if (!text || !state.running || state.cancelRequested) return;
    els.input.value = "";
    autoGrow();
    stickToBottom = true;
    const entry = queuedEntry(text);
    updateSendMode();
    if (state.runId) sendQueued(entry);
    else entry.deferred = true; // sent as soon as the run is accepted
  }

  /** A message in the tray above the box: sending (no id yet) or queued (with its id). */
  function queuedEntry(text, { id = null, runId = null } = {}) {
    const entry = { text, id, runId, deferred: false, withdrawWhenQueued: false };
    entry.state = h("span", { className: "queued-state", text: id ? gettext("Queued") : gettext("Sending…") });
    entry.button = h("button", {
      type: "button", className: "button", text: gettext("Withdraw"), title: gettext("Take the queued messages back into the message box"),
    });
    entry.button.addEventListener("click", () => withdrawQueued(entry));
    entry.element = h("div", { className: "queued-item", dataset: { queued: id || "" } }, h("span", { className: "queued-text", text }), entry.state, entry.button);
    state.queued.push(entry);
    els.queuedTray.appendChild(entry.element);
    renderTray();
    return entry;
  }

  /** After a reload mid-run: the messages still queued for the run come back into the tray. */
  async function showQueuedOf(runId) {
    try {
      const listed = await api("GET", url("runMessages", { RUN_ID: runId }));
      for (const item of listed.queued || []) {
        if (!state.queued.some((e) => e.id === item.id)) queuedEntry(item.message, { id: item.id, runId });
      }
    } catch (_) {
      // Not fatal: the run takes them all the same; they show when it does.
    }
  }

  function sendQueued(entry) {
    entry.deferred = false;
    entry.runId = state.runId;
    state.steerPending.push(entry);
    sendFrame({ type: "message", run_id: entry.runId, message: entry.text });
  }

  function queuedAccepted(frame) {
    const index = state.steerPending.findIndex((e) => e.text === frame.message);
    const entry = state.steerPending.splice(index >= 0 ? index : 0, 1)[0];
    if (!entry) return;
    entry.id = frame.id;
    entry.element.dataset.queued = frame.id;
    entry.state.textContent = gettext("Queued");
    if (entry.withdrawWhenQueued) withdrawQueued(entry);
  }

  /** The run took the message (it is now in the conversation), or it was withdrawn. */
  function dropQueued(id) {
    const index = state.queued.findIndex((e) => e.id === id);
    if (index < 0) return null;
    const [entry] = state.queued.splice(index, 1);
    entry.element.remove();
    renderTray();
    return entry;
  }

  /** Put queued messages back into the message box (withdrawn, dropped or refused). */
  function returnQueued(ids, title, message, entries = []) {
    const back = [...entries, ...ids.map(dropQueued).filter(Boolean)];
    for (const entry of entries) {
      const index = state.queued.indexOf(entry);
      if (index >= 0) state.queued.splice(index, 1);
      entry.element.remove();
    }
    renderTray();
    if (!back.length) return;
    const texts = back.map((e) => e.text).join("\n\n");
    els.input.value = els.input.value.trim() ? `${els.input.value}\n\n${texts}` : texts;
    autoGrow();
    updateSendMode();
    if (title) notice(`queued:${back[0].id || Date.now()}`, title, message, { muted: true });
  }

  async function withdrawQueued(entry) {
    if (!entry.id) {
      entry.withdrawWhenQueued = true; // withdrawn once the server says it is queued
      return;
    }
    entry.button.disabled = true;
    try {
      const answer = await api("DELETE", url("runMessages", { RUN_ID: entry.runId }));
      returnQueued((answer.withdrawn || []).map((w) => w.id), "", "");
    } catch (error) {
      // The run ended meanwhile: the message went into the next run (or a cancel dropped it).
      entry.button.disabled = false;
      notice(`withdraw:${Date.now()}`, gettext("Could not withdraw"), errorText(error.message, error.code), { muted: true });
    }
  }

  async function requestCancel() {
    if (!state.running) return;
    state.cancelRequested = true;
    setSendMode("cancelling");
    setRunStatus(gettext("Cancelling…"), true);
    if (!state.runId) {
      state.cancelAfterAccept = true; // sent as soon as the run is accepted
      return;
    }
    state.cancelAfterAccept = false;
    if (state.socketReady) {
      sendFrame({ type: "cancel", run_id: state.runId });
    } else {
      try {
        await api("POST", url("runCancel", { RUN_ID: state.runId }));
      } catch (_) {
        // the run may have ended meanwhile; the watchdog settles the state
      }
    }
  }

  /** A run that went quiet (a lost frame, a dead server) is settled from its record. */
  async function watchdog() {
    if (!state.running) return;
    const quietFor = Date.now() - state.lastFrameAt;
    if (state.awaitingAcceptSince && Date.now() - state.awaitingAcceptSince > 20000 && !state.runId) {
      notice(`accept:${Date.now()}`, gettext("No answer from the server"), gettext("The message was not accepted; try again."));
      state.awaitingAcceptSince = 0;
      setRunning(false);
      setRunStatus("");
      return;
    }
    if (!state.runId || quietFor < (state.cancelRequested ? 3000 : 10000)) return;
    try {
      const run = await api("GET", url("runDetail", { RUN_ID: state.runId }));
      if (!["queued", "running"].includes(run.status) && state.running) {
        if (run.error && run.status === "failed") liveError(run.error.message || gettext("The run failed"), run.error.code);
        finishRun({ failed: run.status === "failed" });
      }
    } catch (error) {
      if (error.status === 404) finishRun();
    }
  }

  // -- composer, agent picker, sidebar ----------------------------------------------------------

  function autoGrow() {
    els.input.style.height = "auto";
    els.input.style.height = `${Math.min(els.input.scrollHeight, 224)}px`;
  }

  function selectAgent(name) {
    const agent = config.agents.find((a) => a.name === name) || config.agents[0];
    state.agent = agent.name;
    els.badgeText.textContent = agent.badge;
    els.badge.classList.toggle("badge-offline", agent.model_provider === "offline");
    els.badge.title = `${agent.model || gettext("no model")}${agent.model_description ? `: ${agent.model_description}` : ""}`;
    els.input.placeholder = format(gettext("Message the %(name)s agent…"), { name: agent.name });
    if (els.emptyAgentName) els.emptyAgentName.textContent = agent.name;
    if (els.emptyAgentDescription) els.emptyAgentDescription.textContent = agent.description;
  }

  function setSidebar(open) {
    els.shell.classList.toggle("sidebar-open", open);
    els.sidebarToggle.setAttribute("aria-expanded", String(open));
    els.scrim.hidden = !open;
    if (open) els.sidebar.querySelector("a, button")?.focus();
  }

  els.form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (state.running && els.input.value.trim() && !state.cancelRequested) queueMessage(els.input.value);
    else if (state.running) requestCancel();
    else sendMessage(els.input.value);
  });

  els.input.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.shiftKey || event.altKey || event.isComposing) return;
    event.preventDefault();
    if (state.running) queueMessage(els.input.value);
    else sendMessage(els.input.value);
  });
  els.input.addEventListener("input", () => {
    autoGrow();
    updateSendMode();
  });

  for (const button of document.querySelectorAll("[data-suggestion]")) {
    button.addEventListener("click", () => {
      if (state.running) return;
      sendMessage(button.dataset.suggestion);
      els.input.focus();
    });
  }

  if (els.agentSelect) {
    els.agentSelect.addEventListener("change", () => selectAgent(els.agentSelect.value));
  }

  els.sidebarToggle.addEventListener("click", () => setSidebar(!els.shell.classList.contains("sidebar-open")));
  els.scrim.addEventListener("click", () => setSidebar(false));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && els.shell.classList.contains("sidebar-open")) {
      setSidebar(false);
      els.sidebarToggle.focus();
    }
  });

  window.addEventListener("popstate", () => window.location.reload());

  // -- start ------------------------------------------------------------------------------------

  /** A ledger that does not end with a completion marker: a run (maybe another tab's) is
   * still writing to it. Its frames will arrive; only its RUN_FINISHED clears this. */
  function runLooksActive(event) {
    if (!event || event.object === "runner.completion") return false;
    const age = Date.now() - new Date(event.created_at).getTime();
    return age < 5 * 60 * 1000;
  }

  // After a reload mid-run, find the run so that Cancel works again.
  async function adoptActiveRun() {
    try {
      const query = new URLSearchParams({ session_id: state.sessionId, status: "running", limit: "1" });
      const found = await api("GET", `${config.urls.runs}?${query}`);
      const run = found && found.results && found.results[0];
      if (run && !state.runId) {
        state.runId = run.id;
        setRunning(true);
        await showQueuedOf(run.id);
      }
    } catch (error) {
      // Not fatal: the run still streams; only the Cancel button stays hidden.
    }
  }

  async function start() {
    selectAgent(state.agent);
    refreshTimes();
    setInterval(refreshTimes, 60000);
    setInterval(watchdog, 2000);
    if (!state.sessionId) {
      els.input.focus();
      return;
    }
    els.historyStatus.hidden = false;
    els.historyStatus.textContent = gettext("Loading the conversation…");
    await syncHistory();
    els.historyStatus.hidden = true;
    els.historyStatus.textContent = "";
    if (!els.messages.querySelector(".msg, .tool-card, .notice-inline")) els.empty.hidden = false;
    if (runLooksActive(state.lastEvent)) {
      setRunStatus(gettext("A reply is in progress…"), true);
      await adoptActiveRun();
    } else {
      await showPendingApproval();
    }
    stickToBottom = true;
    scrollSoon();
    connect();
    els.input.focus();
  }

  // `state` for debugging in the console and for the browser tests; `sync` brings the screen
  // up to the ledger (turns.js calls it once a regenerated or edited turn is written).
  window.agentsiteChat = { state, sync: syncHistory };
  start();
})();
