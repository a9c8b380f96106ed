"""Gates (SPEC 9.5, DESIGN 6): Spec, Safety, Effectiveness, Human, in that order.

Each gate is optional; the configured ones run in the canonical order whatever order the
configuration lists them in, and the first that does not pass ends the run of gates.
Gates fail closed: a gate that raises is a failure (`error`). Outcomes:

- every gate passed and no Human gate: `publish`;
- every automatic gate passed and a Human gate is configured, or the proposal carries a
  conflict (DESIGN: a conflict always waits for a person): `hold` (pending review);
- anything else: `rejected`, with the gate results saying why.

With no gate configured at all, a proposal without conflict is published directly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from evolution_app.core.delta import ReviewDelta
from evolution_app.core.reconcile import Proposal
from skills_app.core.skill import SKILL_FILE, SkillError, parse_skill_file

GateName = Literal["spec", "safety", "effectiveness", "human"]
GATE_ORDER: tuple[GateName, ...] = ("spec", "safety", "effectiveness", "human")
GateStatus = Literal["pass", "fail", "hold", "error"]
Outcome = Literal["publish", "hold", "rejected"]
MAX_SKILL_CHARS = 16_000
MAX_NAME_CHARS = 64  # the skill repository's limit (SPEC 9.5 allows 120; ours is stricter)


@dataclass(frozen=True, kw_only=True)
class GateResult:
    """One gate's verdict on one proposal; `findings` lists what it found."""

    gate: GateName
    status: GateStatus
    detail: str = ""
    findings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict[str, Any]:
        return {"gate": self.gate, "status": self.status, "detail": self.detail, "findings": list(self.findings)}


@dataclass(frozen=True, kw_only=True)
class GateContext:
    """What a gate judges: the proposal, its rendered files, the evidence delta, and the
    names the library holds now."""

    proposal: Proposal
    files: Mapping[str, str]
    delta: ReviewDelta
    library_names: frozenset[str] = frozenset()


class Gate(Protocol):
    name: GateName

    async def check(self, context: GateContext) -> GateResult:
        """The verdict; raising counts as a failure (gates fail closed)."""
        ...


# -- Spec ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SpecGate:
    """Structure: a SKILL.md that parses, a valid name, description and when-to-use, at
    least `min_steps` steps, within `max_chars`; a create must not take an existing name."""

    min_steps: int = 2
    max_chars: int = MAX_SKILL_CHARS
    name: GateName = "spec"

    async def check(self, context: GateContext) -> GateResult:
        spec = context.proposal.spec
        findings: list[str] = []
        try:
            parsed = parse_skill_file(context.files.get(SKILL_FILE, ""))
        except SkillError as exc:
            findings.append(f"SKILL.md does not parse: {exc}")
        else:
            if parsed.name != spec.name:
                findings.append(f"SKILL.md names {parsed.name!r}, the proposal {spec.name!r}")
        if len(spec.name) > MAX_NAME_CHARS:
            findings.append(f"name longer than {MAX_NAME_CHARS} characters")
        if not spec.description.strip():
            findings.append("no description")
        if not spec.when_to_use.strip():
            findings.append("no 'when to use'")
        if len(spec.steps) < self.min_steps:
            findings.append(f"{len(spec.steps)} step(s); at least {self.min_steps} needed")
        size = sum(len(text) for text in context.files.values())
        if size > self.max_chars:
            findings.append(f"{size} characters; at most {self.max_chars}")
        if context.proposal.action == "create" and spec.name in context.library_names:
            findings.append(f"creates {spec.name!r}, which the library already holds")
        if findings:
            return GateResult(gate="spec", status="fail", detail="; ".join(findings), findings=tuple(findings))
        return GateResult(gate="spec", status="pass", detail=f"{len(spec.steps)} steps, {size} characters")


# -- Safety --------------------------------------------------------------------------------------------

