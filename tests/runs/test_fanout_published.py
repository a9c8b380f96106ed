"""What this process published per session (`runs.fanout.Published`, issue 23): a socket
may skip its quiet-stream re-read only when nothing it shows could have been missed."""

from __future__ import annotations

from channels.layers import InMemoryChannelLayer

from runs.core.records import RunRecord
from runs.fanout import PUBLISHED, ChannelLayerSink, Published
from sessions_app.core.events import OBJECT_RUNNER_COMPLETION, Event, Message

IN_FLIGHT_S = 16.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def saved(seq: int, text: str = "hello") -> Event:
    return Event(author="support", seq=seq, message=Message(role="assistant", content=text))


def delta(text: str) -> Event:
    return Event(author="support", partial=True, message=Message(role="assistant", content=text))


def completion(seq: int) -> Event:
    return Event(author="support", seq=seq, done=True, object=OBJECT_RUNNER_COMPLETION)


def vouches(published: Published, session: str, last_seq: int, runs: set[str]) -> bool:
    return published.vouches(session, last_seq=last_seq, runs=runs, in_flight_s=IN_FLIGHT_S)


def test_a_socket_that_has_everything_published_of_runs_published_here_is_vouched_for() -> None:
    clock = Clock()
    published = Published(clock=clock)
    published.note("s1", "r1", saved(3))
    published.note("s1", "r1", delta("more"))
    clock.now += IN_FLIGHT_S + 1

    assert vouches(published, "s1", 3, {"r1"})
    assert not vouches(published, "s1", 2, {"r1"})  # seq 3 went out long ago and never reached it
    assert not vouches(published, "s1", 3, {"r1", "r2"})  # r2 runs elsewhere
    assert not vouches(published, "s2", 3, {"r1"})  # nothing known of s2
    assert not vouches(published, "s1", 3, set())  # no open run: nothing to vouch for


def test_an_event_still_in_flight_is_waited_for_then_caught_up() -> None:
    clock = Clock()
    published = Published(clock=clock)
    published.note("s1", "r1", saved(3))
    published.note("s1", "r1", saved(4))
    clock.now += IN_FLIGHT_S - 1

    assert vouches(published, "s1", 2, {"r1"})  # 3 and 4 may still be on their way
    clock.now += 2
    assert not vouches(published, "s1", 2, {"r1"})  # by now they were lost: re-read


def test_a_run_that_ended_here_is_no_longer_vouched_for() -> None:
    clock = Clock()
    published = Published(clock=clock)
    published.note("s1", "r1", saved(3))
    published.note("s1", "r1", completion(4))

    # A socket that missed the completion still shows r1 open: it must re-read.
    assert not vouches(published, "s1", 3, {"r1"})
    assert not vouches(published, "s1", 4, {"r1"})


def test_a_run_started_here_is_vouched_for_before_its_first_event() -> None:
    published = Published()
    published.run_here("s1", "r1")

    assert vouches(published, "s1", 0, {"r1"})


def test_when_older_events_than_those_kept_are_missing_it_is_not_vouched_for() -> None:
    clock = Clock()
    published = Published(keep=2, clock=clock)
    for seq in (1, 2, 3):
        published.note("s1", "r1", saved(seq))

    assert not vouches(published, "s1", 0, {"r1"})  # seq 1 is no longer known
    assert vouches(published, "s1", 1, {"r1"})


def test_only_the_most_recent_sessions_are_kept() -> None:
    published = Published(max_sessions=2)
    for session in ("s1", "s2", "s3"):
        published.note(session, "r", saved(1))

    assert not vouches(published, "s1", 1, {"r"})
    assert vouches(published, "s3", 1, {"r"})


def test_a_delta_notes_its_run_and_keeps_its_session_among_the_most_recent() -> None:
    published = Published(max_sessions=2)
    published.note("s1", "r1", delta("The "))  # the run's first event: the run is noted
    published.note("s2", "r2", saved(1))
    assert vouches(published, "s1", 0, {"r1"})
    published.note("s1", "r1", delta("chain "))  # a later delta of a noted run: s1 is recent again
    published.note("s3", "r3", saved(1))  # s2 goes, the least recently published

    assert vouches(published, "s1", 0, {"r1"})
    assert not vouches(published, "s2", 1, {"r2"})
    assert not vouches(published, "s1", 0, {"r1", "r9"})  # a run nothing published here


async def test_the_sink_notes_an_event_even_when_it_drops_it() -> None:
    class Down(InMemoryChannelLayer):
        async def group_send(self, group: str, message: dict[str, object]) -> None:
            raise ConnectionError("redis is down")

    record = RunRecord(id="r-drop", app="agentsite", user_id="7", session_id="s-drop", agent="support", request_id="q")
    sink = ChannelLayerSink(Down(), pause_s=60)
    await sink.publish(record, saved(5))
    await sink.flush()
    await sink.publish(record, saved(6))  # paused: dropped at once

    assert PUBLISHED.vouches("s-drop", last_seq=6, runs={"r-drop"}, in_flight_s=IN_FLIGHT_S)
    assert not PUBLISHED.vouches("s-drop", last_seq=5, runs={"r-drop"}, in_flight_s=0.0)
