"""The model endpoint misbehaves mid-run: it times out, answers 500s, sends malformed JSON
or drops a stream half-way.

Each case drives a real run over the session websocket (Channels' `WebsocketCommunicator`
on the ASGI application), with the real OpenAI provider talking to the local scripted
OpenAI-compatible server. A run either succeeds after a retry or ends `failed`; in both
cases the ledger keeps the user message and every complete event (never a partial one),
its seqs stay contiguous, it ends with the run's completion event, and the socket ends the
run with RUN_FINISHED or RUN_ERROR. Runs on the embedded defaults and on PostgreSQL + Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from agentsite.asgi import application
from runs import models as run_orm
from runs.core.llm.base import Model
from runs.core.llm.openai_provider import OpenAIModel
from sessions_app import models as orm
from sessions_app import services as session_services
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 15
ANSWER = "The certificate of checkout-api expired yesterday."
QUESTION = "Why does checkout-api fail TLS handshakes?"


@dataclass(frozen=True, kw_only=True)
class Fault:
    """One way the endpoint misbehaves, and what the run must come to."""

    steps: tuple[ServerStep, ...]
    status: str
    end_frame: str
    # Ledger objects between the user message and the completion event.
    middle: tuple[str, ...]
    error_fragment: str = ""


# Two attempts per model call (max_retries=1): a fault that repeats outlives the retries.
FAULTS = {
    "timeout-every-attempt": Fault(
        steps=(ServerStep.delay(5, then=ServerStep.answer(ANSWER)),) * 2,
        status="failed",
        end_frame="RUN_ERROR",
        middle=("error",),
        error_fragment="2 attempt(s)",
    ),
    "500-then-answer": Fault(
        steps=(ServerStep.error(500, "upstream exploded"), ServerStep.answer(ANSWER, chunk_size=8)),
        status="completed",
        end_frame="RUN_FINISHED",
        middle=("chat.completion",),
    ),
    "500-every-attempt": Fault(
        steps=(ServerStep.error(500, "upstream exploded"),) * 2,
        status="failed",
        end_frame="RUN_ERROR",
        middle=("error",),
        error_fragment="upstream exploded",
    ),
    "malformed-json-in-stream": Fault(
        steps=(ServerStep.stream_events("{this is not json", done=True),),
        status="failed",
        end_frame="RUN_ERROR",
        middle=("error",),
        error_fragment="invalid JSON",
    ),
    "stream-drops-before-text-then-answer": Fault(
        steps=(ServerStep.broken_stream(ANSWER, after_chunks=1), ServerStep.answer(ANSWER, chunk_size=8)),
        status="completed",
        end_frame="RUN_FINISHED",
        middle=("chat.completion",),
    ),
    # A tool round completes, then the answer's stream breaks after some text was shown:
    # retrying would repeat that text, so the run fails, keeping the finished tool round.
    "stream-drops-mid-answer-after-a-tool-round": Fault(
        steps=(
            ServerStep.call("search_logs", {"query": "tls"}, id="call_logs"),
            ServerStep.broken_stream(ANSWER, after_chunks=4, chunk_size=6),
        ),
        status="failed",
        end_frame="RUN_ERROR",
        middle=("chat.completion", "tool.response", "error"),
        error_fragment="broke after text was streamed",
    ),
}


@sync_to_async
def _token_and_session(alice: Any) -> tuple[str, str]:
    token = Token.objects.get_or_create(user=alice)[0].key
    return token, session_services.session_create(user=alice, agent="support").id


@sync_to_async
def _ledger(session_id: str) -> list[tuple[int, str, str, str, bool]]:
    rows = orm.Event.objects.filter(session_id=session_id).order_by("seq")
    return [(r.seq, r.event_id, r.payload.get("object", ""), r.role, bool(r.payload.get("partial"))) for r in rows]


@sync_to_async
def _run(run_id: str) -> run_orm.Run:
    return run_orm.Run.objects.get(pk=run_id)


async def _final_run(run_id: str) -> run_orm.Run:
    """The run's record once saved: the completion event is emitted before the record is
    (SPEC 1.9), so the socket's last frame can overtake it by a moment."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while (run := await _run(run_id)).status in ("queued", "running"):
        assert asyncio.get_running_loop().time() < deadline, f"run {run_id} is still {run.status}"
        await asyncio.sleep(0.05)
    return run


async def _frames_of_one_run(token: str, session_id: str) -> tuple[str, list[dict[str, Any]]]:
    socket = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session_id}/?token={token}",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")],
    )
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    await socket.send_json_to({"type": "run", "message": QUESTION})
    accepted = await socket.receive_json_from(timeout=TIMEOUT)
    assert accepted["type"] == "run.accepted", accepted
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        frames.append(await socket.receive_json_from(timeout=TIMEOUT))
    await socket.disconnect()
    return accepted["run_id"], frames


@pytest.mark.parametrize("name", list(FAULTS))
async def test_a_model_fault_ends_the_run_cleanly_and_keeps_every_complete_event(
    name: str, alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    fault = FAULTS[name]
    openai_server.script(*fault.steps)
    use_model(
        OpenAIModel(
            model="scripted-openai-model",
            base_url=openai_server.base_url,
            api_key="test",
            timeout_s=0.5,
            max_retries=1,
            backoff_base_s=0.01,
            backoff_max_s=0.05,
        )
    )
    token, session_id = await _token_and_session(alice)

    run_id, frames = await _frames_of_one_run(token, session_id)

    openai_server.assert_consumed()  # every retry the fault called for did happen
    assert frames[-1]["type"] == fault.end_frame, frames[-1]
    if fault.end_frame == "RUN_ERROR":
        assert fault.error_fragment in frames[-1]["message"], frames[-1]
    else:
        answer = "".join(f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT" and f.get("delta"))
        assert answer.endswith(ANSWER)
    run = await _final_run(run_id)
    assert run.status == fault.status

    ledger = await _ledger(session_id)
    seqs = [seq for seq, *_ in ledger]
    assert seqs == list(range(1, len(ledger) + 1)), "seqs must be contiguous from 1"
    assert len({event_id for _, event_id, *_ in ledger}) == len(ledger), "an event was stored twice"
    assert not any(partial for *_, partial in ledger), "a partial (streaming) event reached the ledger"
    assert ledger[0][3] == "user"
    assert ledger[-1][2] == "runner.completion"
    assert tuple(obj for _, _, obj, _, _ in ledger[1:-1]) == fault.middle, ledger
    # Every frame that names a ledger seq names one that exists, and none is sent twice.
    shown = [(f["type"], f["metadata"]["seq"]) for f in frames if "seq" in (f.get("metadata") or {})]
    assert {seq for _, seq in shown} <= set(seqs)
    assert len(shown) == len(set(shown)), shown
