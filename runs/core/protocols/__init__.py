"""Protocol adapters that need no Django: event translators for AG-UI (and later A2A)."""
