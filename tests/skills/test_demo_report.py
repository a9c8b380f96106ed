"""Issue 7, done when: in the demo, "generate the report" makes the agent load the skill,
run its script in the workspace and attach the report as an artifact the UI links,
on the offline model, through the composition root and the REST API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from skills_app.core.workspace import WorkspaceExecutor

pytestmark = pytest.mark.django_db(transaction=True)


def run(client: Any, message: str, **extra: Any) -> dict[str, Any]:
    response = client.post("/api/runs/", {"message": message, "wait": True, **extra}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "completed", response.json()
    return response.json()


def events(client: Any, session_id: str) -> list[dict[str, Any]]:
    return client.get(f"/api/sessions/{session_id}/events/", {"limit": 200}).json()["results"]


@pytest.fixture
def demo_workspaces(settings: Any, tmp_path: Path, executor: WorkspaceExecutor) -> Path:
    settings.AGENTSITE_WORKSPACE_ROOT = tmp_path / "demo-workspaces"
    return settings.AGENTSITE_WORKSPACE_ROOT


def test_generate_the_report_loads_the_skill_runs_its_script_and_saves_the_report(
    alice_api: Any, eager_celery: None, demo_workspaces: Path
) -> None:
    diagnosis = run(
        alice_api, "The payments service fails TLS handshakes, check the certificate of payments.internal.example.com"
    )
    report = run(alice_api, "generate the report", session_id=diagnosis["session_id"])

    ledger = events(alice_api, report["session_id"])
    calls = [c["name"] for e in ledger for c in e.get("tool_calls") or []]
    assert "skill_load" in calls and "skill_run" in calls
    [ran] = [e for e in ledger if e["role"] == "tool" and e["text"].startswith('{"skill": "diagnostic-report"')]
    result = json.loads(ran["text"])
    assert result["exit_code"] == 0, result
    assert "certificate expired on 2026-11-14" in result["stdout"]
    assert sorted(a["name"] for a in result["artifact_files"]) == ["incident-report.html", "incident-report.md"]
    # The workspace was the run's own folder under the configured root, removed when the run ended (issue 17).
    assert demo_workspaces.is_dir() and not [p for p in demo_workspaces.iterdir() if not p.name.startswith(".")]

    listed = alice_api.get(f"/api/sessions/{report['session_id']}/artifacts/").json()["results"]
    assert sorted(a["filename"] for a in listed) == ["incident-report.html", "incident-report.md"]
    markdown = alice_api.get(f"/api/sessions/{report['session_id']}/artifacts/incident-report.md")
    body = b"".join(markdown.streaming_content).decode()
    assert "payments.internal.example.com" in body and "certificate expired on 2026-11-14" in body
    html = alice_api.get(result["artifact_files"][0]["url"])
    html.close()  # its file, unread: the test client closes a streamed response only once it is read to the end
    assert html.status_code == 200 and html["Content-Type"].startswith("text/")
    assert "incident-report" in report["answer"]


def test_a_diagnostic_question_does_not_run_the_skill(
    alice_api: Any, eager_celery: None, demo_workspaces: Path
) -> None:
    asked = run(alice_api, "Why does auth.example.com fail TLS? Inspect its certificate")

    calls = [c["name"] for e in events(alice_api, asked["session_id"]) for c in e.get("tool_calls") or []]
    assert calls and not {"skill_load", "skill_run", "workspace_exec"} & set(calls)


def test_the_knowledge_only_setting_leaves_the_demo_agent_without_execution_tools(settings: Any) -> None:
    from agentsite.composition import build_runner
    from runs.core.llm.offline import OfflineModel

    settings.AGENTSITE_SKILLS_PROFILE = "knowledge_only"
    support = build_runner(OfflineModel()).agents["support"]

    assert {"skill_load", "skill_list_docs", "skill_select_docs"} <= set(support.tools)
    assert not {"skill_run", "workspace_exec"} & set(support.tools)


def test_a_report_saved_twice_has_versions_0_and_1_and_the_chat_links_and_downloads_both(
    alice: Any, alice_api: Any, client: Any, eager_celery: None, demo_workspaces: Path
) -> None:
    """Issue 5, done when: a report saved twice shows versions 0 and 1 and downloads from
    the UI (the chat links what the run's AG-UI stream announces; the browser session
    downloads it)."""
    first = run(alice_api, "Check the certificate of payments.internal.example.com")
    session_id = first["session_id"]
    run(alice_api, "generate the report", session_id=session_id)
    run(alice_api, "Now check the certificate of auth.example.com", session_id=session_id)
    run(alice_api, "generate the report", session_id=session_id)

    listed = alice_api.get(f"/api/sessions/{session_id}/artifacts/").json()["results"]
    [entry] = [a for a in listed if a["filename"] == "incident-report.md"]
    numbers = [v["version"] for v in entry["versions"]]
    assert numbers == [0, 1]

    client.force_login(alice)
    announced = async_to_sync(_artifact_frames)(client.cookies["sessionid"].value, session_id)
    assert {(a["filename"], a["version"]) for a in announced} == {
        ("incident-report.md", 0),
        ("incident-report.html", 0),
        ("incident-report.md", 1),
        ("incident-report.html", 1),
    }
    bodies = {}
    for item in announced:
        if item["filename"] == "incident-report.md":
            response = client.get(item["url"])
            assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
            bodies[item["version"]] = b"".join(response.streaming_content).decode()
    assert "payments.internal.example.com" in bodies[0] and "auth.example.com" not in bodies[0]
    assert "auth.example.com" in bodies[1]


async def _artifact_frames(browser_session: str, session_id: str) -> list[dict[str, Any]]:
    """The `agentsite.artifact` frames the chat page receives when it opens the session."""
    from channels.testing import WebsocketCommunicator

    from agentsite.asgi import application

    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={browser_session}".encode()),
    ]
    socket = WebsocketCommunicator(application, f"/ws/sessions/{session_id}/", headers=headers)
    connected, _ = await socket.connect(timeout=5)
    assert connected
    frames: list[dict[str, Any]] = []
    finished = 0
    while finished < 4:
        frame = await socket.receive_json_from(timeout=5)
        finished += frame["type"] == "RUN_FINISHED"
        if frame["type"] == "CUSTOM" and frame["name"] == "agentsite.artifact":
            frames.append(frame["value"])
    await socket.disconnect()
    return frames
