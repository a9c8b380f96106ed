"""Every environment variable Agentsite reads, declared once (issue 22, item 3).

`VARIABLES` is the one list: name, kind (how the value is parsed and checked), default and
what it does. `agentsite/settings.py` (and `agentsite/threads.py`, which starts before the
settings) read the environment only through `read(name)`, so a variable that is not declared
here cannot be read, and `python -m agentsite.config` prints the table that
`docs/settings.md` holds (a test keeps the two equal).

Environment variables are for deployment: URLs, secrets, limits, pools and process-wide
defaults. How many steps an agent takes is the agent's (`LLMAgent(max_steps=...)`); its
context policy is a `ContextPolicy` (agentsite/context_policy.py) built in code. The
`Context policy` section is the process-wide default policy (summary jobs run per session,
not per agent), which the demo replaces with its named profile (agentsite/demo/profile.py).

The package, by concern:

- `variable.py`: `Variable` (kind, default, section, help) and how the table shows it;
- the declarations, a tuple per section of the table: `deployment.py` (Django, the stores,
  the model endpoint, the processes, the demo), `limits.py` (agents, surfaces and what a
  request, run or user may use; memory, recall and attachments), `context.py` (the default
  context policy), `skills.py` (skills, the workspace sandbox, evolution);
- `reading.py`: `VARIABLES` in table order, `BY_NAME` and `read`, the parsing and checking,
  and `RETIRED` (variables no longer read: setting one stops start-up, naming what replaced it);
- `docs.py`: the Markdown of docs/settings.md (`table`, `document`), printed by `__main__.py`.
"""

from __future__ import annotations

from agentsite.config.docs import HEADER, document, table
from agentsite.config.reading import BY_NAME, RETIRED, VARIABLES, read, refuse_retired
from agentsite.config.variable import Kind, Variable

__all__ = [
    "BY_NAME",
    "HEADER",
    "RETIRED",
    "VARIABLES",
    "Kind",
    "Variable",
    "document",
    "read",
    "refuse_retired",
    "table",
]
