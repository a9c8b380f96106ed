"""Generate the demo's X.509 certificates (run once; the PEM files are committed).

    python -m agentsite.demo.make_certs [OUTPUT_DIR]

Writes a small PKI under `data/certs/` (or OUTPUT_DIR):

- `ca/root-ca.pem`: the trusted root ("Example Corp Root CA"), valid 2024-2046.
- `ca/intermediate-ca.pem`: the issuing CA ("Example Corp Issuing CA 1"), signed by the
  root, valid 2024-2041. Kept for reference (it is what a fixed server should send); the
  certificate tool does not trust it on its own.
- `hosts/checkout.example.com.pem`: leaf + intermediate; valid until 2037: healthy.
- `hosts/payments.internal.example.com.pem`: leaf + intermediate; expired on
  2026-11-14: the incident.
- `hosts/auth.example.com.pem`: leaf + root, the intermediate left out: clients fail with
  "unable to get local issuer certificate".

The output is byte-for-byte reproducible: the EC keys are derived from fixed labels and
the signatures use deterministic ECDSA (RFC 6979). Those keys are therefore public
knowledge: the certificates are demo data and must never be trusted for anything real.
No private key is written to disk.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "data" / "certs"

# The order of the P-256 group: a private scalar must lie in [1, n - 1].
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def _key(label: str) -> ec.EllipticCurvePrivateKey:
    """A P-256 key derived from a label, so that every run produces the same certificates."""
    digest = hashlib.sha256(f"agentsite-demo-pki/{label}".encode()).digest()
    scalar = int.from_bytes(digest, "big") % (_P256_ORDER - 1) + 1
    return ec.derive_private_key(scalar, ec.SECP256R1())


def _name(common_name: str, unit: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example Corp"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
class _Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _issue(
    *,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: _Issued | None,
    serial: int,
    not_before: str,
    not_after: str,
    ca_path_length: int | None = None,
    dns_names: tuple[str, ...] = (),
) -> _Issued:
    """Sign a certificate; `issuer=None` makes it self-signed (a root)."""
    signer_key = issuer.key if issuer is not None else key
    issuer_name = issuer.cert.subject if issuer is not None else subject
    is_ca = ca_path_length is not None
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(_utc(not_before))
        .not_valid_after(_utc(not_after))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=ca_path_length), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not is_ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()), critical=False)
    )
    if dns_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    cert = builder.sign(signer_key, hashes.SHA256(), ecdsa_deterministic=True)
    return _Issued(cert=cert, key=key)


def _leaf(host: str, *, issuer: _Issued, serial: int, not_before: str, not_after: str) -> _Issued:
    return _issue(
        subject=_name(host, "Platform"),
        key=_key(f"leaf/{host}"),
        issuer=issuer,
        serial=serial,
        not_before=not_before,
        not_after=not_after,
        dns_names=(host,),
    )


def build_pki() -> dict[str, bytes]:
    """Every PEM file of the demo, by path relative to the certs folder."""
    root = _issue(
        subject=_name("Example Corp Root CA", "Security"),
        key=_key("root"),
        issuer=None,
        serial=0x1001,
        not_before="2024-01-01T00:00:00",
        not_after="2046-01-01T00:00:00",
        ca_path_length=1,
    )
    intermediate = _issue(
        subject=_name("Example Corp Issuing CA 1", "Security"),
        key=_key("intermediate"),
        issuer=root,
        serial=0x2001,
        not_before="2024-01-01T00:00:00",
        not_after="2041-01-01T00:00:00",
        ca_path_length=0,
    )
    checkout = _leaf(
        "checkout.example.com",
        issuer=intermediate,
        serial=0x3001,
        not_before="2026-01-05T00:00:00",
        not_after="2037-01-05T00:00:00",
    )
    payments = _leaf(
        "payments.internal.example.com",
        issuer=intermediate,
        serial=0x3002,
        not_before="2025-11-14T00:00:00",
        not_after="2026-11-14T00:00:00",
    )
    auth = _leaf(
        "auth.example.com",
        issuer=intermediate,
        serial=0x3003,
        not_before="2026-02-01T00:00:00",
        not_after="2037-02-01T00:00:00",
    )

    def pem(*issued: _Issued) -> bytes:
        return b"".join(i.cert.public_bytes(serialization.Encoding.PEM) for i in issued)

    return {
        "ca/root-ca.pem": pem(root),
        "ca/intermediate-ca.pem": pem(intermediate),
        "hosts/checkout.example.com.pem": pem(checkout, intermediate),
        "hosts/payments.internal.example.com.pem": pem(payments, intermediate),
        # The misconfiguration of the demo: the server sends its leaf and the root, but
        # not the intermediate that signed the leaf.
        "hosts/auth.example.com.pem": pem(auth, root),
    }


def write_pki(output: Path = DEFAULT_OUTPUT) -> list[Path]:
    written = []
    for relative, data in build_pki().items():
        path = output / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    output = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUTPUT
    for path in write_pki(output):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
