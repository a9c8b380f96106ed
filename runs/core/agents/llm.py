"""LLMAgent: the model-and-tools loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from runs.core.agents.base import Agent
from runs.core.attachments import with_attachment_bytes
from runs.core.callbacks import (
    CallbackContext,
    Callbacks,
    callbacks_for,
    run_after_model,
    run_before_model,
    with_changes,
)
from runs.core.context.governance import ContextGovernance
from runs.core.context.pinned import STATE_KEY as PINNED_STATE_KEY
from runs.core.context.pinned import PinnedState
from runs.core.context.precall import BackgroundCompactions, compact_before_call, summarize_now
from runs.core.context.recall_preload import SessionRecallPreload, recall_preload_block, with_user_block
from runs.core.context.request import BuiltRequest, build_context, build_for_invocation, pinned_state
from runs.core.errors import ModelError, TransientModelError
from runs.core.flow.tools import execute_tool_calls
from runs.core.invocation import Invocation
from runs.core.llm.base import Model, ModelResponse
from runs.core.output import (
    OUTPUT_EXTENSION,
    OUTPUT_INVALID_EXTENSION,
    OutputMismatch,
    OutputSpec,
    feedback_message,
)
from runs.core.pacing import setup_done
from runs.core.steering import consume_queued
from runs.core.steps import continued, ending
from runs.core.tools.ask_user import AskUserTool, asked_question, question_event
from runs.core.tools.base import Tool
from runs.core.tools.client import CLIENT_CALLS_EXTENSION, offered, split_calls
from runs.core.tools.transfer import TransferTool, follow_route, run_transfer, transfer_target
from sessions_app.core.events import (
    NO_MODEL_CALL,
    OBJECT_CHUNK,
    OBJECT_COMPLETION,
    OBJECT_ERROR,
    OBJECT_STATE_UPDATE,
    Event,
    EventError,
    Message,
    new_id,
)
from sessions_app.core.memory_tools import MEMORY_SERVICE, memory_preload_block
from sessions_app.core.session import Session
from sessions_app.core.summary import ForkParent, model_message

DEFAULT_MAX_STEPS = 10
# How long a step's tools may take for its call and results to be written as one (issue 18).
STEP_GROUP_WAIT_S = 0.05
# Event extension key of the message that tells the model why its answer was refused.
OUTPUT_FEEDBACK_EXTENSION = "output_feedback"


@runtime_checkable
class InstructionProcessor(Protocol):
    """Extends an LLMAgent's instruction before each of its model calls (the skills block of
    SPEC 8.2 is one): it runs per call, so what a tool changed shows in the very next request."""

    async def process(self, invocation: Invocation, agent_name: str, instruction: str) -> str:
        """The instruction this call sends, given the agent's."""
        ...

    def preview(self, instruction: str) -> str:
        """The same outside a run (the context inspector's next request), without I/O."""
        ...


