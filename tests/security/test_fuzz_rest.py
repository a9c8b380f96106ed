"""Fuzzing the REST API from its OpenAPI schema (issue 11.2) with schemathesis.

Every operation of `/api/schema/` gets generated requests (valid and invalid bodies, query
strings and path ids) as an authenticated user, through the WSGI application in this
process. Checks: no 5xx, no traceback or file path of ours in a body, and every error is
JSON. Bounded and derandomized for `make test` (`FUZZ_MAX_EXAMPLES`, default 5 per
operation); `make fuzz` runs the same with more examples.
"""

from __future__ import annotations

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
            max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: Any) -> None:
            response = case.call(headers=headers)
            case.validate_response(response, checks=[not_a_server_error])
            assert_no_leak(response)

        fuzz()
