"""A2A (Agent2Agent) for Agentsite, on the `a2a-sdk`.

- `server`: every agent of the runner served at `/a2a/<agent>` (agent card, JSON-RPC:
  SendMessage, SendStreamingMessage, GetTask, CancelTask, ...), its tasks kept in our
  database by `task_store.DjangoTaskStore`, callers authenticated by `auth`; its parts:
  `card` (the agent card), `messages` (message text, files, output schema), `executor`
  (a message in, a run out as task updates), `guard` (unexpected errors' text kept from callers).
- `agent`: `A2AAgent`, a remote A2A agent run as one of ours, and `A2ATool`, the same
  agent offered to a model as an `ask_<name>` tool. It imports no Django.

Nothing is imported here, so that the client side can be used without the server's
Django dependencies.
"""
