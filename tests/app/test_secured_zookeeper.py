"""kafka-health against a secured ZooKeeper: digest authentication, SASL (DIGEST-MD5 through a JAAS file, as
Kafka configures it) and TLS to the client port with a client certificate, each through a Kafka-style
``--zk-config`` file: ``describe`` reads the cluster, a preferred replica election through the API writes
its admin znode (with Kafka's secure ACLs under ``zookeeper.set.acl``), and wrong credentials fail in one
line. One embedded server for the module (SASL and digest on the plain port, TLS on the secure port);
each test writes a small cluster into a chroot of its own with the bulk writer, then locks it down with
ACLs for the identity under test, so that a session without it is refused (NoAuth)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient
from kazoo.security import ACL, READ_ACL_UNSAFE, Id, Permissions, make_digest_acl
from pydantic import SecretStr

from app.cli.main import main
from app.embedded.reference_cluster.bulk import BulkClusterSpec, write_bulk_cluster
from app.embedded.zookeeper import EmbeddedZooKeeper, ServerSecurity, pick_free_port
from app.incidents.config import IncidentSettings
from app.retention.config import RetentionSettings
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from app.storage import open_database
from collectors.kafka import zkdata
from collectors.kafka.zkclient import ZooKeeperSecurity, kazoo_client, security_from_file
from collectors.zookeeper.collector import scan
from collectors.zookeeper.first_scan import CollectorSpec
from collectors.zookeeper.wire import ZooKeeperAuthFailedError
from tests.support.controller_stand_in import ControllerStandIn
from tests.support.reference_cluster import wait_for
from tests.support.secured_zookeeper import (
    DIGEST_PASSWORD,
    DIGEST_USER,
    SASL_PASSWORD,
    SASL_USER,
    Pki,
    make_pki,
)
from tests.support.service import OPERATOR, TOKENS, run_server

pytestmark = pytest.mark.integration

SPEC = BulkClusterSpec(
    brokers=3, topics=2, partitions_per_topic=4, replication_factor=3, non_preferred_fraction=1.0
)
PARTITIONS = SPEC.partitions
ELECTION = "/api/v1/actions/preferred-replica-election"


@dataclass(frozen=True)
class Secured:
    server: EmbeddedZooKeeper
    pki: Pki
    directory: Path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("secured-zk")
    pki = make_pki(directory / "pki")
    security = ServerSecurity(
        sasl_users={SASL_USER: SASL_PASSWORD}, tls_keystore=pki.server, tls_truststore=pki.ca
    )
    with EmbeddedZooKeeper(heap="256m", security=security) as server:
        yield Secured(server, pki, directory)


@dataclass(frozen=True)
class Cluster:
    connect: str
    """Plain port and chroot."""
    secure_connect: str
    """TLS port and chroot."""
    config: Path
    """The ``--zk-config`` file with the right credentials."""

    @property
    def security(self) -> ZooKeeperSecurity:
        return security_from_file(self.config)


def _write_config(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def _jaas(path: Path, password: str) -> Path:
    path.write_text(
        "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'  username="{SASL_USER}" password="{password}";\n}};\n'
    )
    return path


def _lock_down(client: KazooClient, root: str, acl: list[ACL]) -> None:
    """Every znode of the tree readable and writable by ``acl``'s identity only."""
    paths = [root]
    while paths:
        path = paths.pop()
        paths += [f"{path}/{child}" for child in client.get_children(path)]
        client.set_acls(path, acl)


