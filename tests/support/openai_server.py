"""ScriptedOpenAIServer: a test double that speaks the OpenAI chat completions protocol over HTTP.

It is not a model and does not pretend to be one: it plays a script. Each
`POST /v1/chat/completions` takes the next `ServerStep` off the queue: a text answer, tool
calls, an HTTP error, a delay, or a stream that breaks. Answers are sent in the real wire
format (`chat.completion`, or `chat.completion.chunk` server-sent events ending in
`data: [DONE]`, tool-call arguments split over several chunks, a final usage chunk when
`stream_options.include_usage` is set), so the code under test runs the real SDK over a
real socket.

Requests are checked the way OpenAI checks them (tool results must answer a preceding tool
call, `tools` may not be empty, `stream_options` needs `stream`), and a bad one is answered
with a 400 without consuming a step, so a malformed request fails the test that sent it.

    with ScriptedOpenAIServer(ServerStep.answer("Hello!")) as server:
        model = OpenAIModel(model="gpt-4o", base_url=server.base_url, api_key="test")
        ...
        server.assert_consumed()
        assert server.requests[0]["messages"][0]["role"] == "system"
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

StepKind = Literal["answer", "tool_calls", "error", "delay", "broken_stream", "events"]

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"

# Answered when a request arrives with no step left: a 4xx that clients do not retry, so a
# test that calls the model once too often fails at once with this message.
EXHAUSTED_STATUS = 418
EXHAUSTED_MESSAGE = "ScriptedOpenAIServer: the script is exhausted but a chat completion was requested"

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(frozen=True, kw_only=True)
class ScriptedToolCall:
    """A tool call the server will answer with; `arguments` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True)
