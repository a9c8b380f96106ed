/* Chat features users expect (issue 21): rename, delete and search the chats in the
   sidebar, and copy a message. Kept apart from chat.js: it decorates what chat.js and the
   server draw (the sidebar's links, the `.msg` bubbles) and watches both lists for new
   entries, so chat.js needs no hooks.

   - Rename: an inline field; Enter saves (PATCH /api/sessions/<id>/ {title}), Escape
     cancels and gives focus back to the Rename button.
   - Delete: a confirm dialog, then DELETE /api/sessions/<id>/ (which stops the chat's
     runs); deleting the open chat goes to a new chat.
   - Search: filters the chats listed in the sidebar by title, client-side (the sidebar
     holds the newest chats the server listed, not every chat ever made).
   - Copy: the message's text through navigator.clipboard, with a hidden-textarea
     execCommand fallback where the Clipboard API is missing or refused (plain http). */
(function () {
  "use strict";
  const COPIED_MS = 2000;
  // Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
  const gettext = window.gettext || ((text) => text);
  const interpolate = window.interpolate || ((format, values) => format.replace(/%\((\w+)\)s/g, (_, key) => values[key]));
  const format = (text, values) => interpolate(text, values, true);

  const { sessionRequest, button } = window.agentsiteUi;

  function call(method, sessionId, body) {
    return sessionRequest(method, `${encodeURIComponent(sessionId)}/`, body);
  }

  // Drawn icons: emoji glyphs are missing where the system has no emoji font.
  const ICONS = {
    rename: "M4 16l1-4 8-8 3 3-8 8-4 1z",
    delete: "M4 6h12M8 6V4h4v2M6 6l1 10h6l1-10",
  };
  function iconButton(className, label, icon) {
    const node = button(className, label, "");
    node.innerHTML = `<svg aria-hidden="true" viewBox="0 0 20 20" width="14" height="14"><path d="${ICONS[icon]}" ` +
      'fill="none" stroke="currentColor" stroke-width="1.8" stroke-linecap="round" stroke-linejoin="round"/></svg>';
    return node;
  }

  // A live region of our own, so a screen reader hears "Copied", "Renamed", "Deleted".
  const announcer = document.createElement("span");
  announcer.className = "visually-hidden";
  announcer.setAttribute("role", "status");
  function announce(text) { announcer.textContent = text; }

  // -- sidebar: rename, delete ------------------------------------------------------------

  function titleOf(link) {
    const span = link.querySelector(".session-title");
    return span ? span.textContent.trim() : "";
  }

  function isOpen(link) {
    return link.getAttribute("aria-current") === "page" || new URL(link.href).pathname === window.location.pathname;
  }

  function labelActions(item) {
    const link = item.querySelector(".session-link");
    const title = titleOf(link);
    item.querySelector(".session-rename").setAttribute("aria-label", format(gettext("Rename chat “%(title)s”"), { title }));
    item.querySelector(".session-delete").setAttribute("aria-label", format(gettext("Delete chat “%(title)s”"), { title }));
  }

  function decorate(item) {
    const link = item.querySelector(".session-link");
    if (!link || item.querySelector(".session-actions")) return;
    const actions = document.createElement("span");
    actions.className = "session-actions";
    const rename = iconButton("icon-button session-rename", gettext("Rename chat"), "rename");
    const remove = iconButton("icon-button session-delete", gettext("Delete chat"), "delete");
    rename.addEventListener("click", () => startRename(item));
    remove.addEventListener("click", () => deleteChat(item));
    actions.append(rename, remove);
    item.classList.add("session-item");
    item.append(actions);
    labelActions(item);
  }

  function startRename(item) {
    const link = item.querySelector(".session-link");
    const sessionId = link.dataset.sessionId;
    const before = titleOf(link);
    const form = document.createElement("form");
    form.className = "session-rename-form";
    const input = document.createElement("input");
    input.type = "text";
    input.className = "session-rename-input";
    input.value = before;
    input.maxLength = 200;
    input.required = true;
    input.setAttribute("aria-label", gettext("New chat name (Enter saves, Escape cancels)"));
    form.append(input);
    link.hidden = true;
    item.querySelector(".session-actions").hidden = true;
    item.prepend(form);
    input.focus();
    input.select();

    let done = false;
    function finish() {
      done = true;
      form.remove();
      link.hidden = false;
      item.querySelector(".session-actions").hidden = false;
      item.querySelector(".session-rename").focus();
    }
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation(); // the sidebar's own Escape would close it on small screens
        finish();
      }
    });
    input.addEventListener("blur", () => { if (!done) finish(); });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const title = input.value.trim();
      if (!title || title === before) { finish(); return; }
      done = true; // disabling the field blurs it: that blur must not end the rename early
      input.disabled = true;
      try {
        const session = await call("PATCH", sessionId, { title });
        link.querySelector(".session-title").textContent = session.title;
        if (isOpen(link)) {
          const heading = document.getElementById("chat-title");
          if (heading) heading.textContent = session.title;
          document.title = `${session.title} · Agentsite`;
        }
        labelActions(item);
        announce(format(gettext("Renamed to %(title)s"), { title: session.title }));
      } catch (error) {
        announce(format(gettext("Could not rename: %(error)s"), { error: error.message }));
        window.alert(format(gettext("Could not rename the chat: %(error)s"), { error: error.message }));
      }
      finish();
    });
  }

  async function deleteChat(item) {
    const link = item.querySelector(".session-link");
    const title = titleOf(link);
    const question = gettext("Delete the chat “%(title)s”? Its messages and files are removed, and a running reply is stopped.");
    if (!window.confirm(format(question, { title }))) {
      item.querySelector(".session-delete").focus();
      return;
    }
    const open = isOpen(link);
    try {
      await call("DELETE", link.dataset.sessionId);
    } catch (error) {
      announce(format(gettext("Could not delete: %(error)s"), { error: error.message }));
      window.alert(format(gettext("Could not delete the chat: %(error)s"), { error: error.message }));
      return;
    }
    if (open) {
      // The open chat is gone: start a new one, as the New chat button does.
      window.location.assign(document.getElementById("new-chat").getAttribute("href"));
      return;
    }
    const next = item.nextElementSibling || item.previousElementSibling;
    item.remove();
    announce(format(gettext("Deleted %(title)s"), { title }));
    const focus = next && next.querySelector(".session-link");
    (focus || document.getElementById("new-chat")).focus();
    filter();
  }

  // -- sidebar: search --------------------------------------------------------------------

  function filter() {
    const input = document.getElementById("session-search");
    const empty = document.getElementById("session-search-empty");
    if (!input) return;
    const query = input.value.trim().toLocaleLowerCase();
    let shown = 0;
    for (const item of document.querySelectorAll("#session-list > li")) {
      const link = item.querySelector(".session-link");
      if (!link) continue;
      const match = !query || titleOf(link).toLocaleLowerCase().includes(query);
      item.hidden = !match;
      if (match) shown += 1;
    }
    if (empty) empty.hidden = !query || shown > 0;
  }

  // -- messages: copy ---------------------------------------------------------------------

  function fallbackCopy(text) {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    if (!ok) throw new Error(gettext("the browser refused to copy"));
  }

  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        return;
      } catch (_) {
        // Refused (no permission, page not focused): try the old way below.
      }
    }
    fallbackCopy(text);
  }

  function addCopy(message) {
    if (message.querySelector(".msg-copy")) return;
    const bubble = message.querySelector(".msg-bubble");
    if (!bubble) return;
    const copy = button("link-button msg-copy", gettext("Copy message"), gettext("Copy"));
    copy.addEventListener("click", async () => {
      const body = bubble.querySelector(".msg-text, .md") || bubble;
      try {
        await copyText(body.innerText.trim());
        copy.textContent = gettext("Copied");
        copy.dataset.state = "copied";
        announce(gettext("Copied to the clipboard"));
      } catch (error) {
        copy.textContent = gettext("Copy failed");
        announce(format(gettext("Could not copy: %(error)s"), { error: error.message }));
      }
      window.setTimeout(() => { copy.textContent = gettext("Copy"); delete copy.dataset.state; }, COPIED_MS);
    });
    const actions = document.createElement("div");
    actions.className = "msg-actions";
    actions.append(copy);
    bubble.after(actions);
  }

  function scan(root, selector, each) {
    if (!(root instanceof Element)) return;
    if (root.matches(selector)) each(root);
    for (const node of root.querySelectorAll(selector)) each(node);
  }

  function start() {
    document.body.append(announcer);
    const list = document.getElementById("session-list");
    if (list) {
      for (const item of list.children) decorate(item);
      new MutationObserver((records) => {
        for (const record of records) for (const node of record.addedNodes) if (node.tagName === "LI") decorate(node);
        filter();
      }).observe(list, { childList: true });
    }
    const search = document.getElementById("session-search");
    if (search) {
      search.addEventListener("input", filter);
      search.addEventListener("keydown", (event) => {
        if (event.key === "Escape" && search.value) {
          event.stopPropagation();
          search.value = "";
          filter();
        }
      });
    }
    const messages = document.getElementById("messages");
    if (messages) {
      scan(messages, ".msg", addCopy);
      new MutationObserver((records) => {
        for (const record of records) for (const node of record.addedNodes) scan(node, ".msg", addCopy);
      }).observe(messages, { childList: true, subtree: true });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
