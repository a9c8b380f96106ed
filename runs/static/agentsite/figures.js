/* Per-message figures (issue 21): under each answer a muted line with the run record's
   tokens in / out, latency and model calls, read from GET /api/runs/<id>/. chat.js calls
   AgentsiteFigures.show(runId) where it links the trace: when a run ends live and when the
   ledger replays a run's completion after a reload. Kept apart from chat.js. */
(function () {
  "use strict";
  const RETRIES = 5;
  // Django's JavaScript catalog (/jsi18n/, loaded by base.html) gives the page's language.
  const gettext = window.gettext || ((text) => text);
  const ngettext = window.ngettext || ((one, other, count) => (count === 1 ? one : other));
  const interpolate = window.interpolate || ((format, values) => format.replace(/%\((\w+)\)s/g, (_, key) => values[key]));
  const format = (text, values) => interpolate(text, values, true);

  function text(run) {
    const parts = [
      format(gettext("%(count)s tokens in"), { count: run.prompt_tokens.toLocaleString() }),
      format(gettext("%(count)s out"), { count: run.completion_tokens.toLocaleString() }),
    ];
    if (run.started_at && run.ended_at) {
      const seconds = (new Date(run.ended_at) - new Date(run.started_at)) / 1000;
      if (Number.isFinite(seconds)) parts.push(format(gettext("%(seconds)s s"), { seconds: seconds.toFixed(1) }));
    }
    parts.push(format(ngettext("%(count)s model call", "%(count)s model calls", run.model_calls), { count: run.model_calls }));
    return parts.join(" · ");
  }

  async function fill(line, runId, left) {
    let run;
    try {
      const response = await fetch(`/api/runs/${encodeURIComponent(runId)}/`, {
        headers: { Accept: "application/json" }, credentials: "same-origin",
      });
      if (!response.ok) { line.remove(); return; }
      run = await response.json();
    } catch (_) {
      line.remove();
      return;
    }
    // The completion frame can come a moment before the record's final save.
    if (!run.ended_at && left > 0) {
      setTimeout(() => fill(line, runId, left - 1), 300);
      return;
    }
    line.textContent = text(run);
    line.dataset.modelCalls = String(run.model_calls);
    line.hidden = false;
  }

  function show(runId) {
    if (!runId) return;
    // The answer is chosen now: the fetch below is async and more answers may follow.
    const answers = document.querySelectorAll(".msg-assistant");
    const answer = answers[answers.length - 1];
    if (!answer || answer.querySelector(".msg-figures")) return;
    const line = document.createElement("p");
    line.className = "msg-figures muted small";
    line.hidden = true;
    line.dataset.runId = runId;
    line.setAttribute("aria-label", gettext("Figures of the run that wrote this answer"));
    answer.appendChild(line);
    fill(line, runId, RETRIES);
  }
  window.AgentsiteFigures = { show };
})();
