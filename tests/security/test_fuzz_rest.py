"""Fuzzing the REST API from its OpenAPI schema (issue 11.2) with schemathesis.

Every operation of `/api/schema/` gets generated requests (valid and invalid bodies, query
strings and path ids) as an authenticated user, through the WSGI application in this
process. Checks: no 5xx, no traceback or file path of ours in a body, and every error is
JSON. Bounded and derandomized for `make test` (`FUZZ_MAX_EXAMPLES`, default 5 per
operation); `make fuzz` runs the same with more examples.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error

from agentsite.wsgi import application

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "5"))

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(alice: Any, settings: Any, use_model: Any) -> str:
    from rest_framework.authtoken.models import Token

    from runs.core.llm.offline import OfflineModel

    # Runs the fuzzer starts (`wait: true` included) end at once on the offline planner.
    settings.AGENTSITE_RUN_WAIT_TIMEOUT_S = 5
    use_model(OfflineModel())
    return Token.objects.get_or_create(user=alice)[0].key


def assert_no_leak(response: Any) -> None:
    text = response.text
    assert "Traceback" not in text and 'File "/' not in text, text[:500]
    if 400 <= response.status_code < 500:
        headers = {name.lower(): value for name, value in response.headers.items()}
        content_type = headers.get("content-type", "")
        content_type = content_type[0] if isinstance(content_type, list) else content_type
        assert content_type.startswith("application/json"), (response.status_code, content_type, text[:200])
        assert "error" in response.json(), text[:300]


def test_no_operation_answers_a_server_error_or_leaks_a_traceback(token: str) -> None:
    # One test over every operation, not one per operation: each test of a transactional
    # database pays for a flush, which would cost more than the fuzzing itself.
    headers = {"Authorization": f"Bearer {token}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [o.label for o in operations]
    for operation in operations:

        @given(case=operation.as_strategy())
        @hypothesis_settings(
            max_examples=MAX_EXAMPLES,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: Any) -> None:
            response = case.call(headers=headers)
            case.validate_response(response, checks=[not_a_server_error])
            assert_no_leak(response)

        fuzz()


# -- deep JSON, NUL and lone surrogates on every operation (issue 17) --------------------------------

NUL, SURROGATE = "a\x00b", "x\ud800"
DEEP = b"[" * 1000 + b"]" * 1000


def _string_properties(operation: Any) -> list[str]:
    """The string fields of an operation's JSON body, from the raw schema."""
    raw = schema.raw_schema
    body = raw["paths"][operation.path][operation.method.lower()]["requestBody"]["content"]["application/json"][
        "schema"
    ]
    ref = body.get("$ref", "")
    resolved = raw["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else body
    return [name for name, prop in resolved.get("properties", {}).items() if prop.get("type") == "string"]


@pytest.fixture
def ids(alice: Any) -> dict[str, str]:
    """A real value for each path parameter, so that a request reaches its body."""
    from asgiref.sync import async_to_sync
    from django.conf import settings

    from runs import models as run_orm
    from sessions_app import services as session_services
    from sessions_app.backends import DjangoSessionService, get_session_sync
    from sessions_app.core.events import Event, Message, utcnow
    from sessions_app.core.memory import MemoryDraft, UserKey
    from sessions_app.core.session import SessionKey
    from sessions_app.memory_backends import memory_manager

    session = session_services.session_create(user=alice, agent="support")
    service = DjangoSessionService()
    memory = memory_manager().add(
        UserKey(app=settings.AGENTSITE_APP, user_id=str(alice.pk)),
        MemoryDraft(text="the staging cluster is in Frankfurt"),
    )
    run = run_orm.Run.objects.create(
        id="run-fuzz",
        app=settings.AGENTSITE_APP,
        user=alice,
        session_id=session.id,
        agent="support",
        request_id="req-fuzz",
        status="completed",
        created_at=utcnow(),
    )
    key = SessionKey(app=settings.AGENTSITE_APP, user_id=str(alice.pk), session_id=session.id)
    message = async_to_sync(service.append_event)(
        get_session_sync(key), Event(author="user", request_id="req-fuzz", message=Message(role="user", content="hi"))
    )
    return {
        "session_id": session.id,
        "memory_id": memory.entry.id,
        "run_id": run.id,
        "filename": "notes.txt",
        "name": "diagnostic-report",
        "event_id": message.id,
    }


def test_every_operation_refuses_deep_json_nul_and_lone_surrogates_with_a_4xx_naming_the_field(
    token: str, ids: dict[str, str]
) -> None:
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    checked = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        path = operation.path.format(**{p.name: ids[p.name] for p in operation.path_parameters})
        sent: list[tuple[str, Any, str | None]] = []  # (how, response, the field an error must name)
        for parameter in operation.path_parameters:
            bad_path = operation.path.format(
                **{p.name: "a%00b" if p is parameter else ids[p.name] for p in operation.path_parameters}
            )
            sent.append((f"path {parameter.name}", api.generic(operation.method.upper(), bad_path), None))
        for parameter in operation.query:
            sent.append(
                (
                    f"query {parameter.name}",
                    api.generic(operation.method.upper(), f"{path}?{parameter.name}=a%00b"),
                    parameter.name,
                )
            )
        for body in operation.body:
            if body.media_type != "application/json":
                continue
            sent.append(("deep body", api.generic(operation.method.upper(), path, DEEP, "application/json"), None))
            for name in _string_properties(operation):
                for bad in (NUL, SURROGATE):
                    raw = json.dumps({name: bad}).encode()
                    sent.append(
                        (
                            f"body {name}={bad!r}",
                            api.generic(operation.method.upper(), path, raw, "application/json"),
                            name,
                        )
                    )
        for how, response, field in sent:
            checked += 1
            label = f"{operation.method.upper()} {operation.path} {how}"
            assert 400 <= response.status_code < 500, (label, response.status_code, response.content[:300])
            assert_no_leak(response)
            if field is not None:
                assert response.json()["error"].get("field") == field, (label, response.json())
    assert checked >= 40, checked