_ANYWHERE: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "destructive: rm -rf of the root or home",
        re.compile(r"\brm\s+(?:-[a-zA-Z]*[rf][a-zA-Z]*\s+)+(?:/(?=[\s'\";&|)]|$)|/\*|~(?=[/\s'\";]|$)|\$HOME)", re.M),
    ),
    ("destructive: raw disk write", re.compile(r"\bdd\s+[^\n]*of=/dev/(?:sd|nvme|hd|disk)")),
    ("destructive: filesystem format", re.compile(r"\bmkfs(?:\.\w+)?\s")),
    ("destructive: fork bomb", re.compile(r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:")),
    ("destructive: recursive delete of the root", re.compile(r"shutil\.rmtree\(\s*['\"](?:/|~)['\"]")),
    ("destructive: world-writable root", re.compile(r"chmod\s+-R\s+0?777\s+/(?:\s|$)")),
    ("escape: writes outside the workspace", re.compile(r"(?:\.\./){2,}")),
    ("secret file: /etc/passwd or /etc/shadow", re.compile(r"/etc/(?:passwd|shadow)\b")),
    ("secret file: ssh keys", re.compile(r"~/\.ssh|\$HOME/\.ssh|/\.ssh/id_")),
    ("secret: AWS access key", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("secret: private key block", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("secret: GitHub token", re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}")),
    ("secret: OpenAI-style key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    (
        "secret: credential assignment",
        re.compile(r"(?i)\b(?:api[_-]?key|secret|token|password|passwd)\b\s*[:=]\s*['\"][^'\"\s]{6,}['\"]"),
    ),
    (
        "prompt injection",
        re.compile(
            r"(?i)ignore (?:all |any |the )?(?:previous|prior|above|earlier) (?:instructions|messages|rules)|"
            r"disregard (?:all |any |the )?(?:previous|prior|above|system)|\byou are now\b|"
            r"reveal (?:the |your )?(?:system prompt|instructions)|\bjailbreak\b|\bdo anything now\b|"
            r"<\|im_start\|>|<\|system\|>|\bnew system instructions?\b"
        ),
    ),
)
# Network use: in scripts, and in the shell commands (code spans and blocks) of the
# instructions; prose that mentions "the network" is fine.
_NETWORK: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("network: download piped to a shell", re.compile(r"\b(?:curl|wget)\b[^\n|]*\|\s*(?:sudo\s+)?(?:ba|z)?sh\b")),
    ("network: curl/wget", re.compile(r"\b(?:curl|wget)\s")),
    ("network: netcat/ssh/scp", re.compile(r"\b(?:nc|ncat|ssh|scp|rsync|telnet|ftp)\s+\S")),
    (
        "network: Python HTTP or sockets",
        re.compile(
            r"\bimport\s+(?:requests|httpx|socket|urllib3|aiohttp)\b|\bfrom\s+(?:requests|httpx|urllib\.request|http\.client|"
            r"socket|aiohttp)\b|\burllib\.request\b|\bhttp\.client\b|\bsocket\.socket\("
        ),
    ),
    ("network: URL in code", re.compile(r"\b(?:https?|ftp)://")),
)
_CODE = re.compile(r"```[\s\S]*?```|`[^`\n]+`")


def safety_findings(files: Mapping[str, str]) -> list[str]:
    """What the static safety checks find in a skill's files ([] when nothing)."""
    findings: list[str] = []
    for path, text in sorted(files.items()):
        for label, pattern in _ANYWHERE:
            if (m := pattern.search(text)) is not None:
                findings.append(f"{path}: {label} ({m.group(0)[:60]!r})")
        code = (
            text
            if path != SKILL_FILE and not path.lower().endswith((".md", ".txt"))
            else "\n".join(_CODE.findall(text))
        )
        for label, pattern in _NETWORK:
            if (m := pattern.search(code)) is not None:
                findings.append(f"{path}: {label} ({m.group(0)[:60]!r})")
                break
    return findings


@dataclass(frozen=True, kw_only=True)
class SafetyGate:
    """Static checks of the scripts and instructions (see `safety_findings`)."""

    name: GateName = "safety"

    async def check(self, context: GateContext) -> GateResult:
        findings = safety_findings(context.files)
        if findings:
            return GateResult(
                gate="safety", status="fail", detail=f"{len(findings)} finding(s)", findings=tuple(findings)
            )
        return GateResult(
            gate="safety", status="pass", detail="no network use, destructive command, secret or injection"
        )


# -- Effectiveness -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ReplayOutcome:
    """How one replay of the evidence task went (with or without the candidate loaded)."""

    completed: bool
    answer: str = ""
    tool_calls: int = 0
    tool_errors: int = 0
    skill_seen: bool = False
    error: str = ""
    # The tools whose calls succeeded, in call order (a tool called twice is listed twice).
    succeeded_tools: tuple[str, ...] = ()


class Replayer(Protocol):
    async def replay(self, context: GateContext, *, with_candidate: bool = True) -> ReplayOutcome:
        """Run the delta's task again, with the candidate in the skill library or without it."""
        ...


_TERM = re.compile(
    r"\b[A-Z][A-Z0-9]{1,9}-\d{1,9}\b"  # ticket ids
    r"|\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,}\b"  # host names
    r"|\b\d{4}-\d{2}-\d{2}\b"  # dates
)


def evidence_terms(delta: ReviewDelta) -> tuple[str, ...]:
    """The facts the recorded answer rests on: ticket ids, host names and dates that both
    the delta's first answer and a successful tool result of the delta hold. A replay's
    answer is measured by how many of them it still gives (its coverage of the evidence)."""
    if not delta.answers:
        return ()
    results = " ".join(step.result for step in delta.tool_steps if step.succeeded)
    found = dict.fromkeys(m.group(0) for m in _TERM.finditer(delta.answers[0].text))
    return tuple(term for term in found if term in results)


def coverage(answer: str, terms: Sequence[str]) -> tuple[str, ...]:
    """The evidence terms an answer leaves out."""
    return tuple(term for term in terms if term not in answer)


@dataclass(frozen=True, kw_only=True)
class EffectivenessGate:
    """The evidence run must have succeeded (an answer, no run error: SPEC's outcome gate);
    then, with a replayer, the task is replayed twice, without the candidate and with it,
    and the candidate passes only when it is not worse: the replay with it completes, sees
    the candidate and answers; it fails no more tool calls; every tool that succeeded
    without it still succeeds (no lookup crowded out); and its answer leaves out no
    evidence term (`evidence_terms`) the answer without it gives. The detail and the
    findings say which of these failed, for the admin."""

    replayer: Replayer | None = None
    name: GateName = "effectiveness"

    async def check(self, context: GateContext) -> GateResult:
        delta = context.delta
        if not delta.succeeded:
            why = delta.errors[0] if delta.errors else "no final answer"
            return GateResult(gate="effectiveness", status="fail", detail=f"the evidence run did not succeed: {why}")
        if self.replayer is None:
            return GateResult(
                gate="effectiveness", status="pass", detail="the evidence run succeeded; no replay configured"
            )
        baseline = await self.replayer.replay(context, with_candidate=False)
        outcome = await self.replayer.replay(context, with_candidate=True)
        terms = evidence_terms(delta)
        findings: list[str] = []
        if not outcome.completed:
            findings.append(f"the replay with the candidate did not complete: {outcome.error or 'no answer'}")
        if not outcome.skill_seen:
            findings.append("the replayed model never saw the candidate in its skill overview")
        if not outcome.answer.strip():
            findings.append("the replay with the candidate gave no answer")
        if outcome.tool_errors > baseline.tool_errors:
            findings.append(
                f"more failed tool calls: {outcome.tool_errors} with the candidate, {baseline.tool_errors} without"
            )
        lost = [
            tool
            for tool in dict.fromkeys(baseline.succeeded_tools)
            if outcome.succeeded_tools.count(tool) < baseline.succeeded_tools.count(tool)
        ]
        if lost:
            findings.append(f"tool calls lost: {', '.join(lost)} succeeded without the candidate, not with it")
        missed = set(coverage(outcome.answer, terms)) - set(coverage(baseline.answer, terms))
        if missed:
            findings.append(
                f"the answer covers less of the evidence: {', '.join(t for t in terms if t in missed)} "
                f"missing with the candidate"
            )
        detail = (
            f"with the candidate: {_summary(outcome, terms)}; without: {_summary(baseline, terms)}; "
            f"recorded run: {delta.tool_call_count} tool call(s), {sum(1 for s in delta.tool_steps if s.failed)} failed"
        )
        if findings:
            return GateResult(gate="effectiveness", status="fail", detail=detail, findings=tuple(findings))
        return GateResult(gate="effectiveness", status="pass", detail=detail)


def _summary(outcome: ReplayOutcome, terms: Sequence[str]) -> str:
    covered = len(terms) - len(coverage(outcome.answer, terms))
    state = "" if outcome.completed else " (did not complete)"
    return (
        f"{outcome.tool_calls} tool call(s), {outcome.tool_errors} failed, "
        f"{covered}/{len(terms)} evidence term(s) in the answer{state}"
    )


# -- Human ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class HumanGate:
    """Holds the proposal for a person (the admin decides)."""

    name: GateName = "human"

    async def check(self, context: GateContext) -> GateResult:
        return GateResult(gate="human", status="hold", detail="waiting for a reviewer in the admin")


@dataclass(frozen=True, kw_only=True)
class GateRun:
    outcome: Outcome
    results: tuple[GateResult, ...] = field(default_factory=tuple)

    @property
    def reason(self) -> str:
        last = self.results[-1] if self.results else None
        if self.outcome == "rejected" and last is not None:
            return f"{last.gate} gate: {last.detail}"
        return ""


def ordered(gates: Sequence[Gate]) -> list[Gate]:
    """The gates in the canonical order (SPEC 9.5), whatever order they were given in."""
    return sorted(gates, key=lambda g: GATE_ORDER.index(g.name))


async def run_gates(gates: Sequence[Gate], context: GateContext) -> GateRun:
    """Run the gates in order, failing closed (see the module docstring)."""
    results: list[GateResult] = []
    for gate in ordered(gates):
        try:
            result = await gate.check(context)
        except Exception as exc:
            result = GateResult(gate=gate.name, status="error", detail=f"{type(exc).__name__}: {exc}")
        results.append(result)
        if result.status == "hold":
            return GateRun(outcome="hold", results=tuple(results))
        if not result.passed:
            return GateRun(outcome="rejected", results=tuple(results))
    if context.proposal.conflict:
        results.append(GateResult(gate="human", status="hold", detail=f"conflict: {context.proposal.conflict}"))
        return GateRun(outcome="hold", results=tuple(results))
    return GateRun(outcome="publish", results=tuple(results))
