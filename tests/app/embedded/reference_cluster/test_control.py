"""The control port over real HTTP (httpx): the cluster's state as JSON and fault injection.

Effects are checked in ZooKeeper through a separate session (``zk_client``) and on the brokers' ``/metrics``,
not in the simulation's memory; error answers must carry ``{"error": message}`` and change nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.control import ControlServer
from tests.support.reference_cluster import (
    ClusterFactory,
    ZkPartition,
    controller_epoch,
    controller_id,
    live_broker_ids,
    read_json,
    scrape,
    small_settings,
    wait_for,
    zk_partitions,
)
from tests.support.zookeeper import ZkClientFactory, ZooKeeperEndpoint, own_chroot

pytestmark = pytest.mark.integration

TOPICS = [
    TopicSpec(name="orders", partitions=4, replication_factor=3),
    TopicSpec(name="payments", partitions=2, replication_factor=2),
]
ISR_TIMEOUT = 60.0  # generous: the machine may be loaded; the wait is for the event, not a bound
Body = bytes | dict[str, Any] | list[Any]


@dataclass
class Control:
    """A started cluster and its control server, called over HTTP."""

    cluster: ReferenceCluster
    server: ControlServer

    def call(self, method: str, path: str, body: Body | None = None) -> Response:
        data = json.dumps(body).encode() if isinstance(body, dict | list) else body
        headers = {"Content-Type": "application/json"} if data is not None else {}
        response = httpx.request(
            method, f"{self.server.url}{path}", content=data, headers=headers, timeout=30, trust_env=False
        )
        return Response(response.status_code, response.headers.get("Content-Type", ""), response.content)

    def get(self) -> dict[str, Any]:
        return self.call("GET", "/").state()

    def post(self, path: str, body: Body | None = None) -> Response:
        return self.call("POST", path, body)


@dataclass
class Response:
    status: int
    content_type: str
    body: bytes

    @property
    def json(self) -> Any:
        assert self.content_type == "application/json", self.content_type
        return json.loads(self.body)

    def state(self) -> dict[str, Any]:
        """The cluster's new state, which every successful POST answers with."""
        assert self.status == 200, (self.status, self.body)
        result: dict[str, Any] = self.json
        return result

    def error(self, status: int) -> str:
        """Require an error answer with ``status``; returns its message."""
        assert self.status == status, (self.status, self.body)
        payload = self.json
        assert set(payload) == {"error"}, payload
        message = payload["error"]
        assert isinstance(message, str), payload
        assert message, payload
        return message


@pytest.fixture
def control(make_cluster: ClusterFactory) -> Iterator[Control]:
    cluster = make_cluster(topics=TOPICS)
    server = ControlServer(cluster)
    server.start()
    yield Control(cluster, server)
    server.close()


@dataclass
class Untouched:
    """A cluster and its control server shared by the module's tests that change nothing (a GET, or
    requests the control port refuses), in a chroot of its own."""

    control: Control
    zk_connect: str


@pytest.fixture(scope="module")
def untouched_cluster(zookeeper_server: ZooKeeperEndpoint) -> Iterator[Untouched]:
    with own_chroot(zookeeper_server, "control-untouched") as zk_connect:
        cluster = ReferenceCluster(small_settings(topics=TOPICS), zk_connect)
        cluster.start()
        server = ControlServer(cluster)
        server.start()
        try:
            yield Untouched(Control(cluster, server), zk_connect)
        finally:
            server.close()
            cluster.stop()
        assert not cluster.errors, cluster.errors


@pytest.fixture
def untouched(untouched_cluster: Untouched) -> Iterator[Control]:
    """The shared cluster's control, checked unchanged after each test (every broker running, none
    stalled, slow or with a failed log dir; the same topics; no skew), so that a refusal that changed
    something fails its own test, not a later one."""
    yield untouched_cluster.control
    state = untouched_cluster.control.get()
    brokers = [(b["id"], b["state"], b["stalled"], b["slow"], b["failed_log_dirs"]) for b in state["brokers"]]
    assert brokers == [(b, "running", False, False, []) for b in (0, 1, 2)]
    assert topic_names(state) == ["orders", "payments"]
    assert state["traffic"]["skew"] == {"brokers": {}, "topics": {}, "partitions": {}}


