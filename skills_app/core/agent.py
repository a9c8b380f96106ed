"""An LLM agent with skills: the skill tools, and the skills block in every request.

The skills request processor (SPEC 8.2) adds, after the agent's instruction, the skill
overview and the content of the loaded skills; it runs before each model call, so a
skill loaded by a tool call shows in the very next request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from runs.core.agents.llm import LLMAgent
from runs.core.context.request import BuiltRequest
from runs.core.invocation import Invocation
from runs.core.tools.base import Tool
from sessions_app.core.events import Event
from sessions_app.core.session import Session
from skills_app.core.tools import SkillToolset


def _join(*parts: str) -> str:
    return "\n\n".join(p for p in parts if p)


class SkillsLLMAgent(LLMAgent):
    """`LLMAgent` plus a `SkillToolset`: its tools join the agent's, its block the instruction."""

    def __init__(self, *, skills: SkillToolset, tools: Sequence[Tool] = (), **kwargs: Any) -> None:
        super().__init__(tools=[*tools, *skills.tools()], **kwargs)
        self.skills = skills

    async def run(self, invocation: Invocation) -> AsyncIterator[Event]:
        # The summaries feed the overview and the tools' skill lists, so read them
        # before the run computes its tool specs.
        await self.skills.prepare()
        try:
            async for event in super().run(invocation):
                yield event
        finally:
            # The workspace is the run's (SPEC 8.3): it goes when the run ends, however it ends.
            await self.skills.release(invocation.invocation_id)

    async def _request(self, invocation: Invocation, step: int, instruction: str, specs: list[Any]) -> BuiltRequest:
        block = await self.skills.instruction_block(
            session=invocation.session, agent=self.name, invocation_id=invocation.invocation_id
        )
        return await super()._request(invocation, step, _join(instruction, block), specs)

    def context_preview(self, session: Session, *, filter_key: str, instruction: str | None = None) -> BuiltRequest:
        base = self.instruction if instruction is None else instruction
        return super().context_preview(session, filter_key=filter_key, instruction=_join(base, self.skills.overview()))
