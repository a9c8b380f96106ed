/* The chat's run: the run state (send button, status line, the run ending), the ledger over
 * REST (the truth: loaded first, re-read after each run and before each reconnect), and the
 * session's websocket, whose AG-UI frames draw the run live. */
import { gettext, format, els, REPAIRED_ERROR_TEXT, FATAL_CLOSE_CODES, state, url, api, h, showThinking, hideThinking } from "./chat-base.js";
import { createMessage, setText, bindMessage, takePendingUser, messageStart, messageContent, messageEnd, setToolStatus, ensureTool, setToolArgs, setToolResult, toolStart, toolArgs, toolEnd, toolProgress, notice, errorText, liveError, artifact } from "./chat-messages.js";
import { setNode, stopNodes, approvalCard } from "./chat-graph.js";
import { touchSidebar, showAttachments, STEER_ERRORS, sendQueued, queuedAccepted, dropQueued, returnQueued, requestCancel } from "./chat-send.js";

// -- run state ------------------------------------------------------------------------------

export function setSendMode(mode) {
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
export function updateSendMode() {
  if (!state.running || state.cancelRequested) return;
  setSendMode(els.input.value.trim() ? "queue" : "cancel");
}

export function setRunStatus(text, busy = false) {
  els.runStatus.replaceChildren(
    ...(busy ? [h("span", { className: "spinner", "aria-hidden": "true" })] : []),
    ...(text ? [h("span", { text })] : []),
  );
}

export function setRunning(running) {
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

export function finishRun({ failed = false, waiting = false } = {}) {
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
export function syncHistory() {
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

export function connect() {
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
      settleRedo(null, { message: gettext("Disconnected") });
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

export function sendFrame(frame) {
  if (state.socketReady && state.socket) {
    state.socket.send(JSON.stringify(frame));
  } else {
    state.outbox.push(frame);
    connect();
  }
}

/** Regenerate or edit over the socket (issue 21; turns.js): send the `regenerate` or `edit`
 * frame; the promise resolves with its `run.accepted` (the new turn's run then streams
 * here as any run does) or rejects with the server's error frame. One at a time: frames
 * are answered in the order sent, and no other frame awaits an answer while no reply runs. */
export function redo(frame) {
  if (state.redo) return state.redo.promise;
  let settle;
  const promise = new Promise((resolve, reject) => { settle = { resolve, reject }; });
  state.redo = { promise, ...settle };
  sendFrame(frame);
  return promise;
}

function settleRedo(accepted, error) {
  const pending = state.redo;
  if (!pending) return;
  state.redo = null;
  if (accepted) {
    pending.resolve(accepted);
  } else {
    const failure = new Error(error.message || gettext("unknown error"));
    failure.code = error.code;
    failure.field = error.field;
    pending.reject(failure);
  }
}

function onFrame(frame) {
  switch (frame.type) {
    case "run.accepted":
      settleRedo(frame, null);
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
      if (state.redo) {
        // A refused regenerate or edit: turns.js shows why, beside the message.
        settleRedo(null, error);
        break;
      }
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
