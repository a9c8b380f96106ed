"""Render the diagnosis found by the support tools as Markdown and HTML.

Input: a JSON list of tool results, `[{"tool", "arguments", "result"}]` (by default
`$WORK_DIR/inputs/tool_results.json`, as skill_run stages it). Output:
`$OUTPUT_DIR/incident-report.md` and `$OUTPUT_DIR/incident-report.html`.
Standard library only: it runs on the system's python3 inside the sandbox.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

MAX_LOG_LINES = 5


def load_results(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    return [r for r in data if isinstance(r, dict) and isinstance(r.get("result"), dict)]


def collect(results: list[dict]) -> dict:
    certificates, searches, tickets = {}, [], {}
    for item in results:
        tool, result = item.get("tool"), item["result"]
        if tool == "inspect_certificate" and result.get("host"):
            certificates[result["host"]] = result  # the latest inspection of a host wins
        elif tool == "search_logs":
            searches.append(result)
        elif tool == "lookup_ticket":
            found = result.get("tickets") or ([result] if result.get("id") else [])
            for ticket in found:
                if isinstance(ticket, dict) and ticket.get("id"):
                    tickets[ticket["id"]] = ticket
    problems = [f"{host}: {c['problem']}" for host, c in certificates.items() if c.get("problem")]
    return {"certificates": certificates, "searches": searches, "tickets": tickets, "problems": problems}


def _yes_no(value: object) -> str:
    return "yes" if value is True else "no" if value is False else "?"


def render_markdown(title: str, found: dict, generated: str) -> str:
    lines = [f"# {title}", "", f"_Generated {generated} from the session's tool results._", "", "## Summary", ""]
    if found["problems"]:
        lines += [f"- {p}" for p in found["problems"]]
    elif found["certificates"] or found["searches"]:
        lines.append("- No problem found in the inspected evidence.")
    else:
        lines.append("- No evidence yet: inspect a certificate or search the logs, then generate the report again.")
    if found["certificates"]:
        lines += [
            "",
            "## Certificates",
            "",
            "| host | not after | days left | expired | chain complete | problem |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for host, c in found["certificates"].items():
            lines.append(
                f"| {host} | {c.get('not_after', '?')} | {c.get('days_remaining', '?')} | {_yes_no(c.get('expired'))} "
                f"| {_yes_no(c.get('chain_complete'))} | {c.get('problem') or '-'} |"
            )
    if found["searches"]:
        lines += ["", "## Log evidence", ""]
        for search in found["searches"]:
            where = search.get("service") or "all services"
            levels = ", ".join(f"{k} {v}" for k, v in (search.get("by_level") or {}).items())
            lines.append(
                f"- {where}, query {search.get('query')!r}: {search.get('total_matches', 0)} matches ({levels})"
            )
            lines += [f"  - `{line}`" for line in (search.get("lines") or [])[:MAX_LOG_LINES]]
    if found["tickets"]:
        lines += ["", "## Related tickets", ""]
        for ticket in found["tickets"].values():
            lines.append(f"- **{ticket['id']}** {ticket.get('title', '')} ({ticket.get('status', '?')})")
            if ticket.get("resolution"):
                lines.append(f"  - Resolution: {ticket['resolution']}")
    if found["problems"]:
        lines += [
            "",
            "## Suggested fix",
            "",
            "1. Renew the certificate (or rebuild the bundle with its full chain: leaf + intermediate).",
            "2. Deploy it and reload the service.",
            "3. Verify with `openssl s_client -connect HOST:443 -showcerts`.",
            "4. Prevent a repeat: expiry alerts 30 days ahead and a chain check in the deploy.",
        ]
    return "\n".join(lines) + "\n"


def render_html(title: str, markdown: str) -> str:
    body: list[str] = []
    in_list = False
    for line in markdown.splitlines():
        text = html.escape(line.strip())
        if line.startswith(("- ", "  - ", "1. ", "2. ", "3. ", "4. ")):
            if not in_list:
                body.append("<ul>")
                in_list = True
            body.append(f"<li>{text.split(' ', 1)[1] if ' ' in text else text}</li>")
            continue
        if in_list:
            body.append("</ul>")
            in_list = False
        if line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("| ---"):
            continue
        elif line.startswith("| "):
            cells = "".join(f"<td>{html.escape(c.strip())}</td>" for c in line.strip("|").split("|"))
            body.append(f"<table><tr>{cells}</tr></table>")
        elif line.strip():
            body.append(f"<p>{text}</p>")
    if in_list:
        body.append("</ul>")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    work = Path(os.environ.get("WORK_DIR", "."))
    parser.add_argument("--input", type=Path, default=work / "inputs" / "tool_results.json")
    parser.add_argument("--output-dir", type=Path, default=Path(os.environ.get("OUTPUT_DIR", "out")))
    parser.add_argument("--title", default="Incident report")
    args = parser.parse_args(argv)
    found = collect(load_results(args.input))
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    markdown = render_markdown(args.title, found, generated)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "incident-report.md").write_text(markdown, encoding="utf-8")
    (args.output_dir / "incident-report.html").write_text(render_html(args.title, markdown), encoding="utf-8")
    summary = "; ".join(found["problems"]) or "no problem found"
    print(
        f"report written: incident-report.md, incident-report.html ({len(found['certificates'])} certificate(s), "
        f"{len(found['searches'])} log search(es), {len(found['tickets'])} ticket(s)); problems: {summary}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
