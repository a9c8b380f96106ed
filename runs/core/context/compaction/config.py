"""Compaction's knobs and tally: the defaults, `CompactionConfig` and `CompactionStats`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

# DESIGN 6 / SPEC 4.2 defaults.
KEEP_RECENT_REQUESTS = 1
TOOL_RESULT_MAX_TOKENS = 1024
OVERSIZED_TOOL_RESULT_MAX_TOKENS = 0
OVERSIZED_RECOMMENDED = 8192

CompactionPass = Literal["pass0", "pass1", "pass2", "args"]


@dataclass(frozen=True, kw_only=True)
class CompactionConfig:
    """The compaction knobs (DESIGN 6). `enabled=False` turns every pass off."""

    enabled: bool = True
    keep_recent_requests: int = KEEP_RECENT_REQUESTS
    tool_result_max_tokens: int = TOOL_RESULT_MAX_TOKENS
    oversized_tool_result_max_tokens: int = OVERSIZED_TOOL_RESULT_MAX_TOKENS
    force_clean_tools: frozenset[str] = frozenset()
    keep_tools: frozenset[str] = frozenset()
    clear_at_least: int = 0
    """Issue 12, C4: Pass 1 elides in batches of at least this many tokens of results
    (0: each result as soon as its unit leaves the protected ones, SPEC 4.6)."""

    def __post_init__(self) -> None:
        for name in (
            "keep_recent_requests",
            "tool_result_max_tokens",
            "oversized_tool_result_max_tokens",
            "clear_at_least",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


@dataclass(frozen=True, kw_only=True)
class CompactionStats:
    """How many results each pass replaced, and the tokens that saved."""

    pass0: int = 0
    pass1: int = 0
    pass2: int = 0
    resume_tail: int = 0
    """Results and call arguments of the resume tail replaced (SPEC 4.5)."""
    fallback: int = 0
    """Results of the running invocation replaced or cut because a request still did not
    fit after its summary (or without one)."""
    tokens_saved: int = 0

    @property
    def total(self) -> int:
        return self.pass0 + self.pass1 + self.pass2 + self.resume_tail + self.fallback

    def plus(self, other: CompactionStats) -> CompactionStats:
        return CompactionStats(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)}
        )

    def to_dict(self) -> dict[str, int]:
        # Not dataclasses.asdict: it deep-copies, and every model call records these.
        return {f.name: getattr(self, f.name) for f in _STATS_FIELDS}


_STATS_FIELDS = dataclasses.fields(CompactionStats)
