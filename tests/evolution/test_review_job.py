"""The review job on Django, end to end: a run with four tool calls gives a gated candidate
that waits for a person, a staff user approves it in the admin, and the next run's skill
overview shows it; runs under the evidence gate, the job run twice, unsafe scripts, user
facts, rejection, direct publishing and the candidates API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from evolution_app import models as orm
from evolution_app.core.gates import HumanGate, SafetyGate, SpecGate
from evolution_app.core.review import REVIEW_TOOL, ModelReviewer
from evolution_app.tasks import evolution_review, evolution_review_task
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from sessions_app import models as sessions
from skills_app import models as skills

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "The payments service fails TLS handshakes, check the certificate of payments.internal.example.com"
SKILL = "search-logs-inspect-certificate-lookup-ticket"


@pytest.fixture(autouse=True)
def _evolution_on(settings: Any) -> None:
    settings.AGENTSITE_EVOLUTION = True
    settings.AGENTSITE_EVOLUTION_MODEL = "offline"
    settings.AGENTSITE_EVOLUTION_GATES = ["spec", "safety", "effectiveness", "human"]
    settings.AGENTSITE_EVOLUTION_REPLAY = "scripted"
    settings.AGENTSITE_MEMORY_AUTO = False


def troubleshooting_model() -> ScriptedModel:
    """Four tool calls over two steps, then the report."""
    return ScriptedModel.of(
        ScriptStep.calls(
            ("search_logs", {"service": "payments", "query": "tls handshake"}),
            ("inspect_certificate", {"host": "payments.internal.example.com"}),
        ),
        ScriptStep.calls(
            ("lookup_ticket", {"query": "tls certificate"}),
            ("search_logs", {"service": "payments", "query": "certificate expired"}),
        ),
        "The certificate of payments.internal.example.com expired: renew it and reload the service.",
    )


def run(api: Any, message: str = TASK, session_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "wait": True}
    if session_id:
        body["session_id"] = session_id
    response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def system_prompt(model: ScriptedModel) -> str:
    return "\n".join(m.content for m in model.requests[0].messages if m.role == "system")


def test_a_learned_skill_is_gated_approved_in_the_admin_and_loaded_by_the_next_run(
    alice_api: Any,
    admin_client: Any,
    admin_user: Any,
    use_model: Callable[[Model], None],
    eager_celery: None,
) -> None:
    model = troubleshooting_model()
    use_model(model)
    first = run(alice_api)
    model.assert_consumed()
    assert SKILL not in system_prompt(model)

    candidate = orm.SkillCandidate.objects.get()
    assert (candidate.name, candidate.action, candidate.status) == (SKILL, "create", "pending_review")
    assert [(g.gate, g.status) for g in candidate.gate_results.all()] == [
        ("spec", "pass"),
        ("safety", "pass"),
        ("effectiveness", "pass"),
        ("human", "hold"),
    ]
    ledger = set(sessions.Event.objects.filter(session_id=first["session_id"]).values_list("event_id", flat=True))
    assert candidate.evidence and {e["event_id"] for e in candidate.evidence} <= ledger
    assert not skills.SkillRevision.objects.filter(skill__name=SKILL).exists()  # waits for a person

    page = admin_client.get(f"/admin/evolution_app/skillcandidate/{candidate.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/admin/sessions_app/event/" in html  # evidence linked to the ledger events
    # A new skill reads as a document, not as a diff against an empty file.
    assert "evolution-documents" in html and "diff_add" not in html and "(absent)" not in html
    assert "effectiveness" in html and "pending review" in html
    assert 'name="_approve"' in html and 'name="_reject"' in html  # the decision is on the page itself

    ask = admin_client.post(
        "/admin/evolution_app/skillcandidate/", {"action": "approve", "_selected_action": [candidate.pk]}
    )
    assert ask.status_code == 200 and b"Reason" in ask.content  # the list's action asks for the reason first
    decide = f"/admin/evolution_app/skillcandidate/{candidate.pk}/decide/"
    refused = admin_client.post(decide, {"_approve": "Approve and publish", "reason": "  "}, follow=True)
    assert "Nothing decided: Give a reason" in refused.content.decode()
    candidate.refresh_from_db()
    assert candidate.status == "pending_review"  # no reason, no approval
    approved = admin_client.post(decide, {"_approve": "Approve and publish", "reason": "the method is sound"})
    assert approved.status_code == 302 and approved["Location"].endswith(f"/skillcandidate/{candidate.pk}/change/")
    candidate.refresh_from_db()
    assert (candidate.status, candidate.decided_by, candidate.decision_reason) == (
        "published",
        admin_user,
        "the method is sound",
    )
    revision = candidate.revision
    assert (revision.status, revision.source, revision.approved_by) == ("published", "evolution", admin_user)
    assert [g["gate"] for g in revision.gate_results] == ["spec", "safety", "effectiveness", "human", "human"]
    assert list(candidate.audit.values_list("action", "actor")) == [
        ("proposed", None),
        ("held", None),
        ("approved", admin_user.pk),
        ("published", admin_user.pk),
    ]

    nxt = ScriptedModel.of("Noted.")
    use_model(nxt)
    run(alice_api, "Another TLS failure on checkout")
    assert f"- {SKILL}: Investigate with search_logs, inspect_certificate, lookup_ticket" in system_prompt(nxt)


def test_a_run_under_the_evidence_gate_gives_no_candidate_and_the_skip_says_why(
    alice_api: Any,
    use_model: Callable[[Model], None],
    eager_celery: None,
) -> None:
    use_model(
        ScriptedModel.of(ScriptStep.call("search_logs", {"service": "payments", "query": "tls"}), "Logs look fine.")
    )
    done = run(alice_api)
    assert not orm.SkillCandidate.objects.exists()
    cursor = orm.ReviewCursor.objects.get(session_id=done["session_id"])
    assert cursor.last_status == "skipped" and "below the evidence gate: 1 tool call(s)" in cursor.last_reason
    assert cursor.last_seq == sessions.Session.objects.get(id=done["session_id"]).last_seq
    review = orm.Review.objects.get()
    assert (review.status, review.from_seq) == ("skipped", 0) and review.reason == cursor.last_reason


def test_the_job_run_twice_has_one_effect_and_reads_only_what_is_new(
    alice_api: Any,
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    settings.AGENTSITE_EVOLUTION = False  # the hook stays out: the job is called by hand
    use_model(troubleshooting_model())
    done = run(alice_api)
    first = evolution_review_task(done["session_id"])
    second = evolution_review_task(done["session_id"])
    assert first["status"] == "reviewed" and [c["outcome"] for c in first["candidates"]] == ["hold"]
    assert second["status"] == "nothing_new"
    assert orm.SkillCandidate.objects.count() == 1 and orm.Review.objects.count() == 1

    use_model(ScriptedModel.of("Thanks."))
    run(alice_api, "thanks", session_id=done["session_id"])
    third = evolution_review_task(done["session_id"])
    assert third["status"] == "skipped" and third["from_seq"] == first["to_seq"]  # only the new turn was read
    assert orm.SkillCandidate.objects.count() == 1
    assert evolution_review_task("no-such-session") == {"status": "missing"}


def reviewer_proposing(skill: dict[str, Any], session_id: str) -> ModelReviewer:
    """A model reviewer whose (scripted) model proposes `skill`, citing the latest answer."""
    call = sessions.Event.objects.filter(session_id=session_id, role="assistant").order_by("-seq").first()
    return ModelReviewer(
        ScriptedModel.of(ScriptStep.call(REVIEW_TOOL, {"skills": [{**skill, "evidence": [call.event_id]}]}))
    )


def skill_spec(**changes: Any) -> dict[str, Any]:
    return {
        "name": "tls-triage",
        "description": "Diagnose TLS handshake failures.",
        "when_to_use": "A service fails TLS handshakes.",
        "steps": ["Inspect the certificate.", "Search the logs for handshake errors."],
        **changes,
    }


def test_an_unsafe_script_is_stopped_by_the_safety_gate(
    alice_api: Any,
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    settings.AGENTSITE_EVOLUTION = False
    use_model(troubleshooting_model())
    done = run(alice_api)
    unsafe = skill_spec(script={"path": "cleanup.sh", "content": "rm -rf / --no-preserve-root\n"})
    outcome = evolution_review(
        session_id=done["session_id"],
        reviewer=reviewer_proposing(unsafe, done["session_id"]),
        gates=[SpecGate(), SafetyGate(), HumanGate()],
    )
    assert [c["outcome"] for c in outcome["candidates"]] == ["rejected"]
    candidate = orm.SkillCandidate.objects.get()
    assert candidate.status == "rejected" and candidate.decision_reason.startswith("safety gate")
    safety = candidate.gate_results.get(gate="safety")
    assert safety.status == "fail" and "rm -rf" in safety.findings[0]
    assert not candidate.gate_results.filter(gate="human").exists()
    assert not skills.Skill.objects.filter(name="tls-triage").exists()


def test_user_facts_from_memory_and_the_account_never_enter_a_skill(
    alice: Any,
    alice_api: Any,
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    settings.AGENTSITE_EVOLUTION = False
    alice.email = "alice@corp.example"
    alice.save()
    use_model(troubleshooting_model())
    done = run(alice_api)
    now = timezone.now()
    sessions.Memory.objects.create(
        id="m1", app="agentsite", user=alice, text="Lives in Lisbon", created_at=now, updated_at=now
    )
    for leaky in (
        skill_spec(steps=["Greet the user by name: my name is Alice.", "Search."]),
        skill_spec(steps=["Send the report to alice@corp.example.", "Search."]),
        skill_spec(steps=["The user is in Lisbon: use the Lisbon region.", "Search."]),
    ):
        # Review the same delta afresh each time.
        orm.ReviewCursor.objects.filter(session_id=done["session_id"]).delete()
        orm.Review.objects.filter(session_id=done["session_id"]).delete()
        outcome = evolution_review(
            session_id=done["session_id"], reviewer=reviewer_proposing(leaky, done["session_id"]), gates=[]
        )
        assert outcome["candidates"] == [] and "user facts never enter a skill" in outcome["notes"][0]
    assert not orm.SkillCandidate.objects.exists() and not skills.Skill.objects.filter(name="tls-triage").exists()


def test_with_no_gate_a_candidate_is_published_directly_and_rollback_restores_the_previous_one(
    alice_api: Any,
    admin_client: Any,
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    settings.AGENTSITE_EVOLUTION = False
    use_model(troubleshooting_model())
    done = run(alice_api)
    evolution_review(
        session_id=done["session_id"], reviewer=reviewer_proposing(skill_spec(), done["session_id"]), gates=[]
    )
    v1 = skills.SkillRevision.objects.get(skill__name="tls-triage")
    assert (v1.status, v1.source) == ("published", "evolution")

    use_model(troubleshooting_model())
    again = run(alice_api, session_id=done["session_id"])
    better = skill_spec(steps=["Inspect the certificate and its chain.", "Search the logs.", "Look up past tickets."])
    evolution_review(session_id=again["session_id"], reviewer=reviewer_proposing(better, again["session_id"]), gates=[])
    update = orm.SkillCandidate.objects.filter(action="update").get()
    assert (update.status, update.revision.revision) == ("published", 2)  # same name: an update, a new revision

    admin_client.post("/admin/skills_app/skill/", {"action": "rollback", "_selected_action": [v1.skill_id]})
    assert skills.SkillRevision.objects.get(skill__name="tls-triage", status="published").revision == 1


def test_a_reviewer_rejects_with_a_reason_and_a_stale_candidate_is_never_published(
    alice_api: Any,
    admin_client: Any,
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    settings.AGENTSITE_EVOLUTION = False
    use_model(troubleshooting_model())
    done = run(alice_api)
    evolution_review_task(done["session_id"])
    candidate = orm.SkillCandidate.objects.get()
    admin_client.post(
        "/admin/evolution_app/skillcandidate/",
        {"action": "reject", "_selected_action": [candidate.pk], "apply": "1", "reason": ""},
    )
    candidate.refresh_from_db()
    assert candidate.status == "pending_review"  # no reason, no rejection
    admin_client.post(
        "/admin/evolution_app/skillcandidate/",
        {"action": "reject", "_selected_action": [candidate.pk], "apply": "1", "reason": "too specific"},
    )
    candidate.refresh_from_db()
    assert (candidate.status, candidate.decision_reason) == ("rejected", "too specific")
    assert candidate.gate_results.last().status == "fail"

    # A candidate proposed as a create, while someone published that skill meanwhile: stale.
    from skills_app.services import skill_revision_create

    orm.SkillCandidate.objects.filter(pk=candidate.pk).update(status="pending_review")
    skill_revision_create(app="agentsite", files=candidate.files, status="published")
    admin_client.post(
        "/admin/evolution_app/skillcandidate/",
        {"action": "approve", "_selected_action": [candidate.pk], "apply": "1", "reason": "ok"},
    )
    candidate.refresh_from_db()
    assert candidate.status == "stale" and candidate.revision is None
    assert skills.SkillRevision.objects.filter(skill__name=candidate.name).count() == 1


def test_the_candidates_api_is_for_staff_only(
    alice_api: Any,
    admin_user: Any,
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    from tests.conftest import _client_for

    settings.AGENTSITE_EVOLUTION = False
    use_model(troubleshooting_model())
    done = run(alice_api)
    evolution_review_task(done["session_id"])
    denied = alice_api.get("/api/evolution/candidates/")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "permission_denied"
    staff = _client_for(admin_user)
    listed = staff.get("/api/evolution/candidates/", {"status": "pending_review"}).json()["results"]
    assert [(c["name"], c["status"], c["session_id"]) for c in listed] == [
        (SKILL, "pending_review", done["session_id"])
    ]
    assert [g["gate"] for g in listed[0]["gate_results"]] == ["spec", "safety", "effectiveness", "human"]
    assert staff.get("/api/evolution/candidates/", {"status": "bogus"}).json()["error"]["field"] == "status"


def test_the_same_procedure_learned_again_adds_evidence_to_the_waiting_candidate(
    alice_api: Any,
    bob_api: Any,
    admin_client: Any,
    use_model: Callable[[Model], None],
    eager_celery: None,
) -> None:
    use_model(troubleshooting_model())
    first = run(alice_api)
    use_model(troubleshooting_model())
    second = run(bob_api)
    candidate = orm.SkillCandidate.objects.get()
    assert {e["session_id"] for e in candidate.evidence} == {first["session_id"], second["session_id"]}
    assert candidate.learned == 2
    assert list(candidate.audit.values_list("action", flat=True)) == ["proposed", "held", "evidence"]
    html = admin_client.get(f"/admin/evolution_app/skillcandidate/{candidate.pk}/change/").content.decode()
    links = html.count("/admin/sessions_app/event/") - html.count('href="/admin/sessions_app/event/"')
    cited = {(e["session_id"], e["event_id"]) for e in candidate.evidence}
    assert "(gone) <em>" not in html and links == len(cited), html[html.find("(gone)") - 300 :][:400]
    # Grouped by session, each session named with its owner, each event once.
    for session_id, owner in ((first["session_id"], "alice"), (second["session_id"], "bob")):
        assert f"<code>{session_id}</code>, {owner}," in html


def test_the_admin_shows_evidence_grouped_by_session_each_event_once() -> None:
    from evolution_app.admin import evidence_by_session

    step = {"event_id": "e2", "seq": 2, "kind": "tool_call", "excerpt": "search_logs, inspect_certificate"}
    items = [
        step,
        {**step},
        {**step},  # one step with three tool calls, cited once per call
        {"event_id": "e3", "seq": 3, "kind": "tool_result", "excerpt": "expired"},
        {"event_id": "e1", "seq": 1, "kind": "user", "excerpt": "fails TLS"},
        {"event_id": "x9", "seq": 9, "kind": "tool_call", "excerpt": "again", "session_id": "other"},
    ]

    grouped = evidence_by_session(items, default_session="first")

    assert list(grouped) == ["first", "other"]
    assert [(e["event_id"], e["kinds"]) for e in grouped["first"]] == [
        ("e1", ["user"]),
        ("e2", ["tool_call"]),
        ("e3", ["tool_result"]),
    ]
    assert [e["event_id"] for e in grouped["other"]] == ["x9"]


def test_a_candidate_worse_than_the_run_without_it_is_rejected_and_the_admin_says_why(
    alice_api: Any,
    admin_client: Any,
    use_model: Callable[[Model], None],
    eager_celery: None,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 21: on the offline planner (replay `auto` = on the model), a learned skill that
    would take a slot of the fleet task's step and crowd out the ticket lookup is rejected
    by the Effectiveness gate, and the candidate's page lists why."""
    from runs.core.llm.offline import OfflineModel

    monkeypatch.setenv("AGENTSITE_DEMO_SCAN_DELAY_S", "0")
    settings.AGENTSITE_EVOLUTION_REPLAY = "auto"
    use_model(OfflineModel())
    run(
        alice_api, "Check the certificate of payments.internal.example.com, scan the fleet, search the logs and tickets"
    )

    candidate = orm.SkillCandidate.objects.get()
    assert candidate.status == "rejected"
    effectiveness = candidate.gate_results.get(gate="effectiveness")
    assert effectiveness.status == "fail"
    assert any("tool calls lost: lookup_ticket" in f for f in effectiveness.findings)
    assert candidate.decision_reason.startswith("effectiveness gate: with the candidate:")
    html = admin_client.get(f"/admin/evolution_app/skillcandidate/{candidate.pk}/change/").content.decode()
    assert '<ul class="gate-findings"><li>' in html and "tool calls lost: lookup_ticket" in html
    assert 'name="_approve"' not in html  # nothing to decide on a rejected candidate


