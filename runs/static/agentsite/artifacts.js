/* The artifacts panel (issue 21): the files of the open chat, from
   GET /api/sessions/<id>/artifacts/: each with its name (a download link to the newest
   version), type, size and versions (each a download link). A "Files" button in the top bar
   opens it (aria-expanded; Escape or Close shut it and give focus back to the button) and
   shows how many files the chat has. The list is read again when the panel opens, when a
   run saves a file (chat.js's `agentsite:artifact`) and when a run ends
   (`agentsite:running`), so a file saved by a tool shows without a reload. Kept apart from
   chat.js. */
(function () {
  "use strict";
  // Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
  const gettext = window.gettext || ((text) => text);
  const ngettext = window.ngettext || ((one, many, n) => (n === 1 ? one : many));
  function format(template, values) {
    return template.replace(/%\((\w+)\)s/g, (_, name) => String(values[name]));
  }

  const els = {};
  let loading = null;
  let again = false;

  function sessionId() {
    const chat = window.agentsiteChat;
    return chat && chat.state ? chat.state.sessionId : null;
  }

  function sessionsUrl() {
    const node = document.getElementById("chat-config");
    const config = node ? JSON.parse(node.textContent) : {};
    return (config.urls && config.urls.sessions) || "/api/sessions/";
  }

  function h(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props)) {
      if (key === "text") node.textContent = value;
      else if (key === "className") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  /** A same-origin http(s) URL, or null: the list's links never point anywhere else. */
  function safeHref(value) {
    try {
      const parsed = new URL(String(value), window.location.href);
      return parsed.origin === window.location.origin ? parsed.href : null;
    } catch (_) {
      return null;
    }
  }

  function size(bytes) {
    if (bytes < 1024) return format(gettext("%(n)s B"), { n: bytes });
    if (bytes < 1024 * 1024) return format(gettext("%(n)s KB"), { n: (bytes / 1024).toFixed(1) });
    return format(gettext("%(n)s MB"), { n: (bytes / (1024 * 1024)).toFixed(1) });
  }

  function item(artifact) {
    const versions = artifact.versions || [];
    const latest = versions[versions.length - 1] || {};
    const href = safeHref(latest.url);
    const name = href
      ? h("a", { className: "artifact-name", href, download: "" }, artifact.filename)
      : h("span", { className: "artifact-name" }, artifact.filename);
    if (href) name.setAttribute("aria-label", format(gettext("Download %(name)s (newest version)"), { name: artifact.filename }));
    const meta = h("p", {
      className: "artifact-meta muted small",
      text: [
        latest.mime || "",
        latest.size !== undefined ? size(latest.size) : "",
        format(ngettext("%(n)s version", "%(n)s versions", versions.length), { n: versions.length }),
      ].filter(Boolean).join(" · "),
    });
    const entry = h("li", { className: "artifact-item", "data-filename": artifact.filename }, name, meta);
    if (versions.length > 1) {
      const list = h("ul", {
        className: "artifact-versions",
        "aria-label": format(gettext("Versions of %(name)s"), { name: artifact.filename }),
      });
      for (const version of versions) {
        const link = safeHref(version.url);
        const label = `v${version.version}`;
        const node = link ? h("a", { href: link, download: "" }, label) : h("span", {}, label);
        node.setAttribute("aria-label", format(gettext("Download version %(v)s of %(name)s, %(size)s"), {
          v: version.version, name: artifact.filename, size: size(version.size),
        }));
        list.append(h("li", {}, node));
      }
      entry.append(list);
    }
    return entry;
  }

  function show(results) {
    els.list.replaceChildren(...results.map(item));
    els.status.textContent = results.length ? "" : gettext("No files yet: files the agent saves in this chat appear here.");
    els.status.hidden = results.length > 0;
    els.count.textContent = results.length ? String(results.length) : "";
    els.count.hidden = !results.length;
    els.toggle.setAttribute("aria-label", format(ngettext("Files in this chat: %(n)s", "Files in this chat: %(n)s", results.length), { n: results.length }));
  }

  async function load() {
    const id = sessionId();
    if (!id) { show([]); return; }
    const response = await fetch(`${sessionsUrl()}${encodeURIComponent(id)}/artifacts/`, {
      headers: { Accept: "application/json" }, credentials: "same-origin",
    });
    if (!response.ok) {
      els.status.hidden = false;
      els.status.textContent = format(gettext("Could not list the files (%(status)s)."), { status: response.status });
      return;
    }
    const data = await response.json();
    show(data.results || []);
  }

  /** One read at a time; a request while one is under way reads once more after it. */
  function refresh() {
    if (loading) { again = true; return loading; }
    loading = load().catch(() => {
      els.status.hidden = false;
      els.status.textContent = gettext("Could not list the files.");
    }).finally(() => {
      loading = null;
      if (again) { again = false; refresh(); }
    });
    return loading;
  }

  function setOpen(open, { focus = true } = {}) {
    els.panel.hidden = !open;
    els.toggle.setAttribute("aria-expanded", open ? "true" : "false");
    if (open) {
      refresh();
      if (focus) els.close.focus();
    } else if (focus) {
      els.toggle.focus();
    }
  }

  function build() {
    const tools = document.querySelector(".topbar-tools");
    const topbar = document.querySelector(".topbar");
    if (!tools || !topbar) return false;
    els.count = h("span", { className: "artifacts-count" });
    els.count.hidden = true;
    els.toggle = h(
      "button",
      { type: "button", className: "button ghost small artifacts-toggle", id: "artifacts-toggle", "aria-controls": "artifacts-panel", "aria-expanded": "false" },
      h("span", { text: gettext("Files") }),
      els.count,
    );
    els.toggle.setAttribute("aria-label", gettext("Files in this chat"));
    els.close = h("button", { type: "button", className: "link-button artifacts-close", "aria-label": gettext("Close the files panel") }, gettext("Close"));
    els.status = h("p", { className: "artifacts-status muted small", role: "status" });
    els.list = h("ul", { className: "artifact-list" });
    els.panel = h(
      "section",
      { className: "artifacts-panel", id: "artifacts-panel", "aria-labelledby": "artifacts-title" },
      h("div", { className: "artifacts-head" }, h("h2", { id: "artifacts-title", text: gettext("Files in this chat") }), els.close),
      els.status,
      els.list,
    );
    els.panel.hidden = true;
    tools.insertBefore(els.toggle, document.getElementById("ledger-link"));
    topbar.after(els.panel);
    els.toggle.addEventListener("click", () => setOpen(els.panel.hidden));
    els.close.addEventListener("click", () => setOpen(false));
    els.panel.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        setOpen(false);
      }
    });
    return true;
  }

  function start() {
    if (!build()) return;
    document.addEventListener("agentsite:artifact", refresh);
    document.addEventListener("agentsite:running", (event) => {
      if (!event.detail || !event.detail.running) refresh();
    });
    refresh();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
