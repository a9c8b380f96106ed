"""Context governance of an LLM agent: its knobs, and the run layer's adapters for summaries.

`ContextGovernance` gathers what an `LLMAgent` does about its context: the summary engine
for synchronous summaries (pre-call compaction, intra-run), how the summary block is
injected, tool-result compaction and the pre-call threshold. Its defaults are DESIGN 6's.
An agent without one shows its loaded history (and any stored summary) as it is.

The adapters let `sessions_app.core.summary` (which knows no run layer) use a `Model` and
tiktoken: `ModelSummaryModel`, `TIKTOKEN`, `llm_summarizer`, `extractive_summarizer`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from runs.core.callbacks import CallbackContext, Callbacks, run_after_model, run_before_model
from runs.core.context.compaction import CompactionConfig
from runs.core.context.pinned import PINNED_BUDGET_RATIO
from runs.core.llm.base import Model, ModelRequest, ToolSpec, tool_json
from runs.core.llm.offline import extractive_summary
from runs.core.tokens import count_message, count_text
from sessions_app.core.events import Message
from sessions_app.core.summary import (
    ChunkedSummarizer,
    ExtractiveSummarizer,
    LLMSummarizer,
    SummaryEngine,
    Tokenizer,
)

_CACHED_CHARS = 256 * 1024
"""Larger texts are counted each time rather than kept alive by the cache."""

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=4096)
def _cached_message(message: Message) -> int:
    return count_message(message)


@functools.lru_cache(maxsize=4096)
def _cached_text(text: str) -> int:
    return count_text(text)


_BY_OBJECT: dict[int, tuple[Message, int]] = {}
_BY_OBJECT_MAX = 16_384


def _count_message(message: Message) -> int:
    # Every call counts the whole history it sends (and the raw ledger): the same messages
    # over and over. Counts are remembered by object first (a dict lookup, the common case:
    # a run reuses its loaded events), then by value (Message is immutable and hashable).
    hit = _BY_OBJECT.get(id(message))
    if hit is not None and hit[0] is message:
        return hit[1]
    if len(message.content) > _CACHED_CHARS:
        return count_message(message)
    tokens = _cached_message(message)
    if len(_BY_OBJECT) >= _BY_OBJECT_MAX:
        _BY_OBJECT.clear()
    _BY_OBJECT[id(message)] = (message, tokens)
    return tokens


def _count_text(text: str) -> int:
    return _cached_text(text) if len(text) <= _CACHED_CHARS else count_text(text)


TIKTOKEN = Tokenizer(count_text=_count_text, count_message=_count_message)
"""The token counter every threshold compares against (DESIGN 7: cl100k_base), memoized."""

# DESIGN 6 / SPEC 4.8 defaults.
PRECALL_RATIO = 0.7
PRECALL_MIN_TOKENS = 2000
DEFAULT_SYNC_LOCK_WAIT_S = 5.0
# Issue 12, C5: the soft threshold that starts a summary in the background.
SOFT_RATIO = 0.55
SOFT_MIN_TOKENS = 1500
DEFAULT_SOFT_WAIT_S = 30.0


ANSWER_RESERVE_RATIO = 0.1
ANSWER_RESERVE_MIN_TOKENS = 256


def hard_limit(window: int) -> int:
    """The most a request may weigh, tool schemas included: the window less room for the
    answer (a tenth, at least 256 tokens). Past it the run's own tool results are cut."""
    return window - max(ANSWER_RESERVE_MIN_TOKENS, int(window * ANSWER_RESERVE_RATIO))


@dataclass(frozen=True, kw_only=True)
class PrecallConfig:
    """SPEC 4.8: compact when a request reaches max(window × `ratio`, `min_tokens`)
    (never above the window): summarize synchronously, rebuild if the summary advanced."""

    enabled: bool = True
    ratio: float = PRECALL_RATIO
    min_tokens: int = PRECALL_MIN_TOKENS

    def __post_init__(self) -> None:
        if not 0 < self.ratio <= 1:
            raise ValueError(f"pre-call compaction ratio must be in (0, 1], got {self.ratio!r}")

    def threshold(self, window: int) -> int:
        return min(window, max(int(window * self.ratio), self.min_tokens))


