"""What a session's deletion tells the layers above, which this app does not import.

Both are sent by `services.session_delete`, outside any transaction of its own.
"""

from __future__ import annotations

from django.dispatch import Signal

session_deleting = Signal()
"""Sent with `session` (the row) before anything is deleted: stop what still writes to it
(its runs). A receiver may block until that is done."""

session_deleted = Signal()
"""Sent with `session_id` and `user_id` once the session and its rows are gone (its sockets
close)."""
