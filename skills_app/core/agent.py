"""An LLM agent with skills: the skill tools, and the skills block in every request.

The skills request processor (SPEC 8.2) adds, after the agent's instruction, the skill
overview and the content of the loaded skills; it runs before each model call, so a
skill loaded by a tool call shows in the very next request.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

from runs.core.agents.llm import InstructionProcessor, LLMAgent
from runs.core.invocation import Invocation
from runs.core.tools.base import Tool
from sessions_app.core.events import Event
from skills_app.core.tools import SkillToolset


def _join(*parts: str) -> str:
    return "\n\n".join(p for p in parts if p)


class SkillsBlock:
    """The instruction processor of `SkillsLLMAgent`: the skill overview and the content of
    the loaded skills, after the agent's instruction."""

    def __init__(self, skills: SkillToolset) -> None:
        self.skills = skills

    async def process(self, invocation: Invocation, agent_name: str, instruction: str) -> str:
        block = await self.skills.instruction_block(
            session=invocation.session, agent=agent_name, invocation_id=invocation.invocation_id
        )
        return _join(instruction, block)

    def preview(self, instruction: str) -> str:
        return _join(instruction, self.skills.overview())


class SkillsLLMAgent(LLMAgent):
    """`LLMAgent` plus a `SkillToolset`: its tools join the agent's, its block the instruction."""

    def __init__(
        self,
        *,
        skills: SkillToolset,
        tools: Sequence[Tool] = (),
        instruction_processors: Sequence[InstructionProcessor] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(
            tools=[*tools, *skills.tools()],
            instruction_processors=[*instruction_processors, SkillsBlock(skills)],
            **kwargs,
        )
        self.skills = skills

    async def run(self, invocation: Invocation) -> AsyncGenerator[Event, None]:
        # The summaries feed the overview and the tools' skill lists, so read them
        # before the run computes its tool specs.
        await self.skills.prepare()
        try:
            async for event in super().run(invocation):
                yield event
        finally:
            # The workspace is the run's (SPEC 8.3): it goes when the run ends, however it ends.
            await self.skills.release(invocation.invocation_id)