@dataclass(frozen=True, kw_only=True)
class BackgroundCompactionConfig:
    """Issue 12, C5: non-blocking compaction. When a request reaches the soft threshold,
    max(window × `ratio`, `min_tokens`) but below the pre-call one, a summary starts in the
    background and this call goes out on the full projection; the next call swaps the new
    summary in. A request that reaches the pre-call threshold while that summary is still
    running waits for it up to `wait_s` seconds before the synchronous path (SPEC 4.8)."""

    ratio: float = SOFT_RATIO
    min_tokens: int = SOFT_MIN_TOKENS
    wait_s: float = DEFAULT_SOFT_WAIT_S

    def __post_init__(self) -> None:
        if not 0 < self.ratio <= 1:
            raise ValueError(f"soft compaction ratio must be in (0, 1], got {self.ratio!r}")
        if self.wait_s < 0:
            raise ValueError(f"soft compaction wait must not be negative, got {self.wait_s!r}")

    def threshold(self, window: int) -> int:
        return min(window, max(int(window * self.ratio), self.min_tokens))


@dataclass(frozen=True, kw_only=True)
class PinnedConfig:
    """Issue 12, C2: carry the user's active directives verbatim in a pinned block of at
    most `budget_ratio` of the window (`runs.core.context.pinned`)."""

    budget_ratio: float = PINNED_BUDGET_RATIO

    def __post_init__(self) -> None:
        if not 0 < self.budget_ratio <= 1:
            raise ValueError(f"pinned budget ratio must be in (0, 1], got {self.budget_ratio!r}")

    def budget(self, window: int) -> int:
        return max(1, int(window * self.budget_ratio))


@dataclass(frozen=True, kw_only=True)
class ContextGovernance:
    """What an LLM agent does about its context (DESIGN 6 defaults)."""

    summaries: SummaryEngine | None = None
    """Runs synchronous summaries; None: the agent never summarizes by itself."""
    summary_injection: Literal["system", "user"] = "system"
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    precall: PrecallConfig = field(default_factory=PrecallConfig)
    background: BackgroundCompactionConfig | None = None
    """Issue 12, C5: start summaries at a soft threshold without blocking; None: off (only
    the synchronous pre-call path compacts)."""
    sync_summary_intra_run: bool = False
    """SPEC 4.7: summarize before every model call of a run but the first."""
    context_window: int | None = None
    """Plan with this window instead of the model's."""
    tokenizer: Tokenizer = TIKTOKEN
    sync_lock_wait_s: float = DEFAULT_SYNC_LOCK_WAIT_S
    manifest_check: bool = False
    """Issue 12, C3: refuse (raise `ManifestError`) a request whose manifest finds an event
    neither shown, compacted with a pointer back, summarized nor announced as not loaded.
    The manifest itself is recorded with every governed call either way."""
    pinned: PinnedConfig | None = None
    """Issue 12, C2: the pinned block of the user's directives; None: off."""


def tools_tokens(tools: Sequence[ToolSpec], tokenizer: Tokenizer = TIKTOKEN) -> int:
    return sum(tokenizer.count_text(tool_json(t)) for t in tools)