@pytest.fixture
def untouched_zk(untouched_cluster: Untouched, make_zk_client: ZkClientFactory) -> KazooClient:
    """A kazoo client on the shared cluster's chroot."""
    return make_zk_client(hosts=untouched_cluster.zk_connect)


def broker(state: dict[str, Any], broker_id: int) -> dict[str, Any]:
    [found] = [b for b in state["brokers"] if b["id"] == broker_id]
    result: dict[str, Any] = found
    return result


def topic_names(state: dict[str, Any]) -> list[str]:
    return [t["name"] for t in state["topics"]]


def isrs(zk: KazooClient, keys: set[tuple[str, int]]) -> list[tuple[int, ...]]:
    partitions = zk_partitions(zk)
    return [partitions[k].isr for k in keys]


def followed_by(zk: KazooClient, broker_id: int) -> set[tuple[str, int]]:
    return {k for k, p in zk_partitions(zk).items() if broker_id in p.replicas and p.leader != broker_id}


# --- GET / ---------------------------------------------------------------------------------------------


def test_get_root_describes_the_cluster_as_zookeeper_shows_it(
    untouched: Control, untouched_zk: KazooClient, untouched_cluster: Untouched
) -> None:
    answer = untouched.call("GET", "/")
    assert answer.status == 200
    state = answer.json
    assert set(state) == {
        "zookeeper", "migration", "controller", "brokers", "topics", "traffic", "consumer_groups"
    }  # fmt: skip
    assert state["consumer_groups"] == []
    assert state["migration"] is None  # until POST /migration/start (test_migration.py)
    assert state["zookeeper"] == untouched_cluster.zk_connect
    assert state["controller"] == {
        "broker_id": controller_id(untouched_zk),
        "epoch": controller_epoch(untouched_zk),
    }

    assert [b["id"] for b in state["brokers"]] == [0, 1, 2]
    partitions = zk_partitions(untouched_zk)
    for b in state["brokers"]:
        assert b["state"] == "running"
        assert b["registered"] is True
        assert (b["stalled"], b["slow"], b["failed_log_dirs"]) == (False, False, [])
        assert b["metrics_url"] == untouched.cluster.metrics_url(b["id"])
        assert b["broker_epoch"] == untouched_zk.exists(f"/brokers/ids/{b['id']}").czxid
        assert b["partitions"] == sum(1 for p in partitions.values() if b["id"] in p.replicas)
        assert b["leaders"] == sum(1 for p in partitions.values() if p.leader == b["id"])

    assert topic_names(state) == ["orders", "payments"]
    for topic in state["topics"]:
        assert [p["partition"] for p in topic["partitions"]] == list(range(len(topic["partitions"])))
        for p in topic["partitions"]:
            in_zk = partitions[topic["name"], p["partition"]]
            assert p["replicas"] == list(in_zk.replicas)
            assert (p["adding_replicas"], p["removing_replicas"]) == ([], [])
            assert p["leader"] == in_zk.leader
            assert p["isr"] == list(in_zk.isr)
            state_znode = read_json(
                untouched_zk, f"/brokers/topics/{topic['name']}/partitions/{p['partition']}/state"
            )
            assert p["leader_epoch"] == state_znode["leader_epoch"]

    traffic = state["traffic"]
    assert traffic["skew"] == {"brokers": {}, "topics": {}, "partitions": {}}
    assert traffic["produce_bytes_per_sec_per_partition"] > 0


# --- brokers ---------------------------------------------------------------------------------------------


def test_stop_and_start_a_broker(control: Control, zk_client: KazooClient) -> None:
    assert live_broker_ids(zk_client) == [0, 1, 2]

    stopped = control.post("/brokers/1/stop").state()
    assert broker(stopped, 1)["state"] == "stopped"
    assert broker(stopped, 1)["registered"] is False
    assert zk_client.exists("/brokers/ids/1") is None, "the crashed broker's session should be closed"
    assert "stopped" in control.post("/brokers/1/stop").error(409)

    started = control.post("/brokers/1/start").state()
    assert broker(started, 1)["state"] == "running"
    assert zk_client.exists("/brokers/ids/1") is not None
    assert read_json(zk_client, "/brokers/ids/1")["port"] == control.cluster.brokers[1].endpoint.port
    control.post("/brokers/1/start").error(409)
    wait_for(
        lambda: all(1 in p.isr for p in zk_partitions(zk_client).values() if 1 in p.replicas),
        timeout=ISR_TIMEOUT,
        message="broker 1 back in every ISR",
    )


