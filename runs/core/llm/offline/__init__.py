"""OfflineModel: the embedded default model (DESIGN 7), a deterministic rule-based planner.

It is not a language model and never says it is one. It lets every path of the product
(tool calls, parallel tools, streaming, summaries) run without a network:

- Plan: when the current turn has no tool results yet, it scores every offered tool by the
  overlap between the user's words and the tool's name, description and parameter
  schema (lowercased, lightly stemmed), fills each parameter from what the request
  contains (hostnames, ticket ids, enum or listed values, quoted strings, numbers, a
  keyword query) and calls, in one response, every tool that clears `MIN_TOOL_SCORE` and
  whose required parameters it could all fill (and one whole group of a tool's
  `requires_one_of`) and whose arguments its JSON schema accepts: never a call with
  required arguments missing or a value the tool would refuse.
- Answer: once the turn's tool results are in (or nothing fits), it writes a short
  Markdown answer: the cause (the problems the results report), the evidence (a digest
  of each result: status, problems, dates, counts, first items) and the fix (steps for
  the certificate problems of the demo's tools, then past resolutions on record), streamed
  word by word, and says the offline planner composed it. A user message in Chinese (CJK
  characters) gets the answer in Chinese; Chinese words of the demo scenario (证书, 日志,
  工单, 扫描, ...) count as their English tool words when planning. When the
  request asks for structured output (issue 20), the answer is instead a valid JSON value
  of the schema (`runs.core.output.minimal_instance`): its strings carry the conclusion,
  its numbers the count of tool results; a JSON object answer is `{"answer": ...}`.
- Summarise: `summarize(text, budget_tokens)` keeps the sentences that carry the most
  entities, numbers, decisions and errors, in their original order, within the budget.

Same request in, same response out: nothing depends on time, randomness or hash order.

The package, by section: `words` (what a text says), `planning` (tool calls), `digests`
(tool results), `answers` (the answer text, per language), `summaries`, `model`
(`OfflineModel`). Its public names are all importable from here.
"""

from runs.core.llm.offline.answers import SIGNATURE, Language, answer_language
from runs.core.llm.offline.model import (
    DEFAULT_CONTEXT_WINDOW,
    OFFLINE_DESCRIPTION,
    OFFLINE_MODEL_NAME,
    WORDS_PER_DELTA,
    OfflineModel,
    offline_model_info,
)
from runs.core.llm.offline.planning import MAX_TOOL_CALLS, MIN_TOOL_SCORE, ToolPlan, plan_tool_calls, schema_problems
from runs.core.llm.offline.summaries import extractive_summary

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "MAX_TOOL_CALLS",
    "MIN_TOOL_SCORE",
    "OFFLINE_DESCRIPTION",
    "OFFLINE_MODEL_NAME",
    "SIGNATURE",
    "WORDS_PER_DELTA",
    "Language",
    "OfflineModel",
    "ToolPlan",
    "answer_language",
    "extractive_summary",
    "offline_model_info",
    "plan_tool_calls",
    "schema_problems",
]
