/* The run trace link (issue 21): chat.js calls AgentsiteTrace.link(runId) when a run ends
   (live or replayed from the ledger); the run's last answer gets a "Trace" link to its
   timeline page. Kept apart from chat.js so the chat's own code stays as it is. */
(function () {
  "use strict";
  // Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
  const gettext = window.gettext || ((text) => text);

  function link(runId) {
    if (!runId) return;
    const answers = document.querySelectorAll(".msg-assistant");
    const answer = answers[answers.length - 1];
    if (!answer || answer.querySelector(".trace-link")) return;
    const a = document.createElement("a");
    a.className = "trace-link muted small";
    a.href = `/runs/${encodeURIComponent(runId)}/trace/`;
    a.textContent = gettext("Trace");
    a.setAttribute("aria-label", gettext("Trace of the run that wrote this answer"));
    answer.appendChild(a);
  }
  window.AgentsiteTrace = { link };
})();
