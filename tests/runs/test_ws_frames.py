"""The work a process's websockets share (runs/surfaces/websocket/frames.py): each live event parsed
once, each frame rendered once, and a socket whose translation differs still gets its own."""

from __future__ import annotations

import json

from runs.core.protocols.agui import AguiTranslator
from runs.surfaces.websocket.frames import SharedFrames
from sessions_app.core.events import Event, Message, ToolCall


def run_events() -> list[Event]:
    call = ToolCall(id="call_1", name="search_logs", arguments='{"service": "payments"}')
    return [
        Event(author="support", seq=1, message=Message(role="user", content="Why does TLS fail?")),
        Event(
            author="support",
            partial=True,
            message=Message(role="assistant", content="Let me "),
            extensions={"message_id": "m1"},
        ),
        Event(
            author="support",
            seq=2,
            message=Message(role="assistant", content="Let me look.", tool_calls=(call,)),
            extensions={"message_id": "m1"},
        ),
        Event(
            author="support",
            seq=3,
            message=Message(role="tool", content="3 errors", tool_call_id="call_1", tool_name="search_logs"),
        ),
    ]


def test_an_item_of_a_live_message_is_parsed_once_per_process() -> None:
    shared = SharedFrames()
    data = run_events()[1].to_dict()
    first = shared.event(data)
    assert shared.event(data) is first  # the second socket gets the same parsed event
    assert shared.event(dict(data)) is first  # an equal item (the pub/sub layer's copy) too
    changed = {**data, "message": {"role": "assistant", "content": "other"}}
    assert shared.event(changed) == Event.from_dict(changed)  # a different item is parsed anew
    assert first == Event.from_dict(data)


def test_sockets_in_step_share_each_frames_text() -> None:
    shared = SharedFrames()
    a = AguiTranslator(thread_id="s1", include_user_messages=True)
    b = AguiTranslator(thread_id="s1", include_user_messages=True)
    for event in run_events():
        items_a = a.translate(event, run_id="r1")
        items_b = b.translate(event, run_id="r1")
        texts_a = shared.render(event, items_a)
        texts_b = shared.render(event, items_b)
        assert texts_a == [item.model_dump_json(by_alias=True) for item in items_a]
        assert all(x is y for x, y in zip(texts_a, texts_b, strict=True))  # rendered once


def test_a_socket_whose_translation_differs_gets_its_own_frames() -> None:
    shared = SharedFrames()
    events = run_events()
    seen_all = AguiTranslator(thread_id="s1", include_user_messages=True)
    for event in events[:2]:
        shared.render(event, seen_all.translate(event, run_id="r1"))
    # This socket joined after the deltas: the message comes whole, its RUN_STARTED too.
    joined = AguiTranslator(thread_id="s1", include_user_messages=True)
    complete = events[2]
    texts_all = shared.render(complete, seen_all.translate(complete, run_id="r1"))
    texts_joined = shared.render(complete, joined.translate(complete, run_id="r1"))
    kinds_all = [json.loads(t)["type"] for t in texts_all]
    kinds_joined = [json.loads(t)["type"] for t in texts_joined]
    assert kinds_joined[0] == "RUN_STARTED" and "RUN_STARTED" not in kinds_all
    contents = [json.loads(t) for t in texts_joined if json.loads(t)["type"] == "TEXT_MESSAGE_CONTENT"]
    assert [c["delta"] for c in contents] == ["Let me look."]  # whole, not the cached remainder "look."


def test_the_cache_keeps_only_the_newest_events() -> None:
    shared = SharedFrames(size=2)
    events = run_events()

    def render(event: Event) -> list[str]:
        return shared.render(
            event, AguiTranslator(thread_id="s1", include_user_messages=True).translate(event, run_id="r1")
        )

    first = render(events[0])
    assert render(events[0])[1] is first[1]  # still cached
    render(events[2])
    render(events[3])  # two newer events: the first is gone
    again = render(events[0])
    assert again == first and again[1] is not first[1]


def test_a_websocket_write_styles_no_debug_arguments_once_the_consumer_is_loaded() -> None:
    # autobahn builds its per-write debug line's arguments whether or not it is logged.
    import autobahn.util

    import runs.surfaces.websocket.consumers  # noqa: F401  # its import turns the styling off

    assert autobahn.util.hl("sent", bold=True) == "sent"
