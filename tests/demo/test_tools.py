from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from agentsite.demo import tools
from agentsite.demo.make_certs import build_pki
from agentsite.demo.tools import (
    certificate_report,
    inspect_certificate,
    known_hosts,
    lookup_ticket,
    search_logs,
    support_tools,
)

# A fixed clock: the bundled payments certificate expired on 2026-11-14.
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


# -- certificates -----------------------------------------------------------------------------


def test_expired_certificate_is_reported_expired_with_its_date():
    report = certificate_report("payments.internal.example.com", now=NOW)

    assert report["expired"] is True
    assert report["status"] == "problem"
    assert report["not_after"] == "2026-11-14T00:00:00Z"
    assert report["days_remaining"] == -17
    assert "certificate expired on 2026-11-14" in report["problem"]
    # The chain itself is fine: expiry is the only problem.
    assert report["chain_complete"] is True
    assert "missing" not in report["problem"]


def test_certificate_without_its_intermediate_is_reported_as_an_incomplete_chain():
    report = certificate_report("auth.example.com", now=NOW)

    assert report["chain_complete"] is False
    assert report["expired"] is False
    assert "chain is missing the intermediate issuer 'Example Corp Issuing CA 1'" in report["problem"]
    assert report["presented_certificates"] == 2  # leaf + root, no intermediate


def test_healthy_certificate_is_valid_with_a_complete_chain_to_the_root():
    report = certificate_report("checkout.example.com", now=NOW)

    assert report["status"] == "ok"
    assert report["problem"] is None
    assert report["expired"] is False
    assert report["chain_complete"] is True
    assert report["chain"] == ["checkout.example.com", "Example Corp Issuing CA 1", "Example Corp Root CA"]
    assert report["sans"] == ["checkout.example.com"]
    assert report["not_after"].startswith("2037-")
    assert report["days_remaining"] > 3000


def test_certificate_days_remaining_follow_the_clock():
    later = certificate_report("checkout.example.com", now=NOW + timedelta(days=10))
    now = certificate_report("checkout.example.com", now=NOW)

    assert now["days_remaining"] - later["days_remaining"] == 10


def test_inspect_certificate_uses_the_real_clock_and_accepts_any_case():
    report = inspect_certificate("Payments.Internal.Example.com")

    assert report["host"] == "payments.internal.example.com"
    assert report["expired"] is (datetime.now(UTC) > datetime(2026, 11, 14, tzinfo=UTC))


def test_unknown_host_raises_lookup_error_listing_known_hosts():
    with pytest.raises(LookupError) as info:
        inspect_certificate("db.example.com")

    message = str(info.value)
    assert "'db.example.com'" in message
    for host in ("auth.example.com", "checkout.example.com", "payments.internal.example.com"):
        assert host in message


def test_chain_whose_names_match_but_signature_does_not_is_not_complete(tmp_path: Path, monkeypatch):
    """The chain check verifies signatures, not only issuer names."""
    real_intermediate = x509.load_pem_x509_certificate(
        (tools.DATA_DIR / "certs" / "ca" / "intermediate-ca.pem").read_bytes()
    )
    impostor_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "evil.example.com")]))
        .issuer_name(real_intermediate.subject)  # claims the real issuer...
        .public_key(impostor_key.public_key())
        .serial_number(7)
        .not_valid_before(NOW - timedelta(days=1))
        .not_valid_after(NOW + timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("evil.example.com")]), critical=False)
        .sign(impostor_key, hashes.SHA256())  # ...but is signed by another key
    )
    (tmp_path / "evil.example.com.pem").write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM) + real_intermediate.public_bytes(serialization.Encoding.PEM)
    )
    monkeypatch.setattr(tools, "HOST_CERT_DIR", tmp_path)

    report = certificate_report("evil.example.com", now=NOW)

    assert report["chain_complete"] is False
    assert "does not verify" in report["problem"]


