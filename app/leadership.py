"""The service's leadership: which replica delivers webhooks, writes incident alerts, runs runbook actions
and prunes the store.

Only one replica may do each of those at a time. :class:`ZooKeeperLeadership` is an ephemeral znode on a
ZooKeeper, held for as long as the instance's session lives; :class:`AlwaysLeader` is for a single instance
(``election = "none"``); :class:`FirstAnswering` leads through the first of several ZooKeepers that
answers (the shared parts of a service that watches several clusters). The webhook notifier, the incident
lane, the action runner and the retention pruner all take a :class:`Leadership` (or, for the action
executors, the :class:`StandingSource` part of it) and ask it before they act.

While its session is disconnected, the last leader stays the ``last-leader`` and keeps delivering webhooks:
when ZooKeeper itself is down nobody else can be elected, yet the staleness alert must still go out. The
parts that write the cluster (the action executors) pause instead.

Nothing is written into a ZooKeeper chroot that holds no Kafka cluster: the election's znode is created
only while ``present`` says the cluster is there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

from collectors.kafka.zkclient import ZooKeeperSecurity, kazoo_client

__all__ = [
    "DEFAULT_LOCK_PATH",
    "SHARED_LOCK_SUFFIX",
    "AlwaysLeader",
    "ElectionSettings",
    "FirstAnswering",
    "Leadership",
    "Standing",
    "StandingSource",
    "ZooKeeperLeadership",
    "service_leadership",
    "shared_leadership",
]

log = logging.getLogger(__name__)

DEFAULT_LOCK_PATH: Final = "/kafka-health/notifier-lock"
SHARED_LOCK_SUFFIX: Final = "-shared"
"""With several clusters, the shared parts' (notifier, retention pruner) election znode is ``lock_path``
with this suffix on a cluster's ZooKeeper, beside that cluster's own election at ``lock_path``."""


class ElectionSettings(Protocol):
    """How the service elects its leader: the election fields of the service's webhooks section
    (``KAFKA_HEALTH_SERVICE__WEBHOOKS__ELECTION``, ``..._LOCK_PATH``, ``..._ZOOKEEPER``,
    ``..._SESSION_TIMEOUT_S``: :class:`~app.webhooks.notifier.NotifierSettings`)."""

    @property
    def election(self) -> Literal["zookeeper", "none"]: ...

    @property
    def lock_path(self) -> str: ...

    @property
    def zookeeper(self) -> str | None: ...

    @property
    def session_timeout_s(self) -> float: ...


Standing = Literal["leader", "last-leader", "follower"]
"""``leader``: elected (checked just now); ``last-leader``: was the leader at its last check and cannot check
now (its ZooKeeper session is disconnected: nobody may have taken over yet, or ZooKeeper is down for
everyone); ``follower``: another instance leads, or this one never led."""


class StandingSource(Protocol):
    """Where this instance stands, asked before each act of a part that only one replica may do (the
    action executors' gate needs no more than this)."""

    def standing(self) -> Standing: ...


class Leadership(StandingSource, Protocol):
    """Who may deliver webhooks, write incident alerts, run actions and prune the store: :meth:`standing`
    is asked before every poll."""

    def start(self) -> None: ...

    def is_leader(self) -> bool: ...

    def stop(self) -> None: ...


class AlwaysLeader:
    """A single instance (or no ZooKeeper): always the leader."""

    def start(self) -> None:
        pass

    def is_leader(self) -> bool:
        return True

    def standing(self) -> Standing:
        return "leader"

    def stop(self) -> None:
        pass


class ZooKeeperLeadership:
    """Leader while this instance's ZooKeeper session owns the ephemeral znode at ``path``.

    :meth:`standing` creates the znode when it is missing and checks its owner (one read per call);
    :meth:`is_leader` is True only for ``leader``: it is False whenever the session is not connected
    (SUSPENDED included: another instance may take over once the session expires on the server), when
    :meth:`standing` says ``last-leader`` if this instance led at its last check. :meth:`stop` deletes the
    znode, so that another instance takes over at its next poll; a crashed instance's znode goes when its
    session expires (``session_timeout_s``). The client connects in the background: a ZooKeeper that is
    down delays the leadership, not the start.

    ``present`` (the service passes "the cluster's snapshot shows a Kafka cluster") guards the creation:
    while it answers False the znode is not created (this instance is a follower), so that the election
    never writes into a chroot that holds no Kafka cluster (``host:port/typo`` would otherwise get a
    persistent ``/typo/kafka-health``); None: always allowed.
    """

    def __init__(
        self,
        connect: str,
        path: str = DEFAULT_LOCK_PATH,
        *,
        identity: str | None = None,
        session_timeout_s: float = 10.0,
        security: ZooKeeperSecurity | None = None,
        present: Callable[[], bool] | None = None,
        **client_options: Any,
    ) -> None:
        self.path = path
        self._present = present
        self.identity = identity or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=5.0)
        self._client = kazoo_client(
            connect, timeout=session_timeout_s, security=security, connection_retry=retry, **client_options
        )
        self._mutex = threading.Lock()
        self._started = False
        self._was_leader = False

    @property
    def client(self) -> KazooClient:
        """The kazoo client (its session is the leadership's)."""
        return self._client

    def start(self) -> None:
        with self._mutex:
            if not self._started:
                self._client.start_async()
                self._started = True

    def is_leader(self) -> bool:
        return self.standing() == "leader"

    @property
    def connected(self) -> bool:
        """Whether its session answers now (started and CONNECTED)."""
        return self._started and self._client.state == KazooState.CONNECTED

    @property
    def eligible(self) -> bool:
        """Connected, and allowed to create its znode now (``present``)."""
        return self.connected and (self._present is None or self._present())

    def release(self) -> None:
        """Give the leadership up (delete the znode when this session owns it) and keep the session: another
        instance, or this one through another ZooKeeper, takes over."""
        with self._mutex:
            self._was_leader = False
            if not self._started or self._client.state != KazooState.CONNECTED:
                return
            self._release()

    def _release(self) -> None:
        try:
            session = self._client.client_id
            stat = self._client.exists(self.path)
            if stat is not None and session is not None and stat.owner_session_id == session[0]:
                self._client.delete(self.path, version=stat.version)
        except (NoNodeError, KazooException, self._client.handler.timeout_exception) as exc:
            log.debug("could not release %s (the session's end will): %s", self.path, exc)

    def standing(self) -> Standing:
        with self._mutex:
            if not self._started:
                return "follower"
            unknown: Standing = "last-leader" if self._was_leader else "follower"
            session = self._client.client_id
            if self._client.state != KazooState.CONNECTED or session is None:
                return unknown
            try:
                stat = self._client.exists(self.path)
                if stat is None:
                    if self._present is not None and not self._present():
                        self._was_leader = False
                        return "follower"
                    with contextlib.suppress(NodeExistsError):  # another instance was quicker
                        self._client.create(self.path, self.identity.encode(), ephemeral=True, makepath=True)
                    stat = self._client.exists(self.path)
            except (KazooException, self._client.handler.timeout_exception) as exc:
                log.debug("leadership check at %s failed: %s", self.path, exc)
                return unknown
            self._was_leader = stat is not None and stat.owner_session_id == session[0]
            return "leader" if self._was_leader else "follower"

    def leader(self) -> str | None:
        """The identity of the current leader (any instance), or None."""
        with self._mutex:
            if not self._started or self._client.state != KazooState.CONNECTED:
                return None
            try:
                data, _ = self._client.get(self.path)
            except (KazooException, self._client.handler.timeout_exception):
                return None
            return bytes(data).decode(errors="replace")

    def stop(self) -> None:
        with self._mutex:
            if not self._started:
                return
            self._started = False
            self._was_leader = False
            try:
                if self._client.state == KazooState.CONNECTED:
                    self._release()
            finally:
                self._client.stop()
                self._client.close()


