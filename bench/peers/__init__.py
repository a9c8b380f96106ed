"""One agent workload on four runtimes: Agentsite, Google ADK, LangGraph, the OpenAI Agents SDK.

See bench/README.md ("Peers") and `bench/peers/run.py`.
"""
