from __future__ import annotations

import json

from agentsite.demo.agents import SUPPORT_INSTRUCTION, build_demo_agents, build_support_agent
from runs.core.llm.offline import OfflineModel
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey


async def run(runner: Runner, message: str, **kwargs) -> list[Event]:
    return [e async for e in runner.run(user_id="alice", message=message, **kwargs)]


def tool_results(events: list[Event], name: str) -> list[Event]:
    return [e for e in events if e.is_tool_result and e.message.tool_name == name]


async def test_support_agent_on_the_offline_model_finds_the_expired_certificate():
    runner = Runner(app="test", agents=[build_support_agent(OfflineModel())], session_service=InMemorySessionService())

    events = await run(
        runner,
        "The payments service fails TLS handshakes, check the certificate of payments.internal.example.com",
    )

    calls = [c for e in events if e.is_tool_call for c in e.message.tool_calls]
    assert ("inspect_certificate", {"host": "payments.internal.example.com"}) in [
        (c.name, json.loads(c.arguments)) for c in calls
    ]
    [certificate] = tool_results(events, "inspect_certificate")
    report = json.loads(certificate.text)
    assert report["expired"] is True
    assert report["problem"].startswith("certificate expired on 2026-11-14")

    answer = next(e for e in reversed(events) if e.is_final_response and not e.is_runner_completion)
    assert answer.author == "support"
    assert "certificate expired on 2026-11-14" in answer.text
    assert "offline planner" in answer.text
    assert any(e.partial for e in events)  # the answer was streamed
    assert not any(e.is_error for e in events)
    assert events[-1].is_runner_completion
    assert events[-1].extensions["status"] == "completed"


async def test_support_agent_run_is_recorded_in_the_session_ledger():
    sessions = InMemorySessionService()
    runner = Runner(app="test", agents=[build_support_agent(OfflineModel())], session_service=sessions)

    events = await run(runner, "Why does auth.example.com fail TLS? Inspect its certificate")

    [certificate] = tool_results(events, "inspect_certificate")
    assert json.loads(certificate.text)["chain_complete"] is False
    answer = events[-2]
    assert "chain is missing the intermediate issuer 'Example Corp Issuing CA 1'" in answer.text
    record = await runner.status(events[-1].extensions["run_id"])
    stored = await sessions.get_session(SessionKey(app="test", user_id="alice", session_id=record.session_id))
    roles = [e.role for e in stored.events if not e.is_runner_completion]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_unknown_ticket_id_error_goes_back_to_the_model_as_a_tool_error():
    model = ScriptedModel.of(
        ScriptStep.call("lookup_ticket", {"ticket_id": "INC-9999"}, id="call_1"),
        "There is no such ticket.",
    )
    runner = Runner(app="test", agents=[build_support_agent(model)], session_service=InMemorySessionService())

    events = await run(runner, "Show me ticket INC-9999")

    [result] = tool_results(events, "lookup_ticket")
    assert result.extensions.get("tool_error") is True
    assert "LookupError" in result.text and "'INC-9999'" in result.text
    # The second model call saw the error as the tool's result.
    assert "'INC-9999'" in model.requests[1].messages[-1].content
    model.assert_consumed()
    assert events[-1].is_runner_completion


async def test_demo_agents_are_the_support_agent_first_and_a_toolless_assistant():
    agents = build_demo_agents(OfflineModel())

    assert [a.name for a in agents] == ["support", "general"]
    support, general = agents
    assert sorted(support.tools) == [
        "inspect_certificate",
        "lookup_ticket",
        "restart_service",
        "scan_fleet",
        "search_logs",
    ]
    assert support.parallel_tools is True
    assert support.instruction == SUPPORT_INSTRUCTION
    assert support.model_name == "offline"
    assert general.tools == {}


