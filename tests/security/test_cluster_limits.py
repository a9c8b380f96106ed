"""Cluster-wide limits (issue 23, item 4): the per-user active-run limit and the API rate
hold across web processes, not only inside one.

The active-run limit counts live runs in the database, so a second Runner (another web
process) refuses a user whom the first one holds at the limit. The API rate counts in
Django's default cache, which is Redis when REDIS_URL is set: a second Python process,
deciding with DRF's own throttle, sees the requests this process counted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from rest_framework.throttling import UserRateThrottle

from runs import models as run_orm
from runs.core.errors import TooManyRunsError
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from tests.security.support import post_json

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_user_at_the_limit_on_one_runner_is_refused_by_another(
    settings: Any, alice: Any, bob_token: str, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    from agentsite.composition import build_runner

    settings.AGENTSITE_MAX_ACTIVE_RUNS_PER_USER = 1
    # "Process A": a Runner of its own, holding alice's one allowed run open.
    node_a = build_runner(ScriptedModel.of(ScriptStep.answer("slow " * 200, chunk_size=5, delay_s=0.05)))
    # Another owner, as a process on another host: B's reaper leaves a live owner's runs alone.
    node_a.owner = "node-a"
    # "Process B": the run manager's Runner, which serves the HTTP API below.
    use_model(ScriptedModel.of(ScriptStep.answer("Bob's answer."), ScriptStep.answer("Alice again.")))
    try:
        held = await node_a.start(user_id=str(alice.pk), message="one")
        assert held.run_id in node_a.active_run_ids()

        refused = await post_json("/api/runs/", {"message": "two"}, alice_token)
        bobs = await post_json("/api/runs/", {"message": "mine", "wait": True}, bob_token)

        assert refused.status_code == 429, refused.content[:300]
        error = refused.json()["error"]
        assert error["code"] == "too_many_runs" and "limit is 1" in error["message"]
        assert bobs.status_code == 201 and bobs.json()["status"] == "completed"
        # The refusal wrote nothing: alice has only the run that node A holds.
        assert await sync_to_async(run_orm.Run.objects.filter(user=alice).count)() == 1

        # And the other way round: node A itself refuses while B's count says "at limit".
        with pytest.raises(TooManyRunsError):
            await node_a.start(user_id=str(alice.pk), message="three")
        node_a.cancel(held.run_id)
        await held.wait()
        # Once the run has ended, B admits alice again.
        again = await post_json("/api/runs/", {"message": "four", "wait": True}, alice_token)
        assert again.status_code == 201, again.content[:300]
    finally:
        await node_a.close()


_SECOND_PROCESS = """
import sys
import django

django.setup()
from agentsite.api.throttling import UserRateThrottle

UserRateThrottle.THROTTLE_RATES["user"] = "3/min"


class User:
    is_authenticated = True
    pk = int(sys.argv[1])


class Request:
    user = User()
    META: dict = {}


print("allowed" if UserRateThrottle().allow_request(Request(), None) else "throttled")
"""


def _decide_in_another_process(user_pk: int) -> str:
    """The API's user throttle, asked in a fresh Python process with this process's settings."""
    cache = django_settings.CACHES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentsite.settings",
        "AGENTSITE_CACHE_KEY_PREFIX": cache.get("KEY_PREFIX", ""),
    }
    done = subprocess.run(
        [sys.executable, "-c", _SECOND_PROCESS, str(user_pk)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(
    not os.environ.get("REDIS_URL"),
    reason="the API rate is shared across processes only through the Redis cache (REDIS_URL unset)",
)
def test_the_api_rate_counted_here_holds_in_another_process(
    monkeypatch: pytest.MonkeyPatch, alice: Any, alice_api: Any, bob: Any
) -> None:
    assert django_settings.CACHES["default"]["BACKEND"] == "agentsite.cache.SharedRedisCache"
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "3/min")

    assert [alice_api.get("/api/sessions/").status_code for _ in range(3)] == [200, 200, 200]

    # Another process has seen none of alice's requests itself, yet refuses her fourth...
    assert _decide_in_another_process(alice.pk) == "throttled"
    # ...and counts its own: bob's first request there is allowed.
    assert _decide_in_another_process(bob.pk) == "allowed"
