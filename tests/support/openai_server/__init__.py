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

The package, by concern: `steps.py` (the script: `ServerStep` and its builders, and the
`RecordedRequest` record), `server.py` (`ScriptedOpenAIServer`: the script queue, the
records, start and stop), `handler.py` (the HTTP routes and how a step is played),
`wire.py` (the paths and the bodies OpenAI sends: completions, chunks, errors) and
`checks.py` (what OpenAI would refuse in a request).
"""

from __future__ import annotations

from tests.support.openai_server.server import ScriptedOpenAIServer
from tests.support.openai_server.steps import RecordedRequest, ScriptedToolCall, ServerStep, StepKind
from tests.support.openai_server.wire import CHAT_PATH, EXHAUSTED_MESSAGE, EXHAUSTED_STATUS, MODELS_PATH

__all__ = [
    "CHAT_PATH",
    "EXHAUSTED_MESSAGE",
    "EXHAUSTED_STATUS",
    "MODELS_PATH",
    "RecordedRequest",
    "ScriptedOpenAIServer",
    "ScriptedToolCall",
    "ServerStep",
    "StepKind",
]
