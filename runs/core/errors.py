"""One error tree for the runtime (STYLE: errors split by audience)."""

from __future__ import annotations


class AgentsiteError(Exception):
    """Base of every error the runtime raises on purpose."""


class UsageError(AgentsiteError):
    """The caller misused the runtime: unknown agent, bad argument, duplicate request id."""


class AgentNotFoundError(UsageError):
    def __init__(self, name: str) -> None:
        super().__init__(f"agent {name!r} not found")
        self.name = name


class DuplicateRequestError(UsageError):
    def __init__(self, request_id: str) -> None:
        super().__init__(f"request id {request_id!r} was already used")
        self.request_id = request_id


class TooManyRunsError(UsageError):
    """The user already has as many runs going as the limit allows (answered 429)."""

    def __init__(self, *, active: int, limit: int) -> None:
        super().__init__(f"you have {active} runs in progress; the limit is {limit}: wait for one to end")
        self.active = active
        self.limit = limit


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

    def __init__(self, limit: int) -> None:
        super().__init__(f"the run exceeded the limit of {limit} events and was stopped")
        self.limit = limit


class TransientModelError(ModelError):
    """Rate limit, 5xx or timeout: worth retrying (and retried, with bounded backoff)."""


class ControlFlowSignal(AgentsiteError):
    """Not an error: a signal that changes the flow (e.g. an agent asking to stop)."""


class StopAgent(ControlFlowSignal):
    """Raised by a tool to end the agent's turn at once (error type `stop_agent_error`)."""
