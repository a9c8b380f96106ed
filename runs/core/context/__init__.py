"""Context governance: everything that decides what one model call sees.

- `projection`: which ledger events a call shows (summary boundary, the running
  invocation, resume tail, anchors, paired tool calls, other agents as context);
- `compaction`: tool-result passes 0-2, the resume tail's placeholders and the fit;
- `manifest`: how a request accounts for every ledger event (C3);
- `pinned`: the user's standing directives, carried verbatim (C2);
- `request`: request building from the pre-content snapshot through the projection;
- `precall`: pre-call compaction (SPEC 4.8), intra-run summaries (4.7) and the
  background summaries of the soft threshold (C5);
- `governance`: an agent's knobs (`ContextGovernance`) and the run-layer adapters of the
  summarizers;
- `seeding`: history a client resends, stored as earlier turns.

The summary algorithm itself (`sessions_app.core.summary`) stays with the session state:
the sessions app's background job runs it, and that app may not depend on the run layer.
"""
