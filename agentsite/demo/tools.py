"""The support agent's tools, over the sample data bundled in `data/`.

- `search_logs`: the service logs under `data/logs/<service>.log`
  (`<ISO timestamp> <LEVEL> <message>` per line).
- `lookup_ticket`: the historical tickets in `data/tickets.json`.
- `inspect_certificate`: the PEM bundle a host serves, `data/certs/hosts/<host>.pem`
  (leaf first, then the chain it sends), checked against the trusted root in
  `data/certs/ca/root-ca.pem`.

Everything is read-only and local: the tools behave the same offline as online.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID

from agentsite.config import read
from runs.core.tools.base import ToolContext
from runs.core.tools.function import FunctionTool

DATA_DIR = Path(__file__).resolve().parent / "data"
LOG_DIR = DATA_DIR / "logs"
TICKETS_FILE = DATA_DIR / "tickets.json"
HOST_CERT_DIR = DATA_DIR / "certs" / "hosts"
TRUSTED_ROOTS_FILE = DATA_DIR / "certs" / "ca" / "root-ca.pem"

LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
_LEVEL_ALIASES = {"WARNING": "WARN", "ERR": "ERROR", "FATAL": "ERROR", "CRITICAL": "ERROR"}
MAX_LIMIT = 200

# Words too common to narrow a search; a query made only of them matches everything.
_NOISE = frozenset(
    "a an and are as at be by did do does for from has have in is it its me my of on or "
    "our show that the this to was were what when where which who why with".split()
)


# -- logs -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LogLine:
    timestamp: str
    service: str
    level: str
    message: str

    def render(self) -> str:
        return f"{self.timestamp} {self.level} [{self.service}] {self.message}"


_LOG_LINE = re.compile(r"^(?P<ts>\S+)\s+(?P<level>[A-Z]+)\s+(?P<message>.*)$")


@functools.cache
def load_logs() -> tuple[LogLine, ...]:
    """Every bundled log line, oldest first (ties in service order)."""
    lines: list[LogLine] = []
    for path in sorted(LOG_DIR.glob("*.log")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            match = _LOG_LINE.match(raw.strip())
            if match:
                lines.append(
                    LogLine(timestamp=match["ts"], service=path.stem, level=match["level"], message=match["message"])
                )
    return tuple(sorted(lines, key=lambda line: line.timestamp))


def known_services() -> list[str]:
    return sorted({line.service for line in load_logs()})


def _query_terms(query: str) -> list[str]:
    """Quoted phrases stay whole; other words are lowercased, noise words dropped."""
    terms: list[str] = []
    for phrase, word in re.findall(r'"([^"]+)"|(\S+)', query.lower()):
        term = phrase.strip() or word.strip(".,;:!?()[]{}'\"")
        if term and (phrase or (term not in _NOISE and len(term) > 1)) and term not in terms:
            terms.append(term)
    return terms


def _term_forms(term: str) -> tuple[str, ...]:
    """The term and a crude stem, so that `handshakes` finds `handshake` and `fails` `failed`."""
    if " " in term or len(term) < 5:
        return (term,)
    for suffix in ("ing", "es", "ed", "s"):
        if term.endswith(suffix) and len(term) - len(suffix) >= 4:
            return (term, term[: -len(suffix)])
    return (term,)


def _normalize_level(level: str | None) -> str | None:
    if level is None or not level.strip():
        return None
    name = level.strip().upper()
    name = _LEVEL_ALIASES.get(name, name)
    if name not in LEVELS:
        raise ValueError(f"unknown level {level!r}; use one of {list(LEVELS)!r}")
    return name


def search_logs(
    service: str | None = None, query: str = "", level: str | None = None, limit: int = 20
) -> dict[str, Any]:
    """Search the service logs (checkout-api, payments, auth-gateway) for lines matching a query.

    Matching is case-insensitive; with several words a line matches when it contains any
    of them and lines matching more words come first ("quoted phrases" match as a whole).
    Returns the matching lines with counts per service and level.

    Args:
        service: Service whose log to search: `checkout-api`, `payments` or `auth-gateway`; omit for all services.
        query: Words or "quoted phrases" to look for in the log lines; empty matches every line.
        level: Minimum severity: `DEBUG`, `INFO`, `WARN` or `ERROR`; omit for all levels.
        limit: Most lines to return (1-200).
    """
    services = known_services()
    wanted_service = None
    if service is not None and service.strip():
        wanted_service = service.strip().lower()
        if wanted_service not in services:
            raise LookupError(f"unknown service {service!r}; known services: {services!r}")
    min_level = _normalize_level(level)
    limit = max(1, min(int(limit), MAX_LIMIT))
    terms = _query_terms(query)

    scored: list[tuple[int, LogLine]] = []
    for line in load_logs():
        if wanted_service is not None and line.service != wanted_service:
            continue
        if min_level is not None and LEVELS.index(line.level) < LEVELS.index(min_level):
            continue
        text = f"{line.service} {line.message}".lower()
        hits = sum(1 for term in terms if any(form in text for form in _term_forms(term)))
        if terms and hits == 0:
            continue
        scored.append((hits, line))

    matched = [line for _, line in scored]
    # Best matches first; among equals the log's own order (oldest first) reads as a story.
    ranked = [line for _, line in sorted(scored, key=lambda item: -item[0])][:limit]
    return {
        "service": wanted_service,
        "query": query,
        "level": min_level,
        "total_matches": len(matched),
        "returned": len(ranked),
        "truncated": len(matched) > len(ranked),
        "by_service": dict(sorted(Counter(line.service for line in matched).items())),
        "by_level": {name: n for name in LEVELS if (n := sum(1 for line in matched if line.level == name))},
        "first_seen": matched[0].timestamp if matched else None,
        "last_seen": matched[-1].timestamp if matched else None,
        "lines": [line.render() for line in ranked],
    }


# -- tickets --------------------------------------------------------------------------------


@functools.cache
def _tickets() -> tuple[dict[str, Any], ...]:
    data = json.loads(TICKETS_FILE.read_text(encoding="utf-8"))
    return tuple(data)


def load_tickets() -> list[dict[str, Any]]:
    return [dict(ticket) for ticket in _tickets()]


def lookup_ticket(ticket_id: str | None = None, query: str = "") -> dict[str, Any]:
    """Look up historical support tickets (incidents) by id, or search their titles, resolutions and tags.

    Args:
        ticket_id: Ticket id such as `INC-1042`; when given, that ticket is returned in full.
        query: Keywords to search for in ticket titles, resolutions, services and tags; empty lists recent tickets.
    """
    tickets = load_tickets()
    if ticket_id is not None and ticket_id.strip():
        wanted = ticket_id.strip().upper()
        for ticket in tickets:
            if ticket["id"].upper() == wanted:
                return {"ticket": ticket}
        raise LookupError(f"no ticket {ticket_id!r}; known ticket ids: {[t['id'] for t in tickets]!r}")

    terms = _query_terms(query)
    scored: list[tuple[int, dict[str, Any]]] = []
    for ticket in tickets:
        haystack = " ".join(
            [ticket["title"], ticket.get("resolution") or "", ticket.get("service") or "", " ".join(ticket["tags"])]
        ).lower()
        hits = sum(1 for term in terms if any(form in haystack for form in _term_forms(term)))
        if terms and hits == 0:
            continue
        scored.append((hits, ticket))
    # Most matching words first, then newest first (two stable sorts).
    scored.sort(key=lambda item: item[1]["created"], reverse=True)
    scored.sort(key=lambda item: -item[0])
    found = [ticket for _, ticket in scored][:10]
    return {"query": query, "matches": len(scored), "returned": len(found), "tickets": found}


# -- certificates ---------------------------------------------------------------------------


def known_hosts() -> list[str]:
    return sorted(path.name.removesuffix(".pem") for path in HOST_CERT_DIR.glob("*.pem"))


@functools.cache
def _trusted_roots() -> tuple[x509.Certificate, ...]:
    return tuple(x509.load_pem_x509_certificates(TRUSTED_ROOTS_FILE.read_bytes()))


def _common_name(name: x509.Name) -> str:
    attributes = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attributes[0].value) if attributes else name.rfc4514_string()


def _issued_by(child: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Issuer name matches and the signature verifies with the issuer's public key."""
    try:
        child.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _sans(cert: x509.Certificate) -> list[str]:
    try:
        extension = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return [str(name) for name in extension.value.get_values_for_type(x509.DNSName)]


