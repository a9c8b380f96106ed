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
 *
 * ES modules, no build step (issue 22, item 5), loaded by `<script type="module">`: this entry
 * (the composer, the agent picker, the sidebar and the start) imports chat-base.js (language,
 * config, elements, `state`, DOM helpers, rendering, scrolling), chat-messages.js (messages,
 * tool cards, notices, artifacts), chat-graph.js (graph node progress and approvals),
 * chat-run.js (run state, the ledger, the websocket) and chat-send.js (sending, files,
 * steering, cancel, the watchdog).
 */
import { gettext, format, config, els, state, api, refreshTimes, scrollSoon, followConversation } from "./chat-base.js";
import { showPendingApproval } from "./chat-graph.js";
import { updateSendMode, setRunStatus, setRunning, syncHistory, connect, redo } from "./chat-run.js";
import { sendMessage, queueMessage, showQueuedOf, requestCancel, watchdog, autoGrow } from "./chat-send.js";

// -- composer, agent picker, sidebar ----------------------------------------------------------

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
  followConversation();
  scrollSoon();
  connect();
  els.input.focus();
}

// `state` for debugging in the console and for the browser tests; `sync` brings the screen
// up to the ledger (turns.js calls it once a regenerated or edited turn is written); `redo`
// sends turns.js's regenerate and edit frames over this page's socket.
window.agentsiteChat = { state, sync: syncHistory, redo };
start();
