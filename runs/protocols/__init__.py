"""HTTP surfaces of the run layer that speak an external protocol (AG-UI)."""
