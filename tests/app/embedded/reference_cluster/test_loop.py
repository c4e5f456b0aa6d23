"""The reference cluster's event loop: one thread, work ordered by due time, errors reported, not fatal."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial

import pytest

from app.embedded.reference_cluster.loop import EventLoop, LoopStoppedError

pytestmark = pytest.mark.unit

WAIT_S = 60.0
"""How long a test waits for what it expects (generous: the machine may be loaded)."""


class Errors:
    def __init__(self) -> None:
        self.seen: list[BaseException] = []
        self.event = threading.Event()

    def __call__(self, exc: BaseException) -> None:
        self.seen.append(exc)
        self.event.set()


@pytest.fixture
def errors() -> Errors:
    return Errors()


@pytest.fixture
def loop(errors: Errors) -> Iterator[EventLoop]:
    event_loop = EventLoop("test-loop", errors)
    event_loop.start()
    yield event_loop
    event_loop.stop(timeout=WAIT_S)


def hold(gate: threading.Event) -> None:
    gate.wait(WAIT_S)


def drain(loop: EventLoop) -> None:
    """Wait until everything posted so far with no delay has run."""
    loop.call(lambda: None, timeout=WAIT_S)


def test_work_runs_in_order_of_due_time(loop: EventLoop) -> None:
    ran: list[str] = []
    done = threading.Event()

    def last() -> None:
        ran.append("late")
        done.set()

    loop.post(last, delay_ms=120)
    loop.post(partial(ran.append, "soon"), delay_ms=20)
    loop.post(partial(ran.append, "middle"), delay_ms=60)
    loop.post(partial(ran.append, "now"))

    assert done.wait(WAIT_S)
    assert ran == ["now", "soon", "middle", "late"]


def test_work_due_at_the_same_time_runs_in_posting_order(loop: EventLoop) -> None:
    ran: list[int] = []
    gate = threading.Event()
    loop.post(partial(hold, gate))  # hold the loop so that all of them queue up

    for i in range(20):
        loop.post(partial(ran.append, i))
    gate.set()
    drain(loop)

    assert ran == list(range(20))


def test_delayed_work_waits_for_its_delay(loop: EventLoop) -> None:
    ran_at: list[float] = []
    done = threading.Event()

    def record() -> None:
        ran_at.append(time.monotonic())
        done.set()

    posted_at = time.monotonic()
    loop.post(record, delay_ms=100)

    assert done.wait(WAIT_S)
    assert ran_at[0] - posted_at >= 0.1


def test_work_runs_on_the_loop_thread(loop: EventLoop) -> None:
    names = loop.call(lambda: (threading.current_thread().name, loop.in_loop()), timeout=WAIT_S)

    assert names == ("test-loop", True)
    assert not loop.in_loop()


def test_call_returns_the_result(loop: EventLoop) -> None:
    assert loop.call(lambda: 6 * 7, timeout=WAIT_S) == 42


def test_call_propagates_the_exception(loop: EventLoop, errors: Errors) -> None:
    failure = KeyError("missing")

    def fail() -> None:
        raise failure

    with pytest.raises(KeyError) as info:
        loop.call(fail, timeout=WAIT_S)

    assert info.value is failure
    assert errors.seen == []  # the caller got it; it is not also reported as a loop error
    assert loop.call(lambda: "still running", timeout=WAIT_S) == "still running"


def test_error_in_posted_work_goes_to_on_error_and_the_loop_keeps_running(
    loop: EventLoop, errors: Errors
) -> None:
    failure = RuntimeError("boom")

    def fail() -> None:
        raise failure

    loop.post(fail)

    assert errors.event.wait(WAIT_S)
    assert errors.seen == [failure]
    assert loop.running
    assert loop.call(lambda: "after", timeout=WAIT_S) == "after"


def test_call_from_inside_the_loop_runs_inline(loop: EventLoop) -> None:
    def outer() -> tuple[str, bool]:
        # posting and waiting here would deadlock: the loop thread is busy running outer()
        return loop.call(lambda: (threading.current_thread().name, True), timeout=0.5)

    assert loop.call(outer, timeout=WAIT_S) == ("test-loop", True)


def test_call_on_a_loop_never_started_raises(errors: Errors) -> None:
    never_started = EventLoop("idle", errors)

    with pytest.raises(LoopStoppedError, match="idle is not running"):
        never_started.call(lambda: 1)


def test_call_on_a_stopped_loop_raises(loop: EventLoop) -> None:
    loop.stop(timeout=WAIT_S)

    assert not loop.running
    with pytest.raises(LoopStoppedError):
        loop.call(lambda: 1, timeout=WAIT_S)


def test_post_on_a_stopped_loop_is_dropped(loop: EventLoop) -> None:
    ran: list[int] = []
    loop.stop(timeout=WAIT_S)

    loop.post(partial(ran.append, 1))
    time.sleep(0.05)

    assert ran == []


def test_stop_drops_pending_delayed_work(loop: EventLoop) -> None:
    ran: list[int] = []
    loop.post(partial(ran.append, 1), delay_ms=50)

    loop.stop(timeout=WAIT_S)
    time.sleep(0.1)

    assert ran == []


def test_start_twice_is_harmless(loop: EventLoop) -> None:
    loop.start()

    assert loop.call(loop.in_loop, timeout=WAIT_S)


def test_stop_from_inside_the_loop_does_not_deadlock(loop: EventLoop) -> None:
    stopped = threading.Event()

    def stop_self() -> None:
        loop.stop(timeout=WAIT_S)
        stopped.set()

    loop.post(stop_self)

    assert stopped.wait(WAIT_S)
    assert not loop.running


def test_call_pending_when_the_loop_stops_raises_loop_stopped(loop: EventLoop) -> None:
    """A caller waiting on work the loop will now never run must hear so at once (LoopStoppedError, "work was
    handed to a loop that is not running"), not sit out its whole timeout: the HTTP threads call into the
    loop, and ``stop()`` drops queued work."""
    gate = threading.Event()
    outcome: list[BaseException | str] = []
    loop.post(partial(hold, gate))  # the loop is busy, so the call below stays queued

    def caller() -> None:
        try:
            outcome.append(str(loop.call(lambda: "ran", timeout=10 * WAIT_S)))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    _wait_for(lambda: _queued(loop) >= 1)
    loop.stop(timeout=0)
    gate.set()
    thread.join(WAIT_S)

    assert len(outcome) == 1  # within WAIT_S: the call did not sit out its timeout (10 x WAIT_S)
    assert isinstance(outcome[0], LoopStoppedError)


def _queued(loop: EventLoop) -> int:
    """White-box: the number of entries waiting in the loop's queue."""
    return len(loop._heap)


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.005)
