"""The session websocket (`/ws/sessions/<session_id>/`, Channels): `consumers` the consumer,
`auth` who a socket is and whether its page may open it (the token checks are `runs.auth`'s),
and the consumer's parts: `input` (client frames checked), `run_frames` (run, cancel, steer,
withdraw), `turn_frames` (regenerate, edit), `replay` (catch-up and replay from the ledger),
`backpressure` (what a slow reader may hold unsent) and `frames` (work a process's sockets share).
"""
