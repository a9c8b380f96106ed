"""The Runner (SPEC 1) and the names its users import: `from runs.core.runner import Runner`.

The Runner in `runner`, the phases of a run beside it (`opening`, `persistence`,
`completion`, `progress`), the handle and the sink protocol in `handle`.
"""

from runs.core.runner.handle import (
    COMPLETION_BUDGET_S,
    DEFAULT_HISTORY_EVENT_LIMIT,
    INTERRUPTED_ASSISTANT,
    START_FAILURE_MAX_CHARS,
    Admission,
    EventListener,
    EventSink,
    PostRunHook,
    RunHandle,
)
from runs.core.runner.runner import Runner

__all__ = [
    "COMPLETION_BUDGET_S",
    "DEFAULT_HISTORY_EVENT_LIMIT",
    "INTERRUPTED_ASSISTANT",
    "START_FAILURE_MAX_CHARS",
    "Admission",
    "EventListener",
    "EventSink",
    "PostRunHook",
    "RunHandle",
    "Runner",
]