async def test_the_demo_governance_summarizes_in_the_background_without_holding_a_call_back(settings) -> None:
    """Issue 12, C5, as the demo runs it: the offline agent under the demo's thresholds
    starts its summary at the soft threshold and never waits for one in a long chat."""
    from agentsite.composition import build_governance
    from runs.core.context.governance import TIKTOKEN, extractive_summarizer
    from sessions_app.core.summary import SummaryEngine

    settings.AGENTSITE_DEMO_GOVERNANCE = True
    engine = SummaryEngine(summarizer=extractive_summarizer(budget_tokens=300), tokenizer=TIKTOKEN)
    agent = build_support_agent(OfflineModel(), build_governance(engine))
    runner = Runner(app="test", agents=[agent], session_service=InMemorySessionService(), load_after_summary=True)
    line = "Checkout keeps timing out while it talks to payments, and the retries pile up in the queue. "
    session_id = None
    reports: list[tuple[int, dict]] = []
    for turn in range(12):
        handle = await runner.start(
            user_id="alice", session_id=session_id, message=f"Turn {turn}: {line * 8}", stream=True
        )
        session_id = handle.session_id
        events = [e async for e in handle.events()]
        reports += [(turn, e.extensions["context"]) for e in events if not e.partial and "context" in e.extensions]
        await agent.background_compactions.join()

    started = [turn for turn, r in reports if (r["precall"] or {}).get("background") == "started"]
    assert len(started) >= 2, [r["sent_tokens"] for _, r in reports]  # it summarizes again and again
    # From the next turn on, the requests carry the summary; no call ever waited for one,
    # and none reached the blocking pre-call threshold.
    assert all(r["summary"] is not None for turn, r in reports if turn > started[0])
    assert all((r["precall"] or {}).get("wait_ms", 0) == 0 for _, r in reports)
    assert max(r["sent_tokens"] for _, r in reports) < agent.governance.precall.threshold(agent.context_window)


async def test_the_offline_planner_never_calls_a_tool_without_its_required_arguments():
    from sessions_app.recall_tools import recall_tools

    agent = build_support_agent(OfflineModel(), extra_tools=recall_tools())
    specs = {name: tool.spec() for name, tool in agent.tools.items()}
    runner = Runner(app="test", agents=[agent], session_service=InMemorySessionService())

    # The README's skill-learning prompt, which used to call session_load({}).
    events = await run(
        runner,
        "The payments service fails TLS handshakes, check the certificate of payments.internal.example.com "
        "and search the logs and tickets",
    )

    calls = [(c.name, json.loads(c.arguments)) for e in events if e.is_tool_call for c in e.message.tool_calls]
    assert {"search_logs", "inspect_certificate", "lookup_ticket"} <= {name for name, _ in calls}
    for name, arguments in calls:
        spec = specs[name]
        assert set(spec.parameters.get("required", [])) <= set(arguments), (name, arguments)
        if spec.requires_one_of:
            assert any(set(group) <= set(arguments) for group in spec.requires_one_of), (name, arguments)
    assert not [e for e in events if e.is_tool_result and "invalid arguments" in e.text]


def final_answer(events: list[Event]) -> str:
    return next(e for e in reversed(events) if e.is_final_response and not e.is_runner_completion).text


async def test_the_offline_answer_gives_the_cause_the_evidence_and_the_fix_in_short_markdown():
    runner = Runner(app="test", agents=[build_support_agent(OfflineModel())], session_service=InMemorySessionService())

    answer = final_answer(
        await run(
            runner,
            "The payments service fails TLS handshakes, check the certificate of payments.internal.example.com "
            "and search the logs and tickets",
        )
    )

    cause, evidence, fix = answer.index("**Cause:**"), answer.index("**Evidence**"), answer.index("**Fix**")
    assert 0 == cause < evidence < fix
    assert "payments.internal.example.com: certificate expired on 2026-11-14" in answer[cause:evidence]
    assert answer[evidence:fix].count("\n- `") == 3  # one line per tool call
    steps = answer[fix:]
    assert "1. Renew the certificate of payments.internal.example.com" in steps
    assert "`openssl s_client -connect payments.internal.example.com:443 -showcerts`" in steps
    # The past incident on this host is the one quoted first.
    assert steps.index("On record: INC-1042") < steps.index("On record: INC-1187")
    assert len(answer) < 3000