def test_controlled_stop_hands_leadership_over_first(control: Control, zk_client: KazooClient) -> None:
    led = {k for k, p in zk_partitions(zk_client).items() if p.leader == 0}
    assert led
    control.post("/brokers/0/stop", {"controlled": "yes"}).error(422)
    assert live_broker_ids(zk_client) == [0, 1, 2]

    control.post("/brokers/0/stop", {"controlled": True}).state()
    partitions = zk_partitions(zk_client)
    assert all(partitions[k].leader not in {0, -1} for k in led if len(partitions[k].replicas) > 1)
    assert zk_client.exists("/brokers/ids/0") is None


NOT_FOUND = [
    "/brokers/7/stop",
    "/brokers/-1/start",
    "/brokers/abc/stop",
    "/brokers/1.5/stall",
    "/brokers//stop",
    "/brokers/7/log-dirs/0/fail",
    "/brokers/0/log-dirs/9/fail",
    "/brokers/0/log-dirs/x/fail",
]


def test_unknown_or_non_numeric_ids_are_404(
    untouched: Control, untouched_zk: KazooClient, subtests: pytest.Subtests
) -> None:
    for path in NOT_FOUND:
        with subtests.test(path=path):
            untouched.post(path).error(404)
    assert live_broker_ids(untouched_zk) == [0, 1, 2]
    assert all(not b["failed_log_dirs"] and not b["stalled"] for b in untouched.get()["brokers"])


def test_stall_then_resume_a_follower(control: Control, zk_client: KazooClient) -> None:
    followed = followed_by(zk_client, 2)
    assert followed
    control.post("/brokers/2/resume").error(409)  # neither stalled nor slow

    assert broker(control.post("/brokers/2/stall").state(), 2)["stalled"] is True
    wait_for(
        lambda: all(2 not in isr for isr in isrs(zk_client, followed)),
        timeout=ISR_TIMEOUT,
        message="the stalled broker out of the ISRs it follows",
    )
    resumed = control.post("/brokers/2/resume").state()
    assert (broker(resumed, 2)["stalled"], broker(resumed, 2)["slow"]) == (False, False)
    wait_for(
        lambda: all(2 in isr for isr in isrs(zk_client, followed)),
        timeout=ISR_TIMEOUT,
        message="the resumed broker back in the ISRs",
    )
    control.post("/brokers/2/resume").error(409)


def test_slow_follower_falls_out_of_the_isrs_and_resume_brings_it_back(
    control: Control, zk_client: KazooClient
) -> None:
    followed = followed_by(zk_client, 0)
    assert followed
    assert broker(control.post("/brokers/0/slow").state(), 0)["slow"] is True
    wait_for(
        lambda: all(0 not in isr for isr in isrs(zk_client, followed)),
        timeout=ISR_TIMEOUT,
        message="the slow broker out of the ISRs it follows",
    )
    assert broker(control.post("/brokers/0/resume").state(), 0)["slow"] is False
    wait_for(
        lambda: all(0 in isr for isr in isrs(zk_client, followed)),
        timeout=ISR_TIMEOUT,
        message="the resumed broker back in the ISRs",
    )


def test_faults_on_a_stopped_broker_are_409(control: Control) -> None:
    control.post("/brokers/2/stop").state()
    for action in ("stall", "slow", "resume", "log-dirs/0/fail"):
        control.post(f"/brokers/2/{action}").error(409)
    after = broker(control.get(), 2)
    assert (after["state"], after["stalled"], after["slow"], after["failed_log_dirs"]) == (
        "stopped",
        False,
        False,
        [],
    )


# --- controller ------------------------------------------------------------------------------------------


