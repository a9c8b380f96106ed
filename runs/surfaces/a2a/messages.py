"""A2A messages in and out: the text and files a message carries, the output schema it
asks for, the metadata that becomes session state, and the parts of the agent's answers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from a2a.server.agent_execution import RequestContext
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Message, Part
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import MessageToDict, ParseDict

from runs.attachment_input import a2a_file_part, attachment_limits
from runs.core.attachments import AttachmentError, check_count
from runs.core.output import OutputSpec, SchemaError
from sessions_app.core.events import ContentPart
from sessions_app.core.session import APP_PREFIX

# Message (or request) metadata key of a JSON Schema the answer must follow.
META_OUTPUT_SCHEMA = "outputSchema"
_RESULT_PREVIEW_CHARS = 2000


def message_text(message: Message) -> str:
    """The text a message carries: its text parts, and its data parts as JSON (SPEC 12.2)."""
    texts: list[str] = []
    for part in message.parts:
        if part.HasField("text"):
            texts.append(part.text)
        elif part.HasField("data"):
            texts.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        elif not part.HasField("raw") and not part.HasField("url"):  # files: message_files
            raise ContentTypeNotSupportedError(message="a part must carry text, data, raw or url")
    return "\n".join(t for t in texts if t)


def message_files(message: Message) -> tuple[ContentPart, ...]:
    """A message's file parts (`raw`, `url`) as attachments, checked as on every surface
    (issue 20): a type outside the allow list is -32005, any other refusal -32602 naming
    the part; nothing is stored from a refused message."""
    limits = attachment_limits()
    files: list[ContentPart] = []
    try:
        for index, part in enumerate(message.parts):
            if part.HasField("raw") or part.HasField("url"):
                files.append(
                    a2a_file_part(
                        raw=part.raw if part.HasField("raw") else None,
                        url=part.url if part.HasField("url") else None,
                        filename=part.filename,
                        media_type=part.media_type,
                        field=f"params.message.parts[{index}]",
                        limits=limits,
                    )
                )
        check_count(files, limits=limits, field="params.message.parts")
    except AttachmentError as exc:
        if exc.status == 415:
            raise ContentTypeNotSupportedError(message=exc.message) from None
        raise InvalidParamsError(message=exc.message, data={"field": exc.field, "code": exc.code}) from None
    return tuple(files)


def _metadata_state(context: RequestContext) -> dict[str, Any]:
    """Request metadata, overlaid by message metadata: what becomes session state."""
    state = dict(context.metadata)
    if context.message is not None and context.message.HasField("metadata"):
        state.update(MessageToDict(context.message.metadata))
    # A client writes its session's and its own user's state, never the app's: every user sees
    # that. The output schema is a request about this answer, not state.
    return {k: v for k, v in state.items() if not k.startswith(APP_PREFIX) and k != META_OUTPUT_SCHEMA}


def output_spec(message: Message, request_metadata: Mapping[str, Any] | None = None) -> OutputSpec | None:
    """`metadata.outputSchema` of the message (else of the request): the JSON Schema the
    answer must follow, as on REST's `output_schema`; `InvalidParamsError` (-32602) naming
    the field and the problem when it is not a valid schema."""
    where, schema = "params.message.metadata.outputSchema", None
    if message.HasField("metadata") and META_OUTPUT_SCHEMA in message.metadata.fields:
        schema = MessageToDict(message.metadata)[META_OUTPUT_SCHEMA]
    elif request_metadata and META_OUTPUT_SCHEMA in request_metadata:
        where, schema = "params.metadata.outputSchema", request_metadata[META_OUTPUT_SCHEMA]
    else:
        return None
    try:
        return OutputSpec.of(schema)
    except SchemaError as exc:
        raise InvalidParamsError(message=f"{where}: {exc}", data={"field": where}) from None


def _value_part(value: Any) -> Part:
    """A structured answer as a data part (`application/json`)."""
    part = Part(media_type="application/json")
    ParseDict(value, part.data)
    return part


def _agent_message(updater: TaskUpdater, text: str, *extra: Part) -> Message:
    parts = [Part(text=text)] if text else []
    return updater.new_agent_message([*parts, *extra])


def _preview(text: str) -> str:
    return text if len(text) <= _RESULT_PREVIEW_CHARS else text[:_RESULT_PREVIEW_CHARS] + "…"