class ServerStep:
    """One scripted answer. Build steps with the class methods, not the constructor."""

    kind: StepKind
    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    chunk_size: int = 4
    fragment_size: int = 5
    interleave: bool = False
    chunk_delay_s: float = 0.0
    usage: tuple[int, int] | None = None
    finish_reason: str | None = None
    status: int = 200
    body: Mapping[str, Any] | str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    then: ServerStep | None = None
    after_chunks: int = 0
    events: tuple[Mapping[str, Any] | str, ...] = ()
    done: bool = True

    @classmethod
    def answer(
        cls,
        text: str,
        *,
        chunk_size: int = 4,
        chunk_delay_s: float = 0.0,
        usage: tuple[int, int] | None = None,
        finish_reason: str = "stop",
    ) -> ServerStep:
        """A text answer, streamed `chunk_size` characters per chunk; `usage` is (prompt, completion)."""
        return cls(
            kind="answer",
            text=text,
            chunk_size=chunk_size,
            chunk_delay_s=chunk_delay_s,
            usage=usage,
            finish_reason=finish_reason,
        )

    @classmethod
    def calls(
        cls,
        *calls: tuple[str, Mapping[str, Any] | str] | tuple[str, Mapping[str, Any] | str, str],
        text: str = "",
        fragment_size: int = 5,
        interleave: bool = False,
        usage: tuple[int, int] | None = None,
    ) -> ServerStep:
        """Parallel tool calls, each `(name, arguments)` or `(name, arguments, id)`.

        When streamed, each call's arguments are split into `fragment_size`-character
        fragments; `interleave` sends the fragments of all calls round-robin instead of
        one call after the other, as some servers do.
        """
        built: list[ScriptedToolCall] = []
        for spec in calls:
            name, arguments = spec[0], spec[1]
            call_id = spec[2] if len(spec) == 3 else f"call_{uuid.uuid4().hex[:12]}"
            built.append(
                ScriptedToolCall(
                    id=call_id,
                    name=name,
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
                )
            )
        return cls(
            kind="tool_calls",
            text=text,
            tool_calls=tuple(built),
            fragment_size=fragment_size,
            interleave=interleave,
            usage=usage,
            finish_reason="tool_calls",
        )

    @classmethod
    def call(cls, name: str, arguments: Mapping[str, Any] | str, *, id: str | None = None) -> ServerStep:
        """A single tool call."""
        return cls.calls((name, arguments, id) if id is not None else (name, arguments))

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        *,
        type: str | None = None,
        code: str | None = None,
        body: Mapping[str, Any] | str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ServerStep:
        """An HTTP error. Without `body`, OpenAI's `{"error": {message, type, param, code}}`."""
        if body is None:
            body = {
                "error": {
                    "message": message or f"scripted error {status}",
                    "type": type or ("server_error" if status >= 500 else "invalid_request_error"),
                    "param": None,
                    "code": code,
                }
            }
        return cls(kind="error", status=status, body=body, headers=dict(headers or {}))

    @classmethod
    def delay(cls, seconds: float, then: ServerStep | None = None) -> ServerStep:
        """Wait `seconds` before answering with `then`; without `then`, hang up instead."""
        return cls(kind="delay", delay_s=seconds, then=then)

    @classmethod
    def broken_stream(cls, text: str, *, after_chunks: int, chunk_size: int = 4) -> ServerStep:
        """Start answering `text`, then drop the connection mid-body after `after_chunks` chunks.

        The role chunk counts: `after_chunks=1` breaks before any text was sent. Without
        streaming, half the JSON body is sent before the connection drops.
        """
        return cls(kind="broken_stream", text=text, after_chunks=after_chunks, chunk_size=chunk_size)

    @classmethod
    def stream_events(cls, *events: Mapping[str, Any] | str, done: bool = True) -> ServerStep:
        """Stream these `data:` payloads verbatim (dicts as JSON), then `[DONE]` if `done`.

        For streams no well-behaved server sends: no choices at all, an error event
        mid-stream, invalid JSON. Always answered as a stream, whatever was requested.
        """
        return cls(kind="events", events=tuple(events), done=done)


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """Any request the server received, with its JSON body (None when it had none)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


class ScriptedOpenAIServer:
    """A local OpenAI-compatible HTTP server that plays a script of `ServerStep`s.

    `requests` holds the JSON bodies of the chat completion requests, in order;
    `received` holds every request with its method, path and headers. A plain string in the
    script is short for `ServerStep.answer(text)`. `GET /v1/models` lists `models` and
    consumes no step.
    """

    def __init__(
        self,
        *steps: ServerStep | str,
        models: Sequence[str] = ("scripted-openai-model",),
        validate: bool = True,
    ) -> None:
        self.models = tuple(models)
        self.validate = validate
        self.requests: list[dict[str, Any]] = []
        self.received: list[RecordedRequest] = []
        self.unexpected: list[dict[str, Any]] = []
        self._steps: deque[ServerStep] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.script(*steps)

    # -- script ---------------------------------------------------------------------------

    def script(self, *steps: ServerStep | str) -> ScriptedOpenAIServer:
        """Append steps to the script; returns the server so calls can be chained."""
        with self._lock:
            self._steps.extend(ServerStep.answer(s) if isinstance(s, str) else s for s in steps)
        return self

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._steps)

    def assert_consumed(self) -> None:
        """Fail when steps were left unplayed or a request arrived after the script ran out."""
        with self._lock:
            left, unexpected = len(self._steps), len(self.unexpected)
        if left:
            raise AssertionError(f"ScriptedOpenAIServer: {left} scripted step(s) were never requested")
        if unexpected:
            raise AssertionError(f"ScriptedOpenAIServer: {unexpected} request(s) arrived after the script ran out")

    def _next_step(self, body: dict[str, Any]) -> ServerStep | None:
        with self._lock:
            if self._steps:
                return self._steps.popleft()
            self.unexpected.append(body)
            return None

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI base URL to give a client, e.g. `http://127.0.0.1:PORT/v1`."""
        if self._httpd is None:
            raise RuntimeError("ScriptedOpenAIServer is not running; call start() or use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ScriptedOpenAIServer:
        """Listen on 127.0.0.1 on a free port and serve from a background thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler, owner=self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="scripted-openai-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake up delayed answers and drop open (keep-alive) connections."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the peer
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _track(self, connection: socket.socket, *, open: bool) -> None:
        with self._lock:
            if open:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.received.append(request)
            if request.path == CHAT_PATH and isinstance(request.body, dict):
                self.requests.append(request.body)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler stuck in a delay must never block the test run's exit

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, owner: ScriptedOpenAIServer):
        self.owner = owner
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 so that streams use chunked encoding: a dropped connection is then visibly
    # incomplete to the client, as with a real server, instead of a normal end of body.
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

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
            self._send_json(404, _error_body(f"Unknown path {path!r}", "invalid_request_error"))
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
            self._send_json(404, _error_body(f"Unknown path {path!r}", "invalid_request_error"))
            return
        if not isinstance(body, dict):
            self._send_json(400, _error_body("The request body is not valid JSON.", "invalid_request_error"))
            return
        if self.owner.validate:
            problem = _request_problem(body)
            if problem is not None:
                self._send_json(400, _error_body(problem, "invalid_request_error"))
                return
        step = self.owner._next_step(body)
        if step is None:
            self._send_json(EXHAUSTED_STATUS, _error_body(EXHAUSTED_MESSAGE, "invalid_request_error"))
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
            payload = step.body if step.body is not None else _error_body("scripted error", "server_error")
            self._send_json(step.status, payload, headers=step.headers)
        elif step.kind == "events":
            self._send_sse(step.events, step=step, done_marker=step.done, end_body=True)
        elif step.kind == "broken_stream":
            if stream:
                chunks = _stream_chunks(step, body, include_usage=include_usage)
                self._send_sse(chunks[: step.after_chunks], step=step, done_marker=False, end_body=False)
            else:
                encoded = json.dumps(_completion(step, body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(encoded)))
                self.end_headers()
                self.wfile.write(encoded[: len(encoded) // 2])
            self._hang_up()
        elif stream:
            chunks = _stream_chunks(step, body, include_usage=include_usage)
            self._send_sse(chunks, step=step, done_marker=True, end_body=True)
        else:
            self._send_json(200, _completion(step, body))

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


# -- wire format ------------------------------------------------------------------------------


def _error_body(message: str, type: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _usage(step: ServerStep, body: Mapping[str, Any]) -> dict[str, int]:
    if step.usage is not None:
        prompt, completion = step.usage
    else:
        # Deterministic stand-ins (about four characters a token), not a tokenizer.
        messages = body.get("messages") or []
        prompt = sum(len(str(m.get("content") or "")) // 4 + 1 for m in messages if isinstance(m, dict))
        produced = step.text + "".join(call.arguments for call in step.tool_calls)
        completion = max(1, len(produced) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[start : start + size] for start in range(0, len(text), size)]


def _stream_chunks(step: ServerStep, body: Mapping[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects OpenAI would stream for this step, in order."""
    base: dict[str, Any] = {
        "id": f"chatcmpl-scripted-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(body.get("model", "")),
        "system_fingerprint": "fp_scripted",
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        made = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
        if include_usage:
            made["usage"] = None  # as OpenAI does: null on every chunk but the last
        return made

    text_first = step.kind != "tool_calls" or bool(step.text)
    chunks = [chunk({"role": "assistant", "content": "" if text_first else None, "refusal": None})]
    chunks.extend(chunk({"content": piece}) for piece in _pieces(step.text, step.chunk_size))

    # Each call opens with its id, type and name and empty arguments; the arguments follow
    # in fragments that carry only the call's index.
    per_call: list[list[dict[str, Any]]] = []
    for index, call in enumerate(step.tool_calls):
        fragments = [
            {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        ]
        fragments.extend(
            {"index": index, "function": {"arguments": piece}} for piece in _pieces(call.arguments, step.fragment_size)
        )
        per_call.append(fragments)
    if step.interleave:
        longest = max((len(fragments) for fragments in per_call), default=0)
        ordered = [fragments[i] for i in range(longest) for fragments in per_call if i < len(fragments)]
    else:
        ordered = [fragment for fragments in per_call for fragment in fragments]
    chunks.extend(chunk({"tool_calls": [fragment]}) for fragment in ordered)

    chunks.append(chunk({}, step.finish_reason or "stop"))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": _usage(step, body)})
    return chunks


def _completion(step: ServerStep, body: Mapping[str, Any]) -> dict[str, Any]:
    """The `chat.completion` object OpenAI would answer for this step without streaming."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": step.text if step.text or not step.tool_calls else None,
        "refusal": None,
        "annotations": [],
    }
    if step.tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in step.tool_calls
        ]
    return {
        "id": f"chatcmpl-scripted-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model", "")),
        "system_fingerprint": "fp_scripted",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": step.finish_reason or "stop"}],
        "usage": _usage(step, body),
    }


def _request_problem(body: Mapping[str, Any]) -> str | None:
    """What OpenAI would refuse in this request body, in its words where known; None if fine."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'"
    if "stream_options" in body and body["stream_options"] is not None and not body.get("stream"):
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            return "[] is too short - 'tools'"
        for index, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or tool.get("type") != "function" or not function.get("name"):
                return f"Invalid tool at 'tools[{index}]': expected {{type: 'function', function: {{name, ...}}}}"
    pending: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _ROLES:
            return f"Invalid value for 'messages[{index}].role': {role!r}"
        if role != "tool" and pending:
            return _unanswered_calls(pending)
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                function = call.get("function") if isinstance(call, dict) else None
                if (
                    not isinstance(function, dict)
                    or not call.get("id")
                    or call.get("type") != "function"
                    or not isinstance(function.get("arguments"), str)
                ):
                    return f"Invalid tool call in 'messages[{index}].tool_calls': {call!r}"
                pending.add(call["id"])
        elif role == "tool":
            if message.get("tool_call_id") not in pending:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'."
                )
            pending.discard(message["tool_call_id"])
    if pending:
        return _unanswered_calls(pending)
    return None


def _unanswered_calls(pending: set[str]) -> str:
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(sorted(pending))}"
    )
