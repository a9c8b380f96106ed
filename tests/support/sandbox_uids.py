"""The uid leases every test sandbox takes: one folder for the machine, so that test
processes running at once (xdist workers, other checkouts) never run commands as the same
uid, whose process limit they would then share. Production keeps its leases under the
workspace root (`WorkspaceConfig.uid_locks` unset)."""

from __future__ import annotations

import tempfile
from pathlib import Path

TEST_UID_LOCKS = Path(tempfile.gettempdir()) / "agentsite-test-uids"
