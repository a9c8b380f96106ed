"""Strict reading of the environment. Only `agentsite/` reads it, once, at start-up.

Every parser raises `ImproperlyConfigured` with a message that names the variable and
quotes the bad value, so a typo stops the server instead of changing its behaviour.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured


class Env:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    def raw(self, name: str) -> str | None:
        value = self._environ.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def string(self, name: str, default: str) -> str:
        return self.raw(name) or default

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        raise ImproperlyConfigured(f"{name} must be a boolean (true/false/1/0), got {value!r}")

    def integer(self, name: str, default: int | None, *, minimum: int = 1) -> int | None:
        value = self.raw(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
        if number < minimum:
            raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value!r}")
        return number

    def choice(self, name: str, default: str, *, choices: tuple[str, ...]) -> str:
        value = self.string(name, default)
        if value not in choices:
            raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return value

    def strings(self, name: str, default: list[str]) -> list[str]:
        value = self.raw(name)
        if value is None:
            return default
        return [item.strip() for item in value.split(",") if item.strip()]

    def _number(
        self, name: str, default: float, *, what: str, accepts: Callable[[float], bool], expected: str
    ) -> float:
        """A float variable that `accepts` takes; refused naming the variable and `expected`."""
        value = self.raw(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            raise ImproperlyConfigured(f"{name} must be {what}, got {value!r}") from None
        if not accepts(number):
            raise ImproperlyConfigured(f"{name} must be {expected}, got {value!r}")
        return number

    def ratio(self, name: str, default: float) -> float:
        """A share of something, in (0, 1]."""
        return self._number(name, default, what="a number", accepts=lambda n: 0 < n <= 1, expected="in (0, 1]")

    def seconds(self, name: str, default: float) -> float:
        """A duration in seconds, a finite number >= 0 (fractions allowed)."""
        return self._number(
            name,
            default,
            what="a number of seconds",
            accepts=lambda n: math.isfinite(n) and n >= 0,
            expected="a finite number >= 0",
        )

    def rate(self, name: str, default: str) -> str | None:
        """A DRF throttle rate, `<count>/<sec|min|hour|day>`; `off` (None) disables the throttle."""
        value = self.string(name, default)
        if value.lower() == "off":
            return None
        count, _, period = value.partition("/")
        periods = {"s", "sec", "second", "m", "min", "minute", "h", "hour", "d", "day"}
        if not count.isdigit() or int(count) < 1 or period not in periods:
            raise ImproperlyConfigured(f"{name} must look like 600/min (or be 'off'), got {value!r}")
        return value

    def url(self, name: str, *, schemes: tuple[str, ...]) -> str | None:
        value = self.raw(name)
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in schemes or not (parts.netloc or parts.path):
            raise ImproperlyConfigured(f"{name} must be a URL with scheme {' or '.join(schemes)}, got {value!r}")
        return value


def database_from_url(url: str, *, name: str = "DATABASE_URL", base_dir: Path) -> dict[str, Any]:
    """DATABASES["default"] from `postgres://user:pass@host:port/db` or `sqlite:///path`."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # sqlite:///relative/to/project and sqlite:////absolute/path, as dj-database-url reads them.
        path = unquote(parts.path)
        path = path[1:] if path.startswith("/") else path
        if not path:
            raise ImproperlyConfigured(f"{name} must name a database file, got {url!r}")
        file = Path(path)
        return sqlite_database(file if file.is_absolute() else base_dir / file)
    if parts.scheme in {"postgres", "postgresql", "pgsql"}:
        db = unquote(parts.path.lstrip("/"))
        if not db:
            raise ImproperlyConfigured(f"{name} must name a database, got {url!r}")
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"{name} has a bad port, got {url!r}") from None
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": db,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": 0,
            # Worker threads keep their connections (agentsite/threads.py): one that may be dead
            # (its socket readable, idle over a second, or an error on it) is checked before it
            # is reused, so a database restart costs a reconnect, not a failed request.
            "CONN_HEALTH_CHECKS": True,
            "TEST": {"NAME": f"test_{db}"},
        }
    raise ImproperlyConfigured(f"{name} must start with postgres:// or sqlite:///, got {url!r}")


def sqlite_database(path: Path) -> dict[str, Any]:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        # Runs write from worker threads while requests read: WAL and an immediate write
        # lock avoid "database is locked" upgrades; the timeout rides out short waits.
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        "TEST": {"NAME": str(path.parent / f"test-{os.getpid()}.sqlite3")},
    }
