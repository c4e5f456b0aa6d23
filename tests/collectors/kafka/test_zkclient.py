"""Kafka's ZooKeeper client configuration: the properties and JAAS files as Kafka reads them, what each
becomes for kazoo, the secure ACLs of ``zookeeper.set.acl``, and the clear errors for what is not
supported. (The secured sessions themselves: tests/collectors/zookeeper/test_secured.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import CREATOR_ALL_ACL, READ_ACL_UNSAFE

from collectors.kafka import zkclient
from collectors.kafka.zkclient import (
    Sasl,
    Tls,
    ZooKeeperSecurity,
    ZooKeeperSecurityError,
    acls_for,
    parse_jaas,
    parse_properties,
    security_from_file,
    security_from_properties,
)

pytestmark = pytest.mark.unit

JAAS = """
// Kafka's broker JAAS file: a KafkaServer section for clients, a Client section for ZooKeeper
KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin" password="admin-secret";
};
/* the ZooKeeper login */
Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="kafka"
    password="kafka-secret";
};
"""


def test_properties_as_java_reads_them() -> None:
    text = (
        "# comment\n! another\n\nzookeeper.ssl.client.enable=true\n"
        "zookeeper.ssl.truststore.location : /etc/zk/ca.pem\n"
        "zookeeper.clientCnxnSocket org.apache.zookeeper.ClientCnxnSocketNetty\n"
        "zookeeper.ssl.keystore.password=long\\\n   secret\n"
        "   zookeeper.set.acl=true   \n"
    )
    assert parse_properties(text) == {
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.ssl.truststore.location": "/etc/zk/ca.pem",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        "zookeeper.ssl.keystore.password": "longsecret",
        "zookeeper.set.acl": "true",
    }


def test_jaas_client_section_and_its_errors() -> None:
    assert parse_jaas(JAAS) == Sasl("kafka", "kafka-secret")
    assert parse_jaas(JAAS, service="zk").service == "zk"
    with pytest.raises(ZooKeeperSecurityError, match=r"no 'ZkClient' section \(found: Client, KafkaServer\)"):
        parse_jaas(JAAS, "ZkClient")
    with pytest.raises(ZooKeeperSecurityError, match=r"Krb5LoginModule.*only .*DigestLoginModule"):
        parse_jaas("Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };")
    with pytest.raises(ZooKeeperSecurityError, match="needs username"):
        parse_jaas('Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="x"; };')


def test_tls_from_kafka_names(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    store = tmp_path / "client.pem"
    ca.write_text("x")
    store.write_text("x")
    security = security_from_properties(
        {
            zkclient.SSL_CLIENT_ENABLE: "true",
            zkclient.SSL_TRUSTSTORE_LOCATION: str(ca),
            zkclient.SSL_TRUSTSTORE_TYPE: "PEM",
            zkclient.SSL_KEYSTORE_LOCATION: str(store),
            zkclient.SSL_KEYSTORE_PASSWORD: "pw",
        }
    )
    assert security.tls == Tls(str(ca), str(store), str(store), "pw", True, True)
    options = security.kazoo_options()
    assert options["use_ssl"] is True
    assert (options["ca"], options["certfile"], options["keyfile"]) == (str(ca), str(store), str(store))
    assert options["check_hostname"] is True
    off = security_from_properties(
        {zkclient.SSL_CLIENT_ENABLE: "true", zkclient.SSL_ENDPOINT_IDENTIFICATION: ""}
    )
    assert off.tls == Tls(check_hostname=False)
    assert security_from_properties({zkclient.SSL_TRUSTSTORE_LOCATION: str(ca)}).tls is None, (
        "TLS only with zookeeper.ssl.client.enable=true, as in Kafka"
    )


@pytest.mark.parametrize(
    ("location", "store_type", "kind"),
    [("/x/truststore.jks", "", "JKS"), ("/x/store.p12", "PKCS12", "PKCS12"), ("/x/store", "JKS", "JKS")],
)
def test_jks_and_pkcs12_are_refused_with_the_conversion(location: str, store_type: str, kind: str) -> None:
    props = {
        zkclient.SSL_CLIENT_ENABLE: "true",
        zkclient.SSL_TRUSTSTORE_LOCATION: location,
        zkclient.SSL_TRUSTSTORE_TYPE: store_type,
    }
    with pytest.raises(ZooKeeperSecurityError, match=f"a {kind} store; only PEM.*keytool -importkeystore"):
        security_from_properties(props)


def test_bad_values_are_named() -> None:
    with pytest.raises(
        ZooKeeperSecurityError, match=r"zookeeper.ssl.client.enable='yes': expected true or false"
    ):
        security_from_properties({zkclient.SSL_CLIENT_ENABLE: "yes"})
    with pytest.raises(ZooKeeperSecurityError, match=r"truststore.location=/nope/ca.pem: no such file"):
        security_from_properties(
            {zkclient.SSL_CLIENT_ENABLE: "true", zkclient.SSL_TRUSTSTORE_LOCATION: "/nope/ca.pem"}
        )
    with pytest.raises(ZooKeeperSecurityError, match=r"java.security.auth.login.config=/nope: no such file"):
        security_from_properties({zkclient.JAAS_CONFIG: "/nope"})
    with pytest.raises(ZooKeeperSecurityError, match=r"zookeeper.auth.digest: expected user:password"):
        security_from_properties({zkclient.AUTH_DIGEST: "nocolon"})
    with pytest.raises(ZooKeeperSecurityError, match="no such file"):
        security_from_file(Path("/nope/zk.properties"))


def test_a_whole_file_with_sasl_digest_and_acls(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)
    config = tmp_path / "zk-client.properties"
    config.write_text(
        f"java.security.auth.login.config={jaas}\nzookeeper.set.acl=true\n"
        "zookeeper.auth.digest=ops:ops-secret\nbroker.id=1\n"
    )
    security = security_from_file(config)
    assert security == ZooKeeperSecurity(
        digest="ops:ops-secret", sasl=Sasl("kafka", "kafka-secret"), tls=None, set_acl=True
    )
    assert "secret" not in repr(security)
    assert security.summary() == "SASL DIGEST-MD5 as 'kafka', digest as 'ops'"
    options = security.kazoo_options()
    assert options["auth_data"] == [("digest", "ops:ops-secret")]
    assert options["sasl_options"] == {
        "mechanism": "DIGEST-MD5",
        "username": "kafka",
        "password": "kafka-secret",
        "service": "zookeeper",
    }
    assert security_from_file(config, {zkclient.SASL_CLIENT: "false"}).sasl is None
    assert not ZooKeeperSecurity().secured
    assert ZooKeeperSecurity().kazoo_options() == {}


def test_set_acl_gives_kafkas_secure_acls() -> None:
    secure = ZooKeeperSecurity(set_acl=True)
    assert acls_for("/admin/preferred_replica_election", secure) == list(CREATOR_ALL_ACL + READ_ACL_UNSAFE)
    assert acls_for("/config/topics/orders", secure) == list(CREATOR_ALL_ACL + READ_ACL_UNSAFE)
    assert acls_for("/config/brokers/<default>", secure) == list(CREATOR_ALL_ACL)
    assert acls_for("/config/users/alice", secure) == list(CREATOR_ALL_ACL)
    assert acls_for("/delegation_token/tokens/t", secure) == list(CREATOR_ALL_ACL)
    assert acls_for("/admin/reassign_partitions", ZooKeeperSecurity()) is None
