"""The process's worker threads for synchronous Django work called from async code.

Each thread keeps its own database connection, so the number of threads is the number of
connections a process can hold. Asyncio's default executor is per event loop: every new
loop (each request of the synchronous test client, each test) would start threads with
connections of their own and PostgreSQL would run out. Two bounded pools instead: one for
ORM calls, one for views that wait on runs (a view waiting on a run must never occupy the
threads the run needs for its own database work).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

DB_EXECUTOR = ThreadPoolExecutor(
    max_workers=int(os.environ.get("AGENTSITE_DB_THREADS", "8")), thread_name_prefix="agentsite-db"
)
VIEW_EXECUTOR = ThreadPoolExecutor(
    max_workers=int(os.environ.get("AGENTSITE_VIEW_THREADS", "16")), thread_name_prefix="agentsite-view"
)
