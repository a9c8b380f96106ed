/* Agentsite session ledger: client-side filters by role, author, tool and text; local times. */
(() => {
  "use strict";
  // Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
  const gettext = window.gettext || ((text) => text);
  const ngettext = window.ngettext || ((one, other, count) => (count === 1 ? one : other));
  const interpolate = window.interpolate || ((format, values) => format.replace(/%\((\w+)\)s/g, (_, key) => values[key]));
  const format = (text, values) => interpolate(text, values, true);

  const form = document.getElementById("ledger-filters");
  const table = document.getElementById("ledger-table");
  if (!form || !table) return;
  const rows = [...table.tBodies[0].rows];
  const count = document.getElementById("filter-count");
  const noMatch = document.getElementById("no-match");
  const role = document.getElementById("filter-role");
  const author = document.getElementById("filter-author");
  const tool = document.getElementById("filter-tool");
  const text = document.getElementById("filter-text");

  // Times are rendered in UTC by the server; show them in the reader's zone.
  for (const node of table.querySelectorAll("time[datetime]")) {
    const date = new Date(node.getAttribute("datetime"));
    if (Number.isNaN(date.getTime())) continue;
    const clock = date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
    const ms = String(date.getMilliseconds()).padStart(3, "0");
    node.replaceChildren(document.createTextNode(clock), Object.assign(document.createElement("span"), { className: "ms", textContent: `.${ms}` }));
    node.title = date.toLocaleString();
  }

  function apply() {
    const wanted = {
      role: role.value,
      author: author.value,
      tool: tool.value,
      text: text.value.trim().toLowerCase(),
    };
    let shown = 0;
    for (const row of rows) {
      const tools = (row.dataset.tools || "").split(" ").filter(Boolean);
      const visible =
        (!wanted.role || row.dataset.role === wanted.role) &&
        (!wanted.author || row.dataset.author === wanted.author) &&
        (!wanted.tool || tools.includes(wanted.tool)) &&
        (!wanted.text || row.textContent.toLowerCase().includes(wanted.text));
      row.hidden = !visible;
      if (visible) shown += 1;
    }
    const total = rows.length;
    count.textContent = shown === total
      ? format(ngettext("%(total)s event", "%(total)s events", total), { total })
      : format(ngettext("Showing %(shown)s of %(total)s event", "Showing %(shown)s of %(total)s events", total), { shown, total });
    if (noMatch) noMatch.hidden = shown !== 0;
    const params = new URLSearchParams(window.location.search);
    for (const [key, value] of Object.entries(wanted)) {
      if (value) params.set(key, value);
      else params.delete(key);
    }
    const query = params.toString();
    window.history.replaceState(null, "", `${window.location.pathname}${query ? `?${query}` : ""}${window.location.hash}`);
  }

  // Filters survive a reload and can be shared as a link.
  const initial = new URLSearchParams(window.location.search);
  for (const [key, control] of [["role", role], ["author", author], ["tool", tool], ["text", text]]) {
    const value = initial.get(key);
    if (value && (control.tagName !== "SELECT" || [...control.options].some((o) => o.value === value))) control.value = value;
  }

  form.addEventListener("submit", (event) => event.preventDefault());
  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("reset", () => setTimeout(apply, 0));
  apply();
})();
