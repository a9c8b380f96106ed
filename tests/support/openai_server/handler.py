"""The HTTP side of `ScriptedOpenAIServer`: the routes, and how a step is played on the socket."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from tests.support.openai_server.checks import request_problem
from tests.support.openai_server.steps import RecordedRequest, ServerStep
from tests.support.openai_server.wire import (
    CHAT_PATH,
    EXHAUSTED_MESSAGE,
    EXHAUSTED_STATUS,
    MODELS_PATH,
    completion,
    error_body,
    stream_chunks,
)

if TYPE_CHECKING:
    from tests.support.openai_server.server import ScriptedOpenAIServer


class ScriptHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler stuck in a delay must never block the test run's exit

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, owner: ScriptedOpenAIServer):
        self.owner = owner
        super().__init__(address, handler)


class ScriptHandler(BaseHTTPRequestHandler):
    # HTTP/1.1 so that streams use chunked encoding: a dropped connection is then visibly
    # incomplete to the client, as with a real server, instead of a normal end of body.
    protocol_version = "HTTP/1.1"
    server: ScriptHTTPServer

    @property
    def owner(self) -> ScriptedOpenAIServer:
        return self.server.owner

    def setup(self) -> None:
        super().setup()
        self.owner._track(self.connection, open=True)

    def end_headers(self) -> None:
        # One request per connection: the client then closes its socket when it has read the
        # answer. A kept-alive connection would outlive the test's event loop in the model's
        # connection pool, and be collected unclosed (a ResourceWarning) during a later test.
        self.send_header("Connection", "close")
        super().end_headers()

    def finish(self) -> None:
        self.owner._track(self.connection, open=False)
        try:
            super().finish()
        except OSError:
            pass  # the client or a broken-stream step already closed the socket

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log; `received` is the record."""

    # -- routes ---------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.owner._record(RecordedRequest(method="GET", path=path, headers=dict(self.headers), body=None))
        if path != MODELS_PATH:
            self._send_json(404, error_body(f"Unknown path {path!r}", "invalid_request_error"))
            return
        created = int(time.time())
        self._send_json(
            200,
            {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": created, "owned_by": "scripted-openai-server"}
                    for name in self.owner.models
                ],
            },
        )

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.owner._record(RecordedRequest(method="POST", path=path, headers=dict(self.headers), body=body))
        if path != CHAT_PATH:
            self._send_json(404, error_body(f"Unknown path {path!r}", "invalid_request_error"))
            return
        if not isinstance(body, dict):
            self._send_json(400, error_body("The request body is not valid JSON.", "invalid_request_error"))
            return
        if self.owner.validate:
            problem = request_problem(body)
            if problem is not None:
                self._send_json(400, error_body(problem, "invalid_request_error"))
                return
        step = self.owner._next_step(body)
        if step is None:
            self._send_json(EXHAUSTED_STATUS, error_body(EXHAUSTED_MESSAGE, "invalid_request_error"))
            return
        try:
            self._play(step, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its timeout fired first)

    # -- playing a step -------------------------------------------------------------------

    def _play(self, step: ServerStep, body: dict[str, Any]) -> None:
        stream = bool(body.get("stream"))
        options = body.get("stream_options")
        include_usage = stream and isinstance(options, dict) and bool(options.get("include_usage"))
        if step.kind == "delay":
            if self.owner._stopping.wait(step.delay_s) or step.then is None:
                self._hang_up()
                return
            self._play(step.then, body)
        elif step.kind == "error":
            payload = step.body if step.body is not None else error_body("scripted error", "server_error")
            self._send_json(step.status, payload, headers=step.headers)
        elif step.kind == "events":
            self._send_sse(step.events, step=step, done_marker=step.done, end_body=True)
        elif step.kind == "broken_stream":
            if stream:
                chunks = stream_chunks(step, body, include_usage=include_usage)
                self._send_sse(chunks[: step.after_chunks], step=step, done_marker=False, end_body=False)
            else:
                encoded = json.dumps(completion(step, body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(encoded)))
                self.end_headers()
                self.wfile.write(encoded[: len(encoded) // 2])
            self._hang_up()
        elif stream:
            chunks = stream_chunks(step, body, include_usage=include_usage)
            self._send_sse(chunks, step=step, done_marker=True, end_body=True)
        else:
            self._send_json(200, completion(step, body))

    def _send_json(
        self, status: int, payload: Mapping[str, Any] | str, *, headers: Mapping[str, str] | None = None
    ) -> None:
        encoded = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(encoded)))
        self.send_header("x-request-id", f"req_scripted_{uuid.uuid4().hex[:8]}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(encoded)

    def _send_sse(
        self,
        chunks: Sequence[Mapping[str, Any] | str],
        *,
        step: ServerStep,
        done_marker: bool,
        end_body: bool,
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", f"req_scripted_{uuid.uuid4().hex[:8]}")
        self.end_headers()
        for index, chunk in enumerate(chunks):
            if index and step.chunk_delay_s and self.owner._stopping.wait(step.chunk_delay_s):
                self._hang_up()  # the server is stopping: leave the body visibly unfinished
                return
            data = chunk if isinstance(chunk, str) else json.dumps(chunk)
            self._write_chunk(f"data: {data}\n\n".encode())
        if done_marker:
            self._write_chunk(b"data: [DONE]\n\n")
        if end_body:
            self.wfile.write(b"0\r\n\r\n")  # the last chunk of a chunked body

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _hang_up(self) -> None:
        """Drop the connection without finishing the response, as a crashed upstream would."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
