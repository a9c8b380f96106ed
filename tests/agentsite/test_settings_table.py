"""One declaration list for the environment (issue 22, item 3): every variable is declared
in agentsite/config/, read through it, checked, and documented by the generated table."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentsite.config import BY_NAME, RETIRED, VARIABLES, document, read

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentsite", "runs", "sessions_app", "skills_app", "evolution_app")


def source_files() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and "skills" not in path.parts
    ]


def test_docs_settings_md_is_the_generated_table() -> None:
    """docs/settings.md cannot drift: regenerate it with `python -m agentsite.config > docs/settings.md`."""
    assert (ROOT / "docs" / "settings.md").read_text() == document()


def test_the_generator_prints_the_document() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentsite.config"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout == document()
    assert "| `AGENTSITE_DB_THREADS` | integer >= 1 | 8 |" in result.stdout


def _read_names(path: Path) -> set[str]:
    """The names that `read("...")` calls in `path` pass."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "read"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
    return names


def test_every_declared_variable_is_read_and_every_read_is_declared() -> None:
    read_names = _read_names(ROOT / "agentsite" / "settings.py") | _read_names(ROOT / "agentsite" / "threads.py")
    assert read_names == set(BY_NAME)
    assert len(BY_NAME) == len(VARIABLES), "a variable is declared twice"


def test_nothing_else_reads_the_environment() -> None:
    """Only agentsite/config/ (through agentsite/env.py) reads the environment; no name is
    built from strings (`getattr(settings, f"AGENTSITE_{...}")`)."""
    allowed = {ROOT / "agentsite" / "env.py"}
    offenders: list[str] = []
    for path in source_files():
        if path in allowed:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv"}:
                parent_ok = path.name in {"asgi.py", "wsgi.py", "celery.py", "manage.py"}  # DJANGO_SETTINGS_MODULE
                if not parent_ok:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} reads os.{node.attr}")
            if isinstance(node, ast.JoinedStr):
                # A name built from strings: a prefix such as "AGENTSITE_" right before a value.
                head = node.values[0] if node.values else None
                if (
                    isinstance(head, ast.Constant)
                    and re.fullmatch(r"(AGENTSITE|DJANGO)_[A-Z0-9_]*", str(head.value))
                    and len(node.values) > 1
                    and isinstance(node.values[1], ast.FormattedValue)
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} builds a variable name")
    assert offenders == []


def test_an_undeclared_variable_cannot_be_read() -> None:
    with pytest.raises(KeyError):
        read("AGENTSITE_NOT_DECLARED", environ={})


@pytest.mark.parametrize(
    ("name", "value", "expects"),
    [
        ("AGENTSITE_PINNED_BUDGET_RATIO", "1.5", "must be in (0, 1]"),
        ("AGENTSITE_COMPACTION_RATIO", "most", "must be a number"),
        ("AGENTSITE_API_RATE_USER", "lots", "must look like 600/min"),
        ("AGENTSITE_DEMO_SCAN_DELAY_S", "-1", "must be a finite number >= 0"),
        ("AGENTSITE_LOG_LEVEL", "loud", "must be one of DEBUG, INFO"),
        ("AGENTSITE_WORKSPACE_MEMORY_MB", "32", "must be at least 64"),
        ("AGENTSITE_DB_THREADS", "eight", "must be an integer"),
        ("AGENTSITE_SUMMARIES", "sometimes", "must be a boolean"),
        ("AGENTSITE_STORAGE_ENDPOINT_URL", "s3.local", "must be a URL with scheme http or https"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_it_expects(name: str, value: str, expects: str) -> None:
    with pytest.raises(ImproperlyConfigured) as raised:
        read(name, environ={name: value})
    message = str(raised.value)
    assert message.startswith(name) and expects in message and repr(value) in message


@pytest.mark.parametrize(
    ("name", "value", "parsed"),
    [
        ("AGENTSITE_PINNED_BUDGET_RATIO", "0.1", 0.1),
        ("AGENTSITE_API_RATE_ANON", "off", None),
        ("AGENTSITE_DEMO_SCAN_DELAY_S", "0.5", 0.5),
        ("AGENTSITE_COMPACTION_KEEP_TOOLS", "a, b,", ["a", "b"]),
        ("AGENTSITE_VIEW_THREADS", "4", 4),
        ("OPENAI_API_KEY", " sk-x ", "sk-x"),
    ],
)
def test_good_values_are_parsed(name: str, value: str, parsed: object) -> None:
    assert read(name, environ={name: value}) == parsed


def test_unset_variables_take_their_declared_or_computed_default() -> None:
    assert read("AGENTSITE_DB_THREADS", environ={}) == 8
    assert read("AGENTSITE_API_RATE_USER", environ={}) == "6000/min"
    assert read("OPENAI_API_KEY", environ={}) is None
    assert read("AGENTSITE_SUMMARY_JOBS", default="celery", environ={}) == "celery"
    # A list default is a copy: changing one setting's list cannot change the declaration.
    read("AGENTSITE_AGENTS", environ={}).append("x:y")
    assert "x:y" not in read("AGENTSITE_AGENTS", environ={})


def test_the_settings_hold_the_declared_defaults() -> None:
    from django.conf import settings

    for name in ("AGENTSITE_MAX_RUN_EVENTS", "AGENTSITE_WORKSPACE_MAX_BYTES", "AGENTSITE_EVOLUTION_GATES"):
        assert getattr(settings, name) == BY_NAME[name].default
    assert not hasattr(settings, "AGENTSITE_MAX_STEPS")  # steps are the agent's (LLMAgent(max_steps=...))


# Variables of the test and benchmark tooling (tests/integration/test_browser.py, bench/stack.py,
# the Procfile), not of the server.
TOOLING = {"AGENTSITE_SCREENSHOTS_DIR", "AGENTSITE_STACK_ACCESS_LOG"}


def test_the_docs_name_only_declared_variables() -> None:
    """A variable the README or docs/ mention exists (AGENTSITE_MAX_STEPS was documented and never read)."""
    unknown: set[str] = set()
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for name in re.findall(r"\b(?:AGENTSITE|DJANGO)_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()):
            known = name in BY_NAME or name in RETIRED or name in TOOLING
            if not known and name != "DJANGO_SETTINGS_MODULE":
                unknown.add(f"{path.name}: {name}")
    assert unknown == set()
