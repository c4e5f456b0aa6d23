"""``kafka-health rolling-restart``: restart every broker once, one at a time, the controller last, never
while stopping one would take a partition offline or under min ISR (the conductor,
:mod:`app.maintenance.rolling_restart`; docs/runbooks/rolling-restart.md).

It keeps a live snapshot of the cluster (the ZooKeeper collector's watches), runs ``--restart-command``
for each broker (``{broker}`` and ``{host}`` filled in, split like a shell would, run without one) or, with
``--external``, waits for something else to restart it, and asks the kafka-health service at
``--service-url`` (token from ``KAFKA_HEALTH_TOKEN``) to demote, promote and silence it. Its journal in
``--state-dir`` lets ``--resume`` continue a run that crashed, was killed or paused (SIGINT/SIGTERM).

Exit codes: 0 done, 3 stopped before or at a broker (not safe to stop in time, a condition the restart does
not explain, not rejoined in time, the restart command failed, paused), 1 the cluster (or the service)
could not be read, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from app.cli.common import (
    ExitCode,
    add_zk_config_argument,
    duration,
    positive_duration,
    settings_or_error,
    settings_tree_with_flags,
    stop_signals,
)
from app.cli.safe_to_stop import positive_int
from app.maintenance.journal import DONE, Journal, JournalError, Options, RunRecord
from app.maintenance.rolling_restart import (
    Conductor,
    Event,
    MaintenanceService,
    Outcome,
    Restarter,
    RestartFailedError,
    ServiceError,
    known_brokers,
    plan_order,
    report,
)
from app.maintenance.service_client import ServiceClient
from app.settings import NO_ZOOKEEPER, Settings
from collectors.health import no_kafka_cluster
from collectors.kafka.model import ClusterSnapshot
from collectors.kafka.zkdata import parse_connect_string
from collectors.zookeeper.collector import ZooKeeperCollector, ZooKeeperCollectorError

HELP = "restart every broker once, one at a time, the controller last, only when it is safe to stop"
DESCRIPTION = (
    "Exit codes: 0 done, 3 stopped (not safe to stop in time, an alert the restart does not explain, a "
    "broker not back in its ISRs in time, the restart command failed, paused by SIGINT/SIGTERM: run again "
    "with --resume), 1 cannot read the cluster or the service, 2 bad input."
)
TOKEN_ENV = "KAFKA_HEALTH_TOKEN"
PLACEHOLDERS = ("{broker}", "{host}")
DEFAULT_STATE_DIR = Path("~/.local/state/kafka-health/rolling-restart")
NEEDS_SERVICE = (
    "demoting and silencing a broker go through the kafka-health service: pass --service-url URL (token in "
    "KAFKA_HEALTH_TOKEN), or --no-demote --no-silence"
)


def broker_list(text: str) -> list[int] | None:
    """``all`` (None) or ``1,2,3``: distinct broker ids."""
    if text.strip() == "all":
        return None
    ids = [part.strip() for part in text.split(",")]
    if not ids or not all(part.isdigit() for part in ids):
        raise argparse.ArgumentTypeError(f"{text!r} is not 'all' or a comma-separated list of broker ids")
    brokers = [int(part) for part in ids]
    if len(set(brokers)) != len(brokers):
        raise argparse.ArgumentTypeError(f"{text!r} names a broker twice")
    return brokers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/chroot]",
        help="the cluster's ZooKeeper (or KAFKA_HEALTH_ZOOKEEPER__CONNECT)",
    )
    add_zk_config_argument(parser)
    parser.add_argument(
        "--brokers",
        type=broker_list,
        default=None,
        metavar="1,2,3|all",
        help="the brokers to restart, in this order (the controller is moved last; default: all)",
    )
    restart = parser.add_mutually_exclusive_group()
    restart.add_argument(
        "--restart-command",
        metavar="CMD",
        help="restarts one broker and exits 0, e.g. 'ssh {host} sudo systemctl restart kafka' "
        "({broker}, {host} filled in; split like a shell would, run without one)",
    )
    restart.add_argument(
        "--external",
        action="store_true",
        help="something else restarts the brokers: say when each one may stop, wait for it to come back",
    )
    parser.add_argument("--no-demote", action="store_true", help="do not move its leaderships away first")
    parser.add_argument("--no-silence", action="store_true", help="do not silence what its absence raises")
    parser.add_argument(
        "--service-url",
        metavar="URL",
        help="the kafka-health service that demotes, promotes and silences (token from KAFKA_HEALTH_TOKEN)",
    )
    parser.add_argument(
        "--wait-rejoined",
        type=positive_duration,
        default=600.0,
        metavar="SECONDS",
        help="a broker's window, from its silence to its rejoining every ISR (default 600)",
    )
    parser.add_argument(
        "--max-unsafe-wait",
        type=duration,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for a broker to become safe to stop before stopping the run (default 600)",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where the run's journal is kept (default {DEFAULT_STATE_DIR})",
    )
    parser.add_argument("--resume", action="store_true", help="continue the run journaled in --state-dir")
    parser.add_argument(
        "--timeout",
        type=positive_duration,
        default=30.0,
        metavar="SECONDS",
        help="seconds to read the cluster at the start (default 30)",
    )
    parser.add_argument(
        "--default-min-insync-replicas",
        "--default-min-isr",
        type=positive_int,
        metavar="N",
        help="the brokers' static min.insync.replicas, for topics that set none and no dynamic broker "
        "default (default: KAFKA_HEALTH_SERVICE__VIEW__DEFAULT_MIN_INSYNC_REPLICAS, else Kafka's 1)",
    )


# --- input -------------------------------------------------------------------------------------------------


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Flags over ``KAFKA_HEALTH_*`` over defaults, and the checks that need no cluster; raises ValueError
    (or a ValidationError) with a one-line message."""
    tree = settings_tree_with_flags(args)
    if args.default_min_insync_replicas is not None:
        tree["service"]["view"]["default_min_insync_replicas"] = args.default_min_insync_replicas
    settings = Settings.model_validate(tree)
    if settings.zookeeper.connect is None:
        raise ValueError(NO_ZOOKEEPER)
    parse_connect_string(settings.zookeeper.connect)
    if not args.resume:
        if args.restart_command is None and not args.external:
            raise ValueError("pass --restart-command CMD (or --external)")
        if args.restart_command is not None:
            command_argv(args.restart_command, 0, "host")
    if not args.resume and not (args.no_demote and args.no_silence) and not args.service_url:
        raise ValueError(NEEDS_SERVICE)
    return settings


