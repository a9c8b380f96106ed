"""Shared fixtures: personas, API clients, the scripted runner, and a guard on real models."""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import openai
import pytest

from runs.core.llm.base import Model

pytest_plugins = ["tests.support.fixtures"]


def _redis_db(url: str, db: int) -> str:
    """`url` aimed at Redis database `db` (the path of redis://, the `db` query of unix://)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"] + [("db", str(db))]
        return urlunsplit(parts._replace(query=urlencode(query)))
    return urlunsplit(parts._replace(path=f"/{db}"))


def worker_redis_dbs(url: str, worker: str) -> tuple[int, int]:
    """The Redis databases of pytest-xdist worker `worker` ("gwK") when REDIS_URL is `url`
    with database B: B+1+2K (broker, channel layer, locks) and B+2+2K (the cache)."""
    parts = urlsplit(url)
    base = int(dict(parse_qsl(parts.query)).get("db", 0) if parts.scheme == "unix" else parts.path.strip("/") or 0)
    index = int(worker.removeprefix("gw"))
    return base + 1 + 2 * index, base + 2 + 2 * index


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: list[Any]) -> None:
    """Under pytest-xdist (`-n N`) each worker gets Redis databases of its own, so that one
    worker's `cache.clear()`, control-group broadcasts and queues never reach another's tests.

    Set in the worker's environment when it starts (execnet's `env`), because Django reads
    its settings before any conftest of the worker is imported; the servers and Celery
    workers that tests start inherit it. PostgreSQL needs nothing here: pytest-django gives
    each worker its own test database (test_<name>_gwK), SQLite and files go to the worker's
    own temporary folders.
    """
    url = os.environ.get("REDIS_URL")
    if not url:
        return
    for spec in specs:
        broker, cache = worker_redis_dbs(url, spec.id)
        spec.env.update(
            {
                "REDIS_URL": _redis_db(url, broker),
                "AGENTSITE_CACHE_REDIS_DB": str(cache),
                "AGENTSITE_TEST_REDIS_URL": url,
            }
        )


def _is_loopback(url: str | None) -> bool:
    host = urlsplit(str(url)).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _no_real_model_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any OpenAI client aimed at something other than this machine fails the test."""
    original = openai.AsyncOpenAI.__init__

    def guarded(self: Any, *args: Any, **kwargs: Any) -> None:
        if not _is_loopback(kwargs.get("base_url")):
            pytest.fail(f"a test tried to reach a real model endpoint: base_url={kwargs.get('base_url')!r}")
        original(self, *args, **kwargs)

    monkeypatch.setattr(openai.AsyncOpenAI, "__init__", guarded)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def make_user(django_user_model: Any) -> Callable[[str], Any]:
    def make(username: str) -> Any:
        return django_user_model.objects.create_user(username=username, password=f"{username}-password")

    return make


@pytest.fixture
def alice(make_user: Callable[[str], Any]) -> Any:
    return make_user("alice")


@pytest.fixture
def bob(make_user: Callable[[str], Any]) -> Any:
    return make_user("bob")


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every SQL statement any thread runs through Django's cursors (the database pool's
    threads included, which `CaptureQueriesContext` does not see)."""
    from django.db.backends.utils import CursorWrapper

    seen: list[str] = []
    execute = CursorWrapper.execute

    def counted(cursor: CursorWrapper, sql: str, params: Any = None) -> Any:
        seen.append(str(sql))
        return execute(cursor, sql, params)

    monkeypatch.setattr(CursorWrapper, "execute", counted)
    yield seen


def _client_for(user: Any) -> Any:
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    token, _ = Token.objects.get_or_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.key}")
    return client


@pytest.fixture
def alice_api(alice: Any) -> Any:
    return _client_for(alice)


@pytest.fixture
def bob_api(bob: Any) -> Any:
    return _client_for(bob)


@pytest.fixture
def use_model() -> Iterator[Callable[[Model], None]]:
    """Make the process's run manager serve the demo agents on the given model."""
    from agentsite.composition import build_runner, run_manager

    manager = run_manager()

    def use(model: Model) -> None:
        manager.reset(lambda: build_runner(model))

    yield use
    manager.reset(build_runner)


