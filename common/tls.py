"""TLS for listeners (stdlib `ssl`) and a development CA (`cryptography`).

Kafka's keys, PEM flavour: `ssl.keystore.location` (PEM holding the server certificate chain
and private key; `ssl.keystore.type=PEM`), `ssl.key.password` (if the key is encrypted),
`ssl.truststore.location` (PEM CA bundle used to verify client certificates) and
`ssl.client.auth` = none | requested | required. A client certificate's subject becomes the
principal `User:CN=...` on SSL listeners, as Kafka's default principal builder does.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsConfigError(ValueError):
    pass


def server_context(keystore: str, key_password: str | None = None, truststore: str | None = None,
                   client_auth: str = "none") -> ssl.SSLContext:
    if not keystore:
        raise TlsConfigError("ssl.keystore.location is required on an SSL/SASL_SSL listener")
    if client_auth not in CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth={client_auth!r}: must be none, requested or required")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(keystore, password=key_password)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"ssl.keystore.location={keystore}: {exc}") from None
    ctx.verify_mode = CLIENT_AUTH[client_auth]
    if client_auth != "none":
        if not truststore:
            raise TlsConfigError("ssl.client.auth needs ssl.truststore.location")
        try:
            ctx.load_verify_locations(truststore)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"ssl.truststore.location={truststore}: {exc}") from None
    return ctx


def client_context(cafile: str | None, certfile: str | None = None,
                   keyfile: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cafile)
    if certfile:
        ctx.load_cert_chain(certfile, keyfile)
    return ctx


def peer_principal(ssl_object) -> str | None:
    """`User:CN=name` from a verified client certificate, None without one."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert:
        return None
    parts = []
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
                     "countryName": "C", "localityName": "L"}.get(key, key)
            parts.append(f"{short}={value}")
    return "User:" + ",".join(parts) if parts else None


# -- development CA --------------------------------------------------------------------------------

def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def generate_dev_ca(directory: Path, hosts=("127.0.0.1", "localhost"),
                    clients=()) -> dict[str, Path]:
    """A throwaway CA plus one server certificate for `hosts` (and client certificates named
    by `clients`), written as PEM under `directory`. For `raftka dev --secure` and tests only:
    the CA key sits next to the certificates."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=365)

    def pem_key(key):
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raftka dev CA")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                            False), critical=True)
               .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, sans: list, usage) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
                   .issuer_name(ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)

    sans = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    paths = {"ca": directory / "ca.pem", "ca_key": directory / "ca-key.pem",
             "server": directory / "server.pem"}
    paths["ca"].write_bytes(ca_pem)
    _write_private(paths["ca_key"], pem_key(ca_key))
    cert_pem, key_pem = leaf(str(hosts[0]), sans, ExtendedKeyUsageOID.SERVER_AUTH)
    # keystore = key + chain in one PEM, which both ssl.load_cert_chain and Kafka's PEM
    # keystore type accept
    _write_private(paths["server"], key_pem + cert_pem + ca_pem)
    for name in clients:
        cert_pem, key_pem = leaf(name, [], ExtendedKeyUsageOID.CLIENT_AUTH)
        paths[f"client:{name}"] = directory / f"client-{name}.pem"
        _write_private(paths[f"client:{name}"], key_pem + cert_pem)
    return paths


def main(argv=None) -> int:
    """`python -m common.tls DIR [HOST ...]`: a dev CA + server certificate."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m common.tls DIR [HOST ...]", file=sys.stderr)
        return 2
    hosts = tuple(args[1:]) or ("127.0.0.1", "localhost")
    for name, path in generate_dev_ca(Path(args[0]), hosts).items():
        print(f"{name}={path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
