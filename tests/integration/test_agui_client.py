"""`POST /agui/support` driven by the official AG-UI client (`HttpAgent` from @ag-ui/client,
run by Node) against a real Daphne server on the offline planner.

The client validates every event against the protocol's schemas and its ordering rules,
so a run it accepts is a run any AG-UI frontend accepts. Its package comes from
`package.json` / `package-lock.json` (`npm ci`, which `make test` runs when npm is installed).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Event as AguiEvent
from pydantic import TypeAdapter
from rest_framework.authtoken.models import Token

from runs import models as run_orm
from tests.support.daphne import LiveServer, live_daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "integration" / "agui_client.mjs"
AGUI_EVENT: TypeAdapter[Any] = TypeAdapter(AguiEvent)
TLS_QUESTION = "Why does payments.internal.example.com fail TLS handshakes?"


@pytest.fixture
def node() -> str:
    """Node and the installed client. Without Node.js the test is skipped with the reason
    (`make test` says so too); with Node but without the client it fails and says how to
    get it, since `make test` installs it wherever npm is."""
    node = shutil.which("node")
    if node is None:
        pytest.skip(
            "Node.js 20+ and npm are needed for the official AG-UI JavaScript client: install them and rerun `make test`"
        )
    if not (ROOT / "node_modules" / "@ag-ui" / "client" / "package.json").exists():
        pytest.fail(
            "node_modules is missing @ag-ui/client: run `npm ci` (or `make test`, which runs it) in the repository root"
        )
    return node


@pytest.fixture
def server(tmp_path: Path, transactional_db: Any) -> Iterator[LiveServer]:
    with live_daphne(tmp_path) as live:
        yield live


def run_client(node: str, server: LiveServer, token: str, thread_id: str, message: str) -> list[dict[str, Any]]:
    completed = subprocess.run(
        [node, str(CLIENT), f"{server.url}/agui/support", token, thread_id, message],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
    failures = [line for line in lines if line["kind"] == "error"]
    assert completed.returncode == 0 and not failures, (
        f"the AG-UI client failed: {failures or completed.stderr}\nserver log:\n{server.output()[-3000:]}"
    )
    return lines


def test_the_official_client_runs_the_support_agent_through_a_tool_call(
    node: str, server: LiveServer, alice: Any
) -> None:
    token = Token.objects.get_or_create(user=alice)[0].key
    lines = run_client(node, server, token, "agui-client-thread", TLS_QUESTION)
    events = [line["event"] for line in lines if line["kind"] == "event"]
    for event in events:
        AGUI_EVENT.validate_python(event)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert events[0]["threadId"] == "agui-client-thread"
    run = run_orm.Run.objects.get(pk=events[0]["runId"])
    assert (run.status, run.session_id, run.user_id) == ("completed", "agui-client-thread", alice.pk)

    tool_names = [e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"]
    assert "inspect_certificate" in tool_names
    assert kinds.count("TOOL_CALL_RESULT") == len(tool_names)
    assert kinds.index("TOOL_CALL_RESULT") < kinds.index("TEXT_MESSAGE_START")
    answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "expired" in answer

    # The conversation the client assembled from the stream: its question, the assistant's
    # tool calls, their results, the answer.
    result = next(line for line in lines if line["kind"] == "result")
    roles = [m["role"] for m in result["messages"]]
    assert roles[0] == "user" and roles[-1] == "assistant"
    calls = [c for m in result["messages"] if m["role"] == "assistant" for c in m.get("toolCalls") or []]
    results = {m["toolCallId"] for m in result["messages"] if m["role"] == "tool"}
    assert {c["id"] for c in calls} == results and len(calls) == len(tool_names)
    assert result["messages"][-1]["content"] == answer

    # The same thread goes on: a second run from the client continues the session.
    again = run_client(node, server, token, "agui-client-thread", "And what about checkout.example.com?")
    assert [line["event"]["type"] for line in again if line["kind"] == "event"][-1] == "RUN_FINISHED"
    assert run_orm.Run.objects.filter(session_id="agui-client-thread").count() == 2