@pytest.fixture(autouse=True)
def _fresh_run_manager() -> Iterator[None]:
    """Runs of one test never leak into the next."""
    yield
    composition = sys.modules.get("agentsite.composition")
    if composition is not None:
        composition.run_manager().close()


@pytest.fixture(scope="session", autouse=True)
def _release_worker_connections(request: pytest.FixtureRequest) -> Iterator[None]:
    """Runs reach the database from worker threads that keep their connections open;
    PostgreSQL refuses to drop the test database while they do, so end them first."""
    if not request.config.pluginmanager.hasplugin("django"):
        yield
        return
    # Requested here so that it is torn down after this fixture.
    request.getfixturevalue("django_db_setup")
    django_db_blocker = request.getfixturevalue("django_db_blocker")
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None, tmp_path_factory: Any) -> None:
    """The SQLite test database, its WAL included, lives in a temporary folder, not in the
    checkout's var/ (live Daphne servers find it through the connection's settings)."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("database") / "test.sqlite3")


@pytest.fixture(scope="session", autouse=True)
def _files_in_temporary_folders(tmp_path_factory: Any) -> Iterator[None]:
    """Users' artifacts and media files go to temporary folders, in this process and in
    the servers and workers that tests start (they inherit the environment)."""
    from django.conf import settings
    from django.test.utils import override_settings

    storages = {name: dict(config) for name, config in settings.STORAGES.items()}
    artifacts = storages["artifacts"]
    if not artifacts["BACKEND"].endswith("FileSystemStorage"):
        yield
        return
    location = str(tmp_path_factory.mktemp("artifacts"))
    artifacts["OPTIONS"] = {**artifacts.get("OPTIONS", {}), "location": location}
    previous = os.environ.get("AGENTSITE_STORAGE_LOCATION")
    os.environ["AGENTSITE_STORAGE_LOCATION"] = location
    with override_settings(STORAGES=storages, MEDIA_ROOT=tmp_path_factory.mktemp("media")):
        yield
    if previous is None:
        os.environ.pop("AGENTSITE_STORAGE_LOCATION", None)
    else:
        os.environ["AGENTSITE_STORAGE_LOCATION"] = previous


# `make test-fast` (pytest --fast): the tests that need no database, no live server and no
# other process: the core packages' contracts and the pure units, for a run under a minute.
_SLOW_FIXTURES = frozenset({"db", "transactional_db", "live_server"})
_SLOW_FOLDERS = ("integration", "resilience", "security", "ui")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true", help="only the tests that need no database or other process")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--fast"):
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        folder = item.path.parent.name
        fixtures = set(getattr(item, "fixturenames", ()))
        slow = (
            folder in _SLOW_FOLDERS
            or item.get_closest_marker("django_db") is not None
            or item.get_closest_marker("integration") is not None
            or bool(fixtures & _SLOW_FIXTURES)
        )
        (dropped if slow else kept).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


# Tests write only to temporary folders (issue 21). The checkout's var/ belongs to `make run`
# (its database, secret key, demo credentials, artifacts); a test run that adds or changes
# anything there fails, naming the files. `secret_key` is the exception: Django's settings
# make it on their first import in a fresh clone, tests or not.
VAR = Path(__file__).resolve().parents[1] / "var"
_VAR_OWN = frozenset({"secret_key"})
_var_before = pytest.StashKey[dict[str, tuple[int, int]]]()


def _var_files() -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for path in VAR.rglob("*") if VAR.is_dir() else ():
        try:
            stat = path.stat()
        except FileNotFoundError:  # a WAL that its database removed meanwhile
            continue
        if path.is_file():
            found[str(path.relative_to(VAR))] = (stat.st_mtime_ns, stat.st_size)
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_var_before] = _var_files()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or _var_before not in session.config.stash:
        return  # under xdist the controller checks, once every worker has finished
    before = session.config.stash[_var_before]
    written = sorted(name for name, stat in _var_files().items() if name not in _VAR_OWN and before.get(name) != stat)
    if not written:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = (
        f"the test run wrote to the checkout's var/ ({', '.join(written)}); tests must write only to "
        "temporary folders (a `make run` of this checkout running meanwhile writes there too)"
    )
    if reporter is not None:
        reporter.write("\n")  # after the progress line, which the reporter ends only later
        reporter.write_line(message, red=True, bold=True)
    else:
        print(message, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