class FirstAnswering:
    """Leadership through the first of several ZooKeepers (in the given order) whose session answers now:
    the shared parts of a service that watches several clusters (the notifier, the retention pruner) lead
    through the first cluster's ZooKeeper, and through the next one while that one is down, so that one
    cluster's ZooKeeper down does not stop webhook deliveries.

    Every candidate's session is kept open; :meth:`standing` asks the first connected candidate, and gives
    up what this instance holds through a candidate other than that one (another instance may be leading
    through the answering ZooKeeper now). With no candidate connected, the last leader stays
    ``last-leader``, as with one ZooKeeper."""

    def __init__(self, candidates: Sequence[ZooKeeperLeadership]) -> None:
        if not candidates:
            raise ValueError("FirstAnswering needs at least one ZooKeeper")
        self.candidates = tuple(candidates)
        self.identity = self.candidates[0].identity
        self._mutex = threading.Lock()
        self._through: int | None = None
        """The candidate this instance last led through."""
        self._was_leader = False

    def start(self) -> None:
        for candidate in self.candidates:
            candidate.start()

    def is_leader(self) -> bool:
        return self.standing() == "leader"

    def standing(self) -> Standing:
        with self._mutex:
            for index, candidate in enumerate(self.candidates):
                if not candidate.eligible:
                    continue
                standing = candidate.standing()
                if self._through is not None and self._through != index:
                    self.candidates[self._through].release()
                self._through = index if standing != "follower" else None
                self._was_leader = standing != "follower"
                return standing
            return "last-leader" if self._was_leader else "follower"

    @property
    def answering(self) -> int | None:
        """The index of the candidate whose ZooKeeper answers first, or None."""
        return next((i for i, c in enumerate(self.candidates) if c.eligible), None)

    def stop(self) -> None:
        for candidate in self.candidates:
            candidate.stop()


