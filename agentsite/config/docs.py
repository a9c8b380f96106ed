"""docs/settings.md, rendered from the declarations (`python -m agentsite.config`)."""

from __future__ import annotations

from agentsite.config.reading import VARIABLES


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table() -> str:
    """The Markdown table of every variable, by section (docs/settings.md)."""
    lines: list[str] = []
    section = ""
    for variable in VARIABLES:
        if variable.section != section:
            section = variable.section
            lines += [
                "",
                f"## {section}",
                "",
                "| variable | type | default | what it does |",
                "| --- | --- | --- | --- |",
            ]
        lines.append(
            f"| `{variable.name}` | {_cell(variable.expects())} | {_cell(variable.default_text())} | "
            f"{_cell(variable.help)} |"
        )
    return "\n".join(lines).lstrip("\n") + "\n"


HEADER = """# Settings

Every environment variable Agentsite reads. Generated from the package `agentsite/config/` by
`python -m agentsite.config > docs/settings.md`; a test keeps this file equal to it. Each is
read once, at start-up, and checked: a bad value stops the server with a message naming the
variable and what it expects.

Environment variables are for deployment: URLs, secrets, limits, pools and process-wide
defaults. How many steps an agent takes is the agent's own (`LLMAgent(max_steps=...)`), and
so is its context policy: a `ContextPolicy` (`agentsite/context_policy.py`) built in code,
turned into the agent's governance by `governance(policy, ...)`. The context-policy section
is the process-wide default policy (summary jobs run per session, not per agent:
`ContextPolicy.from_settings()`); the demo replaces eight of its values with its named
profile (`agentsite/demo/profile.py`) while `AGENTSITE_DEMO_GOVERNANCE` is on.

"""


def document() -> str:
    """docs/settings.md: the header and the table."""
    return HEADER + table()
