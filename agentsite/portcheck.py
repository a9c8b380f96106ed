"""`python -m agentsite.portcheck HOST PORT`: `make run` asks this before anything else, so a
busy port stops it at once with a message that names the port (the development server
would log "Address already in use" and keep running without serving)."""

from __future__ import annotations

import errno
import socket
import sys


def port_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port, or None when it can."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"HOST={host!r} does not resolve: {exc.strerror}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # The same option the server sets, so a port in TIME_WAIT counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"port {port} on {host} is already in use by another program: stop it, "
                    f"or choose another port, e.g. `make run PORT={port + 1}`"
                )
            return f"cannot listen on {host}:{port}: {exc.strerror}"
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit() or not 0 < int(argv[1]) < 65536:
        print(f"usage: python -m agentsite.portcheck HOST PORT (got {argv!r})", file=sys.stderr)
        return 2
    problem = port_problem(argv[0], int(argv[1]))
    if problem is not None:
        print(f"make run: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
