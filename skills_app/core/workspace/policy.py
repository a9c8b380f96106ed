"""Code workspaces: the command policy (SPEC 8.2 / 8.3)."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from skills_app.core.workspace.results import _FORBIDDEN_IN_POLICY, _OPERATORS, SHELL_WRAPPERS
from skills_app.core.workspace_fs import WorkspaceError

# -- command policy (SPEC 8.2 / 8.3) ---------------------------------------------------------


def _simple_commands(command: str) -> list[list[str]]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|&;")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in _OPERATORS:
            commands.append([])
        elif set(token) <= set("|&;"):
            raise WorkspaceError(f"operator {token!r} is not allowed; use |, &&, || or ;")
        else:
            commands[-1].append(token)
    if any(not c for c in commands):
        raise WorkspaceError(f"command {command!r} has an empty part")
    return commands


@dataclass(frozen=True, kw_only=True)
class CommandPolicy:
    """Allow and deny lists of executables (by base name).

    With neither list the command goes to `sh -c` as written: the sandbox is the
    protection. With either list (policy mode) the command must be simple commands joined
    by `|`, `&&`, `||` or `;`: no redirections, `$` expansions, backticks, subshells,
    braces or leading assignments, and no shell wrappers (sh, bash, env, xargs, ...),
    since any of those would let a denied program run under another name.
    """

    allowed: frozenset[str] = frozenset()
    denied: frozenset[str] = frozenset()

    @property
    def enforced(self) -> bool:
        return bool(self.allowed or self.denied)

    def check(self, command: str) -> None:
        """Raise `WorkspaceError` naming the reason when the command may not run."""
        if not command or not command.strip():
            raise WorkspaceError("a command is required")
        if "\x00" in command:
            raise WorkspaceError("the command contains a NUL character")
        if not self.enforced:
            return
        bad = _FORBIDDEN_IN_POLICY.search(command)
        if bad:
            raise WorkspaceError(
                f"command {command!r} uses {bad.group(0)!r}: redirections, expansions and subshells are not "
                "allowed while a command allow or deny list is set"
            )
        try:
            commands = _simple_commands(command)
        except ValueError as exc:
            raise WorkspaceError(f"command {command!r} cannot be parsed: {exc}") from None
        for argv in commands:
            if "=" in argv[0]:
                raise WorkspaceError(f"leading assignment {argv[0]!r} is not allowed")
            program = os.path.basename(argv[0])
            if program in SHELL_WRAPPERS:
                raise WorkspaceError(f"command {program!r} runs other programs and is never allowed under a policy")
            if program in self.denied:
                raise WorkspaceError(f"command {program!r} is denied")
            if self.allowed and program not in self.allowed:
                raise WorkspaceError(f"command {program!r} is not in the allowed commands {sorted(self.allowed)!r}")
