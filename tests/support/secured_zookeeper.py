"""A secured ZooKeeper for the tests that need one: certificates made at test time with ``openssl``, and one
embedded server per test module with SASL (DIGEST-MD5) on its client port, digest ACLs (which need nothing
on the server) and a TLS port that requires a client certificate (ZooKeeper's own server options:
``app.embedded.zookeeper.ServerSecurity``). The shared unsecured server of ``tests.support.zookeeper`` is
left as it is."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

SASL_USER, SASL_PASSWORD = "kafka", "kafka-secret"
DIGEST_USER, DIGEST_PASSWORD = "ops", "ops-secret"
CLIENT_CN = "kafka-health-client"


@dataclass(frozen=True)
class Pki:
    """PEM files: the CA the server trusts and its clients trust (``ca``), the server's and a client's key
    store (private key and certificate in one file), and a CA that signed nothing here (``other_ca``)."""

    ca: Path
    server: Path
    client: Path
    other_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> Path:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
        "-subj", f"/CN={name}", "-days", "2", cwd=directory,
    )  # fmt: skip
    return directory / f"{name}.pem"


def _leaf(directory: Path, name: str, cn: str, ca: str, san: str | None) -> Path:
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
        "-subj", f"/CN={cn}", cwd=directory,
    )  # fmt: skip
    extra: list[str] = []
    if san is not None:
        (directory / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-out", f"{name}.crt", "-days", "2", *extra, cwd=directory,
    )  # fmt: skip
    bundle = directory / f"{name}.pem"
    bundle.write_text((directory / f"{name}.key").read_text() + (directory / f"{name}.crt").read_text())
    return bundle


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "test-ca")
    other = _ca(directory, "other-ca")
    server = _leaf(directory, "server", "localhost", "test-ca", "IP:127.0.0.1,DNS:localhost")
    client = _leaf(directory, "client", CLIENT_CN, "test-ca", None)
    return Pki(ca, server, client, other)
