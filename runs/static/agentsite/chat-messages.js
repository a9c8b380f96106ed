/* The chat's conversation items: messages (streamed or from the ledger), tool-call cards with
 * their arguments, results and progress bar, notices and artifact links. Keyed by ledger
 * identity (messageId, toolCallId, notice key), so drawing one twice updates it instead. */
import { gettext, format, state, h, svg, ICONS, prettyJson, isErrorResult, renderRich, scrollSoon, place, showThinking, hideThinking } from "./chat-base.js";
import { showAttachments } from "./chat-send.js";

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

export function createMessage(id, role, author) {
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

export function setText(record, text) {
  record.text = text;
  scheduleRender(record);
}

export function bindMessage(record, id) {
  if (record.id && record.id !== id) state.messages.set(record.id, record);
  record.id = id;
  record.element.dataset.messageId = id;
  record.element.classList.remove("msg-pending");
  state.messages.set(id, record);
}

export function takePendingUser(text) {
  const index = text === undefined
    ? 0
    : state.pendingUsers.findIndex((r) => r.text.trim() === text.trim());
  if (index < 0 || !state.pendingUsers.length) return null;
  return state.pendingUsers.splice(index, 1)[0];
}

export function addPendingUser(text, attachments = []) {
  const record = createMessage(null, "user");
  record.element.classList.add("msg-pending");
  setText(record, text);
  if (attachments.length) {
    showAttachments(record, attachments.map((a) => ({ type: a.mime.startsWith("image/") ? "image" : "file", name: a.name, mime: a.mime, size: a.size, href: a.previewUrl })));
  }
  state.pendingUsers.push(record);
  return record;
}

export function messageStart(id, role) {
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

export function messageContent(id, delta, role) {
  let record = state.messages.get(id);
  if (!record) record = messageStart(id, role || "assistant");
  if (record.role === "assistant") hideThinking();
  setText(record, record.text + (delta || ""));
}

export function messageEnd(id) {
  const record = state.messages.get(id);
  if (!record) return;
  record.ended = true;
  record.element.classList.remove("msg-streaming");
}

// -- tool calls ---------------------------------------------------------------------------

export function setToolStatus(record, status) {
  record.status = status;
  record.card.dataset.status = status;
  const labels = { running: gettext("Running…"), done: gettext("Done"), error: gettext("Failed"), cancelled: gettext("Not completed") };
  const icon = status === "running"
    ? h("span", { className: "spinner", "aria-hidden": "true" })
    : svg(status === "done" ? ICONS.check : status === "error" ? ICONS.cross : ICONS.stop);
  record.stateEl.replaceChildren(icon, h("span", { text: labels[status] }));
}

export function ensureTool(id, name) {
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

export function setToolArgs(record, text) {
  record.argsText = text;
  const shown = text.trim() ? prettyJson(text) : "{}";
  record.argsPre.firstChild.textContent = shown;
}

export function setToolResult(record, content) {
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

export function toolStart(id, name) {
  hideThinking();
  const record = ensureTool(id, name);
  if (!record.result) record.argsText = "";
  return record;
}

export function toolArgs(id, delta) {
  const record = ensureTool(id);
  if (record.result) return;
  record.argsText += delta || "";
  record.argsPre.firstChild.textContent = record.argsText;
}

export function toolEnd(id) {
  const record = ensureTool(id);
  setToolArgs(record, record.argsText);
  if (!record.result) showThinking();
}

// Issue 21: a long tool's progress (CUSTOM agentsite.tool.progress) as a bar in its card.
// Live only (never replayed from the ledger); a report for a card that already has its
// result, or was cancelled, changes nothing, so the bar stays where the cancel stopped it.
export function toolProgress(value) {
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

export function notice(key, title, message, { muted = false } = {}) {
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

export function errorText(message, code) {
  return code ? `${message} (${code})` : message;
}

export function liveError(message, code) {
  const key = `live:${state.runId || ""}:${code || ""}:${message}`;
  if (state.notices.has(key)) return;
  const element = notice(key, gettext("The run failed"), errorText(message, code));
  state.liveErrors.push({ message, element });
}

export function safeHref(value) {
  try {
    const parsed = new URL(String(value), window.location.href);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch (_) {
    return null;
  }
}

export function artifact(value) {
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