def service_leadership(
    zookeeper: str,
    settings: ElectionSettings,
    *,
    security: ZooKeeperSecurity | None = None,
    cluster: str | None = None,
    present: Callable[[], bool] | None = None,
) -> Leadership:
    """The service's one leadership (its notifier's and its incident lane's), not started: elected through
    the cluster's ZooKeeper (``settings.zookeeper`` to use another) unless ``settings.election`` is
    ``none``. ``security`` (the cluster's ZooKeeper credentials) applies to the cluster's ZooKeeper only,
    not to another one named by ``settings.zookeeper``. ``cluster``: a named cluster of a service that
    watches several (its incident lane's and its runner's leadership); on a dedicated election ZooKeeper
    its znode is ``lock_path-cluster-NAME``, so that each cluster elects on its own. ``present``: whether
    the cluster's ZooKeeper holds a Kafka cluster now; on the cluster's own ZooKeeper the election's znode
    is created only then (:class:`ZooKeeperLeadership`)."""
    if settings.election == "zookeeper":
        path = settings.lock_path
        if settings.zookeeper and cluster is not None:
            path = f"{path}-cluster-{cluster}"
        return ZooKeeperLeadership(
            settings.zookeeper or zookeeper,
            path,
            session_timeout_s=settings.session_timeout_s,
            security=None if settings.zookeeper else security,
            present=None if settings.zookeeper else present,
        )
    return AlwaysLeader()


def shared_leadership(
    zookeepers: Sequence[tuple[str, ZooKeeperSecurity | None]],
    settings: ElectionSettings,
    *,
    identity: str | None = None,
    present: Sequence[Callable[[], bool] | None] | None = None,
) -> Leadership:
    """The leadership of the shared parts (notifier, retention pruner) of a service that watches several
    clusters, not started: on ``settings.zookeeper`` at ``lock_path`` when it is set; else
    :class:`FirstAnswering` over the clusters' ``zookeepers`` (connect string, credentials; in the
    clusters' name order) at ``lock_path`` + :data:`SHARED_LOCK_SUFFIX`; :class:`AlwaysLeader` when
    ``settings.election`` is ``none``. ``present``: per cluster, whether its ZooKeeper holds a Kafka
    cluster now; a candidate is skipped (and writes nothing) while it does not."""
    if settings.election != "zookeeper":
        return AlwaysLeader()
    if settings.zookeeper:
        return ZooKeeperLeadership(
            settings.zookeeper,
            settings.lock_path,
            identity=identity,
            session_timeout_s=settings.session_timeout_s,
        )
    identity = identity or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return FirstAnswering(
        [
            ZooKeeperLeadership(
                connect,
                settings.lock_path + SHARED_LOCK_SUFFIX,
                identity=identity,
                session_timeout_s=settings.session_timeout_s,
                security=security,
                present=None if present is None else present[index],
            )
            for index, (connect, security) in enumerate(zookeepers)
        ]
    )
