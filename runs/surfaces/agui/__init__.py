"""AG-UI over HTTP (`POST /agui/<agent>`, `/agui/<agent>/cancel`): `views` the endpoints,
`input` the request checked, `stream` the run and its event stream, `steering` an input that
goes into the thread's active run. The AG-UI translator itself is plain Python in
`runs.core.protocols.agui`."""
