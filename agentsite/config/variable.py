"""One declared environment variable: its kind, default, section and meaning (issue 22, item 3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["boolean", "integer", "string", "choice", "strings", "url", "ratio", "seconds", "rate", "secret"]


@dataclass(frozen=True, kw_only=True)
class Variable:
    """One environment variable: how it is parsed and checked, its default, what it does."""

    name: str
    kind: Kind
    default: Any
    help: str
    section: str
    minimum: int = 1
    choices: tuple[str, ...] = ()
    schemes: tuple[str, ...] = ()
    shown: str = ""
    """The default as the docs show it, where it is computed from other settings."""

    def expects(self) -> str:
        """What a valid value looks like (the table's type column)."""
        if self.kind == "integer":
            return f"integer >= {self.minimum}"
        if self.kind == "choice":
            return " / ".join(f"`{choice}`" for choice in self.choices)
        if self.kind == "url":
            return "URL (" + ", ".join(f"`{scheme}`" for scheme in self.schemes) + ")"
        return {
            "boolean": "boolean",
            "string": "string",
            "strings": "comma-separated list",
            "ratio": "number in (0, 1]",
            "seconds": "seconds >= 0",
            "rate": "`N/sec|min|hour|day` or `off`",
            "secret": "string (secret)",
        }[self.kind]

    def default_text(self) -> str:
        """The default as the table shows it."""
        if self.shown:
            return self.shown
        if self.default is None or self.default == "" or self.default == []:
            return "unset"
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if isinstance(self.default, list):
            return "`" + ",".join(self.default) + "`"
        if isinstance(self.default, int):
            return f"{self.default:,}"
        return f"`{self.default}`"


def declare(name: str, kind: Kind, default: Any, section: str, help: str, **options: Any) -> Variable:
    """A `Variable`, positionally: the declaration modules list a hundred of them."""
    return Variable(name=name, kind=kind, default=default, section=section, help=help, **options)
