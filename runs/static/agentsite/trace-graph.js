/* The graph in the run trace (issue 21): for a run of a graph agent, its graph drawn as SVG
 * (nodes and edges from the agent's own definition, GET /api/runs/<id>/trace/ `graph`) with
 * each node's state, and beside it the same as a text list, which is what keyboard and
 * screen-reader users read (the drawing is one labelled image).
 *
 * States: from the stored trace's node spans once the run has ended; while it runs, first
 * from its checkpoints (the API's `progress`: the supersteps done, the one running), then
 * from the session websocket's STEP_STARTED / STEP_FINISHED frames (`metadata.graph`) of
 * this run, live; the run's end settles them from its trace.
 *
 * No build step: an ES module loaded by templates/runs/trace.html; text is set with
 * textContent only. */

const gettext = window.gettext || ((text) => text);
const interpolate = window.interpolate || ((format, values) => format.replace(/%\((\w+)\)s/g, (_, key) => values[key]));
const format = (text, values) => interpolate(text, values, true);
const pgettext = window.pgettext || ((context, text) => text);

const SVG = "http://www.w3.org/2000/svg";
const START = "__start__";
const END = "__end__";
const NODE_W = 168;
const NODE_H = 44;
const GAP_X = 28;
const GAP_Y = 40;
const MARGIN = 16;
const LANE = 40; // right of the nodes: where edges that skip a layer or loop back run
const TRACE_RETRIES = 10;

const STATE_LABELS = {
  pending: gettext("not reached"),
  running: gettext("in progress"),
  done: gettext("done"),
  paused: gettext("waiting for approval"),
  stopped: gettext("stopped"),
  failed: gettext("failed"),
};
// A node span's status in the stored trace, as a node state.
const SPAN_STATES = { ok: "done", running: "running", paused: "paused", cancelled: "stopped", error: "failed" };

const root = document.getElementById("trace-graph");
const view = { graph: null, nodes: new Map(), socket: null, lastSeq: 0, ended: false, current: null };

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

