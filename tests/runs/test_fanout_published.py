"""What this process published per session (`runs.fanout.Published`, issue 23): a socket
may skip its quiet-stream re-read only when nothing it shows could have been missed."""

from __future__ import annotations

from channels.layers import InMemoryChannelLayer

from runs.core.records import RunRecord
from runs.fanout import PUBLISHED, ChannelLayerSink, Published
from sessions_app.core.events import OBJECT_RUNNER_COMPLETION, Event, Message


def saved(seq: int, text: str = "hello") -> Event:
    return Event(author="support", seq=seq, message=Message(role="assistant", content=text))


def delta(text: str) -> Event:
    return Event(author="support", partial=True, message=Message(role="assistant", content=text))


def completion(seq: int) -> Event:
    return Event(author="support", seq=seq, done=True, object=OBJECT_RUNNER_COMPLETION)


def test_a_socket_that_has_everything_published_of_runs_published_here_is_vouched_for() -> None:
    published = Published()
    published.note("s1", "r1", saved(3))
    published.note("s1", "r1", delta("more"))

    assert published.vouches("s1", last_seq=3, runs={"r1"})
    assert not published.vouches("s1", last_seq=2, runs={"r1"})  # seq 3 never reached it
    assert not published.vouches("s1", last_seq=3, runs={"r1", "r2"})  # r2 runs elsewhere
    assert not published.vouches("s2", last_seq=3, runs={"r1"})  # nothing known of s2
    assert not published.vouches("s1", last_seq=3, runs=set())  # no open run: nothing to vouch for


def test_a_run_that_ended_here_is_no_longer_vouched_for() -> None:
    published = Published()
    published.note("s1", "r1", saved(3))
    published.note("s1", "r1", completion(4))

    # A socket that missed the completion still shows r1 open: it must re-read.
    assert not published.vouches("s1", last_seq=3, runs={"r1"})
    assert not published.vouches("s1", last_seq=4, runs={"r1"})


def test_only_the_most_recent_sessions_are_kept() -> None:
    published = Published(max_sessions=2)
    for session in ("s1", "s2", "s3"):
        published.note(session, "r", saved(1))

    assert not published.vouches("s1", last_seq=1, runs={"r"})
    assert published.vouches("s3", last_seq=1, runs={"r"})


async def test_the_sink_notes_an_event_even_when_it_drops_it() -> None:
    class Down(InMemoryChannelLayer):
        async def group_send(self, group: str, message: dict[str, object]) -> None:
            raise ConnectionError("redis is down")

    record = RunRecord(id="r-drop", app="agentsite", user_id="7", session_id="s-drop", agent="support", request_id="q")
    sink = ChannelLayerSink(Down(), pause_s=60)
    await sink.publish(record, saved(5))
    await sink.flush()
    await sink.publish(record, saved(6))  # paused: dropped at once

    assert PUBLISHED.vouches("s-drop", last_seq=6, runs={"r-drop"})
    assert not PUBLISHED.vouches("s-drop", last_seq=5, runs={"r-drop"})