class ModelSummaryModel:
    """A run-layer `Model` as the `SummaryModel` of an `LLMSummarizer`: one non-streaming
    call, the final text (tool calls, if the model makes any, are ignored).

    `callbacks`: the summarizer's model callbacks (SPEC 3.4, issue 26): their
    `before_model` may change the request or answer in the model's place (`Respond`: no
    call), their `after_model` may replace the answer; the other points do not apply.
    Their context has no invocation (`agent_name` is `name`). A summary has no event to
    record a change on, so each change is logged at INFO."""

    def __init__(
        self,
        model: Model,
        *,
        context_window: int | None = None,
        callbacks: Callbacks | None = None,
        name: str = "summarizer",
    ) -> None:
        self.model = model
        self._window = context_window
        self.callbacks = callbacks
        self.name = name

    @property
    def context_window(self) -> int:
        return self._window or self.model.info().context_window

    async def complete(self, messages: Sequence[Message], *, tools: Sequence[Any] = ()) -> str:
        request = ModelRequest(messages=tuple(messages), tools=tuple(_tool_spec(t) for t in tools), stream=False)
        callbacks = self.callbacks
        context = CallbackContext(invocation=None, agent_name=self.name)
        answer: Message | None = None
        if callbacks is not None and callbacks.before_model:
            gate = await run_before_model(callbacks, context, request)
            _log_changes(self.name, gate.changes)
            request, answer = gate.request, gate.response
        if answer is None:
            async for response in self.model.generate(request):
                if not response.partial and response.message is not None:
                    answer = response.message
        if answer is None:
            return ""
        if callbacks is not None and callbacks.after_model:
            answer, changes = await run_after_model(callbacks, context, answer)
            _log_changes(self.name, changes)
        return answer.content


def _log_changes(name: str, changes: Sequence[Mapping[str, Any]]) -> None:
    for change in changes:
        logger.info(
            "%s: %s callback %s changed the %s: %s",
            name,
            change.get("point"),
            change.get("callback"),
            change.get("change"),
            change.get("note") or "",
        )


def _tool_spec(tool: Any) -> ToolSpec:
    """A fork parent's tool: a spec, or the mapping of its fields it became on its way to a
    Celery worker (`ForkParent.to_dict`, SPEC 3.6)."""
    if isinstance(tool, ToolSpec):
        return tool
    return ToolSpec(
        name=tool["name"],
        description=tool.get("description", ""),
        parameters=tool.get("parameters", {}),
        requires_one_of=tuple(tuple(group) for group in tool.get("requires_one_of", ())),
    )


def llm_summarizer(
    model: Model,
    *,
    context_window: int | None = None,
    max_summary_words: int = 0,
    cache_safe_forking: bool = False,
    tokenizer: Tokenizer = TIKTOKEN,
    callbacks: Callbacks | None = None,
) -> LLMSummarizer:
    return LLMSummarizer(
        ModelSummaryModel(model, context_window=context_window, callbacks=callbacks),
        name=f"llm:{model.info().name}",
        max_summary_words=max_summary_words,
        cache_safe_forking=cache_safe_forking,
        tokenizer=tokenizer,
    )


def chunked_summarizer(
    model: Model,
    *,
    context_window: int | None = None,
    max_summary_words: int = 0,
    cache_safe_forking: bool = False,
    tokenizer: Tokenizer = TIKTOKEN,
    callbacks: Callbacks | None = None,
) -> ChunkedSummarizer:
    """Issue 12, C6: the model's summarizer with every request bounded by construction
    (hidden ranges in chunks, summaries of summaries, a failed chunk retried alone)."""
    return ChunkedSummarizer(
        ModelSummaryModel(model, context_window=context_window, callbacks=callbacks),
        name=f"chunked:{model.info().name}",
        max_summary_words=max_summary_words,
        cache_safe_forking=cache_safe_forking,
        tokenizer=tokenizer,
    )


def extractive_summarizer(*, budget_tokens: int = 512, tokenizer: Tokenizer = TIKTOKEN) -> ExtractiveSummarizer:
    """The offline model's summarizer (`runs.core.llm.offline.extractive_summary`), in
    sections with their seq ranges (issue 12, C1), counted with the thresholds' tokenizer."""
    return ExtractiveSummarizer(
        extractive_summary, budget_tokens=budget_tokens, name="offline-extractive", tokenizer=tokenizer
    )