async def test_a_chinese_question_about_the_demo_scenario_is_understood_and_answered_in_chinese():
    runner = Runner(app="test", agents=[build_support_agent(OfflineModel())], session_service=InMemorySessionService())

    events = await run(runner, "支付服务 TLS 握手失败，检查 payments.internal.example.com 的证书，并搜索日志和工单")

    calls = {c.name: json.loads(c.arguments) for e in events if e.is_tool_call for c in e.message.tool_calls}
    assert set(calls) == {"search_logs", "inspect_certificate", "lookup_ticket"}
    assert calls["inspect_certificate"] == {"host": "payments.internal.example.com"}
    assert calls["search_logs"]["service"] == "payments"
    answer = final_answer(events)
    assert answer.startswith("**原因：**payments.internal.example.com: 证书已于 2026-11-14T00:00:00Z 过期")
    assert "**证据**" in answer and "**修复**" in answer
    assert "1. 续签 payments.internal.example.com 的证书" in answer
    assert "离线规划器" in answer and "Composed by" not in answer


async def test_a_chinese_fleet_scan_and_a_chinese_question_missing_its_host(monkeypatch):
    monkeypatch.setenv("AGENTSITE_DEMO_SCAN_DELAY_S", "0")
    runner = Runner(app="test", agents=[build_support_agent(OfflineModel())], session_service=InMemorySessionService())

    scan = await run(runner, "扫描所有主机的证书")

    assert [c.name for e in scan if e.is_tool_call for c in e.message.tool_calls] == ["scan_fleet"]
    assert "**原因：**结果报告了 2 个问题" in final_answer(scan)

    vague = await run(runner, "证书过期了吗？")

    assert not [e for e in vague if e.is_tool_call]
    answer = final_answer(vague)
    assert answer.startswith("离线规划器")
    assert "inspect_certificate 看起来相关，但需要 `host`" in answer


async def test_an_error_in_the_logs_is_the_cause_when_no_tool_reports_a_problem_of_its_own():
    runner = Runner(app="test", agents=[build_support_agent(OfflineModel())], session_service=InMemorySessionService())

    answer = final_answer(await run(runner, "search the logs of checkout-api for errors"))

    assert answer.startswith("**Cause:** checkout-api: upstream payments.internal.example.com:443 TLS handshake failed")
    assert "none of the results reports a problem" not in answer
    # The fix is about the host the log line names, not the service that logged it.
    assert "1. Renew the certificate of payments.internal.example.com" in answer


def test_a_chinese_message_with_an_image_is_told_in_chinese_that_the_planner_reads_text_only():
    from runs.core.llm.base import ModelRequest
    from sessions_app.core.events import ArtifactRef, ContentPart, Message

    part = ContentPart(
        type="image",
        name="graph.png",
        mime="image/png",
        size=2048,
        artifact=ArtifactRef(filename="x-graph.png", version=0),
    )

    answer = OfflineModel().respond(ModelRequest(messages=(Message(role="user", content="这是什么？", parts=(part,)),)))

    assert answer.content.startswith(
        "我看不到图片，也读不了附件：离线规划器只处理文字。收到的附件：graph.png (image/png, 2.0 KiB)"
    )


async def test_a_structured_answer_carries_every_problem_of_the_cause(monkeypatch):
    from runs.core.llm.base import ModelRequest
    from runs.core.output import OutputSpec
    from sessions_app.core.events import Message

    monkeypatch.setenv("AGENTSITE_DEMO_SCAN_DELAY_S", "0")
    runner = Runner(app="test", agents=[build_support_agent(OfflineModel())], session_service=InMemorySessionService())
    scan = await run(runner, "scan the certificates of the whole fleet")
    turn = tuple(e.message for e in scan if e.message is not None and not e.partial and e.message.role != "user")[:-1]

    answer = OfflineModel().respond(
        ModelRequest(
            messages=(Message(role="user", content="scan the certificates of the whole fleet"), *turn),
            output=OutputSpec(kind="json_object"),
        )
    )

    gist = json.loads(answer.content)["answer"]
    assert gist.startswith("the results report 2 problems:")
    assert (
        "1. auth.example.com: chain is missing" in gist
        and "2. payments.internal.example.com: certificate expired" in gist
    )
