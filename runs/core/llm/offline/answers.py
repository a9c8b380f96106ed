"""The offline planner's answers, in the user's language (English, or Chinese for a
message with CJK characters): a short Markdown incident note (cause, evidence, fix) from
the turn's tool results, or, when no tool fits, what it could not do and why."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from runs.core.llm.base import ToolSpec
from runs.core.llm.offline.digests import _VALUE_CHARS, _findings, _labelled, _Result, _truncate
from runs.core.llm.offline.planning import ToolPlan
from runs.core.llm.offline.words import _HOST

SIGNATURE = "(Composed by the offline planner from the tool results above: deterministic rules, not a language model.)"

Language = Literal["en", "zh"]
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_CAUSE = re.compile(r"^\*\*(?:Cause:|原因：)\*\*\s*")


def answer_language(user_text: str) -> Language:
    """Chinese when the user's message holds CJK characters (the demo's readers write
    Chinese), else English: the planner answers in the user's language."""
    return "zh" if _CJK.search(user_text or "") else "en"


# What the planner writes, in each language it answers in.
_TEXT: dict[Language, dict[str, str]] = {
    "en": {
        "failed": "Could not complete this request: {failed} of {total} tool call(s) failed.",
        "cause": "**Cause:** {cause}",
        "causes": "**Cause:** the results report {count} problems:",
        "no_problem": "**Cause:** none of the results reports a problem.",
        "nothing": "**Cause:** no tool produced a result, so there is nothing to conclude yet.",
        "partial": "**Cause:** the results that came back report no problem, but the failed call(s) above mean "
        "the request was not done.",
        "evidence": "**Evidence**",
        "fix": "**Fix**",
        "no_fix": "Nothing to fix from these results.",
        "no_known_fix": "No fix on record for this: ask to look up past tickets about it, or to inspect the host "
        "it names.",
        "retry": "Fix what made the failed call(s) fail and ask again.",
        "on_record": "On record: {resolution}",
        "renew": "Renew the certificate of {host} and deploy it with its full chain (leaf + intermediate), "
        "then reload the service.",
        "chain": "Rebuild the certificate bundle of {host} as leaf + intermediate and reload the service.",
        "names": "Reissue the certificate of {host} with the names clients use.",
        "verify": "Verify with `openssl s_client -connect {host}:443 -showcerts`.",
        "prevent": "Prevent a repeat: alert on certificates well before they expire and check the chain in deploys.",
        "signature": SIGNATURE,
        "no_tool": "The offline planner (a deterministic rule-based planner, not a language model) found no "
        "tool it could call for this request.",
        "needs": "{tool} looks relevant but needs {needs}, which the request does not give.",
        "misfit": "{tool} looks relevant but the arguments the request gives do not fit it: {problems}.",
        "can_do": "What it can do here:",
        "ask_again": "Ask again naming what to look at (for example a host, a service, an id or keywords).",
        "no_tools": "This agent has no tools, and without a language model configured the planner cannot hold "
        "a free-form conversation: it can only run tools and report their results.",
        "short_signature": "(Composed by the offline planner.)",
    },
    "zh": {
        "failed": "无法完成此请求：{total} 个工具调用中有 {failed} 个失败。",
        "cause": "**原因：**{cause}",
        "causes": "**原因：**结果报告了 {count} 个问题：",
        "no_problem": "**原因：**所有结果都没有报告问题。",
        "nothing": "**原因：**没有任何工具返回结果，目前无法得出结论。",
        "partial": "**原因：**返回的结果没有报告问题，但上面失败的调用说明请求没有完成。",
        "evidence": "**证据**",
        "fix": "**修复**",
        "no_fix": "根据这些结果，没有需要修复的内容。",
        "no_known_fix": "没有关于此问题的修复记录：可以让我查找相关的历史工单，或检查它提到的主机。",
        "retry": "先解决导致调用失败的问题，然后再问一次。",
        "on_record": "以往记录：{resolution}",
        "renew": "续签 {host} 的证书，并连同完整证书链（叶证书 + 中间证书）一起部署，然后重新加载服务。",
        "chain": "将 {host} 的证书包重建为叶证书 + 中间证书，并重新加载服务。",
        "names": "用客户端实际使用的名称为 {host} 重新签发证书。",
        "verify": "用 `openssl s_client -connect {host}:443 -showcerts` 验证。",
        "prevent": "防止再次发生：在证书过期前尽早告警，并在部署时检查证书链。",
        "signature": "（由离线规划器根据上述工具结果生成：确定性规则，不是语言模型。）",
        "no_tool": "离线规划器（确定性的规则规划器，不是语言模型）没有找到可以为此请求调用的工具。",
        "needs": "{tool} 看起来相关，但需要 {needs}，而请求中没有提供。",
        "misfit": "{tool} 看起来相关，但请求给出的参数不符合它的要求：{problems}。",
        "can_do": "这里可以做的：",
        "ask_again": "请再问一次，并说明要查看的对象（例如主机、服务、编号或关键词）。",
        "no_tools": "这个智能体没有工具；在没有配置语言模型时，规划器无法进行自由对话，只能调用工具并报告结果。",
        "short_signature": "（由离线规划器生成。）",
    },
}

# Known problem texts of the demo's tools, in Chinese (the tools report in English).
_PROBLEMS_ZH: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"certificate expired on (\S+) \((\d+) days? ago\)"), r"证书已于 \1 过期（\2 天前）"),
    (re.compile(r"certificate expires on (\S+) \(in (\d+) days?\)"), r"证书将于 \1 过期（还有 \2 天）"),
    (
        re.compile(r"chain is missing the intermediate issuer '([^']+)' of '([^']+)'"),
        r"证书链缺少 '\2' 的中间证书签发者 '\1'",
    ),
)


