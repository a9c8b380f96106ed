"""The web process is SIGKILLed during runs: on restart they are `interrupted`, a graph run
resumes from its last checkpoint, and no event is duplicated.

Two runs are in flight in a first Daphne process when it is killed: an LLM run waiting on
its model (the scripted OpenAI server holds the answer back) and a run of the demo graph
sitting in `draft_report` (slowed by `slow_daphne`), after `plan`, the two tool nodes and
`decide` were checkpointed. A second Daphne process's reaper marks both `interrupted`,
each with one completion event in the ledger; resuming the graph run continues at
`draft_report`: the tools do not run again, and the report reaches the approval pause.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from rest_framework.authtoken.models import Token

from runs import models as run_orm
from sessions_app import models as orm
from sessions_app import services as session_services
from tests.resilience.services import web_process
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 30
QUESTION = "Why does payments.internal.example.com fail TLS handshakes?"


def _until(what: str, check: Any, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


def test_runs_of_a_killed_web_process_are_interrupted_and_a_graph_run_resumes(
    tmp_path: Path, alice: Any, openai_server: ScriptedOpenAIServer
) -> None:
    token = Token.objects.get_or_create(user=alice)[0].key
    chat = session_services.session_create(user=alice, agent="support").id
    incident = session_services.session_create(user=alice, agent="troubleshoot").id
    # The model never answers in time: the LLM run is mid-call when the process dies.
    started = time.monotonic()
    openai_server.script(ServerStep.delay(60, then=ServerStep.answer("too late")))
    env = {
        "AGENTSITE_MODEL": "scripted-openai-model",
        "OPENAI_BASE_URL": openai_server.base_url,
        "OPENAI_API_KEY": "sk-test",
        "AGENTSITE_TEST_SLOW_NODE_S": "60",
    }
    headers = {"Authorization": f"Bearer {token}"}

    with web_process(tmp_path, env=env, module="tests.resilience.slow_daphne") as first:
        api = httpx.Client(base_url=first.url, headers=headers, timeout=TIMEOUT)
        llm = api.post("/api/runs/", json={"message": "Summarise the outage", "session_id": chat})
        assert llm.status_code == 201, llm.text
        graph = api.post("/api/runs/", json={"message": QUESTION, "session_id": incident, "agent": "troubleshoot"})
        assert graph.status_code == 201, graph.text
        llm_id, graph_id = llm.json()["id"], graph.json()["id"]
        _until("the model call", lambda: openai_server.requests)
        _until(
            "the checkpoint before draft_report",
            lambda: any(
                "draft_report" in nodes
                for nodes in run_orm.GraphCheckpoint.objects.filter(run_id=graph_id).values_list(
                    "next_nodes", flat=True
                )
            ),
        )
        print(f"killing the first web process {time.monotonic() - started:.1f}s in")
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)

    assert run_orm.Run.objects.get(pk=llm_id).status == "running"  # nobody has noticed yet

    with web_process(tmp_path, env=env) as second:
        restarted = time.monotonic()
        api = httpx.Client(base_url=second.url, headers=headers, timeout=TIMEOUT)
        for run_id in (llm_id, graph_id):
            _until(
                f"run {run_id} interrupted",
                lambda run_id=run_id: api.get(f"/api/runs/{run_id}/").json()["status"] == "interrupted",
            )
        print(f"both runs interrupted {time.monotonic() - restarted:.1f}s after the new process listened")
        resumed = api.post(f"/api/runs/{graph_id}/resume/", json={"value": "continue", "message": "Carry on"})
        assert resumed.status_code == 201, resumed.text
        resumed_id = resumed.json()["id"]
        run = _until(
            "the resumed run",
            lambda: (r := api.get(f"/api/runs/{resumed_id}/").json())["status"] not in ("queued", "running") and r,
        )
        assert run["status"] == "completed", run
        assert run["interrupt"]["node"] == "approve", run  # it went on from draft_report to the approval
        # A second resume of the interrupted run is refused: it was resumed once.
        assert api.post(f"/api/runs/{graph_id}/resume/", json={"value": "again"}).status_code == 409

    openai_server.stop()  # release the held answer; the script's one step was consumed
    for session_id, runs in ((chat, [llm_id]), (incident, [graph_id, resumed_id])):
        rows = list(orm.Event.objects.filter(session_id=session_id).order_by("seq"))
        assert [r.seq for r in rows] == list(range(1, len(rows) + 1)), "seqs must be contiguous"
        assert len({r.event_id for r in rows}) == len(rows), "an event was stored twice"
        completions = Counter(
            r.payload["extensions"]["run_id"] for r in rows if r.payload.get("object") == "runner.completion"
        )
        assert completions == Counter(runs), completions  # one completion per run, no more
    statuses = {
        r.payload["extensions"]["run_id"]: r.payload["extensions"]["status"]
        for r in orm.Event.objects.filter(session_id__in=[chat, incident], payload__object="runner.completion")
    }
    assert statuses == {llm_id: "interrupted", graph_id: "interrupted", resumed_id: "completed"}
    texts = [
        r.payload["message"].get("content") or ""
        for r in orm.Event.objects.filter(session_id=incident)
        if r.payload.get("message")
    ]
    assert sum(t.startswith("**Draft incident report: payments") for t in texts) == 1  # drafted once, after the resume
    # The tool nodes ran once, before the kill: the resume did not repeat their supersteps.
    tools = Counter(
        r.payload["message"].get("tool_name")
        for r in orm.Event.objects.filter(session_id=incident)
        if r.payload.get("object") == "tool.response"
    )
    assert tools == Counter({"search_logs": 1, "inspect_certificate": 1}), tools
