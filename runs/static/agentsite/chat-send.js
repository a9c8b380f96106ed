/* Sending in the chat: a new chat's session, the `run` frame, images and files to attach
 * (issue 20), messages queued into the running reply (steering, SPEC 1.5), cancel, and the
 * watchdog that settles a run gone quiet from its record. */
import { gettext, format, els, TITLE_CHARS, state, url, api, h, refreshTimes, scrollSoon, followConversation } from "./chat-base.js";
import { addPendingUser, notice, errorText, liveError, safeHref } from "./chat-messages.js";
import { setSendMode, updateSendMode, setRunStatus, setRunning, finishRun, connect, sendFrame } from "./chat-run.js";

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

export function touchSidebar() {
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

export async function sendMessage(raw) {
  const text = raw.trim();
  if ((!text && !state.attachments.length) || state.running) return;
  const attachments = takeAttachments();
  els.input.value = "";
  autoGrow();
  followConversation();
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

export function showAttachments(record, attachments) {
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

export const STEER_ERRORS = new Set(["queue_full", "run_not_active", "run_unreachable", "message_too_large", "invalid_frame", "not_found"]);

function renderTray() {
  els.queuedTray.hidden = state.queued.length === 0;
}

export function queueMessage(raw) {
  const text = raw.trim();
  if (!text || !state.running || state.cancelRequested) return;
  els.input.value = "";
  autoGrow();
  followConversation();
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
export async function showQueuedOf(runId) {
  try {
    const listed = await api("GET", url("runMessages", { RUN_ID: runId }));
    for (const item of listed.queued || []) {
      if (!state.queued.some((e) => e.id === item.id)) queuedEntry(item.message, { id: item.id, runId });
    }
  } catch (_) {
    // Not fatal: the run takes them all the same; they show when it does.
  }
}

export function sendQueued(entry) {
  entry.deferred = false;
  entry.runId = state.runId;
  state.steerPending.push(entry);
  sendFrame({ type: "message", run_id: entry.runId, message: entry.text });
}

export function queuedAccepted(frame) {
  const index = state.steerPending.findIndex((e) => e.text === frame.message);
  const entry = state.steerPending.splice(index >= 0 ? index : 0, 1)[0];
  if (!entry) return;
  entry.id = frame.id;
  entry.element.dataset.queued = frame.id;
  entry.state.textContent = gettext("Queued");
  if (entry.withdrawWhenQueued) withdrawQueued(entry);
}

/** The run took the message (it is now in the conversation), or it was withdrawn. */
export function dropQueued(id) {
  const index = state.queued.findIndex((e) => e.id === id);
  if (index < 0) return null;
  const [entry] = state.queued.splice(index, 1);
  entry.element.remove();
  renderTray();
  return entry;
}

/** Put queued messages back into the message box (withdrawn, dropped or refused). */
export function returnQueued(ids, title, message, entries = []) {
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

export async function requestCancel() {
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
export async function watchdog() {
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

export function autoGrow() {
  els.input.style.height = "auto";
  els.input.style.height = `${Math.min(els.input.scrollHeight, 224)}px`;
}