def _say(language: Language, problem: str) -> str:
    if language == "en":
        return problem
    for pattern, replacement in _PROBLEMS_ZH:
        problem = pattern.sub(replacement, problem)
    return problem


def _fixes(problems: Sequence[tuple[str, str]], language: Language) -> list[str]:
    """Concrete steps for the problems the demo's tools report (certificates): renew,
    rebuild the chain, reissue for the right names; then verify and prevent a repeat."""
    text = _TEXT[language]
    steps: list[str] = []
    hosts: list[str] = []
    for label, problem in problems:
        lowered = problem.lower()
        if not (label and _HOST.fullmatch(label)):
            # A log line's source is a service: the host its message names is what to fix.
            named = _HOST.search(problem)
            label = named.group(1) if named else label
        host = label or "the host"
        if "expired" in lowered or "expires" in lowered:
            steps.append(text["renew"].format(host=host))
        elif "chain" in lowered or "intermediate" in lowered:
            steps.append(text["chain"].format(host=host))
        elif "hostname" in lowered or "does not match" in lowered or "names" in lowered:
            steps.append(text["names"].format(host=host))
        else:
            continue
        if label and _HOST.fullmatch(label):
            hosts.append(label)
    if hosts:
        steps.extend(text["verify"].format(host=h) for h in dict.fromkeys(hosts))
    if steps:
        steps.append(text["prevent"])
    return list(dict.fromkeys(steps))


_LOG_ERROR = re.compile(r"^(?P<at>\S+)\s+(?:ERROR|FATAL|CRITICAL)\s+(?:\[(?P<source>[^\]]+)\]\s*)?(?P<message>.+)$")


def _log_errors(results: Sequence[_Result]) -> list[tuple[str, str]]:
    """(source, message at time) of the error lines in log-like results (a `lines` list of
    "<time> <LEVEL> [source] message" strings), first per source, in result order."""
    found: dict[str, str] = {}
    for result in results:
        data = result.data
        lines = data.get("lines") if isinstance(data, Mapping) else None
        for line in lines if isinstance(lines, list) else ():
            match = _LOG_ERROR.match(line) if isinstance(line, str) else None
            if match is not None:
                source = match.group("source") or ""
                found.setdefault(source, f"{_truncate(match.group('message'), _VALUE_CHARS)} ({match.group('at')})")
    return list(found.items())


def _compose_answer(results: Sequence[_Result], language: Language = "en") -> str:
    """The answer as a short incident note in Markdown: the cause, the evidence (one line
    per tool call), the fix (steps for the problems found, and past resolutions on record)."""
    text = _TEXT[language]
    problems, resolutions, failures = _findings(results)
    logged = not problems and _log_errors(results)
    if logged:
        # Logs are evidence; an error they hold is the cause only when no tool reports a
        # problem of its own (a certificate check's finding explains the log lines).
        problems = logged
    lines: list[str] = []
    if failures:
        # A failed step comes first and in plain words: an answer that reads as "no problem
        # found" when the work could not be done misleads more than no answer.
        lines.append(text["failed"].format(failed=len(failures), total=len(results)))
        lines.extend(f"- {failure}" for failure in failures)
        lines.append("")
    said = [_labelled(label, _say(language, problem)) for label, problem in problems]
    if len(said) == 1:
        lines.append(text["cause"].format(cause=said[0].rstrip(".") + ("。" if language == "zh" else ".")))
    elif said:
        lines.append(text["causes"].format(count=len(said)))
        lines.extend(f"{i}. {p}" for i, p in enumerate(said[:5], 1))
    elif failures and len(failures) == len(results):
        lines.append(text["nothing"])
    elif failures:
        lines.append(text["partial"])
    else:
        lines.append(text["no_problem"])
    lines.extend(["", text["evidence"]])
    lines.extend(f"- `{result.header()}`: {result.digest()}" for result in results)
    lines.extend(["", text["fix"]])
    steps = _fixes(problems, language)
    lines.extend(f"{i}. {step}" for i, step in enumerate(steps, 1))
    # Past resolutions about what is broken now come first (a ticket on another host is
    # only a hint).
    subjects = [label for label, _ in problems if label]
    resolutions = sorted(resolutions, key=lambda r: not any(subject in r for subject in subjects))
    lines.extend(f"- {text['on_record'].format(resolution=r)}" for r in resolutions[:2])
    if not steps and not resolutions:
        lines.append(text["retry"] if failures else text["no_known_fix"] if problems else text["no_fix"])
    lines.extend(["", text["signature"]])
    return "\n".join(lines)


def _compose_no_tool_answer(tools: Sequence[ToolSpec], blocked: Sequence[ToolPlan], language: Language = "en") -> str:
    text = _TEXT[language]
    lines = [text["no_tool"]]
    specs = {spec.name: spec for spec in tools}
    for plan in blocked:
        needs = []
        for pname in plan.missing:
            schema = (specs[plan.tool].parameters.get("properties", {}) or {}).get(pname, {})
            hint = schema.get("description")
            needs.append(f"`{pname}` ({_truncate(str(hint), 120)})" if hint else f"`{pname}`")
        if needs:
            lines.append(text["needs"].format(tool=plan.tool, needs=", ".join(needs)))
        else:
            lines.append(text["misfit"].format(tool=plan.tool, problems="; ".join(plan.invalid[:2])))
    if tools:
        lines.extend(["", text["can_do"]])
        lines.extend(f"- {spec.name}: {_truncate(spec.description, 200)}" for spec in tools)
        lines.extend(["", text["ask_again"]])
    else:
        lines.append(text["no_tools"])
    lines.extend(["", text["short_signature"]])
    return "\n".join(lines)