def _host_matches(host: str, names: Sequence[str]) -> bool:
    for name in names:
        name = name.lower()
        if name == host:
            return True
        if name.startswith("*.") and host.count(".") == name.count(".") and host.endswith(name[1:]):
            return True
    return False


def _check_chain(leaf: x509.Certificate, presented: Sequence[x509.Certificate]) -> tuple[list[str], str | None]:
    """Walk from the leaf to a trusted root through the presented certificates.

    Returns the common names along the path and the problem that stopped it (None when
    the path reaches a trusted root).
    """
    roots = _trusted_roots()
    path = [leaf]
    current = leaf
    while len(path) <= len(presented) + 1:
        names = [_common_name(c.subject) for c in path]
        for root in roots:
            if current == root:
                return names, None
            if _issued_by(current, root):
                return [*names, _common_name(root.subject)], None
        if current.issuer == current.subject:
            root_name = _common_name(current.subject)
            return names, f"chain ends at the self-signed {root_name!r}, which is not a trusted root"
        candidates = [c for c in presented if c.subject == current.issuer and c not in path]
        if not candidates:
            issuer = _common_name(current.issuer)
            return names, f"chain is missing the intermediate issuer {issuer!r} of {_common_name(current.subject)!r}"
        issuer_cert = next((c for c in candidates if _issued_by(current, c)), None)
        if issuer_cert is None:
            return names, (
                f"signature of {_common_name(current.subject)!r} does not verify with the key of "
                f"{_common_name(current.issuer)!r}"
            )
        path.append(issuer_cert)
        current = issuer_cert
    return [_common_name(c.subject) for c in path], "chain does not reach a trusted root"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def certificate_report(host: str, *, now: datetime | None = None) -> dict[str, Any]:
    """What `inspect_certificate` returns, with an injectable clock."""
    now = now or datetime.now(UTC)
    name = host.strip().lower().rstrip(".")
    path = HOST_CERT_DIR / f"{name}.pem"
    if not name or "/" in name or not path.is_file():
        raise LookupError(f"no certificate for host {host!r}; known hosts: {known_hosts()!r}")
    certs = x509.load_pem_x509_certificates(path.read_bytes())
    leaf, presented = certs[0], certs[1:]
    not_before, not_after = leaf.not_valid_before_utc, leaf.not_valid_after_utc
    expired = now > not_after
    # Whole days, truncated toward zero: 18.4 days past expiry reads as -18, "18 days ago".
    days_remaining = math.trunc((not_after - now).total_seconds() / 86400)
    sans = _sans(leaf)
    chain, chain_problem = _check_chain(leaf, presented)

    problems: list[str] = []
    if expired:
        problems.append(f"certificate expired on {_iso(not_after)} ({-days_remaining} days ago)")
    elif now < not_before:
        problems.append(f"certificate is not valid before {_iso(not_before)}")
    if chain_problem is not None:
        problems.append(chain_problem)
    hostname_ok = _host_matches(name, sans)
    if not hostname_ok:
        problems.append(f"host {name!r} is not among the certificate's names {sans!r}")
    for cert in presented:
        if now > cert.not_valid_after_utc:
            expired_on = _iso(cert.not_valid_after_utc)
            problems.append(f"chain certificate {_common_name(cert.subject)!r} expired on {expired_on}")

    return {
        "host": name,
        "status": "problem" if problems else "ok",
        "problem": "; ".join(problems) or None,
        "expired": expired,
        "not_before": _iso(not_before),
        "not_after": _iso(not_after),
        "days_remaining": days_remaining,
        "chain_complete": chain_problem is None,
        "chain": chain,
        "hostname_matches": hostname_ok,
        "subject": leaf.subject.rfc4514_string(),
        "issuer": leaf.issuer.rfc4514_string(),
        "sans": sans,
        "serial": format(leaf.serial_number, "x"),
        "presented_certificates": len(certs),
        "checked_at": _iso(now),
    }