def command_argv(template: str, broker: int, host: str | None) -> list[str]:
    """The restart command for ``broker``: ``template`` split like a shell would (no shell runs it), each
    word with ``{broker}`` and ``{host}`` filled in. Raises ValueError when it cannot be split or run."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise ValueError(f"--restart-command {template!r} cannot be split: {exc}") from exc
    if not words:
        raise ValueError("--restart-command is empty")
    argv = [w.replace("{broker}", str(broker)).replace("{host}", host or "") for w in words]
    if shutil.which(argv[0]) is None:
        raise ValueError(f"--restart-command: {words[0]!r} is not a command found on PATH")
    return argv


class CommandRestarter:
    """Runs ``--restart-command`` for a broker; its output goes to ``output`` (stderr with ``--format
    json``, so that stdout stays JSON)."""

    def __init__(self, template: str, output: TextIO) -> None:
        self.template = template
        self.output = output

    def restart(self, broker: int, host: str | None) -> None:
        try:
            argv = command_argv(self.template, broker, host)
        except ValueError as exc:
            raise RestartFailedError(str(exc)) from exc
        self.output.flush()
        try:
            completed = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=self.output, stderr=sys.stderr, check=False
            )
        except OSError as exc:
            raise RestartFailedError(f"{shlex.join(argv)}: {exc}") from exc
        if completed.returncode != 0:
            raise RestartFailedError(f"{shlex.join(argv)} exited with {completed.returncode}")


class LiveCluster:
    """The ZooKeeper collector's live snapshot and an event set at each change (the conductor's Cluster)."""

    def __init__(self, collector_factory: Any) -> None:
        self.changed = threading.Event()
        self.collector: ZooKeeperCollector = collector_factory(lambda _s: self.changed.set())

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.collector.snapshot


# --- output ------------------------------------------------------------------------------------------------


class Narrator:
    """Events as text lines with a time (``--format text``) or as JSON lines (``--format json``)."""

    def __init__(self, fmt: str, out: TextIO) -> None:
        self.fmt = fmt
        self.out = out

    def __call__(self, event: Event) -> None:
        if self.fmt == "json":
            self.out.write(json.dumps(event.to_json()) + "\n")
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(event.at))
            who = f"broker {event.broker}: " if event.broker is not None else ""
            self.out.write(f"{stamp} {who}{event.message}\n")
        self.out.flush()


def write_report(record: RunRecord, outcome: Outcome, fmt: str, out: TextIO) -> None:
    if fmt == "json":
        out.write(json.dumps({"event": "report", **report(record, outcome)}) + "\n")
    out.flush()


# --- the command -------------------------------------------------------------------------------------------


def run(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stop: threading.Event | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    settings = settings_or_error(lambda: settings_from_args(args), err)
    if settings is None:
        return ExitCode.BAD_INPUT
    zk = settings.zookeeper
    assert zk.connect is not None
    journal = Journal((args.state_dir or DEFAULT_STATE_DIR).expanduser())
    try:
        previous = journal.load()
    except JournalError as exc:
        err.write(f"error: {exc}\n")
        return ExitCode.BAD_INPUT
    problem = journal_problem(args, previous, zk.connect, journal)
    if problem is not None:
        err.write(f"error: {problem}\n")
        return ExitCode.BAD_INPUT
    if args.resume and previous is not None and previous.state == DONE:
        out.write(f"the rolling restart journaled in {journal.path} is done already\n")
        return ExitCode.OK

    service: ServiceClient | None = None
    options = previous.options if args.resume and previous is not None else None
    demote = options.demote if options else not args.no_demote
    silence = options.silence if options else not args.no_silence
    if demote or silence:
        if not args.service_url:
            err.write(f"error: {NEEDS_SERVICE}\n")
            return ExitCode.BAD_INPUT
        service = ServiceClient(args.service_url, os.environ.get(TOKEN_ENV) or None)
        try:
            missing = service.missing_routes(demote=demote, silence=silence)
        except ServiceError as exc:
            err.write(f"error: cannot read the service at {args.service_url}: {exc}\n")
            service.close()
            return ExitCode.FAILED
        if missing:
            err.write(
                f"error: the service at {args.service_url} has no {', '.join(missing)}: upgrade it, or pass "
                "--no-demote --no-silence\n"
            )
            service.close()
            return ExitCode.FAILED

    default_min_isr = settings.service.view.default_min_insync_replicas
    cluster = LiveCluster(
        lambda on_change: ZooKeeperCollector(
            zk.connect,
            connections=zk.connections,
            session_timeout_s=zk.session_timeout_s,
            on_change=on_change,
            security=zk.security(),
        )
    )
    try:
        cluster.collector.start(timeout=args.timeout)
    except ZooKeeperCollectorError as exc:
        err.write(f"error: cannot read the cluster at {zk.connect}: {exc}\n")
        return ExitCode.FAILED
    try:
        missing_cluster = no_kafka_cluster(cluster.snapshot)
        if missing_cluster is not None:
            err.write(f"error: {zk.connect}: {missing_cluster}\n")
            return ExitCode.FAILED
        if args.resume and previous is not None:
            record = previous
            if args.restart_command is not None or args.external:  # a corrected command, or another mode
                record.options.restart_command = None if args.external else args.restart_command
        else:
            record_or_problem = new_record(args, cluster.snapshot, zk.connect)
            if isinstance(record_or_problem, str):
                err.write(f"error: {record_or_problem}\n")
                return ExitCode.BAD_INPUT
            record = record_or_problem
        command_output = err if args.format == "json" else out
        restarter: Restarter | None = None
        if record.options.restart_command is not None:
            restarter = CommandRestarter(record.options.restart_command, command_output)
        maintenance: MaintenanceService | None = service

        def conduct(signalled: threading.Event) -> Outcome:
            conductor = Conductor(
                cluster,
                journal,
                record,
                restarter=restarter,
                service=maintenance,
                stop=signalled,
                on_event=Narrator(args.format, out),
                progress=command_output,
                default_min_insync_replicas=default_min_isr,
            )
            return conductor.run()

        if stop is not None:
            outcome = conduct(stop)
        else:
            with stop_signals() as signalled:
                outcome = conduct(signalled)
        write_report(record, outcome, args.format, out)
        if outcome.exit_code != 0 and args.format == "text":
            err.write(f"{outcome.message}\n")
        return outcome.exit_code
    finally:
        cluster.collector.stop()
        if service is not None:
            service.close()


def journal_problem(
    args: argparse.Namespace, previous: RunRecord | None, connect: str, journal: Journal
) -> str | None:
    """Why the journal and the flags disagree (bad input), or None."""
    if args.resume:
        if previous is None:
            return f"nothing to resume: no journal at {journal.path} (pass the --state-dir of the run)"
        if previous.zookeeper != connect:
            return (
                f"the run journaled in {journal.path} is on {previous.zookeeper}, not {connect}: pass that "
                "--zookeeper, or another --state-dir"
            )
        if (
            args.brokers is not None
            and args.brokers != previous.order
            and sorted(args.brokers) != sorted(previous.order)
        ):
            order = ",".join(str(b) for b in previous.order)
            return f"--brokers differs from the journaled run's ({order}): leave it out with --resume"
        return None
    if previous is not None and previous.state != DONE:
        return (
            f"a rolling restart journaled in {journal.path} has not finished ({previous.state}): run again "
            "with --resume, or remove that file to start over"
        )
    return None


def new_record(args: argparse.Namespace, snapshot: ClusterSnapshot, connect: str) -> RunRecord | str:
    """A new run's record, or why the brokers asked for cannot be restarted (bad input)."""
    known = known_brokers(snapshot)
    requested = sorted(snapshot.brokers) if args.brokers is None else list(args.brokers)
    unknown = [b for b in requested if b not in known]
    if unknown:
        listed = ", ".join(str(b) for b in known) or "none"
        return (
            f"broker {', '.join(str(b) for b in unknown)} is neither registered nor assigned any replica "
            f"(known brokers: {listed})"
        )
    if not requested:
        return "no broker is registered: nothing to restart"
    options = Options(
        demote=not args.no_demote,
        silence=not args.no_silence,
        restart_command=None if args.external else args.restart_command,
        wait_rejoined_s=args.wait_rejoined,
        max_unsafe_wait_s=args.max_unsafe_wait,
    )
    return RunRecord(
        zookeeper=connect,
        order=plan_order(requested, snapshot.controller.broker_id),
        known_brokers=known,
        options=options,
        started_at=time.time(),
    )
