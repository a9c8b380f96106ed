"""HTTP surfaces of the run layer that speak an external protocol (AG-UI), and the parts of the
session websocket (`runs.consumers`): `ws_input`, `ws_runs`, `ws_replay`, `backpressure`, `frames`."""
