"""Back-pressure for a websocket: how much the server holds unsent for a client that reads
slowly, or not at all (issue 23, item 5).

Daphne never makes an ASGI `send` wait: every frame goes to the connection's Twisted
transport, which buffers in memory whatever the kernel's socket buffer cannot take. A
client that stops reading would make that buffer grow by every frame of its session.
`SendWindow` registers itself as the transport's streaming producer (Twisted's own flow
control) with the transport's buffer size set to `limit_bytes`: Twisted pauses it when the
buffer holds more than that and resumes it once the buffer has drained to nothing. The
consumer stops writing while paused and, on resume, catches up from the ledger
(runs/surfaces/websocket/consumers.py), so at most `limit_bytes` plus the frames of one event wait in the
process for a client that never reads.

The transport is Daphne's: the ASGI `send` callable Daphne hands an application is
`functools.partial(server.handle_reply, protocol)` (`_daphne_protocol`). Under any other server (and the test
communicator) there is no transport to watch and the window never closes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class SendWindow:
    """Whether a websocket's client keeps up: `open` until the transport's unsent bytes pass
    the limit, open again (calling `on_resume`) when they have all been sent."""

    def __init__(self, transport: Any, *, limit_bytes: int, on_resume: Callable[[], None]) -> None:
        self.transport = transport
        self.limit_bytes = limit_bytes
        self.on_resume = on_resume
        self.open = True
        self.pauses = 0
        self.peak_bytes = 0
        # Under Daphne the connection's producer is twisted.web's HTTPChannel (the websocket
        # was an HTTP upgrade); it hands the transport's pauses and resumes on to the producer
        # registered with it. A bare transport takes ours directly.
        self._consumer = getattr(transport, "producer", None) or transport
        self._consumer.registerProducer(self, True)
        self._registered = True
        transport.bufferSize = limit_bytes

    @classmethod
    def attach(cls, send: Any, *, limit_bytes: int, on_resume: Callable[[], None]) -> SendWindow | None:
        """A window on the transport behind `send` (an ASGI send callable), None when there is
        none to watch (another server, a test communicator) or it already has a producer."""
        if limit_bytes <= 0:
            return None
        transport = getattr(_daphne_protocol(send), "transport", None)
        if transport is None or not hasattr(transport, "registerProducer"):
            return None
        try:
            return cls(transport, limit_bytes=limit_bytes, on_resume=on_resume)
        except Exception:  # a transport that refuses a producer: no back-pressure, as before
            logger.warning("websocket back-pressure unavailable on %r", transport, exc_info=True)
            return None

    def buffered_bytes(self) -> int:
        """Bytes written to the transport and not yet handed to the kernel."""
        transport = self.transport
        return (
            len(getattr(transport, "dataBuffer", b""))
            - int(getattr(transport, "offset", 0))
            + int(getattr(transport, "_tempDataLen", 0))
        )

    # -- Twisted's IPushProducer ----------------------------------------------------------------

    def note_unsent(self) -> None:
        """Record the bytes waiting now (called after each write while the window is closed)."""
        self.peak_bytes = max(self.peak_bytes, self.buffered_bytes())

    def pauseProducing(self) -> None:
        if self.open:
            self.pauses += 1
        self.open = False
        self.note_unsent()

    def resumeProducing(self) -> None:
        if not self.open:
            self.open = True
            self.on_resume()

    def stopProducing(self) -> None:
        """The connection is gone: nothing more will be sent."""
        self.open = False

    def close(self) -> None:
        """Stop watching (the socket is closing)."""
        if self._registered:
            self._registered = False
            with contextlib.suppress(Exception):  # the connection may be gone already
                self._consumer.unregisterProducer()


def _daphne_protocol(send: Any) -> Any:
    """The Daphne protocol behind an ASGI send callable: Daphne's is
    `partial(server.handle_reply, protocol)`, which Channels' session middleware wraps in a
    bound method of an object holding it as `real_send`."""
    for _ in range(8):
        if isinstance(send, functools.partial):
            return send.args[0] if send.args else None
        send = getattr(getattr(send, "__self__", None), "real_send", None)
        if send is None:
            return None
    return None
