"""Ending the processes an integration test started."""

from __future__ import annotations

import subprocess


def stop(process: subprocess.Popen[bytes], grace_s: float = 15) -> None:
    """SIGTERM (a graceful shutdown), SIGKILL once `grace_s` has passed."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
