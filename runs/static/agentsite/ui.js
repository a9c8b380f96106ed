/* What the chat's small scripts (chatlist.js, turns.js) share: the session API's address and
   CSRF token, JSON requests to it with errors as exceptions, and labelled buttons. Loaded
   before them (templates/chat/chat.html). */
(function () {
  "use strict";
  // Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
  const gettext = window.gettext || ((text) => text);
  const interpolate = window.interpolate || ((format, values) => format.replace(/%\((\w+)\)s/g, (_, key) => values[key]));

  function sessionsUrl() {
    const node = document.getElementById("chat-config");
    const config = node ? JSON.parse(node.textContent) : {};
    return (config.urls && config.urls.sessions) || "/api/sessions/";
  }

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  // `method` on the sessions API at `path` (relative to it); the answer's JSON, or an Error
  // carrying the server's message (its JSON error body names the problem).
  async function sessionRequest(method, path, body) {
    const response = await fetch(`${sessionsUrl()}${path}`, {
      method,
      credentials: "same-origin",
      headers: {
        Accept: "application/json",
        "X-CSRFToken": csrfToken(),
        ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
      },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    let data = null;
    try { data = await response.json(); } catch (_) { data = null; }
    if (!response.ok) {
      const error = (data && data.error) || {};
      throw new Error(error.message || interpolate(gettext("%(method)s answered %(status)s"), { method, status: response.status }, true));
    }
    return data;
  }

  // A button with an accessible label (also its tooltip) and a visible text.
  function button(className, label, text) {
    const node = document.createElement("button");
    node.type = "button";
    node.className = className;
    node.setAttribute("aria-label", label);
    node.title = label;
    node.textContent = text;
    return node;
  }

  window.agentsiteUi = { sessionsUrl, csrfToken, sessionRequest, button };
})();
