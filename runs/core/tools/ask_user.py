"""`ask_user`: an LLM agent asks the user and waits for the reply (SPEC 1.2 step 6, 11.2).

Offered by an `LLMAgent` built with `await_user_reply=True`. The tool only takes note of
the question (`extensions["ask_user"]` on its result); the agent then ends its turn with
the question as its answer, and that answer records the await-user-reply route (the
agent's lookup path) in the session state, so that the user's next message comes back to
this agent (`runs.core.routing`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runs.core.invocation import Invocation
from runs.core.llm.base import ToolSpec
from runs.core.routing import Route, route_delta
from runs.core.tools.base import ToolArgumentError, ToolContext
from sessions_app.core.events import NO_MODEL_CALL, OBJECT_COMPLETION, Event, Message, new_id

ASK_USER = "ask_user"
ASK_EXTENSION = "ask_user"
"""`extensions` key on the tool's result: `{"question": str}`."""
MAX_QUESTION_CHARS = 4000


class AskUserTool:
    """Ask the user a question and end the turn until they reply."""

    name = ASK_USER
    description = (
        "Ask the user a question when you cannot go on without their answer (a missing "
        "detail, a choice, a confirmation). Your turn ends with the question; the user's "
        "next message is their reply and comes back to you."
    )

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters={
                "type": "object",
                "properties": {"question": {"type": "string", "description": "the question, as the user will read it"}},
                "required": ["question"],
            },
        )

    async def call(self, context: ToolContext, args: Mapping[str, Any]) -> Any:
        question = args.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ToolArgumentError("question must be a non-empty string")
        if len(question) > MAX_QUESTION_CHARS:
            raise ToolArgumentError(f"question is {len(question)} characters; the limit is {MAX_QUESTION_CHARS}")
        context.extensions[ASK_EXTENSION] = {"question": question.strip()}
        return {"status": "asked", "note": "the question goes to the user; the turn ends here"}


def asked_question(results: Sequence[Event]) -> str | None:
    """The question an `ask_user` call of this step asked (the first), or None."""
    for event in results:
        asked = event.extensions.get(ASK_EXTENSION)
        if isinstance(asked, Mapping) and isinstance(asked.get("question"), str):
            return str(asked["question"])
    return None


def question_event(invocation: Invocation, *, author: str, question: str) -> Event:
    """The agent's final answer for a turn that asks: the question, recording the route
    to this agent's lookup path (its branch)."""
    route = Route(path=invocation.branch, kind="ask_user", run_id=invocation.run_id, question=question)
    message_id = new_id()
    return invocation.stamp(
        Event(
            id=message_id,
            author=author,
            object=OBJECT_COMPLETION,
            done=True,
            finish_reason="stop",
            message=Message(role="assistant", content=question),
            state_delta=route_delta(route),
            extensions={"message_id": message_id, NO_MODEL_CALL: True, ASK_EXTENSION: {"question": question}},
        )
    )