def test_stop_controller_elects_another_with_a_higher_epoch(control: Control, zk_client: KazooClient) -> None:
    first, first_epoch = controller_id(zk_client), controller_epoch(zk_client)
    assert first is not None

    answer = control.post("/controller/stop").state()
    assert broker(answer, first)["state"] == "stopped"
    second = wait_for(
        lambda: (c := controller_id(zk_client)) is not None and c != first and c,
        message="another broker in /controller",
    )
    assert second in {0, 1, 2} - {first}
    assert controller_epoch(zk_client) > first_epoch
    state = wait_for(
        lambda: s if (s := control.get())["controller"] else None, message="the new controller in GET /"
    )
    assert state["controller"] == {"broker_id": second, "epoch": controller_epoch(zk_client)}


# --- load skew ---------------------------------------------------------------------------------------------


BAD_SKEWS: dict[str, bytes | dict[str, Any]] = {
    "not-json": b"{not json",
    "not-an-object": b"[1, 2]",
    "empty": b"",
    "unknown-broker": {"brokers": {"7": 2}},
    "negative-factor": {"brokers": {"1": -1}},
    "non-numeric-factor": {"brokers": {"1": "fast"}},
    "unknown-key": {"bogus": 1},
    "good-and-bad": {"brokers": {"0": 3}, "topics": {"no-such-topic": 2}},
    "unknown-partition": {"partitions": {"orders-99": 2}},
    "non-bool-reset": {"reset": "yes"},
}


def test_bad_skew_bodies_are_422_and_apply_nothing(control: Control, subtests: pytest.Subtests) -> None:
    good = control.post("/load/skew", {"brokers": {"1": 4}}).state()
    assert good["traffic"]["skew"]["brokers"] == {"1": 4.0}
    for case, body in BAD_SKEWS.items():
        with subtests.test(case):
            control.post("/load/skew", body).error(422)
            assert control.get()["traffic"] == good["traffic"]


def test_good_skew_is_applied_and_reset_clears_it(control: Control) -> None:
    answer = control.post(
        "/load/skew", {"brokers": {"1": 4}, "topics": {"orders": 2}, "partitions": {"payments-1": 0.5}}
    ).state()
    assert answer["traffic"]["skew"] == {
        "brokers": {"1": 4.0},
        "topics": {"orders": 2.0},
        "partitions": {"payments-1": 0.5},
    }
    cleared = control.post("/load/skew", {"reset": True}).state()
    assert cleared["traffic"]["skew"] == {"brokers": {}, "topics": {}, "partitions": {}}


# --- topics -------------------------------------------------------------------------------------------------


def test_create_topic(control: Control, zk_client: KazooClient) -> None:
    control.post("/topics", {"name": "events", "partitions": 3, "replication_factor": 2}).state()

    znode = read_json(zk_client, "/brokers/topics/events")
    assert set(znode["partitions"]) == {"0", "1", "2"}
    assert all(len(set(r)) == 2 and set(r) <= {0, 1, 2} for r in znode["partitions"].values())
    created = wait_for(
        lambda: [p for k, p in zk_partitions(zk_client).items() if k[0] == "events" and p.leader is not None],
        message="the new topic's state znodes",
    )
    assert len(created) == 3
    assert all(p.leader in p.replicas and set(p.isr) == set(p.replicas) for p in created)
    state = wait_for(
        lambda: s if "events" in topic_names(s := control.get()) else None,
        message="the new topic in GET /",
    )
    [events] = [t for t in state["topics"] if t["name"] == "events"]
    assert len(events["partitions"]) == 3

    duplicate = control.post("/topics", {"name": "events", "partitions": 1, "replication_factor": 1})
    assert "events" in duplicate.error(409)
    control.post("/topics", {"name": "orders", "partitions": 4, "replication_factor": 3}).error(409)
    assert len(read_json(zk_client, "/brokers/topics/events")["partitions"]) == 3


def test_corrupt_state_makes_a_state_znode_unparseable(control: Control, zk_client: KazooClient) -> None:
    control.post("/topics/orders/partitions/0/corrupt-state", {}).state()
    data, _ = zk_client.get("/brokers/topics/orders/partitions/0/state")
    assert data == ReferenceCluster.CORRUPT_STATE
    with pytest.raises(json.JSONDecodeError):
        json.loads(data)
    assert "no state znode" in control.post("/topics/orders/partitions/99/corrupt-state", {}).error(404)
    assert "not a number" in control.post("/topics/orders/partitions/x/corrupt-state", {}).error(404)


