"""pytest plugin: fail the run when it leaves Java or Python processes behind.

At the end of the session it looks for processes this run started that are still alive:

* the pytest process's descendants (psutil, recursive), and
* any process, wherever it now hangs in the process tree, whose environment carries this session's marker
  (:data:`MARKER_ENV`, set at configure time and inherited by everything the run spawns), so that a JVM
  re-parented to init after its Python parent died is found too.

It ignores the session ZooKeeper while its fixture (``zookeeper_server``) is still alive, zombies (dead,
merely not reaped) and anything that exits within a short grace period. If java or python processes
remain, it lists them and sets the session's exit status to 1. It never kills anything.

Enable it in ``tests/conftest.py``: ``pytest_plugins = [..., "tests.support.orphans"]``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Generator

import psutil
import pytest

MARKER_ENV = "PYTEST_ORPHAN_CHECK_SESSION"
GRACE_SECONDS = 5.0
SESSION_ZOOKEEPER_FIXTURE = "zookeeper_server"

_token_key = pytest.StashKey[str]()
_previous_marker_key = pytest.StashKey[str | None]()
_session_zookeeper_key = pytest.StashKey[object]()


def pytest_configure(config: pytest.Config) -> None:
    token = uuid.uuid4().hex
    config.stash[_token_key] = token
    config.stash[_previous_marker_key] = os.environ.get(MARKER_ENV)
    os.environ[MARKER_ENV] = token


def pytest_unconfigure(config: pytest.Config) -> None:
    previous = config.stash.get(_previous_marker_key, None)
    if previous is None:
        os.environ.pop(MARKER_ENV, None)
    else:
        os.environ[MARKER_ENV] = previous


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest
) -> Generator[None, object, object]:
    result = yield
    if fixturedef.argname == SESSION_ZOOKEEPER_FIXTURE:
        request.config.stash[_session_zookeeper_key] = result
    return result


@pytest.hookimpl(trylast=True)  # after the runner's own sessionfinish has torn the session fixtures down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: its controller checks the whole tree
        return
    leftovers = find_leftovers(config.stash.get(_token_key, ""), _live_session_zookeeper_pids(config))
    if not leftovers:
        return
    lines = [f"{len(leftovers)} java/python process(es) left behind by this test run:"]
    lines += [f"  pid {pid} (parent {ppid}): {command}" for pid, ppid, command in leftovers]
    lines.append("  (stop them by pid, e.g. kill " + " ".join(str(pid) for pid, _, _ in leftovers) + ")")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")  # end the progress line
        reporter.write_sep("=", "orphan processes", red=True, bold=True)
        for line in lines:
            reporter.write_line(line, red=True)
    else:
        print("\n".join(lines))
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _live_session_zookeeper_pids(config: pytest.Config) -> set[int]:
    """The session ZooKeeper's JVM, if its fixture has not been finalized (e.g. an interrupted run)."""
    server = config.stash.get(_session_zookeeper_key, None)
    pid = getattr(server, "pid", None)
    running = getattr(server, "is_running", False)
    return {pid} if isinstance(pid, int) and running else set()


def find_leftovers(token: str, ignore: set[int]) -> list[tuple[int, int, str]]:
    """(pid, ppid, command line) of the java/python processes of this run still alive after the grace."""
    me = psutil.Process()
    candidates: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        candidates.update((p.pid, p) for p in me.children(recursive=True))
    if token:
        for process in psutil.process_iter():
            if process.pid == me.pid or process.pid in candidates:
                continue
            try:
                if process.environ().get(MARKER_ENV) == token:
                    candidates[process.pid] = process
            except psutil.Error:  # gone, a zombie, or someone else's
                continue
    suspects = [p for pid, p in candidates.items() if pid not in ignore and _is_live_java_or_python(p)]
    if not suspects:
        return []
    _, alive = psutil.wait_procs(suspects, timeout=GRACE_SECONDS)
    leftovers = []
    for process in alive:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            leftovers.append((process.pid, process.ppid(), " ".join(process.cmdline())[:300]))
        except psutil.Error:
            continue
    return sorted(leftovers)


def _is_live_java_or_python(process: psutil.Process) -> bool:
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        names = [process.name(), *process.cmdline()[:1]]
    except psutil.Error:
        return False
    return any(
        "java" in os.path.basename(n).lower() or "python" in os.path.basename(n).lower() for n in names
    )
