"""`python -m agentsite.config > docs/settings.md`."""

from __future__ import annotations

import sys

from agentsite.config.docs import document

sys.stdout.write(document())