def test_the_candidate_page_and_its_decisions_read_in_chinese(
    alice_api: Any,
    admin_client: Any,
    use_model: Callable[[Model], None],
    eager_celery: None,
) -> None:
    use_model(troubleshooting_model())
    run(alice_api)
    candidate = orm.SkillCandidate.objects.get()
    chinese = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}

    html = admin_client.get(f"/admin/evolution_app/skillcandidate/{candidate.pk}/change/", **chinese).content.decode()

    assert "<h2>决定</h2>" in html and 'value="批准并发布"' in html and 'value="拒绝"' in html
    assert "引用了" in html  # the evidence's session heading
    asked = admin_client.post(
        "/admin/evolution_app/skillcandidate/", {"action": "approve", "_selected_action": [candidate.pk]}, **chinese
    ).content.decode()
    assert "理由（必填）：" in asked and "批准技能候选" in asked
    refused = admin_client.post(
        f"/admin/evolution_app/skillcandidate/{candidate.pk}/decide/",
        {"_approve": "1", "reason": " "},
        follow=True,
        **chinese,
    ).content.decode()
    assert "未作决定：请填写理由" in refused
    approved = admin_client.post(
        f"/admin/evolution_app/skillcandidate/{candidate.pk}/decide/",
        {"_approve": "1", "reason": "方法可靠"},
        follow=True,
        **chinese,
    ).content.decode()
    assert f"{SKILL[0].upper()}{SKILL[1:]}：已发布为修订版 1" in approved  # the admin capitalises messages


