"""One confined command as a subprocess: stdin fed, both streams read capped, the whole
process group killed at the deadline, on cancel or when a watchdog says so."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence

from skills_app.core.workspace.results import (
    _READ_CHUNK,
    _WATCH_EVERY_S,
    TRUNCATION_MARKER,
    CommandResult,
)


async def _read_capped(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, int]:
    """Read a stream to its end, keeping the first `limit` bytes: the rest is counted,
    never buffered (a command may write gigabytes)."""
    if stream is None:
        return b"", 0
    kept = bytearray()
    total = 0
    while True:
        chunk = await stream.read(_READ_CHUNK)
        if not chunk:
            return bytes(kept), total
        total += len(chunk)
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _feed(process: asyncio.subprocess.Process, data: bytes) -> None:
    if process.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            process.stdin.write(data)
            await process.stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, RuntimeError):
        process.stdin.close()


def _decode(data: bytes, total: int, limit: int, stream: str) -> tuple[str, bool, str | None]:
    text = data.decode("utf-8", errors="replace")
    if total <= limit:
        return text, False, None
    note = f"\n{TRUNCATION_MARKER} ({stream}: {total} bytes in all, the first {limit} shown)"
    return text + note, True, f"{stream} truncated: {total} bytes, {limit} kept inline"


async def _watch(process: asyncio.subprocess.Process, watchdog: Callable[[], str | None], stopped: list[str]) -> None:
    while process.returncode is None:
        await asyncio.sleep(_WATCH_EVERY_S)
        reason = await asyncio.to_thread(watchdog)
        if reason is not None:
            stopped.append(reason)
            _kill_group(process)
            return


async def run_confined(
    argv: Sequence[str],
    *,
    stdin: str | None,
    timeout_s: float,
    output_limit: int,
    watchdog: Callable[[], str | None] | None = None,
) -> CommandResult:
    """Start `argv` in a new session, feed stdin, read both streams capped, and kill the
    whole process group at the deadline (or when the caller is cancelled, or when
    `watchdog`, asked every quarter second, gives a reason)."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={},
        start_new_session=True,
    )
    readers = asyncio.gather(
        _read_capped(process.stdout, output_limit),
        _read_capped(process.stderr, output_limit),
        _feed(process, (stdin or "").encode("utf-8")),
    )
    timed_out = False
    stopped: list[str] = []
    watcher = asyncio.ensure_future(_watch(process, watchdog, stopped)) if watchdog is not None else None
    try:
        try:
            await asyncio.wait_for(asyncio.shield(readers), timeout=timeout_s)
            await asyncio.wait_for(process.wait(), timeout=max(0.1, timeout_s - (time.monotonic() - started)))
        except TimeoutError:
            timed_out = True
            _kill_group(process)
    except BaseException:
        _kill_group(process)
        readers.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(process.wait(), timeout=2)
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher
    # After a kill the pipes close when the pid namespace is gone; never wait forever.
    try:
        (out, out_total), (err, err_total), _ = await asyncio.wait_for(readers, timeout=5)
    except TimeoutError:
        readers.cancel()
        out, out_total, err, err_total = b"", 0, b"", 0
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), timeout=5)
    duration_ms = int((time.monotonic() - started) * 1000)
    stdout, out_cut, out_warning = _decode(out, out_total, output_limit, "stdout")
    stderr, err_cut, err_warning = _decode(err, err_total, output_limit, "stderr")
    warnings = [w for w in (out_warning, err_warning) if w]
    exit_code = process.returncode
    if stopped:
        warnings.append(f"stopped: {stopped[0]}")
    elif timed_out:
        warnings.append(f"timed out after {timeout_s:g} s: the command and all its processes were killed")
    elif exit_code is not None and exit_code < 0:
        warnings.append(
            f"killed by signal {signal.Signals(-exit_code).name if -exit_code in signal.valid_signals() else -exit_code}"
        )
    elif exit_code in (128 + signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGXFSZ):
        warnings.append(f"the command was stopped by a resource limit (exit status {exit_code})")
    return CommandResult(
        exit_code=None if timed_out else exit_code,
        stdout=stdout,
        stderr=stderr,
        stdout_bytes=out_total,
        stderr_bytes=err_total,
        stdout_truncated=out_cut,
        stderr_truncated=err_cut,
        timed_out=timed_out,
        duration_ms=duration_ms,
        warnings=tuple(warnings),
    )