def test_committed_certificates_are_exactly_what_make_certs_generates():
    certs_dir = tools.DATA_DIR / "certs"
    generated = build_pki()

    assert sorted(generated) == sorted(str(p.relative_to(certs_dir)) for p in certs_dir.rglob("*.pem"))
    for relative, data in generated.items():
        assert (certs_dir / relative).read_bytes() == data, relative
    assert known_hosts() == ["auth.example.com", "checkout.example.com", "payments.internal.example.com"]


# -- logs -------------------------------------------------------------------------------------


def test_log_search_finds_the_expired_certificate_handshake_failures():
    result = search_logs(query='"certificate has expired"')

    assert result["total_matches"] >= 4
    assert all("certificate has expired" in line.lower() for line in result["lines"])
    assert result["by_service"].get("checkout-api", 0) >= 4
    assert any("payments.internal.example.com" in line for line in result["lines"])


def test_log_search_finds_the_missing_issuer_failures_for_auth():
    result = search_logs(query='"unable to get local issuer certificate"')

    assert result["total_matches"] >= 3
    assert set(result["by_service"]) == {"auth-gateway", "checkout-api"}
    assert all("auth.example.com" in line for line in result["lines"])


def test_log_search_filters_by_service_and_minimum_level_case_insensitively():
    result = search_logs(service="Payments", query="TLS", level="warn")

    assert result["total_matches"] > 0
    assert set(result["by_service"]) == {"payments"}
    assert set(result["by_level"]) <= {"WARN", "ERROR"}
    assert all(" INFO " not in line and " DEBUG " not in line for line in result["lines"])


def test_log_search_ranks_lines_matching_more_words_first_and_honours_the_limit():
    result = search_logs(query="payments.internal.example.com expired handshake", limit=2)

    assert result["returned"] == 2
    assert result["truncated"] is True
    assert result["total_matches"] > 2
    top = result["lines"][0].lower()
    assert "payments.internal.example.com" in top and "expired" in top and "handshake" in top


def test_log_search_rejects_an_unknown_service_or_level():
    with pytest.raises(LookupError, match="'billing'"):
        search_logs(service="billing")
    with pytest.raises(ValueError, match="'LOUD'"):
        search_logs(level="LOUD")


# -- tickets ----------------------------------------------------------------------------------


def test_ticket_lookup_by_id_returns_the_earlier_expired_certificate_incident():
    ticket = lookup_ticket(ticket_id="inc-1042")["ticket"]

    assert ticket["id"] == "INC-1042"
    assert ticket["status"] == "resolved"
    assert "expired" in ticket["tags"]
    assert "certificate" in ticket["resolution"]


def test_ticket_lookup_of_an_unknown_id_raises_lookup_error_naming_it():
    with pytest.raises(LookupError) as info:
        lookup_ticket(ticket_id="INC-9999")

    assert "'INC-9999'" in str(info.value)
    assert "INC-1042" in str(info.value)  # and says which ids exist


def test_ticket_keyword_search_ranks_the_certificate_incidents_first():
    result = lookup_ticket(query="expired certificate")

    assert result["matches"] >= 1
    assert result["tickets"][0]["id"] == "INC-1042"
    assert "INC-1203" not in [t["id"] for t in result["tickets"]]


# -- tool wiring ------------------------------------------------------------------------------


def test_support_tools_expose_schemas_with_described_parameters():
    specs = {tool.name: tool.spec() for tool in support_tools()}

    assert list(specs) == ["search_logs", "lookup_ticket", "inspect_certificate", "scan_fleet", "restart_service"]
    assert specs["inspect_certificate"].parameters["required"] == ["host"]
    assert specs["search_logs"].parameters["required"] == []
    assert specs["search_logs"].parameters["properties"]["limit"] == {
        "type": "integer",
        "description": "Most lines to return (1-200).",
        "default": 20,
    }
    for spec in specs.values():
        assert spec.description
        for name, schema in spec.parameters["properties"].items():
            assert schema.get("description"), f"{spec.name}.{name} has no description"


def test_bundled_data_stays_small():
    total = sum(p.stat().st_size for p in tools.DATA_DIR.rglob("*") if p.is_file())

    assert total < 200 * 1024
