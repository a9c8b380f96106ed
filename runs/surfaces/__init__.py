"""The protocol surfaces: the adapters that expose runs to clients, each a thin translation
between a wire protocol and the runner, the selectors and the services.

- `apis.py`, `turn_apis.py`: the REST API (DRF) for runs, agents and redone turns;
  `rest_wait.py`, `wait: true` answered on the event loop, not a view thread;
- `openai_compat.py`, `openai_responses.py`: the OpenAI-compatible `/v1` endpoints; chat
  completions' parts: `openai_request` (the body checked), `openai_runs` (the session found,
  the run started), `openai_answers` (the answer, not streamed, or replayed), `openai_stream`;
- `websocket/`: the session websocket (Channels consumer, its authentication and its parts);
- `agui/`: AG-UI over HTTP;
- `a2a/`: the A2A server (Starlette, the a2a-sdk) and the A2A client agent.

Every surface authenticates with `runs.auth`, adapted by `websocket/auth.py` (Channels) and
`a2a/auth.py` (the A2A SDK). The browser's pages (`runs.views`, `runs.trace_views`) render
HTML from the same selectors and are not protocol surfaces.
"""