class LLMAgent:
    """Ask the model; run the tools it calls; repeat until it answers or steps run out.

    Each step streams text deltas as partial events, then yields the complete assistant
    event and, for tool calls, one tool-result event per call (in call order). When the
    tools finish within `STEP_GROUP_WAIT_S`, the assistant event is yielded after them and
    the step is marked for one ledger write (runs.core.steps); the final answer is marked
    as the agent's last event.

    With `governance`, each step's request is governed (DESIGN 6): tool results compacted,
    a summary started in the background at the soft threshold and swapped in at the next
    step (issue 12, C5), a synchronous summary and a rebuild when the request reaches the
    pre-call threshold, optionally a summary before every step but the first. Every complete assistant event
    carries the context stats of the call that produced it in `extensions["context"]`.

    With `output` (or a run's `RunOptions.output`), the final answer must be JSON of that
    spec (issue 20): it goes to the model with the request, is not streamed as deltas
    (a refused answer must not reach a reader as if it were the answer), and is validated.
    A refused answer is kept (`extensions["output_invalid"]`, not done) and followed by a
    user-role message from the agent saying what is wrong (`extensions["output_feedback"]`);
    after `max_retries` refusals the run fails with `output_invalid`. The valid value is in
    the final event's `extensions["output"]`. `callbacks` (runs.core.callbacks) run around
    each model call and tool call, after the Runner's.
    """

    kind = "llm"
    paces_setup = True
    """It leaves the runner's setup gate itself, just before its first model call (issue 23,
    runs.core.pacing): its preloads and first request are setup."""

    def __init__(
        self,
        *,
        name: str,
        model: Model,
        instruction: str = "",
        description: str = "",
        tools: Sequence[Tool] = (),
        max_steps: int = DEFAULT_MAX_STEPS,
        parallel_tools: bool = True,
        governance: ContextGovernance | None = None,
        memory_preload: int = 0,
        session_recall: SessionRecallPreload | None = None,
        output: OutputSpec | Mapping[str, Any] | type[Any] | None = None,
        callbacks: Callbacks | None = None,
        sub_agents: Sequence[Agent] = (),
        await_user_reply: bool = False,
        instruction_processors: Sequence[InstructionProcessor] = (),
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps!r}")
        # SPEC 11.2: sub-agents add `transfer_to_agent`; await_user_reply adds `ask_user`
        # (runs.core.routing: the reply comes back to this agent).
        self.sub_agents = list(sub_agents)
        self.await_user_reply = await_user_reply
        tools = [
            *tools,
            *([TransferTool(self.sub_agents)] if self.sub_agents else []),
            *([AskUserTool()] if await_user_reply else []),
        ]
        names = [t.name for t in tools]
        if len(names) != len(set(names)):
            raise ValueError(f"duplicate tool names in {names!r}")
        self.name = name
        self.model = model
        self.instruction = instruction
        self.description = description
        self.tools = {t.name: t for t in tools}
        self.max_steps = max_steps
        self.parallel_tools = parallel_tools
        self.governance = governance
        # SPEC 6.5: 0 off, -1 every memory, N adaptive; needs services["memory"].
        self.memory_preload = memory_preload
        # SPEC 5.4: None (or max_results 0) off; needs services["recall"].
        self.session_recall = session_recall
        self.output = output if output is None or isinstance(output, OutputSpec) else OutputSpec.of(output)
        self.callbacks = callbacks
        self.instruction_processors = tuple(instruction_processors)
        # Issue 12, C5: summaries started at the soft threshold, swapped in at the next call.
        self.background_compactions = BackgroundCompactions()

    @property
    def model_name(self) -> str | None:
        return self.model.info().name

    @property
    def context_window(self) -> int:
        """The window the agent plans with: the governance override, else the model's."""
        if self.governance is not None and self.governance.context_window:
            return self.governance.context_window
        return self.model.info().context_window

    @property
    def sync_summary_intra_run(self) -> bool:
        """SPEC 4.7: read by the runner, which then skips async jobs for tool results."""
        governance = self.governance
        return bool(
            governance is not None
            and governance.sync_summary_intra_run
            and governance.summaries is not None
            and governance.summaries.summarizer is not None
        )

    def context_preview(self, session: Session, *, filter_key: str, instruction: str | None = None) -> BuiltRequest:
        """The request the next model call on `session` would start from (no turn is active)."""
        instruction = self.instruction if instruction is None else instruction
        for processor in self.instruction_processors:
            instruction = processor.preview(instruction)
        return build_context(
            session,
            filter_key=filter_key,
            instruction=instruction,
            tools=[t.spec() for t in self.tools.values()],
            governance=self.governance,
            window=self.context_window,
        )

    def fork_parent(self, invocation: Invocation, event: Event) -> ForkParent | None:
        """SPEC 1.8 / 3.6: the run's last request plus the persisted messages since, up to
        `event`, as the parent of an async summary fork; None when there is none or its
        last tool round is incomplete."""
        built = invocation.state_of(self.name).last_request
        if built is None or event.seq is None:
            return None
        parent = built.fork_parent()
        tail = [
            m
            for e in invocation.session.events
            if e.invocation_id == invocation.invocation_id
            and parent.covered_last_seq < (e.seq or 0) <= event.seq
            and (m := model_message(e)) is not None
        ]
        answered = {m.tool_call_id for m in tail if m.role == "tool"}
        if any(call.id not in answered for m in tail for call in m.tool_calls):
            return None
        return ForkParent(
            messages=(*parent.messages, *tail),
            tools=parent.tools,
            tools_tokens=parent.tools_tokens,
            summary_last_seq=parent.summary_last_seq,
            covered_last_seq=event.seq,
        )

    async def _request(self, invocation: Invocation, step: int, instruction: str, specs: list[Any]) -> BuiltRequest:
        """This step's request: governed when the agent has governance (SPEC 4.7, 4.8), its
        instruction extended by the agent's instruction processors."""
        for processor in self.instruction_processors:
            instruction = await processor.process(invocation, self.name, instruction)
        state = invocation.state_of(self.name)
        governance = self.governance
        window = self.context_window

        def build(fit_to: int | None = None) -> BuiltRequest:
            return build_for_invocation(
                invocation, instruction=instruction, tools=specs, governance=governance, window=window, fit_to=fit_to
            )

        if governance is not None and step > 0 and self.sync_summary_intra_run:
            previous = state.last_request
            await summarize_now(
                invocation, governance, parent=previous.fork_parent() if previous else None, window=window
            )
        built = build()
        report = None
        if governance is not None:
            built, report = await compact_before_call(
                invocation,
                built,
                governance=governance,
                rebuild=build,
                background=self.background_compactions,
                fit=build,
            )
        state.last_request = built
        state.precall = report.to_dict() if report is not None else None
        return built

    def _pinned_update(self, invocation: Invocation) -> Event | None:
        """Issue 12, C2: a state change that stores the session's pinned intent once this
        turn's user message added or retired a pin, so that the pins outlive the events
        they came from (a later load skips what the summary covers). None when nothing
        changed or pinning is off."""
        if self.governance is None or self.governance.pinned is None:
            return None
        stored = PinnedState.of_session_state(invocation.session.state)
        folded = pinned_state(invocation.session)
        if folded.records == stored.records:
            return None
        return invocation.stamp(
            Event(author=self.name, object=OBJECT_STATE_UPDATE, state_delta={PINNED_STATE_KEY: folded.to_dict()})
        )

    def _error(self, invocation: Invocation, type_: str, message: str, code: str | None = None) -> Event:
        return invocation.stamp(
            Event(
                author=self.name,
                object=OBJECT_ERROR,
                done=True,
                error=EventError(type=type_, message=message, code=code),
            )
        )

    async def run(self, invocation: Invocation) -> AsyncGenerator[Event, None]:
        routed = follow_route(invocation, self.sub_agents)
        if routed is not None:  # the user's reply goes to the sub-agent that asked
            async for event in routed:
                yield event
            return
        try:
            async for event in self._run(invocation):
                yield event
        finally:
            invocation.agent_state.pop(self.name, None)
            self.background_compactions.release(invocation)

    async def _run(self, invocation: Invocation) -> AsyncGenerator[Event, None]:
        max_steps = invocation.options.max_steps or self.max_steps
        instruction = invocation.options.instruction or self.instruction
        if added := invocation.options.added_instruction:
            instruction = f"{instruction}\n\n{added}" if instruction else added
        # Preloaded once per run, so the request prefix stays the same across its steps.
        memories = await memory_preload_block(
            invocation.services.get(MEMORY_SERVICE),
            app=invocation.app,
            user_id=invocation.session.user_id,
            preload=self.memory_preload,
            query=invocation.message.content,
        )
        if memories:
            instruction = f"{instruction}\n\n{memories}" if instruction else memories
        recalled = await recall_preload_block(
            self.session_recall,
            invocation.services,
            session=invocation.session,
            message=invocation.message.content,
        )
        recall_in_user = (
            recalled is not None and self.session_recall is not None and self.session_recall.injection == "user"
        )
        if recalled and not recall_in_user:
            instruction = f"{instruction}\n\n{recalled}" if instruction else recalled
        # Issue 20: the caller's own tools go beside the agent's (never in place of one);
        # its tool choice binds the first step only, so that a forced call can be followed
        # by an answer ("none" offers no tools at all, in every step).
        choice = invocation.options.tool_choice
        client_names = {s.name for s in invocation.options.client_tools} - set(self.tools)
        specs = list(
            offered(
                choice,
                [
                    *(t.spec() for t in self.tools.values()),
                    *(s for s in invocation.options.client_tools if s.name in client_names),
                ],
            )
        )
        pinned = self._pinned_update(invocation)
        if pinned is not None:
            yield pinned
        output = invocation.options.output or self.output
        callbacks = callbacks_for(invocation, self.callbacks)
        refused = 0
        for step in range(max_steps):
            async for queued in consume_queued(invocation):  # SPEC 1.5: steering, between model steps
                yield queued
            built = await self._request(invocation, step, instruction, specs)
            request = built.request if output is None else replace(built.request, output=output)
            if recall_in_user and recalled:
                request = replace(
                    request, messages=with_user_block(request.messages, recalled, invocation.message.content)
                )
            if step == 0 and choice is not None and specs:
                request = replace(request, tool_choice=choice)
            message_id = new_id()
            final: ModelResponse | None = None
            gate = await run_before_model(
                callbacks,
                CallbackContext(invocation=invocation, agent_name=self.name, step=step),
                request,
            )
            request, changes = gate.request, gate.changes
            if gate.response is not None:
                # A callback answered for the model: no call, and the ledger says so.
                final = ModelResponse(id=message_id, partial=False, message=gate.response)
            if gate.response is None:  # images and files: their bytes, for this call only (issue 20)
                request = await with_attachment_bytes(request, invocation)
            setup_done(invocation)  # issue 23: the model's I/O never holds a setup place
            try:
                async for response in self.model.generate(request) if gate.response is None else _nothing():
                    if response.partial:
                        if response.delta and output is None:
                            yield invocation.stamp(
                                Event(
                                    author=self.name,
                                    object=OBJECT_CHUNK,
                                    partial=True,
                                    message=Message(role="assistant", content=response.delta),
                                    extensions={"message_id": message_id},
                                )
                            )
                    else:
                        final = response
            except TransientModelError as exc:
                yield self._error(invocation, "model_unavailable", str(exc), exc.code)
                return
            except ModelError as exc:
                yield self._error(invocation, "model_error", str(exc), exc.code)
                return
            if final is None or final.message is None:
                yield self._error(invocation, "model_error", "the model ended its stream without a final response")
                return
            message = final.message
            if callbacks.after_model:
                message, after = await run_after_model(
                    callbacks,
                    CallbackContext(invocation=invocation, agent_name=self.name, step=step),
                    message,
                )
                changes = [*changes, *after]
            context = {**built.stats(), "precall": invocation.state_of(self.name).precall}
            extensions: dict[str, Any] = {"message_id": message_id, "context": context}
            if gate.response is not None:
                extensions[NO_MODEL_CALL] = True
            completion = with_changes(
                invocation.stamp(
                    Event(
                        id=message_id,
                        author=self.name,
                        object=OBJECT_COMPLETION,
                        message=message,
                        done=not message.tool_calls,
                        finish_reason=final.finish_reason or ("tool_calls" if message.tool_calls else "stop"),
                        usage=final.usage,
                        model=final.model,
                        extensions=extensions,
                    )
                ),
                changes,
            )
            if not message.tool_calls and output is not None:
                try:
                    value = output.check(message.content)
                except OutputMismatch as exc:
                    refused += 1
                    invalid = replace(
                        completion,
                        done=False,
                        extensions={**completion.extensions, OUTPUT_INVALID_EXTENSION: exc.problems},
                    )
                    yield continued(invalid)
                    if refused > output.max_retries:
                        yield self._error(
                            invocation,
                            "output_invalid",
                            f"the answer did not match the output schema after {refused} attempt(s): {exc}",
                            "output_invalid",
                        )
                        return
                    # Written with the refused answer, before the retry's request is built
                    # from the ledger: the model sees its answer and what is wrong with it.
                    yield invocation.stamp(
                        Event(
                            author=self.name,
                            message=feedback_message(output, exc.problems, attempt=refused),
                            extensions={OUTPUT_FEEDBACK_EXTENSION: {"attempt": refused, "problems": exc.problems}},
                        )
                    )
                    continue
                completion = replace(completion, extensions={**completion.extensions, OUTPUT_EXTENSION: value})
            if not message.tool_calls:
                yield ending(completion)
                return
            ours, theirs = split_calls(message.tool_calls, client_names, self.tools)
            if theirs:
                # Issue 20: the client runs these; ours run now, and the turn ends with the
                # calls waiting in the ledger for the client's results (runs.core.tools.client).
                completion = replace(
                    completion,
                    extensions={
                        **completion.extensions,
                        CLIENT_CALLS_EXTENSION: [call.id for call in theirs],
                    },
                )
                results, stop = (
                    await execute_tool_calls(
                        invocation,
                        ours,
                        self.tools,
                        parallel=self.parallel_tools,
                        callbacks=callbacks,
                    )
                    if ours
                    else ([], None)
                )
                paused = [completion, *results]
                for event in paused[:-1]:
                    yield continued(event)
                if stop is not None:
                    yield paused[-1]
                    yield self._error(invocation, "stop_agent_error", str(stop))
                else:
                    yield ending(paused[-1])
                return
            # Issue 18: the step (the call and its results) is one ledger write when the tools
            # finish within STEP_GROUP_WAIT_S; a slower tool's call is recorded and shown first,
            # so that nobody waits for it to see what the model asked for.
            tools = asyncio.ensure_future(
                execute_tool_calls(
                    invocation,
                    message.tool_calls,
                    self.tools,
                    parallel=self.parallel_tools,
                    callbacks=callbacks,
                )
            )
            try:
                await asyncio.wait({tools}, timeout=STEP_GROUP_WAIT_S)
                grouped = tools.done()
                if not grouped:
                    yield completion
                results, stop = await tools
            finally:
                if not tools.done():
                    tools.cancel()
                    with contextlib.suppress(BaseException):
                        await tools
            written = [completion, *results] if grouped else list(results)
            for event in written[:-1]:
                yield continued(event)
            if written:
                yield written[-1]
            if stop is not None:
                yield self._error(invocation, "stop_agent_error", str(stop))
                return
            question = asked_question(results) if self.await_user_reply else None
            if question is not None:  # SPEC 1.2 step 6: the turn ends with the question
                yield ending(question_event(invocation, author=self.name, question=question))
                return
            transfer = transfer_target(results, {a.name: a for a in self.sub_agents})
            if transfer is not None:  # SPEC 11.2: the target answers in this run; this agent ends
                async for event in run_transfer(invocation, author=self.name, target=transfer[0], note=transfer[1]):
                    yield event
                return
        yield self._error(
            invocation, "max_steps_exceeded", f"the agent used all {max_steps} steps without a final answer"
        )


async def _nothing() -> AsyncIterator[ModelResponse]:
    """The stream of a model call a callback answered: nothing more to read."""
    responses: tuple[ModelResponse, ...] = ()
    for response in responses:  # an async generator that yields nothing
        yield response
