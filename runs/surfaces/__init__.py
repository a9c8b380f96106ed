"""The protocol surfaces: the adapters that expose runs to clients, each a thin translation
between a wire protocol and the runner, the selectors and the services.

- `apis.py`, `turn_apis.py`: the REST API (DRF) for runs, agents and redone turns;
- `openai_compat.py`, `openai_responses.py`: the OpenAI-compatible `/v1` endpoints; chat
  completions' parts: `openai_request` (the body checked), `openai_runs` (the session found,
  the run started), `openai_answers` (the answer, not streamed, or replayed), `openai_stream`;
- `a2a/`: the A2A server (Starlette, the a2a-sdk) and the A2A client agent.

Every surface authenticates with `runs.auth`. The websocket consumer (`runs.consumers`,
`runs.ws_auth`) and the AG-UI views (`runs.protocols`) are surfaces too, not moved here yet.
"""
