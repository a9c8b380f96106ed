/* Graph runs in the chat: the card of a run's node steps, and the approve / reject prompt of
 * a run paused for approval (POST /api/runs/<id>/resume/). */
import { gettext, format, config, state, url, api, h, svg, ICONS, scrollSoon, followConversation, place } from "./chat-base.js";
import { addPendingUser } from "./chat-messages.js";
import { setRunStatus, setRunning, connect } from "./chat-run.js";

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

export function setNode(runId, meta, status) {
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

export function stopNodes() {
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
export function approvalCard({ runId, interruptId, message, payload }) {
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
  followConversation();
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
export async function showPendingApproval() {
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