BAD_TOPICS: dict[str, bytes | dict[str, Any]] = {
    "illegal-name": {"name": "bad name!", "partitions": 1, "replication_factor": 1},
    "no-partitions": {"name": "ok", "partitions": 0, "replication_factor": 1},
    "rf-zero": {"name": "ok", "partitions": 1, "replication_factor": 0},
    "rf-above-brokers": {"name": "ok", "partitions": 1, "replication_factor": 4},
    "missing-rf": {"name": "ok", "partitions": 1},
    "non-numeric": {"name": "ok", "partitions": "many", "replication_factor": 1},
    "unknown-field": {"name": "ok", "partitions": 1, "replication_factor": 1, "colour": "red"},
    "not-json": b"{not json",
    "empty": b"",
}


def test_bad_topic_specs_are_422_and_create_nothing(
    untouched: Control, untouched_zk: KazooClient, subtests: pytest.Subtests
) -> None:
    for case, body in BAD_TOPICS.items():
        with subtests.test(case):
            untouched.post("/topics", body).error(422)
            assert sorted(untouched_zk.get_children("/brokers/topics")) == ["orders", "payments"]


# --- log dirs ---------------------------------------------------------------------------------------


def test_log_dir_failure_is_notified_and_its_replicas_leave_the_isrs(
    control: Control, zk_client: KazooClient
) -> None:
    cluster = control.cluster
    lost = cluster.loop.call(
        lambda: {(tp.topic, tp.partition) for tp, lg in cluster.brokers[0].logs.items() if lg.log_dir == 0}
    )
    hosted = {k for k, p in zk_partitions(zk_client).items() if 0 in p.replicas}
    assert lost, "broker 0 should have replicas in log dir 0"
    assert lost < hosted, (lost, hosted)
    notifications = "/log_dir_event_notification"
    cversion_before = zk_client.exists(notifications).cversion

    answer = control.post("/brokers/0/log-dirs/0/fail").state()
    assert broker(answer, 0)["failed_log_dirs"] == [0]

    # the broker created a notification and the controller processed and deleted it
    wait_for(
        lambda: (
            not zk_client.get_children(notifications)
            and zk_client.exists(notifications).cversion >= cversion_before + 2
        ),
        message="the log dir event notification created and deleted",
    )

    def failed_replicas_out_of_isrs() -> dict[tuple[str, int], ZkPartition] | None:
        partitions = zk_partitions(zk_client)
        return partitions if all(0 not in partitions[k].isr for k in lost) else None

    partitions = wait_for(failed_replicas_out_of_isrs, message="the failed replicas out of their ISRs")
    assert all(partitions[k].leader not in {0, -1} for k in lost if len(partitions[k].replicas) > 1)
    assert all(0 in partitions[k].isr for k in hosted - lost), "replicas on the healthy dir stay in sync"

    metrics = scrape(str(cluster.metrics_url(0)))
    assert metrics.unlabelled("kafka_server_replicamanager_offlinereplicacount") == len(lost) > 0
    assert metrics.unlabelled("kafka_log_logmanager_offlinelogdirectorycount") == 1
    assert metrics.unlabelled("kafka_server_replicamanager_partitioncount") == len(hosted)

    control.post("/brokers/0/log-dirs/0/fail").error(409)


# --- routing ----------------------------------------------------------------------------------------


UNKNOWN_ROUTES = [
    ("POST", "/nope", 404),
    ("GET", "/nope", 404),
    ("GET", "/brokers/1/stop", 404),
    ("POST", "/brokers/1/explode", 404),
    ("POST", "/brokers/1/stop/now", 404),
    ("POST", "/controller/start", 404),
    ("POST", "/", 404),  # documented: 404 for an unknown route (GET is the only method of /)
]


def test_unknown_routes(untouched: Control, untouched_zk: KazooClient, subtests: pytest.Subtests) -> None:
    for method, path, status in UNKNOWN_ROUTES:
        with subtests.test(f"{method} {path}"):
            untouched.call(method, path).error(status)
    assert live_broker_ids(untouched_zk) == [0, 1, 2]


def test_oversized_body_is_413(untouched: Control) -> None:
    untouched.post("/load/skew", b" " * (64 * 1024 + 1)).error(413)
