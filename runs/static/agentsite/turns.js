/* Regenerate the last answer and edit a sent message (issue 21, chat features). Kept apart
   from chat.js: it decorates the `.msg` bubbles chat.js draws and re-reads the conversation
   whenever it changes.

   The ledger is append-only: a regenerated answer or an edited message is a new turn whose
   user message names the one it redoes (`data-regenerates` / `data-edit-of`, set by chat.js
   from the events API). Here a turn is a user message and everything drawn after it up to
   the next user message. A redo drawn right after the turn it redoes (or after another
   version of it) joins that turn as a new *version*: one version is shown, the newest unless
   the user picks another with the "‹ 2 / 3 ›" buttons under its message. A redo of an older
   message (an edit further up) stays where the ledger put it, marked "Edited", with a link to
   the original.

   - Regenerate: a button under the last answer while no reply runs ("Try again" under the
     notice of a run that failed or was cancelled without one); a `regenerate` frame.
   - Edit: a button under each message you sent; the text becomes a field in place (Enter
     sends, Shift+Enter a new line, Escape cancels and gives focus back to the Edit button);
     an `edit` frame.

   Both go over the chat's websocket, as messages do (chat.js's `redo`; docs/websocket.md):
   the same rules and errors as POST /api/sessions/<id>/regenerate/ and
   POST /api/sessions/<id>/events/<event id>/edit/, and the new turn streams on the socket. */