def _cluster(secured: Secured, tmp_path: Path, kind: str, set_acl: bool = False) -> Cluster:
    chroot = f"/secured-{kind}-{uuid.uuid4().hex[:8]}"
    plain = secured.server.connect_string
    write_bulk_cluster(plain + chroot, SPEC)
    config = [f"zookeeper.set.acl={str(set_acl).lower()}"]
    if kind == "digest":
        acl = [make_digest_acl(DIGEST_USER, DIGEST_PASSWORD, all=True)]
        config.append(f"zookeeper.auth.digest={DIGEST_USER}:{DIGEST_PASSWORD}")
    elif kind == "sasl":
        acl = [ACL(Permissions.ALL, Id("sasl", SASL_USER))]
        config.append(f"java.security.auth.login.config={_jaas(tmp_path / 'jaas.conf', SASL_PASSWORD)}")
    else:
        acl = []
        config += [
            "zookeeper.ssl.client.enable=true",
            "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
            f"zookeeper.ssl.truststore.location={secured.pki.ca}",
            "zookeeper.ssl.truststore.type=PEM",
            f"zookeeper.ssl.keystore.location={secured.pki.client}",
            "zookeeper.ssl.keystore.type=PEM",
        ]
    cluster = Cluster(
        plain + chroot,
        secured.server.secure_connect_string + chroot,
        _write_config(tmp_path / "zk-client.properties", config),
    )
    if acl:
        admin = kazoo_client(plain, timeout=10.0, security=cluster.security)
        admin.start(timeout=10.0)
        try:
            _lock_down(admin, chroot, acl)
        finally:
            admin.stop()
            admin.close()
    return cluster


def _connect(cluster: Cluster, kind: str) -> str:
    return cluster.secure_connect if kind == "tls" else cluster.connect


