"""The demo: a support agent troubleshooting a production error, with bundled sample data.

Plain Python (no Django): the composition root wires these agents into the Runner.
"""
