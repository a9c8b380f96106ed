"""One error tree for the runtime (STYLE: errors split by audience).

Issue 21: an error people read carries a stable `error_code` and the `params` its English
text was made from; core never imports Django's translation, so a surface says it in the
user's language from those two (`runs.error_texts`). `str()` stays the English text.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

_NO_PARAMS: Mapping[str, object] = MappingProxyType({})


class AgentsiteError(Exception):
    """Base of every error the runtime raises on purpose."""

    error_code: str = "agentsite_error"
    """Stable across languages and releases; what a surface translates by."""
    params: Mapping[str, object] = _NO_PARAMS
    """The values the English text names (reprs where it quotes them), for a translation."""


class UsageError(AgentsiteError):
    """The caller misused the runtime: unknown agent, bad argument, duplicate request id."""

    error_code = "invalid_request"


class AgentNotFoundError(UsageError):
    error_code = "unknown_agent"

    def __init__(self, name: str) -> None:
        super().__init__(f"agent {name!r} not found")
        self.name = name
        self.params = {"agent": repr(name)}


class DuplicateRequestError(UsageError):
    error_code = "duplicate_request"

    def __init__(self, request_id: str) -> None:
        super().__init__(f"request id {request_id!r} was already used")
        self.request_id = request_id
        self.params = {"request_id": repr(request_id)}


class TooManyRunsError(UsageError):
    """The user already has as many runs going as the limit allows (answered 429)."""

    error_code = "too_many_runs"

    def __init__(self, *, active: int, limit: int) -> None:
        super().__init__(f"you have {active} runs in progress; the limit is {limit}: wait for one to end")
        self.active = active
        self.limit = limit
        self.params = {"active": active, "limit": limit}


class RunFailure(AgentsiteError):
    """A run could not finish: the model or a flow step failed."""


class ModelError(RunFailure):
    """The model endpoint refused the request (a 4xx other than 429) or answered nonsense."""

    def __init__(self, message: str, *, status_code: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code


class EventLimitError(RunFailure):
    """A run produced more events than the limit allows; it ends `failed` (type `event_limit`)."""

    error_code = "event_limit"

    def __init__(self, limit: int) -> None:
        super().__init__(f"the run exceeded the limit of {limit} events and was stopped")
        self.limit = limit
        self.params = {"limit": limit}


class TransientModelError(ModelError):
    """Rate limit, 5xx or timeout: worth retrying (and retried, with bounded backoff)."""


class ControlFlowSignal(AgentsiteError):
    """Not an error: a signal that changes the flow (e.g. an agent asking to stop)."""


class StopAgent(ControlFlowSignal):
    """Raised by a tool to end the agent's turn at once (error type `stop_agent_error`)."""