def test_a_candidate_learned_in_many_sessions_keeps_the_first_sessions_evidence_and_counts_the_rest(
    alice_api: Any,
    bob_api: Any,
    admin_user: Any,
    use_model: Callable[[Model], None],
    eager_celery: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stored evidence is bounded: past MAX_EVIDENCE_SESSIONS sessions a join only counts
    (every join used to append to the list and write it whole)."""
    from evolution_app import services
    from tests.conftest import _client_for

    monkeypatch.setattr(services, "MAX_EVIDENCE_SESSIONS", 2)
    sessions_learned = []
    for api in (alice_api, bob_api, alice_api, bob_api):
        use_model(troubleshooting_model())
        sessions_learned.append(run(api)["session_id"])
    candidate = orm.SkillCandidate.objects.get()
    assert candidate.learned == 4
    assert {e["session_id"] for e in candidate.evidence} == set(sessions_learned[:2])
    # Each learning is still on the audit trail, the later ones included.
    joined = list(candidate.audit.filter(action="evidence").values_list("comment", flat=True))
    assert joined == [f"learned again in session {s}" for s in sessions_learned[1:]]
    listed = _client_for(admin_user).get("/api/evolution/candidates/", {"status": "pending_review"}).json()["results"]
    assert [(c["learned"], len({e["session_id"] for e in c["evidence"]})) for c in listed] == [(4, 2)]

    # A session already cited adds its new evidence even past the bound.
    monkeypatch.setattr(services, "MAX_EVIDENCE_SESSIONS", 1)
    before = sum(1 for e in candidate.evidence if e["session_id"] == sessions_learned[0])
    use_model(troubleshooting_model())
    again = run(alice_api, session_id=sessions_learned[0])
    assert again["session_id"] == sessions_learned[0]
    candidate.refresh_from_db()
    assert candidate.learned == 5
    assert {e["session_id"] for e in candidate.evidence} == set(sessions_learned[:2])
    assert sum(1 for e in candidate.evidence if e["session_id"] == sessions_learned[0]) > before


def test_the_migration_counts_the_sessions_an_existing_candidates_evidence_cites() -> None:
    import importlib

    from django.apps import apps

    migration = importlib.import_module("evolution_app.migrations.0003_times_learned")
    shared = {"files": {"SKILL.md": "x"}, "status": "pending_review", "app": "agentsite", "action": "create"}
    many = orm.SkillCandidate.objects.create(
        name="many",
        session_key="s1",
        evidence=[
            {"event_id": "e1", "seq": 1},  # from before evidence named its session: the candidate's own
            {"event_id": "e2", "seq": 2, "session_id": "s2"},
            {"event_id": "e3", "seq": 3, "session_id": "s3"},
            {"event_id": "e4", "seq": 4, "session_id": "s3"},
        ],
        **shared,
    )
    one = orm.SkillCandidate.objects.create(name="one", session_key="s9", evidence=[{"event_id": "e"}], **shared)
    migration.count_learned(apps, None)
    assert orm.SkillCandidate.objects.get(pk=many.pk).learned == 3
    assert orm.SkillCandidate.objects.get(pk=one.pk).learned == 1
