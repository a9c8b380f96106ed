"""DjangoSessionService, the SessionService contract on the ORM, and the synchronous reads
and writes behind it: `from sessions_app.backends import DjangoSessionService, db_call`.

`service` holds the class; each of its async methods wraps one synchronous, transactional
function of `reads` (session rows), `ledger` (events), `summaries` or `state` (scoped
state), through `db`'s `db_call`.
"""

from sessions_app.backends.db import db_call
from sessions_app.backends.ledger import JoinedWrite
from sessions_app.backends.reads import get_session_head_sync, get_session_sync
from sessions_app.backends.service import DjangoSessionService
from sessions_app.backends.state import session_state_view_sync, update_session_state_sync, with_scoped_state

__all__ = [
    "DjangoSessionService",
    "JoinedWrite",
    "db_call",
    "get_session_head_sync",
    "get_session_sync",
    "session_state_view_sync",
    "update_session_state_sync",
    "with_scoped_state",
]
