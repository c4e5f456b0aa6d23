"""The shared parts' leadership of a service that watches several clusters: through the first cluster's
ZooKeeper that answers (:class:`FirstAnswering`), so that one ZooKeeper down does not stop deliveries; and
which leadership :func:`shared_leadership` and :func:`service_leadership` choose."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from app.leadership import (
    SHARED_LOCK_SUFFIX,
    AlwaysLeader,
    FirstAnswering,
    ZooKeeperLeadership,
    service_leadership,
    shared_leadership,
)
from app.webhooks.notifier import NotifierSettings
from tests.support.reference_cluster import wait_for
from tests.support.tcp_proxy import TcpProxy

LOCK = "/kafka-health/notifier-lock-shared"


@pytest.mark.integration
def test_the_leadership_moves_to_the_next_zookeeper_while_the_first_is_down_and_back(
    zk_connect: str, zk_client: KazooClient
) -> None:
    """Two instances, each over two ZooKeepers (two chroots; the first behind a proxy, cut as a ZooKeeper
    that is down for everyone): one leads through the first; with the first down it leads through the
    second (its deliveries go on); with the first back it leads through the first again and gives the
    second up; the other instance follows throughout."""
    zk_client.ensure_path("/a")
    zk_client.ensure_path("/b")
    servers, _, chroot = zk_connect.partition("/")
    host, port = servers.split(",")[0].rsplit(":", 1)

    def instance(proxy: TcpProxy, identity: str) -> FirstAnswering:
        return FirstAnswering(
            [
                ZooKeeperLeadership(
                    proxy.address(f"/{chroot}/a"), LOCK, identity=identity, session_timeout_s=4.0
                ),
                ZooKeeperLeadership(f"{servers}/{chroot}/b", LOCK, identity=identity, session_timeout_s=4.0),
            ]
        )

    with TcpProxy((host, int(port))) as proxy:
        one, two = instance(proxy, "one"), instance(proxy, "two")
        try:
            one.start()
            two.start()
            wait_for(lambda: one.answering == 0 and two.answering == 0, message="both connected")
            assert one.standing() == "leader"
            assert two.standing() == "follower"
            assert zk_client.get("/a" + LOCK)[0] == b"one"
            assert zk_client.exists("/b" + LOCK) is None

            proxy.cut()
            wait_for(lambda: one.answering == 1 and two.answering == 1, message="the first one down")
            assert one.standing() == "leader"  # through the second: deliveries go on
            assert two.standing() == "follower"
            assert zk_client.get("/b" + LOCK)[0] == b"one"

            proxy.restore()
            wait_for(lambda: one.answering == 0 and two.answering == 0, timeout=20, message="the first back")
            wait_for(lambda: one.standing() == "leader", timeout=20, message="leading through the first")
            assert zk_client.exists("/b" + LOCK) is None  # given up on the second
            assert two.standing() == "follower"
        finally:
            one.stop()
            two.stop()
    assert zk_client.exists("/a" + LOCK) is None


@pytest.mark.unit
def test_no_answering_zookeeper_leaves_the_last_leader_standing_as_such() -> None:
    """Not started: no candidate answers, and an instance that never led is a follower."""
    alone = FirstAnswering([ZooKeeperLeadership("127.0.0.1:1", LOCK)])
    assert alone.standing() == "follower"
    assert alone.answering is None
    with pytest.raises(ValueError, match="at least one"):
        FirstAnswering([])


@pytest.mark.unit
def test_which_leadership_the_service_uses() -> None:
    zookeepers = [("zk-a:2181/a", None), ("zk-b:2181/b", None)]
    shared = shared_leadership(zookeepers, NotifierSettings())
    assert isinstance(shared, FirstAnswering)
    assert [c.path for c in shared.candidates] == [NotifierSettings().lock_path + SHARED_LOCK_SUFFIX] * 2
    assert len({c.identity for c in shared.candidates}) == 1  # one instance, whichever ZooKeeper it leads
    dedicated = NotifierSettings(zookeeper="election:2181")
    on_its_own = shared_leadership(zookeepers, dedicated)
    assert isinstance(on_its_own, ZooKeeperLeadership)
    assert on_its_own.path == dedicated.lock_path
    # each cluster elects on its own: through its own ZooKeeper, or on the dedicated one at a path of its own
    own = service_leadership("zk-a:2181/a", NotifierSettings(), cluster="a")
    assert isinstance(own, ZooKeeperLeadership)
    assert own.path == NotifierSettings().lock_path
    on_dedicated = service_leadership("zk-a:2181/a", dedicated, cluster="a")
    assert isinstance(on_dedicated, ZooKeeperLeadership)
    assert on_dedicated.path == dedicated.lock_path + "-cluster-a"
    assert isinstance(shared_leadership(zookeepers, NotifierSettings(election="none")), AlwaysLeader)
