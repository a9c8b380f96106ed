"""Skill tools, profiles and the skills block of the request (SPEC 8.2), on the scripted model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.core.llm.base import ModelRequest
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from sessions_app.core.artifacts import ArtifactScope, InMemoryArtifactService
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService
from skills_app.core.agent import SkillsLLMAgent
from skills_app.core.repository import InMemorySkillRepository, skill_from_files
from skills_app.core.tools import EXECUTION_TOOLS, KNOWLEDGE_TOOLS, SkillsConfig, SkillToolset
from skills_app.core.workspace import WorkspaceExecutor
from tests.skills.conftest import skill_md

ALPHA_BODY = "ALPHA-INSTRUCTIONS: follow these steps.\n"
SKILLS = InMemorySkillRepository(
    [
        skill_from_files(
            {
                "SKILL.md": skill_md("alpha", "Alpha does things.", body=ALPHA_BODY, command="python3 scripts/make.py"),
                "docs/extra.md": "EXTRA-DOC-CONTENT",
                "scripts/make.py": (
                    "import os, pathlib\n"
                    "out = pathlib.Path(os.environ['OUTPUT_DIR'])\n"
                    "(out / 'result.md').write_text('# made by ' + os.environ['SKILL_NAME'])\n"
                    "(out / 'data').mkdir(exist_ok=True)\n"
                    "(out / 'data' / 'n.csv').write_text('a,b')\n"
                    "print('made')\n"
                ),
            }
        ),
        skill_from_files({"SKILL.md": skill_md("beta", "Beta knows things.", body="BETA-BODY")}),
    ]
)


def _runner(model: ScriptedModel, toolset: SkillToolset, artifacts: InMemoryArtifactService | None = None) -> Runner:
    agent = SkillsLLMAgent(skills=toolset, name="helper", model=model, instruction="You help.")
    return Runner(
        app="test",
        agents=[agent],
        session_service=InMemorySessionService(),
        services={"artifacts": artifacts} if artifacts is not None else {},
    )


async def _run(runner: Runner, message: str, session_id: str | None = None) -> list[Event]:
    return [e async for e in runner.run(user_id="alice", message=message, session_id=session_id)]


def _system(request: ModelRequest) -> str:
    return "\n".join(m.content for m in request.messages if m.role == "system")


def _result(events: list[Event], tool: str) -> Event:
    return next(e for e in events if e.is_tool_result and e.message is not None and e.message.tool_name == tool)


async def test_a_knowledge_only_agent_never_sees_an_execution_tool() -> None:
    model = ScriptedModel.of(ScriptStep.call("skill_run", {"skill": "alpha"}), "done")
    toolset = SkillToolset(SKILLS)  # knowledge_only is the default profile
    runner = _runner(model, toolset)

    events = await _run(runner, "run alpha")

    assert toolset.config.profile == "knowledge_only"
    assert sorted(runner.agents["helper"].tools) == sorted(KNOWLEDGE_TOOLS)
    for request in model.requests:
        assert not {t.name for t in request.tools} & set(EXECUTION_TOOLS)
        assert "You cannot execute code here" in _system(request)
        assert "skill_run runs" not in _system(request)
    refused = _result(events, "skill_run")
    assert refused.extensions.get("tool_error") and "unknown tool 'skill_run'" in refused.text
    model.assert_consumed()


def test_profiles_and_allow_lists_choose_the_tools(executor: WorkspaceExecutor) -> None:
    full = SkillToolset(SKILLS, config=SkillsConfig(profile="full"), executor=executor)
    only = SkillToolset(SKILLS, config=SkillsConfig(profile="full", allowed_tools=("skill_load",)), executor=executor)
    none = SkillToolset(SKILLS, config=SkillsConfig(allowed_tools=()))

    assert [t.name for t in full.tools()] == [*KNOWLEDGE_TOOLS, *EXECUTION_TOOLS]
    assert [t.name for t in only.tools()] == ["skill_load"]
    assert none.tools() == []
    with pytest.raises(ValueError, match="need a WorkspaceExecutor"):
        SkillToolset(SKILLS, config=SkillsConfig(profile="full"))


async def test_the_overview_is_in_the_system_prompt_and_the_skill_parameter_lists_the_skills() -> None:
    model = ScriptedModel.of("hello")
    await _run(_runner(model, SkillToolset(SKILLS)), "hi")

    [request] = model.requests
    assert "You help." in _system(request)
    assert "Available skills:\n- alpha: Alpha does things.\n- beta: Beta knows things." in _system(request)
    assert ALPHA_BODY.strip() not in _system(request)
    load = next(t for t in request.tools if t.name == "skill_load")
    assert load.parameters["properties"]["skill"]["enum"] == ["alpha", "beta"]


async def test_a_skill_added_between_turns_is_offered_and_counted_in_the_next_request() -> None:
    # The tool's schema is built once per catalog (its JSON and token count are remembered
    # by that object): a new skill must still reach the model, and its cost the stats.
    repository = InMemorySkillRepository([SKILLS._skills["alpha"]])
    model = ScriptedModel.of("one", "two")
    runner = _runner(model, SkillToolset(repository))
    first = await _run(runner, "hi")
    repository.add(skill_from_files({"SKILL.md": skill_md("gamma", "Gamma does more.")}))
    record = await runner.status(first[-1].extensions["run_id"])
    second = await _run(runner, "again", session_id=record.session_id)

    enums = [
        next(t for t in r.tools if t.name == "skill_load").parameters["properties"]["skill"]["enum"]
        for r in model.requests
    ]
    assert enums == [["alpha"], ["alpha", "gamma"]]
    costs = [e.extensions["context"]["tools_tokens"] for e in (*first, *second) if "context" in e.extensions]
    assert len(costs) == 2 and costs[1] > costs[0]


async def test_a_loaded_skill_and_its_chosen_docs_are_in_the_next_request_for_the_turn() -> None:
    model = ScriptedModel.of(
        ScriptStep.call("skill_load", {"skill": "alpha", "docs": ["docs/extra.md"]}),
        "using alpha",
        "next turn",
    )
    runner = _runner(model, SkillToolset(SKILLS))

    events = await _run(runner, "use alpha")
    record = await runner.status(events[-1].extensions["run_id"])
    await _run(runner, "again", session_id=record.session_id)

    loaded = _result(events, "skill_load")
    assert loaded.text == "loaded: alpha"
    assert loaded.state_delta["temp:skill:loaded:alpha"] == "1"
    assert json.loads(loaded.state_delta["temp:skill:docs:alpha"]) == ["docs/extra.md"]
    assert loaded.state_delta["temp:skill:loaded_by_agent:helper/alpha"] == "1"
    first, after_load, next_turn = (_system(r) for r in model.requests)
    assert "[Loaded] alpha" not in first
    assert "[Loaded] alpha" in after_load and ALPHA_BODY.strip() in after_load
    assert "Docs loaded: docs/extra.md" in after_load and "EXTRA-DOC-CONTENT" in after_load
    assert "[Loaded] alpha" not in next_turn  # load mode `turn`: gone with the invocation
    model.assert_consumed()


async def test_session_mode_keeps_a_load_across_turns_and_once_mode_for_one_request() -> None:
    session_model = ScriptedModel.of(ScriptStep.call("skill_load", {"skill": "beta"}), "ok", "later")
    runner = _runner(session_model, SkillToolset(SKILLS, config=SkillsConfig(load_mode="session")))
    events = await _run(runner, "load beta")
    record = await runner.status(events[-1].extensions["run_id"])
    await _run(runner, "later", session_id=record.session_id)
    assert ["BETA-BODY" in _system(r) for r in session_model.requests] == [False, True, True]

    once_model = ScriptedModel.of(
        ScriptStep.call("skill_load", {"skill": "beta"}), ScriptStep.call("skill_list_docs", {"skill": "alpha"}), "ok"
    )
    await _run(_runner(once_model, SkillToolset(SKILLS, config=SkillsConfig(load_mode="once"))), "load beta once")
    assert ["BETA-BODY" in _system(r) for r in once_model.requests] == [False, True, False]


async def test_select_docs_and_list_docs_and_unknown_names() -> None:
    model = ScriptedModel.of(
        ScriptStep.calls(("skill_list_docs", {"skill": "alpha"}), ("skill_load", {"skill": "nope"})),
        ScriptStep.call("skill_select_docs", {"skill": "alpha", "include_all_docs": True}),
        "done",
    )
    events = await _run(_runner(model, SkillToolset(SKILLS)), "docs")

    assert json.loads(_result(events, "skill_list_docs").text) == {"skill": "alpha", "docs": ["docs/extra.md"]}
    assert "unknown skill: nope" in _result(events, "skill_load").text
    selected = _result(events, "skill_select_docs")
    assert selected.state_delta["temp:skill:docs:alpha"] == "*"
    assert "EXTRA-DOC-CONTENT" in _system(model.requests[2])


async def test_skill_run_runs_the_default_command_and_exports_out_files_as_artifacts_once(
    executor: WorkspaceExecutor,
) -> None:
    artifacts = InMemoryArtifactService()
    model = ScriptedModel.of(
        ScriptStep.call("skill_run", {"skill": "alpha"}),
        ScriptStep.call("skill_run", {"skill": "alpha"}),
        ScriptStep.call("workspace_exec", {"command": "echo changed > out/result.md; ls /workspace/skills/alpha"}),
        "done",
    )
    runner = _runner(model, SkillToolset(SKILLS, config=SkillsConfig(profile="full"), executor=executor), artifacts)

    events = await _run(runner, "make it")

    first, second, shell = [e for e in events if e.is_tool_result]
    ran = json.loads(first.text)
    assert (ran["exit_code"], ran["stdout"], ran["command"]) == (0, "made\n", "python3 scripts/make.py")
    assert [(a["name"], a["version"]) for a in ran["artifact_files"]] == [("result.md", 0), ("data_n.csv", 0)]
    assert first.extensions["artifact"]["filename"] == "result.md"
    assert [a["filename"] for a in first.extensions["artifacts"]] == ["result.md", "data_n.csv"]
    assert json.loads(first.state_delta["temp:skill:artifacts"])["files"][1] == {"name": "data_n.csv", "version": 0}
    assert json.loads(second.text)["artifact_files"] == []  # unchanged outputs are not saved again
    shelled = json.loads(shell.text)
    assert "SKILL.md" in shelled["stdout"] and [a["name"] for a in shelled["artifact_files"]] == ["result.md"]
    record = await runner.status(events[-1].extensions["run_id"])
    scope = ArtifactScope(app="test", user_id="alice", session_id=record.session_id)
    saved = await artifacts.load(scope, "result.md")
    assert saved is not None and saved.version == 1 and saved.data == b"changed\n"
    assert (await artifacts.load(scope, "result.md", version=0)).data == b"# made by alpha"


async def test_at_most_the_configured_number_of_outputs_become_artifacts(
    tmp_path: Path, executor: WorkspaceExecutor
) -> None:
    artifacts = InMemoryArtifactService()
    model = ScriptedModel.of(
        ScriptStep.call("workspace_exec", {"command": "for i in $(seq 1 25); do echo $i > out/f$i.txt; done"}), "ok"
    )

    events = await _run(
        _runner(model, SkillToolset(SKILLS, config=SkillsConfig(profile="full"), executor=executor), artifacts), "many"
    )

    result = json.loads(_result(events, "workspace_exec").text)
    assert len(result["artifact_files"]) == 20
    assert any("more than 20 output files" in w for w in result["warnings"])


async def test_skill_run_can_require_a_load_first_and_reports_the_sandbox_status(executor: WorkspaceExecutor) -> None:
    model = ScriptedModel.of(ScriptStep.call("skill_run", {"skill": "alpha"}), "ok")
    config = SkillsConfig(profile="full", require_load_before_run=True)

    events = await _run(_runner(model, SkillToolset(SKILLS, config=config, executor=executor)), "run")

    assert "skill_run requires skill_load first" in _result(events, "skill_run").text


async def test_execution_tools_refuse_to_run_where_the_sandbox_is_unavailable(tmp_path: Path) -> None:
    from skills_app.core.workspace import WorkspaceConfig

    broken = WorkspaceExecutor(WorkspaceConfig(root=tmp_path / "ws", setpriv=str(tmp_path / "missing-setpriv")))
    model = ScriptedModel.of(ScriptStep.call("workspace_exec", {"command": "echo hi"}), "ok")

    events = await _run(_runner(model, SkillToolset(SKILLS, config=SkillsConfig(profile="full"), executor=broken)), "x")

    refused = _result(events, "workspace_exec")
    assert refused.extensions.get("tool_error")
    assert "code execution is disabled: the sandbox is unavailable" in refused.text
    assert "missing-setpriv is not installed" in refused.text


async def test_the_offline_planner_says_plainly_that_a_refused_skill_run_did_not_happen(tmp_path: Path) -> None:
    from runs.core.llm.offline import OfflineModel
    from skills_app.core.workspace import WorkspaceConfig

    # A short missing path: the answer shortens a long error, and under pytest-xdist tmp_path
    # is long enough to cut the hint off.
    no_sandbox = WorkspaceExecutor(WorkspaceConfig(root=tmp_path / "ws", bwrap="/nonexistent/bwrap"))
    toolset = SkillToolset(SKILLS, config=SkillsConfig(profile="full"), executor=no_sandbox)

    events = await _run(_runner(OfflineModel(), toolset), "run the skill alpha")

    assert _result(events, "skill_run").extensions.get("tool_error")
    answer = next(e for e in reversed(events) if e.is_final_response and not e.is_runner_completion).text
    assert answer.startswith("Could not complete this request")
    assert "apt install bubblewrap" in answer
    assert "none of the results reports a problem" not in answer