def inspect_certificate(host: str) -> dict[str, Any]:
    """Inspect the TLS certificate a host serves: validity dates, expiry, names and chain to the trusted root.

    Reports subject, issuer, SANs, not_before/not_after, days remaining, `expired`,
    `chain_complete` (the presented chain leads to the trusted root, checked by issuer
    names and signatures) and a `problem` text when something is wrong.

    Args:
        host: Hostname whose certificate to inspect, e.g. `payments.internal.example.com`.
    """
    return certificate_report(host)


# The fleet scan (issue 21): the demo's long tool, with progress and a cancel worth seeing.
SCAN_SECONDS_ENV = "AGENTSITE_DEMO_SCAN_DELAY_S"
SCAN_CHECKS = ("handshake", "validity dates", "chain to the trusted root", "host names")


def scan_seconds() -> float:
    """The whole scan's duration: `AGENTSITE_DEMO_SCAN_DELAY_S` (tests set it small), else 10 s.
    Read per call, not from the settings, so that a test can change it; the settings check it at start."""
    return float(read(SCAN_SECONDS_ENV))


async def scan_fleet(context: ToolContext, scope: Literal["fleet"]) -> dict[str, Any]:
    """Scan the TLS certificates of every host in the fleet, one after another (slow: about 10 s), reporting progress.

    Checks each bundled host's handshake, validity dates, chain to the trusted root and
    host names, and returns every host's status, problem and expiry with the count of hosts
    that have a problem. Use inspect_certificate for one named host.

    Args:
        scope: What to scan: `fleet` (every host).
    """
    hosts = known_hosts()
    total = len(hosts) * len(SCAN_CHECKS)
    # The bundled certificates are read in microseconds; the pause stands in for the network
    # round trips of a real fleet, so that progress and a cancel can be watched.
    pause = scan_seconds() / total if total else 0.0
    context.report_progress(0, total, f"0/{len(hosts)} hosts scanned")
    reports: list[dict[str, Any]] = []
    step = 0
    for index, host in enumerate(hosts):
        for check in SCAN_CHECKS:
            if context.cancelled:
                raise asyncio.CancelledError  # the run is being cancelled: stop between steps
            await asyncio.sleep(pause)
            step += 1
            context.report_progress(step, total, f"{host}: {check} ({index}/{len(hosts)} hosts scanned)")
        report = certificate_report(host)
        reports.append({key: report[key] for key in ("host", "status", "problem", "not_after", "days_remaining")})
        context.report_progress(step, total, f"{index + 1}/{len(hosts)} hosts scanned")
    problems = [r["host"] for r in reports if r["status"] != "ok"]
    return {
        "scope": scope,
        "hosts_scanned": len(reports),
        "hosts_with_problems": len(problems),
        "problem_hosts": problems,
        "hosts": reports,
    }


def restart_service(name: str) -> dict[str, Any]:
    """Restart a production process by name; destructive: it drops the requests in flight.

    Runs only when the user approved it in their message (the demo's approval policy).

    Args:
        name: The process to restart (one of the three the logs cover).
    """
    if name not in known_services():
        raise ValueError(f"unknown process {name!r}; use one of {known_services()!r}")
    # A demo: nothing is restarted, but the result reads as an operator's tool would answer.
    return {"service": name, "restarted": True, "dropped_requests": 0}


# Tools the demo's approval policy holds back until the user approves them (issue 20).
DESTRUCTIVE_TOOLS = frozenset({"restart_service"})


def support_tools() -> list[FunctionTool]:
    """The support agent's tools, in the order they are offered to the model."""
    return [
        FunctionTool(search_logs),
        FunctionTool(lookup_ticket),
        FunctionTool(inspect_certificate),
        FunctionTool(scan_fleet),
        FunctionTool(restart_service),
    ]