(function () {
  "use strict";
  // Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
  const gettext = window.gettext || ((text) => text);
  function format(template, values) {
    return template.replace(/%\((\w+)\)s/g, (_, name) => String(values[name]));
  }

  const picked = new Map(); // first version's id -> index of the version shown (absent: the newest)
  const seen = new Map(); // first version's id -> versions counted at the last render
  let container = null;
  let observer = null;
  let editing = null; // {message, form, restore()} of the message being edited

  function chat() { return window.agentsiteChat || { state: {} }; }
  function running() { return Boolean(chat().state.running); }

  const { button } = window.agentsiteUi;

  /** A `regenerate` or `edit` frame over the chat's socket; its `run.accepted`, or an Error. */
  function redo(frame) {
    const send = chat().redo;
    return send ? send(frame) : Promise.reject(new Error(gettext("unknown error")));
  }

  // A live region of our own: "Regenerating the answer", "Showing version 1 of 2".
  const announcer = document.createElement("span");
  announcer.className = "visually-hidden";
  announcer.setAttribute("role", "status");
  function announce(text) { announcer.textContent = text; }

  function actionsOf(message) {
    let actions = message.querySelector(":scope > .msg-actions");
    if (!actions) {
      actions = document.createElement("div");
      actions.className = "msg-actions";
      const bubble = message.querySelector(".msg-bubble");
      if (bubble) bubble.after(actions);
      else message.append(actions); // an error notice
    }
    return actions;
  }

  function showError(message, text) {
    const actions = actionsOf(message);
    let line = actions.querySelector(".turn-error");
    if (!line) {
      line = document.createElement("span");
      line.className = "turn-error";
      line.setAttribute("role", "alert");
      actions.append(line);
    }
    line.textContent = text;
  }

  // -- turns and their versions -------------------------------------------------------------

  function turnsOf() {
    const turns = [];
    let current = null;
    for (const node of container.children) {
      if (node.id === "empty-state" || node.classList.contains("thinking")) continue;
      if (node.classList.contains("msg-user")) {
        const data = node.dataset;
        current = { user: node, id: data.messageId || "", parent: data.regenerates || data.editOf || "", nodes: [node] };
        turns.push(current);
      } else if (current) {
        current.nodes.push(node);
      }
    }
    return turns;
  }

  /** Turns grouped into versions: a redo joins the group of the turn it redoes when that
   * group is the one drawn just before it; else it starts a group of its own (detached). */
  function groupsOf(turns) {
    const groupOf = new Map();
    const groups = [];
    let previous = null;
    for (const turn of turns) {
      const parent = turn.parent ? groupOf.get(turn.parent) : null;
      let group;
      if (parent && parent === previous) {
        group = parent;
        group.versions.push(turn);
      } else {
        group = { key: turn.id, versions: [turn] };
        groups.push(group);
        turn.detached = Boolean(turn.parent);
      }
      if (turn.id) groupOf.set(turn.id, group);
      previous = group;
    }
    return groups;
  }

  function shownIndex(group) {
    const count = group.versions.length;
    const before = seen.get(group.key) || 0;
    if (before && count > before) picked.delete(group.key); // a new version: show it
    seen.set(group.key, count);
    return picked.has(group.key) ? Math.min(picked.get(group.key), count - 1) : count - 1;
  }

  function switcher(group, index) {
    const message = group.versions[index].user;
    const count = group.versions.length;
    let box = message.querySelector(".turn-versions");
    if (!box) {
      box = document.createElement("span");
      box.className = "turn-versions";
      box.setAttribute("role", "group");
      box.setAttribute("aria-label", gettext("Versions of this message and its answer"));
      const previous = button("link-button turn-previous", gettext("Show the previous version"), "‹");
      const label = document.createElement("span");
      label.className = "turn-version-label";
      const next = button("link-button turn-next", gettext("Show the next version"), "›");
      previous.addEventListener("click", () => pick(message, -1));
      next.addEventListener("click", () => pick(message, +1));
      box.append(previous, label, next);
      actionsOf(message).prepend(box);
    }
    box.dataset.group = group.key;
    // "2 / 3" on screen; a screen reader reads the words instead (an aria-label on a span is not read).
    const text = `${index + 1} / ${count}`;
    const label = box.querySelector(".turn-version-label");
    if (label.dataset.text !== text) {
      label.dataset.text = text;
      const shown = document.createElement("span");
      shown.setAttribute("aria-hidden", "true");
      shown.textContent = text;
      const spoken = document.createElement("span");
      spoken.className = "visually-hidden";
      spoken.textContent = format(gettext("Version %(n)s of %(count)s"), { n: index + 1, count });
      label.replaceChildren(shown, spoken);
    }
    box.querySelector(".turn-previous").disabled = index === 0;
    box.querySelector(".turn-next").disabled = index === count - 1;
  }

  function pick(message, step) {
    const box = message.querySelector(".turn-versions");
    if (!box) return;
    const key = box.dataset.group;
    const group = groupsOf(turnsOf()).find((g) => g.key === key);
    if (!group) return;
    const current = group.versions.findIndex((t) => t.user === message);
    const index = Math.max(0, Math.min(group.versions.length - 1, current + step));
    picked.set(key, index);
    render();
    // The buttons moved to the version now shown: keep the focus on the same one.
    const shown = group.versions[index].user.querySelector(".turn-versions");
    if (shown) {
      const same = shown.querySelector(step < 0 ? ".turn-previous" : ".turn-next");
      const other = shown.querySelector(step < 0 ? ".turn-next" : ".turn-previous");
      (same.disabled ? other : same).focus();
    }
    announce(format(gettext("Showing version %(n)s of %(count)s"), { n: index + 1, count: group.versions.length }));
  }

  function markEdited(turn, turns) {
    const author = turn.user.querySelector(".msg-author");
    if (!author || !turn.user.dataset.editOf || author.querySelector(".msg-edited")) return;
    const mark = document.createElement("span");
    mark.className = "msg-edited";
    mark.textContent = ` · ${gettext("edited")}`;
    author.append(mark);
    const original = turns.find((t) => t.id === turn.user.dataset.editOf);
    if (turn.detached && original) {
      const link = button("link-button msg-original", gettext("Show the original message"), gettext("original"));
      link.addEventListener("click", () => {
        original.user.setAttribute("tabindex", "-1");
        original.user.scrollIntoView({ block: "center" });
        original.user.focus();
      });
      author.append(" · ", link);
    }
  }

  // -- regenerate -----------------------------------------------------------------------------

  /** The last turn's last answer, or the notice of its run's failure or cancel when that
   * came after it (a run that ended without an answer can be tried again too). */
  function regenerateTarget(turns) {
    const last = turns[turns.length - 1];
    if (!last || last.user.classList.contains("turn-hidden")) return null;
    const ends = last.nodes.filter((n) => (n.classList.contains("msg-assistant") && !n.classList.contains("msg-streaming"))
      || n.classList.contains("notice-inline"));
    return ends[ends.length - 1] || null;
  }

  function placeRegenerate(turns) {
    const target = regenerateTarget(turns);
    for (const node of container.querySelectorAll(".msg-regenerate")) {
      if (node.closest(".msg, .notice-inline") !== target) node.remove();
    }
    if (!target || !chat().state.sessionId) return;
    let regenerate = target.querySelector(".msg-regenerate");
    if (!regenerate) {
      const answer = target.classList.contains("msg-assistant");
      regenerate = answer
        ? button("link-button msg-regenerate", gettext("Regenerate this answer"), gettext("Regenerate"))
        : button("link-button msg-regenerate", gettext("Answer this message again"), gettext("Try again"));
      regenerate.addEventListener("click", () => regenerateAnswer(target, regenerate));
      actionsOf(target).append(regenerate);
    }
    regenerate.disabled = running() || regenerate.dataset.busy === "1";
  }

  async function regenerateAnswer(message, control) {
    const sessionId = chat().state.sessionId;
    if (!sessionId || running()) return;
    control.dataset.busy = "1";
    control.disabled = true;
    try {
      await redo({ type: "regenerate" });
    } catch (error) {
      delete control.dataset.busy;
      control.disabled = false;
      showError(message, format(gettext("Could not regenerate: %(reason)s"), { reason: error.message }));
      announce(format(gettext("Could not regenerate: %(reason)s"), { reason: error.message }));
      return;
    }
    announce(gettext("Regenerating the answer"));
    document.getElementById("composer-input")?.focus();
    await chat().sync?.(); // the new turn's message, with what it regenerates, before its answer streams
  }

  // -- edit and resend ------------------------------------------------------------------------

  function placeEdit(message) {
    if (!message.dataset.messageId || message.classList.contains("msg-pending")) return;
    let edit = message.querySelector(".msg-edit");
    if (!edit) {
      edit = button("link-button msg-edit", gettext("Edit and resend this message"), gettext("Edit"));
      edit.addEventListener("click", () => startEdit(message));
      actionsOf(message).append(edit);
    }
    edit.disabled = running();
  }

  function textOf(message) {
    const record = chat().state.messages && chat().state.messages.get(message.dataset.messageId);
    if (record && typeof record.text === "string") return record.text;
    const body = message.querySelector(".msg-text");
    return body ? body.textContent : "";
  }

  function startEdit(message) {
    if (editing) editing.restore(false);
    const bubble = message.querySelector(".msg-bubble");
    const body = bubble.querySelector(".msg-text");
    const actions = actionsOf(message);
    const form = document.createElement("form");
    form.className = "msg-edit-form";
    const field = document.createElement("textarea");
    field.className = "msg-edit-input";
    field.value = textOf(message);
    field.rows = Math.min(10, Math.max(2, field.value.split("\n").length));
    field.setAttribute("aria-label", gettext("Edit your message (Enter sends, Shift+Enter adds a line, Escape cancels)"));
    const error = document.createElement("p");
    error.className = "turn-error";
    error.setAttribute("role", "alert");
    const send = document.createElement("button");
    send.type = "submit";
    send.className = "button primary small";
    send.textContent = gettext("Send");
    send.setAttribute("aria-label", gettext("Send the edited message"));
    const cancel = button("button ghost small", gettext("Cancel editing"), gettext("Cancel"));
    const row = document.createElement("div");
    row.className = "msg-edit-buttons";
    row.append(cancel, send);
    form.append(field, error, row);
    if (body) body.hidden = true;
    actions.hidden = true;
    bubble.append(form);
    message.classList.add("msg-editing");
    field.focus();
    field.setSelectionRange(field.value.length, field.value.length);

    function restore(focusEdit) {
      form.remove();
      if (body) body.hidden = false;
      actions.hidden = false;
      message.classList.remove("msg-editing");
      editing = null;
      if (focusEdit) message.querySelector(".msg-edit")?.focus();
    }
    editing = { message, restore };
    cancel.addEventListener("click", () => restore(true));
    field.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation(); // the sidebar's own Escape would close it on small screens
        restore(true);
      } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = field.value;
      if (!text.trim()) {
        error.textContent = gettext("The message must not be empty.");
        return;
      }
      field.disabled = send.disabled = true;
      try {
        await redo({ type: "edit", event_id: message.dataset.messageId, message: text });
      } catch (failure) {
        field.disabled = send.disabled = false;
        error.textContent = format(gettext("Not sent: %(reason)s"), { reason: failure.message });
        field.focus();
        return;
      }
      restore(false);
      announce(gettext("Sent the edited message"));
      document.getElementById("composer-input")?.focus();
      await chat().sync?.();
    });
  }

  // -- drawing --------------------------------------------------------------------------------

  function render() {
    if (!container) return;
    observer.disconnect(); // our own changes below must not schedule another render
    try {
      const turns = turnsOf();
      for (const group of groupsOf(turns)) {
        const index = shownIndex(group);
        group.versions.forEach((turn, i) => {
          for (const node of turn.nodes) {
            if (node.classList.contains("turn-hidden") !== (i !== index)) node.classList.toggle("turn-hidden", i !== index);
          }
          if (i !== index) turn.user.querySelector(".turn-versions")?.remove();
        });
        if (group.versions.length > 1) switcher(group, index);
      }
      for (const turn of turns) {
        markEdited(turn, turns);
        placeEdit(turn.user);
      }
      placeRegenerate(turns);
    } finally {
      observer.observe(container, { childList: true, subtree: true });
    }
  }

  let scheduled = false;
  function schedule() {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => {
      scheduled = false;
      render();
    });
  }

  function start() {
    container = document.getElementById("messages");
    if (!container) return;
    document.body.append(announcer);
    observer = new MutationObserver(schedule);
    // chat.js sets these on a message when the ledger says what it redoes; a streamed answer
    // ends by dropping its msg-streaming class.
    new MutationObserver(schedule).observe(container, {
      attributes: true, subtree: true, attributeFilter: ["data-regenerates", "data-edit-of", "data-message-id", "class"],
    });
    document.addEventListener("agentsite:running", schedule);
    render();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
