/* The chat's groundwork (chat.js and its modules share it): the page's language, the page's
 * configuration and elements, the one `state` of the conversation, small DOM and JSON helpers,
 * the safe markdown-ish rendering of model text (text nodes only, never HTML), and keeping
 * the newest message in view. Imports nothing, so every other chat module can import it. */

// Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
export const gettext = window.gettext || ((text) => text);
const interpolate = window.interpolate || ((format, values) => format.replace(/%\((\w+)\)s/g, (_, key) => values[key]));
export const format = (text, values) => interpolate(text, values, true);

export const config = JSON.parse(document.getElementById("chat-config").textContent);
const $ = (id) => document.getElementById(id);
export const els = {
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

export const REPAIRED_ERROR_TEXT = gettext("An error occurred during execution. Please contact the service provider.");
export const FATAL_CLOSE_CODES = new Set([4400, 4401, 4403, 4404]);
export const TITLE_CHARS = 80;

export const state = {
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
  redo: null, // the `regenerate` or `edit` frame (turns.js) awaiting its answer: {promise, resolve, reject}
  thinking: null,
  syncing: Promise.resolve(),
};

// -- small helpers ------------------------------------------------------------------------

export function url(name, params = {}) {
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

export async function api(method, path, body) {
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

export function h(tag, props = {}, ...children) {
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

export function svg(path, size = 14) {
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

export const ICONS = {
  tool: "M12.5 3.5a4 4 0 0 0-4.9 5.2L3.5 12.8a1.6 1.6 0 0 0 2.3 2.3l4.1-4.1a4 4 0 0 0 5.2-4.9l-2.4 2.4-2-.6-.6-2z",
  check: "M4 10.5l4 4 8-9",
  cross: "M5 5l10 10M15 5L5 15",
  file: "M6 2.5h5l4 4v11H6zM11 2.5v4h4",
  stop: "M10 3a7 7 0 1 0 0 14a7 7 0 1 0 0-14zM5.1 5.1l9.8 9.8",
  pause: "M7 4.5v11M13 4.5v11",
};

export function prettyJson(text) {
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

export function isErrorResult(content) {
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

export function refreshTimes() {
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

export function renderRich(target, text) {
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
export function scrollSoon() {
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

/** Keep the newest message in view again (after the user sends something). */
export function followConversation() {
  stickToBottom = true;
}

export function place(node) {
  els.empty.hidden = true;
  els.messages.appendChild(node);
  if (state.thinking) els.messages.appendChild(state.thinking);
  scrollSoon();
}

export function showThinking() {
  if (!state.running) return;
  if (!state.thinking) {
    state.thinking = h("div", { className: "thinking", "aria-hidden": "true" }, h("span"), h("span"), h("span"));
  }
  place(state.thinking);
}

export function hideThinking() {
  if (state.thinking) state.thinking.remove();
  state.thinking = null;
}
