"""Signals while the main thread waits: Ctrl-C interrupts, other handlers run and the wait goes on.

Python runs signal handlers only in the main thread, so a blocking call there must wake up
to run them. These tests block the main thread (pytest runs tests in it) and send it a
signal from a helper thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import assert_free
from ctxlock import CancelToken, Lock, LockTimeout

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_kill")
    or threading.current_thread() is not threading.main_thread(),
    reason="needs POSIX signals and tests running in the main thread",
)

# When the helper thread sends the signal, counted from the start of the wait.
SEND_AFTER = 0.2
# Generous bound for a handler to run (the contract says ~50 ms).
HANDLER_BOUND = 2.0


@pytest.fixture
def usr1_handler() -> Iterator[list[float]]:
    """Install a SIGUSR1 handler that records when it ran (in the main thread)."""
    calls: list[float] = []

    def handler(signum: int, frame: Any) -> None:
        assert threading.current_thread() is threading.main_thread()
        calls.append(time.monotonic())

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        yield calls
    finally:
        signal.signal(signal.SIGUSR1, old)


def send_later(spawn, signum: int, delay: float = SEND_AFTER):
    """From a helper thread, send ``signum`` to the main thread after ``delay``; returns when."""
    main_ident = threading.main_thread().ident
    assert main_ident is not None

    def send() -> float:
        # Count the delay from when the main thread runs this file's code again (it is
        # back from starting this thread): on a loaded machine, or without a GIL, starting
        # a thread can take longer than the delay, and the signal must not land there.
        end = time.monotonic() + 10.0
        while time.monotonic() < end:
            frame = sys._current_frames().get(main_ident)
            if frame is not None and frame.f_code.co_filename == __file__:
                break
            time.sleep(0.001)
        time.sleep(delay)
        sent = time.monotonic()
        signal.pthread_kill(main_ident, signum)
        return sent

    return spawn(send)


def signal_main_thread(signum: int, until: Callable[[], object] = lambda: True) -> None:
    """From a helper thread: send ``signum`` to the main thread, then poll (up to 10 s)
    until ``until()`` (the handler's record, say: a handler sets nothing thread-safe)."""
    main_ident = threading.main_thread().ident
    assert main_ident is not None
    signal.pthread_kill(main_ident, signum)
    end = time.monotonic() + 10
    while not until() and time.monotonic() < end:
        time.sleep(0.005)


def catch_interrupt(fn: Callable[[], Any]) -> tuple[str, Any, float]:
    """Run fn in the main thread; return (outcome, value, when it ended).

    A KeyboardInterrupt that arrives late (fn not interruptible) is caught too, so that a
    failing implementation fails this test instead of aborting the whole session.
    """
    try:
        try:
            value = fn()
            outcome = "returned"
        except KeyboardInterrupt as exc:
            value = exc
            outcome = "interrupted"
        except Exception as exc:
            value = exc
            outcome = "raised"
        ended = time.monotonic()
        time.sleep(0.01)  # let a late signal arrive here rather than later
    except KeyboardInterrupt:
        return "late interrupt", None, time.monotonic()
    return outcome, value, ended


# --- Lock.acquire -----------------------------------------------------------------------------


@pytest.mark.parametrize("fair", [False, True])
def test_ctrl_c_interrupts_acquire_in_main_thread(spawn, default_sigint, fair):
    lock = Lock(fair=fair)
    holder = spawn(lock.acquire).result()
    sender = send_later(spawn, signal.SIGINT)
    outcome, value, ended = catch_interrupt(lambda: lock.acquire(deadline=10))
    if outcome == "returned":
        value()
    sent = sender.result()
    assert outcome == "interrupted", (outcome, value)
    assert ended - sent < HANDLER_BOUND
    # The interrupted waiter left the queue: the unlock hands the lock to nobody.
    assert lock.locked()
    holder()
    assert not lock.locked()
    u = lock.try_acquire()
    assert u is not None
    assert lock.locked()
    u()
    assert not lock.locked()


def test_ctrl_c_interrupts_acquire_with_token(spawn, default_sigint):
    lock = Lock()
    holder = spawn(lock.acquire).result()
    token = CancelToken(deadline=10)
    sender = send_later(spawn, signal.SIGINT)
    outcome, value, _ = catch_interrupt(lambda: lock.acquire(token))
    if outcome == "returned":
        value()
    sender.result()
    assert outcome == "interrupted", (outcome, value)
    assert not token.cancelled  # the interrupt does not cancel the token
    holder()
    u = lock.acquire(token, deadline=5)
    u()
    assert not lock.locked()


@pytest.mark.parametrize("fair", [False, True])
def test_signal_handler_runs_during_acquire_and_wait_continues(spawn, usr1_handler, fair):
    lock = Lock(fair=fair)
    holder = spawn(lock.acquire).result()
    ran = threading.Event()

    def signal_then_release() -> float:
        time.sleep(SEND_AFTER)
        signal_main_thread(signal.SIGUSR1, lambda: usr1_handler)
        ran.set()
        time.sleep(0.2)  # the acquire must keep waiting after the handler ran
        released = time.monotonic()
        holder()
        return released

    helper = spawn(signal_then_release)
    t0 = time.monotonic()
    u = lock.acquire(deadline=20)
    got = time.monotonic()
    released = helper.result()
    try:
        assert ran.is_set()
        assert len(usr1_handler) == 1, "the handler did not run while acquire was blocked"
        assert usr1_handler[0] - t0 < SEND_AFTER + HANDLER_BOUND
        assert usr1_handler[0] < released <= got
        assert lock.locked()
    finally:
        u()
    assert not lock.locked()


def test_signal_handler_runs_during_acquire_deadline_kept(spawn, usr1_handler):
    lock = Lock()
    holder = spawn(lock.acquire).result()
    try:
        send_later(spawn, signal.SIGUSR1)
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            lock.acquire(deadline=0.6)
        elapsed = time.monotonic() - t0
        assert len(usr1_handler) == 1
        # A signal neither ends the wait early nor restarts the deadline from zero.
        assert 0.6 - 0.005 <= elapsed < 0.6 + 5.0
    finally:
        holder()
    assert not lock.locked()


def test_exception_from_signal_handler_ends_acquire(spawn):
    class Stop(Exception):
        pass

    def handler(signum: int, frame: Any) -> None:
        raise Stop

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        lock = Lock(fair=True)
        holder = spawn(lock.acquire).result()
        sender = send_later(spawn, signal.SIGUSR1)
        with pytest.raises(Stop):
            lock.acquire(deadline=10)
        sender.result()
        holder()
        assert not lock.locked()
        u = lock.try_acquire()
        assert u is not None
        u()
    finally:
        signal.signal(signal.SIGUSR1, old)


@pytest.mark.parametrize("handler_waits", ["before the release", "after the release"])
def test_signal_handler_may_wait_for_the_lock_its_thread_waits_for(spawn, target, handler_waits):
    """A handler that acquires the lock its interrupted acquire waits for gets it first.

    The interrupted wait steps aside while the handler waits (a grant that reached it
    goes on), and queues again once the handler returns, as ``threading.Lock``'s does.
    Before, the release handed the lock to the interrupted wait, which could use it only
    once the handler returned: the handler's acquire waited out its deadline.
    """
    view = target.view
    holder = spawn(target.blocker.acquire).result()
    released = threading.Event()
    events: list[tuple[str, float]] = []
    waiting: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        # The interrupted acquire is queued (the signal did not come before it waited).
        waiting.append(view.statistics().waiting)
        events.append(("handler", time.monotonic()))
        if handler_waits == "after the release":
            assert released.wait(10)
            time.sleep(0.05)  # the release reached the interrupted wait by now
        try:
            unlock = view.acquire(deadline=10)
        except LockTimeout:
            events.append(("handler timed out", time.monotonic()))
            return
        events.append(("handler acquired", time.monotonic()))
        unlock()

    def signal_then_release() -> None:
        time.sleep(SEND_AFTER)
        signal_main_thread(signal.SIGUSR1, lambda: events)
        time.sleep(0.2)  # the handler's acquire is queued (or the handler sleeps)
        holder()
        released.set()

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        helper = spawn(signal_then_release)
        unlock = view.acquire(deadline=30)
        helper.result()
    finally:
        signal.signal(signal.SIGUSR1, old)
    try:
        assert [e for e, _ in events] == ["handler", "handler acquired"]
        assert waiting[0] >= 1
        assert view.locked()
    finally:
        unlock()
    assert_free(target)


def test_a_handler_that_does_not_block_leaves_the_interrupted_wait_its_turn(spawn):
    """A wait in a handler that never blocks (a token polled with timeout 0) leaves the
    interrupted acquire its place: the lock handed to it meanwhile is not passed on."""
    lock = Lock(fair=True)
    holder = spawn(lock.acquire).result()
    order: list[str] = []
    released = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        assert released.wait(10)
        time.sleep(0.05)  # the release handed the lock to the interrupted acquire
        CancelToken().wait(0)

    def other() -> None:
        with lock:
            order.append("other")

    def signal_then_release() -> None:
        time.sleep(SEND_AFTER)
        # The other thread queues behind the main thread's acquire.
        spawn(other)
        end = time.monotonic() + 10
        while lock.statistics().waiting < 2 and time.monotonic() < end:
            time.sleep(0.005)
        signal_main_thread(signal.SIGUSR1)
        time.sleep(0.1)
        holder()
        released.set()

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        helper = spawn(signal_then_release)
        with lock:
            order.append("main")
        helper.result()
    finally:
        signal.signal(signal.SIGUSR1, old)
    end = time.monotonic() + 10
    while len(order) < 2 and time.monotonic() < end:
        time.sleep(0.005)
    assert order == ["main", "other"]


# --- CancelToken.wait -------------------------------------------------------------------------


def test_ctrl_c_interrupts_token_wait(spawn, default_sigint):
    token = CancelToken()
    sender = send_later(spawn, signal.SIGINT)
    outcome, value, ended = catch_interrupt(lambda: token.wait(10))
    sent = sender.result()
    assert outcome == "interrupted", (outcome, value)
    assert ended - sent < HANDLER_BOUND
    assert not token.cancelled
    # The token still works after the interrupted wait.
    spawn(token.cancel, "after")
    assert token.wait(10) is True
    assert token.reason == "after"


def test_signal_handler_runs_during_token_wait_and_wait_continues(spawn, usr1_handler):
    token = CancelToken()

    def signal_then_cancel() -> float:
        time.sleep(SEND_AFTER)
        signal_main_thread(signal.SIGUSR1, lambda: usr1_handler)
        time.sleep(0.2)
        cancelled = time.monotonic()
        token.cancel("done")
        return cancelled

    helper = spawn(signal_then_cancel)
    t0 = time.monotonic()
    assert token.wait(20) is True
    woke = time.monotonic()
    cancelled = helper.result()
    assert len(usr1_handler) == 1
    assert usr1_handler[0] - t0 < SEND_AFTER + HANDLER_BOUND
    assert usr1_handler[0] < cancelled <= woke


def test_signal_handler_during_token_wait_keeps_timeout(spawn, usr1_handler):
    token = CancelToken()
    send_later(spawn, signal.SIGUSR1)
    t0 = time.monotonic()
    assert token.wait(0.6) is False
    elapsed = time.monotonic() - t0
    assert len(usr1_handler) == 1
    assert 0.6 - 0.005 <= elapsed < 0.6 + 5.0


# --- a real Ctrl-C on a child process ---------------------------------------------------------

SCRIPT = textwrap.dedent(
    """
    import signal
    import sys
    import threading

    import ctxlock

    # Python keeps SIGINT ignored if it started ignored, and a child inherits its
    # parent's signal mask: this child must not depend on the test session's state.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    lock = ctxlock.Lock()
    held = []
    t = threading.Thread(target=lambda: held.append(lock.acquire()))
    t.start()
    t.join()
    print("ready", flush=True)
    lock.acquire(deadline=30)
    print("acquired", flush=True)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_to_process_blocked_in_acquire():
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read() if proc.stderr else ""
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
        exited = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "acquired" not in out
    assert "KeyboardInterrupt" in err, err
    assert proc.returncode != 0
    assert exited - sent < 10