function html(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function label(id) {
  if (id === START) return pgettext("graph marker", "start");
  if (id === END) return pgettext("graph marker", "end");
  return id;
}

async function fetchTrace() {
  const response = await fetch(`/api/runs/${encodeURIComponent(root.dataset.runId)}/trace/`, {
    headers: { Accept: "application/json" }, credentials: "same-origin",
  });
  if (!response.ok) throw new Error(format(gettext("%(method)s answered %(status)s"), { method: "GET", status: response.status }));
  return response.json();
}

// -- layout and drawing ---------------------------------------------------------------------

/** Top to bottom by the API's layers; the nodes of one layer side by side, centred. */
function layout(graph) {
  const layers = new Map();
  for (const node of graph.nodes) {
    if (!layers.has(node.layer)) layers.set(node.layer, []);
    layers.get(node.layer).push(node);
  }
  const widest = Math.max(...[...layers.values()].map((row) => row.length));
  const nodesWidth = MARGIN * 2 + widest * NODE_W + (widest - 1) * GAP_X;
  const width = nodesWidth + LANE;
  const places = new Map();
  for (const [layer, row] of layers) {
    const rowWidth = row.length * NODE_W + (row.length - 1) * GAP_X;
    row.forEach((node, index) => {
      places.set(node.id, {
        x: (nodesWidth - rowWidth) / 2 + index * (NODE_W + GAP_X),
        y: MARGIN + layer * (NODE_H + GAP_Y),
      });
    });
  }
  const height = MARGIN * 2 + (Math.max(...layers.keys()) + 1) * (NODE_H + GAP_Y) - GAP_Y;
  return { places, width, height, lane: nodesWidth + LANE / 2 };
}

function edgePath(from, to, lane) {
  const x1 = from.x + NODE_W / 2;
  const y1 = from.y + NODE_H;
  const x2 = to.x + NODE_W / 2;
  const y2 = to.y;
  if (y2 > y1 && y2 - y1 <= GAP_Y + 1) {
    const bend = (y2 - y1) / 2;
    return { d: `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`, mid: { x: (x1 + x2) / 2, y: (y1 + y2) / 2 } };
  }
  // Past a layer, or back up a loop: out of the source's right side, along the lane right of
  // every node, into the target's right side, so it crosses no node on the way.
  const a = from.y + NODE_H / 2;
  const b = to.y + NODE_H / 2;
  const r = Math.min(12, Math.abs(b - a) / 2);
  const turn = b > a ? r : -r;
  return {
    d: `M${from.x + NODE_W},${a} L${lane - r},${a} Q${lane},${a} ${lane},${a + turn} L${lane},${b - turn} Q${lane},${b} ${lane - r},${b} L${to.x + NODE_W},${b}`,
    mid: { x: lane, y: (a + b) / 2 },
  };
}

function draw(graph) {
  const { places, width, height, lane } = layout(graph);
  const picture = svg("svg", {
    class: "graph-diagram", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-label": format(gettext("Diagram of the %(name)s graph; the list beside it gives each node's state"), { name: graph.name }),
  });
  const defs = svg("defs");
  const marker = svg("marker", { id: "graph-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "currentColor" }));
  defs.append(marker);
  picture.append(defs);
  for (const edge of graph.edges) {
    const from = places.get(edge.source);
    const to = places.get(edge.target);
    if (!from || !to) continue;
    const { d, mid } = edgePath(from, to, lane);
    picture.append(svg("path", { class: `graph-edge graph-edge-${edge.kind}`, d, "marker-end": "url(#graph-arrow)", "data-source": edge.source, "data-target": edge.target }));
    if (edge.label) {
      const text = svg("text", { class: "graph-edge-label", x: mid.x + 4, y: mid.y, "dominant-baseline": "middle" });
      text.textContent = edge.label;
      picture.append(text);
    }
  }
  const list = html("ol", "graph-node-list");
  list.setAttribute("aria-label", format(gettext("Nodes of the %(name)s graph and their states"), { name: graph.name }));
  for (const node of graph.nodes) {
    const place = places.get(node.id);
    const marker = node.kind === "start" || node.kind === "end";
    const group = svg("g", { class: `graph-node${marker ? " graph-marker" : ""}`, "data-node": node.id, transform: `translate(${place.x},${place.y})` });
    group.append(svg("rect", { width: NODE_W, height: NODE_H, rx: marker ? NODE_H / 2 : 8 }));
    const name = svg("text", { class: "graph-node-name", x: NODE_W / 2, y: marker ? NODE_H / 2 : 17, "text-anchor": "middle", "dominant-baseline": "middle" });
    name.textContent = label(node.id);
    group.append(name);
    let stateText = null;
    if (!marker) {
      stateText = svg("text", { class: "graph-node-state", x: NODE_W / 2, y: 33, "text-anchor": "middle", "dominant-baseline": "middle" });
      group.append(stateText);
      const description = svg("title");
      description.textContent = node.description || node.id;
      group.prepend(description);
    }
    picture.append(group);
    if (marker) continue;
    const item = html("li", "graph-node-item");
    item.dataset.node = node.id;
    const itemState = html("span", "graph-node-item-state");
    item.append(html("strong", "", node.id), document.createTextNode(": "), itemState);
    if (node.description) item.append(html("span", "muted", ` (${node.description})`));
    list.append(item);
    view.nodes.set(node.id, { group, stateText, item, itemState, state: "" });
    setState(node.id, "pending", { quiet: true });
  }
  const status = html("p", "visually-hidden");
  status.setAttribute("role", "status");
  status.id = "trace-graph-status";
  const figure = html("div", "graph-figure");
  figure.append(picture);
  root.querySelector(".trace-graph-body").replaceChildren(figure, list, status);
}

function setState(id, state, { quiet = false, earlier = false } = {}) {
  const node = view.nodes.get(id);
  if (!node) return;
  if (!earlier && node.item.dataset.earlier) {
    // It ran in this run too: this run's state is the one shown.
    delete node.item.dataset.earlier;
    node.item.querySelector(".graph-node-earlier")?.remove();
  }
  if (node.state === state) return;
  node.state = state;
  node.group.dataset.state = state;
  node.item.dataset.state = state;
  node.stateText.textContent = STATE_LABELS[state];
  node.itemState.textContent = STATE_LABELS[state];
  if (!quiet) {
    const status = document.getElementById("trace-graph-status");
    if (status) status.textContent = format(gettext("%(node)s: %(state)s"), { node: id, state: STATE_LABELS[state] });
  }
}

/** A resumed run's earlier runs (the API's `earlier`: node -> span status): what ran before
 * the pause, marked as such in the list. */
function applyEarlier(earlier) {
  for (const [id, status] of Object.entries(earlier || {})) {
    const node = view.nodes.get(id);
    if (!node) continue;
    setState(id, SPAN_STATES[status] || "done", { quiet: true, earlier: true });
    node.item.dataset.earlier = "1";
    if (!node.item.querySelector(".graph-node-earlier")) {
      node.itemState.after(html("span", "muted graph-node-earlier", ` · ${gettext("before the pause")}`));
    }
  }
}

/** The states the stored trace gives (a resumed run's earlier segments first). */
function applyTrace(trace) {
  const segments = [...(trace.earlier_segments || []), trace];
  for (const segment of segments) {
    for (const span of segment.spans || []) {
      if (span.kind !== "node") continue;
      if (span.attrs && span.attrs.graph && span.attrs.graph !== view.graph.name) continue;
      setState(span.name, SPAN_STATES[span.status] || "done", { quiet: true });
    }
  }
}

// -- following the run live -----------------------------------------------------------------

function settleRunning(state) {
  for (const [id, node] of view.nodes) if (node.state === "running") setState(id, state);
}

async function ended() {
  if (view.ended) return;
  view.ended = true;
  if (view.socket) view.socket.close();
  // The trace is saved with the run's record, a moment after its last frame.
  for (let left = TRACE_RETRIES; left > 0; left--) {
    try {
      const data = await fetchTrace();
      if (data.trace) {
        applyTrace(data.trace);
        break;
      }
    } catch (_) {
      // keep the live states
    }
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
  root.dataset.live = "ended";
  const note = root.querySelector(".trace-graph-live");
  if (note) {
    note.textContent = `${gettext("The run has ended.")} `;
    const again = html("a", "", gettext("Show its timeline"));
    again.href = window.location.pathname;
    note.append(again);
  }
}

function onFrame(frame) {
  const seq = frame.metadata && frame.metadata.seq;
  if (Number.isInteger(seq)) view.lastSeq = Math.max(view.lastSeq, seq);
  const ours = root.dataset.runId;
  // Step frames name no run: they belong to the run the stream is in (runs of a session
  // follow one another; a page opened mid-run starts inside ours).
  if (frame.type === "RUN_STARTED") view.current = frame.runId;
  const meta = frame.metadata && frame.metadata.graph;
  const mine = view.current === ours && meta && meta.graph === view.graph.name;
  if (frame.type === "STEP_STARTED" && mine) {
    // A node starts once the step before it has finished: a predecessor still shown running
    // is done (a socket that joined mid-run gets no STEP_FINISHED for a node that started
    // before it joined).
    for (const edge of view.graph.edges) {
      if (edge.target === meta.node && view.nodes.get(edge.source)?.state === "running") setState(edge.source, "done");
    }
    setState(meta.node, "running");
  } else if (frame.type === "STEP_FINISHED" && mine) {
    setState(meta.node, { paused: "paused", stopped: "stopped" }[meta.status] || "done");
  } else if (frame.type === "RUN_ERROR" && (frame.runId || view.current) === ours) {
    settleRunning(frame.code === "cancelled" ? "stopped" : "failed");
    ended();
  } else if (frame.type === "RUN_FINISHED" && frame.runId === ours) {
    settleRunning("stopped"); // a node still open at the end was cut short
    ended();
  }
}

function follow() {
  if (view.ended) return;
  const scheme = window.location.protocol === "https:" ? "wss" : "ws";
  const path = `/ws/sessions/${encodeURIComponent(root.dataset.sessionId)}/?after_seq=${view.lastSeq}`;
  const socket = new WebSocket(`${scheme}://${window.location.host}${path}`);
  view.socket = socket;
  socket.addEventListener("open", async () => {
    root.dataset.live = "following";
    // The run may have ended between the page and the socket: then its end is not replayed.
    try {
      if ((await fetchTrace()).trace) ended();
    } catch (_) {
      // the socket goes on
    }
  });
  socket.addEventListener("message", (message) => {
    try {
      onFrame(JSON.parse(message.data));
    } catch (error) {
      console.error("agentsite: could not show a frame in the trace graph", error);
    }
  });
  socket.addEventListener("close", async () => {
    if (view.ended || view.socket !== socket) return;
    view.socket = null;
    // Closed under us (a restart, a network blip): the run may have ended meanwhile.
    try {
      const data = await fetchTrace();
      if (data.trace) {
        ended();
        return;
      }
    } catch (_) {
      // try the socket again
    }
    setTimeout(follow, 1000);
  });
}

async function start() {
  let data;
  try {
    data = await fetchTrace();
  } catch (error) {
    root.querySelector(".trace-graph-body").textContent = format(gettext("Could not load the graph: %(error)s"), { error: error.message });
    root.hidden = false;
    return;
  }
  if (!data.graph) {
    root.hidden = true;
    return;
  }
  view.graph = data.graph;
  root.hidden = false;
  document.getElementById("trace-graph-title").textContent = format(gettext("The %(name)s graph"), { name: data.graph.name });
  draw(data.graph);
  applyEarlier(data.earlier);
  if (data.trace) {
    applyTrace(data.trace);
    view.ended = true;
    root.dataset.live = "ended";
    return;
  }
  // Opened mid-run: where the run is, by its checkpoints; the socket says what happens next.
  const progress = data.progress || { done: [], running: [] };
  for (const id of progress.done) setState(id, "done", { quiet: true });
  for (const id of progress.running) setState(id, "running", { quiet: true });
  view.lastSeq = Number(root.dataset.afterSeq) || 0;
  view.current = root.dataset.runId;
  root.querySelector(".trace-graph-live").textContent = gettext("The run is in progress: node states update as it runs.");
  follow();
}

if (root) start();
