"""Issue 20, item 3, in the core: content parts on `Message` (backward compatible, never
serializing bytes), type sniffing and limits, the Runner storing uploads as session
artifacts before the turn enters the ledger, the request with its bytes, note and token
estimate, and the offline model saying it cannot see images."""

from __future__ import annotations

import base64

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.attachments import (
    AttachmentError,
    AttachmentLimits,
    decode_data_url,
    openai_content,
    sniff,
    upload_part,
)
from runs.core.context.request import build_context
from runs.core.llm.offline import OfflineModel
from runs.core.llm.scripted import ScriptedModel
from runs.core.runner import Runner
from runs.core.tokens import count_message
from sessions_app.core.artifact_tools import ARTIFACT_SERVICE
from sessions_app.core.artifacts import ArtifactScope, InMemoryArtifactService
from sessions_app.core.events import IMAGE_TOKEN_ESTIMATE, ArtifactRef, ContentPart, Event, Message
from sessions_app.core.inmemory import InMemorySessionService

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")
LIMITS = AttachmentLimits(max_bytes=1000, max_count=3)


def test_an_event_stored_before_parts_loads_and_serializes_as_before() -> None:
    old = {
        "id": "e1",
        "author": "user",
        "created_at": "2026-01-01T00:00:00+00:00",
        "message": {"role": "user", "content": "hello"},
    }
    event = Event.from_dict(old)
    assert event.message is not None and event.message.parts == () and event.text == "hello"
    assert "parts" not in event.to_dict()["message"]
    assert openai_content(event.message) == "hello"


def test_a_part_round_trips_by_reference_and_its_bytes_are_never_serialized() -> None:
    stored = ContentPart(
        type="image", name="a.png", mime="image/png", size=len(PNG), artifact=ArtifactRef(filename="x-a.png", version=2)
    )
    message = Message(role="user", content="look", parts=(stored,))
    assert Message.from_dict(message.to_dict()) == message
    with pytest.raises(ValueError, match="must be stored as an artifact"):
        Message(role="user", parts=(upload_part(PNG, limits=LIMITS, field="f"),)).to_dict()


def test_types_are_sniffed_from_the_bytes_not_taken_from_the_client() -> None:
    assert sniff(PNG, declared="application/pdf") == "image/png"
    assert sniff(b"%PDF-1.7 ...") == "application/pdf"
    assert sniff(b'{"a": 1}', declared="application/json") == "application/json"
    assert sniff(b"a,b\n1,2\n", name="t.csv") == "text/csv"
    assert sniff(b"\x7fELF\x02\x01\x01\x00") is None
    with pytest.raises(AttachmentError) as refused:
        upload_part(b"plain words", limits=LIMITS, field="p", kind="image")
    assert refused.value.status == 415
    with pytest.raises(AttachmentError) as big:
        upload_part(PNG * 20, limits=LIMITS, field="p")
    assert big.value.status == 413
    with pytest.raises(AttachmentError) as bad:
        decode_data_url("data:image/png;base64,%%%", field="u")
    assert bad.value.status == 400 and bad.value.code == "invalid_base64"


async def test_the_runner_stores_uploads_as_session_artifacts_and_the_model_gets_them_with_the_note() -> None:
    artifacts = InMemoryArtifactService()
    model = ScriptedModel.of("I see a pixel.")
    runner = Runner(
        agents=[LLMAgent(name="a", model=model)],
        session_service=InMemorySessionService(),
        app="app",
        services={ARTIFACT_SERVICE: artifacts},
    )
    upload = upload_part(PNG, limits=LIMITS, field="p", name="pixel.png")
    handle = await runner.start(user_id="u", message=Message(role="user", content="what?", parts=(upload,)))
    assert handle.task is not None
    await handle.task
    sent = model.requests[0].messages[-1]
    (image, note) = sent.parts
    assert image.data == PNG and image.artifact is not None
    assert note.type == "text" and note.text == f"Attached files: pixel.png (image/png, {len(PNG)} B)"
    assert count_message(sent) >= IMAGE_TOKEN_ESTIMATE
    # The ledger's user event references the artifact; its bytes are in the artifact store.
    session = await runner.session_service.get_session(handle.invocation.session.key)
    assert session is not None
    (part,) = next(e for e in session.events if e.is_user_message).message.parts  # type: ignore[union-attr]
    assert part.artifact == image.artifact and part.data is None
    scope_session = handle.record.session_id
    stored = await artifacts.load(
        ArtifactScope(app="app", user_id="u", session_id=scope_session), image.artifact.filename
    )
    assert stored is not None and stored.data == PNG and stored.mime == "image/png"


def test_the_request_counts_a_fixed_estimate_per_image() -> None:
    part = ContentPart(
        type="image", name="a.png", mime="image/png", size=10, artifact=ArtifactRef(filename="a.png", version=0)
    )
    with_image = Message(role="user", content="look", parts=(part,))
    assert count_message(with_image) - count_message(Message(role="user", content="look")) >= IMAGE_TOKEN_ESTIMATE


def test_the_offline_model_says_it_cannot_see_images_and_lists_them() -> None:
    from runs.core.llm.base import ModelRequest

    part = ContentPart(
        type="image",
        name="graph.png",
        mime="image/png",
        size=2048,
        artifact=ArtifactRef(filename="x-graph.png", version=0),
    )
    answer = OfflineModel().respond(
        ModelRequest(messages=(Message(role="user", content="what is this?", parts=(part,)),))
    )
    assert answer.content.startswith("I cannot see images or read attached files")
    assert "graph.png (image/png, 2.0 KiB)" in answer.content


def test_build_context_adds_the_note_to_a_user_message_with_attachments() -> None:
    from sessions_app.core.session import Session

    part = ContentPart(
        type="file", name="r.pdf", mime="application/pdf", size=5, artifact=ArtifactRef(filename="r.pdf", version=0)
    )
    session = Session(
        app="a",
        user_id="u",
        id="s",
        events=[
            Event(seq=1, author="user", message=Message(role="user", content="read", parts=(part,))),
        ],
    )
    built = build_context(session, filter_key="a", instruction="", tools=[], governance=None, window=8192)
    (message,) = built.request.messages
    assert message.parts[-1].text == "Attached files: r.pdf (application/pdf, 5 B)"
    (block,) = built.blocks()
    assert block["attachments"][0]["artifact"] == {"filename": "r.pdf", "version": 0}
