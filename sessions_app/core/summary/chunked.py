"""Summaries: the summarizers built from sections, `ChunkedSummarizer` (C6) and `ExtractiveSummarizer`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from sessions_app.core.events import Event
from sessions_app.core.summary.sections import (
    SummarySection,
    anchor_sections,
    fit_sections,
    render_sections,
    strip_section_headers,
    summary_sections,
)
from sessions_app.core.summary.summarizers import (
    LLMSummarizer,
    SummaryModel,
    SummaryRequest,
    SummaryResult,
    is_context_length_error,
)
from sessions_app.core.summary.transcript import (
    APPROX_TOKENIZER,
    DEFAULT_SECTION_TOKENS,
    DEFAULT_SUMMARY_TOKENS,
    DEFAULT_TRANSCRIPT,
    FALLBACK_CONTEXT_WINDOW,
    MIN_SUMMARY_TOKENS,
    SUMMARY_BUDGET_RATIO,
    Tokenizer,
    TranscriptFormat,
    conversation_lines,
)


class ChunkedSummarizer:
    """Compaction that cannot overflow (issue 12, C6): every request fits by construction.

    The new events are cut into chunks whose transcript fits the input budget (0.7 of the
    model's window, as `LLMSummarizer`); an event too large for one chunk is cut into
    pieces, each its own chunk, so no event is left out or shortened. Each chunk is
    summarised alone; a failed chunk (an exception, a context-length refusal, an empty
    answer) is retried alone, up to `attempts` times, a refused one in halves. Every event
    goes into some request whole: the summarizer sees 100% of what it hides.

    The summary is made of sections (C1): the previous summary's sections, kept as they
    were, then one per chunk, each with the seq range it stands for. While they weigh
    more than `summary_tokens` (default a quarter of the request room, between 256 and
    2,048), the oldest are summarised together in groups that fit one request
    (summaries of summaries) and the group's ranges become one union range.
    `SummaryResult.sections` are the sections of the text.

    With `cache_safe_forking` and a parent request, SPEC 3.6's fork is tried first, as
    `LLMSummarizer` does; it is used only when it fits the budget (it is bounded too), and
    its boundary stops at the newest event the parent held.
    """

    def __init__(
        self,
        model: SummaryModel,
        *,
        name: str = "chunked",
        prompt: str | None = None,
        max_summary_words: int = 0,
        tokenizer: Tokenizer = APPROX_TOKENIZER,
        budget_ratio: float = SUMMARY_BUDGET_RATIO,
        input_token_budget: int | None = None,
        fallback_window: int = FALLBACK_CONTEXT_WINDOW,
        attempts: int = 3,
        cache_safe_forking: bool = False,
        summary_tokens: int | None = None,
        system_prompt: str = "",
        transcript: TranscriptFormat = DEFAULT_TRANSCRIPT,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts!r}")
        if summary_tokens is not None and summary_tokens < 1:
            raise ValueError(f"summary_tokens must be positive, got {summary_tokens!r}")
        self.summary_tokens = summary_tokens
        self.leaf = LLMSummarizer(
            model,
            name=name,
            prompt=prompt,
            max_summary_words=max_summary_words,
            tokenizer=tokenizer,
            budget_ratio=budget_ratio,
            input_token_budget=input_token_budget,
            fallback_window=fallback_window,
            cache_safe_forking=cache_safe_forking,
            system_prompt=system_prompt,
            transcript=transcript,
        )
        self.model = model
        self.name = name
        self.tokenizer = tokenizer
        self.attempts = attempts

    def room(self) -> int:
        """Transcript tokens one request may carry: the budget less the prompt's own cost."""
        return max(16, self.leaf.budget() - self.leaf._tokens(self.leaf._render("", [])))

    def _cost(self, line: str) -> int:
        return self.tokenizer.count_text(line) + 1

    def _pieces(self, line: str, room: int) -> list[str]:
        """A line cut at word boundaries into pieces that each cost at most `room`."""
        pieces: list[str] = []
        current: list[str] = []
        for word in line.split(" "):
            trial = " ".join([*current, word])
            if current and self._cost(trial) > room:
                pieces.append(" ".join(current))
                current = [word]
            else:
                current.append(word)
        if current:
            pieces.append(" ".join(current))
        # A single "word" over the room (a base64 blob) is cut by characters.
        out: list[str] = []
        for piece in pieces:
            while self._cost(piece) > room and len(piece) > 1:
                cut = max(1, len(piece) * room // max(1, self._cost(piece)))
                out.append(piece[:cut])
                piece = piece[cut:]
            out.append(piece)
        return out

    def chunks(self, events: Sequence[Event]) -> list[tuple[int, int, list[str]]]:
        """(first_seq, last_seq, transcript lines) per chunk, oldest first, each within `room`."""
        room = self.room()
        out: list[tuple[int, int, list[str]]] = []
        lines: list[str] = []
        used = 0
        first = last = 0
        for event in events:
            seq = event.seq or 0
            for line in conversation_lines(event, self.leaf.transcript):
                for piece in self._pieces(line, room) if self._cost(line) > room else [line]:
                    cost = self._cost(piece)
                    if lines and used + cost > room:
                        out.append((first, last, lines))
                        lines, used = [], 0
                    if not lines:
                        first = seq
                    lines.append(piece)
                    used += cost
                    last = seq
        if lines:
            out.append((first, last, lines))
        return out

    async def _summarize_lines(self, lines: list[str]) -> str:
        """One bounded request for `lines`, retried alone; a refused one goes in halves."""
        error: BaseException | None = None
        for _ in range(self.attempts):
            try:
                text = (await self.model.complete(self.leaf._render("", lines))).strip()
            except Exception as exc:
                if is_context_length_error(exc) and len(lines) > 1:
                    half = len(lines) // 2
                    return "\n".join(
                        [await self._summarize_lines(lines[:half]), await self._summarize_lines(lines[half:])]
                    )
                error = exc
                continue
            if text:
                return text
        if error is not None:
            raise error
        return ""

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        forked = await self.leaf.summarize_forked(request, self.leaf.budget())
        if forked is not None:
            return forked
        # The fork did not work out (or is off): the chunks decide.
        new: list[SummarySection] = []
        for first, last, lines in self.chunks(request.events):
            text = strip_section_headers(await self._summarize_lines(lines))
            if text:
                new.append(SummarySection(first_seq=first, last_seq=last, text=text))
        if not new:
            return SummaryResult(text="")
        sections = anchor_sections([*summary_sections(request.previous), *new], last_seq=new[-1].last_seq)
        fitted = await fit_sections(
            sections,
            budget=self.summary_budget(),
            count_text=self.tokenizer.count_text,
            merge=self._merge,
            group_room=self.room(),
        )
        return SummaryResult(text=render_sections(fitted), sections=tuple(fitted))

    def summary_budget(self) -> int:
        """Tokens the stored summary (every section with its header) may take."""
        if self.summary_tokens is not None:
            return self.summary_tokens
        return min(DEFAULT_SUMMARY_TOKENS, max(MIN_SUMMARY_TOKENS, self.room() // 4))

    async def _merge(self, batch: Sequence[SummarySection], limit: int | None) -> str:
        return (await self._roll(batch)).text

    async def _roll(self, batch: Sequence[SummarySection]) -> SummarySection:
        lines: list[str] = []
        for section in batch:
            lines.extend(
                self._pieces(section.text, self.room()) if self._cost(section.text) > self.room() else [section.text]
            )
        text = await self._summarize_lines(lines)
        return SummarySection(first_seq=batch[0].first_seq, last_seq=batch[-1].last_seq, text=text)


class ExtractiveSummarizer:
    """The offline model's summarizer: the most informative sentences, within
    `budget_tokens` (DESIGN 7). `summarize` is the extractive function
    (`runs.core.llm.offline.extractive_summary`); it runs in a thread.

    The summary is made of sections (C1). The new events are cut, whole, into chunks of
    about `section_tokens` transcript tokens (the granularity); each chunk becomes a
    section of at most `section_budget_tokens` (default a quarter of the budget) with its
    seq range. The previous summary's sections are kept as they were. While the whole is
    over `budget_tokens`, the oldest sections are extracted together into one section
    whose range is the union of theirs: old history gets coarser, none is dropped.
    """

    def __init__(
        self,
        summarize: Callable[[str, int], str],
        *,
        budget_tokens: int = 512,
        name: str = "extractive",
        section_tokens: int = DEFAULT_SECTION_TOKENS,
        section_budget_tokens: int | None = None,
        tokenizer: Tokenizer = APPROX_TOKENIZER,
    ) -> None:
        if budget_tokens < 1:
            raise ValueError(f"budget_tokens must be positive, got {budget_tokens!r}")
        if section_tokens < 1:
            raise ValueError(f"section_tokens must be positive, got {section_tokens!r}")
        if section_budget_tokens is not None and section_budget_tokens < 1:
            raise ValueError(f"section_budget_tokens must be positive, got {section_budget_tokens!r}")
        self._summarize = summarize
        self.budget_tokens = budget_tokens
        self.name = name
        self.section_tokens = section_tokens
        self.section_budget_tokens = section_budget_tokens or max(16, budget_tokens // 4)
        self.tokenizer = tokenizer

    def chunks(self, events: Sequence[Event]) -> list[tuple[int, int, list[str]]]:
        """(first_seq, last_seq, transcript lines) per section of new events, oldest
        first; events are never split, so one larger than `section_tokens` is a chunk alone."""
        out: list[tuple[int, int, list[str]]] = []
        lines: list[str] = []
        used = first = last = 0
        for event in events:
            event_lines = conversation_lines(event)
            if not event_lines:
                continue
            cost = sum(self.tokenizer.count_text(line) + 1 for line in event_lines)
            if lines and used + cost > self.section_tokens:
                out.append((first, last, lines))
                lines, used = [], 0
            if not lines:
                first = event.seq or 0
            lines.extend(event_lines)
            used += cost
            last = event.seq or 0
        if lines:
            out.append((first, last, lines))
        return out

    async def _extract(self, text: str, limit: int) -> str:
        # The previous text goes in as plain sentences: a "system:" prefix would be kept by
        # the extraction and pile up, one more per round.
        return strip_section_headers(await asyncio.to_thread(self._summarize, text, limit))

    async def _merge(self, group: Sequence[SummarySection], limit: int | None) -> str:
        return await self._extract("\n".join(s.text for s in group), limit or self.section_budget_tokens)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        new: list[SummarySection] = []
        for first, last, lines in self.chunks(request.events):
            text = await self._extract("\n".join(lines), self.section_budget_tokens)
            if text:
                new.append(SummarySection(first_seq=first, last_seq=last, text=text))
        previous = summary_sections(request.previous)
        if not new and not previous:
            return SummaryResult(text="")
        end = new[-1].last_seq if new else max(s.last_seq for s in previous)
        sections = anchor_sections([*previous, *new], last_seq=end)
        fitted = await fit_sections(
            sections, budget=self.budget_tokens, count_text=self.tokenizer.count_text, merge=self._merge
        )
        return SummaryResult(text=render_sections(fitted), sections=tuple(fitted))