def describe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["describe", "--timeout", "15s", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("kind", ["digest", "sasl", "tls"])
def test_describe_reads_a_secured_zookeeper(
    kind: str, secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _cluster(secured, tmp_path, kind)
    connect = _connect(cluster, kind)
    code, out, err = describe(
        capsys, "--zookeeper", connect, "--zk-config", str(cluster.config), "--format", "json"
    )
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert sorted(b["id"] for b in doc["brokers"]) == [0, 1, 2]
    assert doc["errors"] == []
    snapshot = scan(connect, timeout=15.0, security=cluster.security)
    assert sorted(snapshot.brokers) == [0, 1, 2]
    assert len(snapshot.partitions) == PARTITIONS
    assert snapshot.errors == ()


@pytest.mark.parametrize("kind", ["digest", "sasl"])
def test_without_the_credentials_the_acls_refuse_and_describe_says_so(
    kind: str, secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _cluster(secured, tmp_path, kind)
    snapshot = scan(cluster.connect, timeout=15.0)
    assert snapshot.errors, "every znode is locked to another identity"
    assert {e.reason.split(":")[0] for e in snapshot.errors} == {"not authorised"}
    code, out, err = describe(capsys, "--zookeeper", cluster.connect)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"error: {cluster.connect}: not authorised to read /")
    wrong = _write_config(tmp_path / "wrong.properties", [f"zookeeper.auth.digest={DIGEST_USER}:wrong"])
    code, _, err = describe(capsys, "--zookeeper", cluster.connect, "--zk-config", str(wrong))
    assert code == 1
    assert "not authorised" in err


def test_a_wrong_sasl_password_fails_at_once_in_one_line(
    secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _cluster(secured, tmp_path, "sasl")
    jaas = _jaas(tmp_path / "wrong-jaas.conf", "not-the-password")
    wrong = _write_config(tmp_path / "wrong.properties", [f"java.security.auth.login.config={jaas}"])
    started = time.monotonic()
    code, out, err = describe(
        capsys, "--zookeeper", cluster.connect, "--zk-config", str(wrong), "--timeout", "120s"
    )
    assert time.monotonic() - started < 60, (
        "an authentication failure is not retried until the timeout (120 s)"
    )
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert "refused the SASL login (authentication failed): check the credentials" in err
    with pytest.raises(ZooKeeperAuthFailedError):
        scan(cluster.connect, timeout=15.0, security=security_from_file(wrong))


# kazoo leaves the socket of a failed TLS handshake to the garbage collector (its ResourceWarning)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_tls_with_an_untrusted_server_or_no_client_certificate_fails(
    secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _cluster(secured, tmp_path, "tls")
    untrusted = _write_config(
        tmp_path / "untrusted.properties",
        ["zookeeper.ssl.client.enable=true", f"zookeeper.ssl.truststore.location={secured.pki.other_ca}"],
    )
    code, out, err = describe(
        capsys, "--zookeeper", cluster.secure_connect, "--zk-config", str(untrusted), "--timeout", "3s"
    )
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert "cannot read the cluster" in err
    assert "(TLS: is it the secure client port, does the trust store hold the server's CA" in err
    no_client_cert = _write_config(
        tmp_path / "no-cert.properties",
        ["zookeeper.ssl.client.enable=true", f"zookeeper.ssl.truststore.location={secured.pki.ca}"],
    )
    code, _, _ = describe(
        capsys, "--zookeeper", cluster.secure_connect, "--zk-config", str(no_client_cert), "--timeout", "3s"
    )
    assert code == 1, "the server needs a client certificate"
    bad = _write_config(tmp_path / "jks.properties", [
        "zookeeper.ssl.client.enable=true", "zookeeper.ssl.truststore.location=/etc/kafka/truststore.jks"
    ])  # fmt: skip
    code, _, err = describe(capsys, "--zookeeper", cluster.secure_connect, "--zk-config", str(bad))
    assert code == 2
    assert "only PEM is supported" in err


@contextmanager
def _service(connect: str, tmp_path: Path, security: ZooKeeperSecurity) -> Iterator[str]:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    open_database(store_url).close()
    settings = ServiceSettings(
        tokens=SecretStr(TOKENS),
        incidents=IncidentSettings(enabled=False),
        retention=RetentionSettings(enabled=False),
    )
    app = create_app(
        ServiceSpec(settings, [ClusterSpec(CollectorSpec(connect, security=security))], store_url=store_url)
    )
    server, thread = run_server(app, pick_free_port())
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_the_service_with_wrong_digest_credentials_is_not_ready_and_says_why(
    secured: Secured, tmp_path: Path
) -> None:
    cluster = _cluster(secured, tmp_path, "digest")
    wrong = ZooKeeperSecurity(digest=f"{DIGEST_USER}:wrong")
    with _service(cluster.connect, tmp_path, wrong) as url:
        ready = httpx.get(url + "/readyz")
        assert ready.status_code == 503
        assert ready.json()["reason"].startswith("not authorised to read /")


def _wait_done(url: str, action_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(f"{url}/api/v1/actions/{action_id}", headers=OPERATOR).json()
        return body if body["state"] not in ("PENDING", "RUNNING") else None

    return wait_for(done, timeout=60, message=f"action {action_id} finished")


@pytest.mark.parametrize("kind", ["digest", "sasl", "tls"])
def test_an_election_through_the_api_on_a_secured_zookeeper(
    kind: str, secured: Secured, tmp_path: Path
) -> None:
    cluster = _cluster(secured, tmp_path, kind, set_acl=True)
    connect = _connect(cluster, kind)
    security = cluster.security
    controller = kazoo_client(connect, timeout=10.0, security=security)
    controller.start(timeout=10.0)
    stand_in = ControllerStandIn(controller, connect, held=True, security=security)
    stand_in.start()
    try:
        with _service(connect, tmp_path, security) as url:
            _elect(url, controller, stand_in)
    finally:
        stand_in.stop()
        controller.stop()
        controller.close()
    assert stand_in.failures == []
    assert len(stand_in.elected) == PARTITIONS


def _elect(url: str, controller: KazooClient, stand_in: ControllerStandIn) -> None:
    run = httpx.post(url + ELECTION, json={"scope": "all", "dry_run": False}, headers=OPERATOR)
    assert run.status_code == 202, run.text
    acls = wait_for(
        _acls_of(controller, zkdata.PREFERRED_REPLICA_ELECTION_PATH),
        timeout=30,
        message="the election znode",
    )
    # zookeeper.set.acl: Kafka's secure ACL, all rights for the creator, read for everyone
    assert _creator_all_and_world_read(acls), acls
    stand_in.release()
    action = _wait_done(url, run.json()["action_id"])
    assert action["state"] == "SUCCEEDED", action
    assert action["result"]["elected"] == PARTITIONS


def _acls_of(client: KazooClient, path: str) -> Callable[[], list[ACL] | None]:
    def read() -> list[ACL] | None:
        if client.exists(path) is None:
            return None
        acls, _ = client.get_acls(path)
        return list(acls)

    return read


def _creator_all_and_world_read(acls: list[ACL]) -> bool:
    """The server expands ``auth`` (creator) into the creator's own identities."""
    world = [a for a in acls if a.id.scheme == "world"]
    own = [a for a in acls if a.id.scheme != "world"]
    return world == list(READ_ACL_UNSAFE) and bool(own) and all(a.perms == Permissions.ALL for a in own)
