"""What a caller of the A2A request handler learns of an unexpected failure: that it
happened (`_hiding_internals`), never its text.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from a2a.server.request_handlers import RequestHandler
from a2a.utils.errors import A2AError, InternalError

logger = logging.getLogger(__name__)

INTERNAL_ERROR = "internal error; it has been logged"


def _internal(exc: Exception) -> InternalError:
    """What a caller learns of a failure that is not about its request: that it happened.
    (The SDK answers with `str(exc)`: a database error and its SQL, for one.)"""
    logger.error("A2A request failed", exc_info=exc)
    return InternalError(message=INTERNAL_ERROR)


async def _guarded(result: Awaitable[Any]) -> Any:
    try:
        return await result
    except A2AError:
        raise
    except Exception as exc:
        raise _internal(exc) from None


async def _guarded_stream(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    try:
        async for item in stream:
            yield item
    except A2AError:
        raise
    except Exception as exc:
        raise _internal(exc) from None


def _hide_internals(method: Callable[..., Any]) -> Callable[..., Any]:
    """A request handler method whose unexpected errors reach the caller as a bare
    internal error (its streaming methods return async generators, the rest coroutines)."""

    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = method(self, *args, **kwargs)
        except A2AError:
            raise
        except Exception as exc:
            raise _internal(exc) from None
        return _guarded_stream(result) if inspect.isasyncgen(result) else _guarded(result)

    return wrapped


def _hiding_internals(cls: type[RequestHandler]) -> type[RequestHandler]:
    for name in dir(RequestHandler):
        if name.startswith("on_"):
            setattr(cls, name, _hide_internals(getattr(cls, name)))
    return cls
