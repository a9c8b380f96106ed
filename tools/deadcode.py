"""The dead-code check of `make lint`: code in the project's packages that nothing uses.

Usage is looked for in the packages, the tests, the benches and `tools/deadcode_allow.py`
(names only frameworks reach: Django's admin and app registry, settings strings, URL handlers);
findings are reported only in the packages, since a helper a test alone uses is still in use.
Exit status 1 when anything is found.
"""

from __future__ import annotations

import sys
from pathlib import Path

from vulture import Vulture

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agentsite", "runs", "sessions_app", "skills_app", "evolution_app")
USERS = ("tests", "bench", "tools/deadcode_allow.py")
# Names Django, DRF, Celery and pytest call by convention, never by a reference in our code.
CONVENTIONS = (
    "Meta",
    "Command",
    "*Config",
    "*Admin",
    "*Inline",
    "*Form",
    "*Serializer",
    "*Api",
    "*Scheme",
    "list_*",
    "search_fields",
    "readonly_fields",
    "ordering",
    "fieldsets",
    "inlines",
    "actions",
    "date_hierarchy",
    "raw_id_fields",
    "autocomplete_fields",
    "has_*_permission",
    "get_*",
    "formfield_for_*",
    "save_model",
    "delete_model",
    "changelist_view",
    "change_view",
    "response_*",
    "clean",
    "clean_*",
    "ready",
    "handle",
    "add_arguments",
    "validate",
    "validate_*",
    "to_representation",
    "to_internal_value",
    "perform_*",
    "authenticate*",
    "throttle_*",
    "allow_request",
    "wait",
    "get_queryset",
    "migrate",
    "db_table",
    "verbose_name*",
    "app_label",
    "default_auto_field",
    "parser_classes",
    "renderer_classes",
    "permission_classes",
    "authentication_classes",
    "throttle_classes",
    "serializer_class",
    "http_method_names",
    "media_type",
    "format_suffix",
    "target_class",
    "name",
    "priority",
    "requires_system_checks",
    "help",
    "output_transaction",
    "connect",
    "disconnect",
    "receive",
    "websocket_*",
    "sender",
)
DECORATORS = (
    "@admin.register",
    "@admin.action",
    "@admin.display",
    "@receiver",
    "@shared_task",
    "@app.task",
    "@register",
    "@property",
    "@cached_property",
    "@extend_schema*",
    "@pytest.fixture",
)
SKIPPED = ("migrations", "settings.py")
# Variables and attributes are left out: in Django code most are fields, options and
# serializer declarations that the frameworks read by introspection.
KINDS = ("function", "method", "class", "property", "import", "unreachable_code")


def _files(where: str) -> list[Path]:
    path = ROOT / where
    if path.is_file():
        return [path]
    return [
        p for p in sorted(path.rglob("*.py")) if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
    ]


def main(min_confidence: int = 60) -> int:
    """Print each unused name in the packages; 1 when there is any."""
    vulture = Vulture(ignore_names=list(CONVENTIONS), ignore_decorators=list(DECORATORS))
    packages = [p for where in PACKAGES for p in _files(where) if not any(s in p.parts or p.name == s for s in SKIPPED)]
    vulture.scavenge([str(p) for p in packages] + [str(p) for where in USERS for p in _files(where)])
    roots = tuple(str(ROOT / where) + "/" for where in PACKAGES)
    found = [
        item
        for item in vulture.get_unused_code(min_confidence=min_confidence)
        if item.typ in KINDS
        and str(item.filename).startswith(roots)
        and not any(s in Path(item.filename).parts for s in SKIPPED)
    ]
    for item in found:
        print(item.get_report(add_size=False))
    if found:
        print(
            f"{len(found)} unused names: remove them, or list a name only a framework reaches in tools/deadcode_allow.py"
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
