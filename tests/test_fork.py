"""What a child process sees after ``os.fork()`` (Linux and other POSIX systems).

The definition, which these tests pin down:

- A lock's state is copied into the child as it was at the fork, exactly like a
  ``threading.Lock``'s. A lock held by another thread of the parent stays held in the
  child, where that thread does not exist: the child must not wait for it without a
  limit, and an acquire with a deadline (or ``blocking=False``, ``try_acquire``) tells
  it so. The ``Unlock`` objects the child inherited can still release such a hold.
- A lock free at the fork is fully usable in the child, by its threads and tasks.
- A lock held by the forking thread is held by the child's only thread, which releases
  it with its ``Unlock``; the child's release does not touch the parent's lock.
- Tokens keep their deadlines in the child. ctxlock's timer thread (which cancels tokens
  at their deadlines) is not copied by ``fork``, but blocking acquires and
  ``token.wait()`` check the deadline themselves, and asyncio acquires use the event
  loop's timer, so those waits end at the deadline. A token also "cancels itself" at
  its deadline with nobody waiting (``cancelled``, ``on_cancel``, ``unlock_on_cancel``,
  ``wait_async``), as it does in the parent: that needs a timer in the child.

Every child runs under ``signal.alarm`` with the default action, so a child stuck in
native code is killed rather than hanging the suite; the parent also gives up on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import test_lock_manager as contract
from conftest import wait_until
from ctxlock import (
    BackendError,
    CancelToken,
    Lock,
    LockManager,
    LockTimeout,
    SharableLock,
    Unlock,
    WouldBlock,
)
from ctxlock._bench import pg_server
from kinds import KINDS, Kind, over

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or sys.platform == "darwin", reason="needs os.fork() (Linux)"
)

# The child is killed by SIGALRM after this many seconds; the parent waits a bit longer.
CHILD_ALARM = 10
PARENT_WAIT = 20.0


def fork() -> int:
    """``os.fork()``; 3.12+ warns when the parent has threads, as these tests mean to."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def in_child(fn: Callable[[], object]) -> None:
    """Run ``fn`` in a forked child; fail the test with the child's traceback if it fails."""
    reap_child(*start_child(fn))


def start_child(fn: Callable[[], object]) -> tuple[int, int]:
    """Fork a child that runs ``fn`` and exits; its pid and the read end of the pipe that
    brings its traceback, for ``reap_child``."""
    read_end, write_end = os.pipe()
    pid = fork()
    if pid == 0:  # the child: never return into pytest
        status = 1
        message = b""
        try:
            os.close(read_end)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # pytest-timeout's is inherited
            signal.alarm(CHILD_ALARM)
            fn()
            status = 0
        except BaseException:
            message = traceback.format_exc().encode()[-8000:]
        finally:
            try:
                os.write(write_end, message)
            finally:
                os._exit(status)
    os.close(write_end)
    return pid, read_end


def reap_child(pid: int, read_end: int) -> None:
    """Wait for the child of ``start_child``; fail the test with its traceback if it failed."""
    try:
        end = time.monotonic() + PARENT_WAIT
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > end:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"the child did not exit within {PARENT_WAIT} s")
            time.sleep(0.01)
        output = os.read(read_end, 10_000).decode(errors="replace")
    finally:
        os.close(read_end)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        pytest.fail(f"the child was killed by {sig} (SIGALRM: it hung){output}")
    assert os.WEXITSTATUS(status) == 0, f"the child failed:\n{output}"


class Holder:
    """A parent thread that takes a hold and keeps it until told to let go."""

    def __init__(self, take: Callable[[], Unlock]) -> None:
        self.unlock: Unlock | None = None
        self._take = take
        self._held = threading.Event()
        self._go = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self._held.wait(10), "the holder thread did not acquire"

    def _run(self) -> None:
        self.unlock = self._take()
        self._held.set()
        self._go.wait(30)
        self.unlock()

    def release(self) -> None:
        self._go.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


StartHolder = Callable[[Callable[[], Unlock]], Holder]


@pytest.fixture
def holders() -> Iterator[StartHolder]:
    started: list[Holder] = []

    def start(take: Callable[[], Unlock]) -> Holder:
        h = Holder(take)
        started.append(h)
        return h

    yield start
    for h in started:
        h.release()


@pytest.fixture(autouse=True)
def timer_thread_running() -> None:
    """Make sure ctxlock's timer thread exists in the parent, so it is missing in the child
    whatever ran before (it starts with the first token that has a deadline)."""
    assert CancelToken(deadline=0.01).wait(5)


# --- a lock held by another thread at the fork ------------------------------------------------


def test_lock_held_by_another_thread_stays_held_in_child(holders: StartHolder) -> None:
    lock = Lock()
    plain = threading.Lock()
    holder = holders(lock.acquire)
    plain.acquire()  # the same situation for a threading.Lock, for comparison...
    released = threading.Event()

    def release_plain() -> None:
        released.wait(30)
        plain.release()

    other = threading.Thread(target=release_plain, daemon=True)
    other.start()  # ...held by the main thread here, released by another

    def child() -> None:
        assert threading.active_count() == 1  # the holder thread is not here
        assert lock.locked()
        assert repr(lock) == "<ctxlock.Lock locked fair=False waiting=0>"
        assert lock.try_acquire() is None
        with pytest.raises(WouldBlock):
            lock.acquire(blocking=False)
        with pytest.raises(LockTimeout):
            lock.acquire(deadline=0)
        with pytest.raises(LockTimeout):
            lock.acquire(deadline=0.2)  # waits, then gives up: it does not hang
        with pytest.raises(LockTimeout):
            lock.acquire(CancelToken(deadline=0.2))
        # threading.Lock behaves the same: its state was copied too.
        assert plain.locked()
        assert not plain.acquire(timeout=0.05)
        # The Unlock the child inherited still releases the hold, as it may from any thread.
        assert holder.unlock is not None
        holder.unlock()
        assert holder.unlock.released
        assert not lock.locked()
        with lock.acquire(deadline=1):
            assert lock.locked()
        assert not lock.locked()

    try:
        in_child(child)
        # The parent's lock is untouched by the child.
        assert lock.locked()
        assert holder.unlock is not None and not holder.unlock.released
    finally:
        released.set()
        other.join(10)


def test_lock_held_by_another_thread_with_a_waiter_does_not_hang_child(
    holders: StartHolder,
) -> None:
    """A parent thread was queued at the fork: no such thread exists in the child, which
    counts no waiter (``waiting``, the repr) and never hands the lock to it. A child's
    acquire with a deadline returns or raises LockTimeout, never hangs."""
    lock = Lock(fair=True)
    holder = holders(lock.acquire)
    outcome: list[str] = []

    def wait_in_parent() -> None:
        try:
            lock.acquire(deadline=20)()
            outcome.append("acquired")
        except LockTimeout:
            outcome.append("timeout")

    waiter = threading.Thread(target=wait_in_parent, daemon=True)
    waiter.start()
    assert wait_until(lambda: "waiting=1" in repr(lock), 10), repr(lock)

    def child() -> None:
        assert "waiting=0" in repr(lock), repr(lock)
        assert lock.statistics().waiting == 0
        with pytest.raises(LockTimeout):
            lock.acquire(deadline=0.2)
        assert holder.unlock is not None
        holder.unlock()
        # Not handed to the parent's waiter, which is not here: free for the child.
        lock.acquire(deadline=0.3)()
        assert lock.statistics().waiting == 0

    in_child(child)
    holder.release()
    waiter.join(25)
    assert outcome == ["acquired"]  # the parent's waiter is unaffected by the child


def test_sharable_lock_held_by_other_threads_in_child(holders: StartHolder) -> None:
    rw = SharableLock()
    readers = holders(rw.shared.acquire)

    def child() -> None:
        assert rw.shared.locked() and not rw.exclusive.locked()
        with pytest.raises(LockTimeout):
            rw.exclusive.acquire(deadline=0.2)
        with pytest.raises(LockTimeout):
            rw.exclusive.acquire(CancelToken(deadline=0.2))
        # The writer that gave up lets readers in: the reader group can still grow.
        with rw.shared.acquire(deadline=1):
            assert "shared by 2" in repr(rw)
        assert readers.unlock is not None
        readers.unlock()
        assert not rw.shared.locked()
        with rw.exclusive.acquire(deadline=1):
            assert rw.exclusive.locked()

    in_child(child)
    assert rw.shared.locked()
    readers.release()

    writer = holders(rw.exclusive.acquire)

    def child_of_writer() -> None:
        assert rw.exclusive.locked()
        with pytest.raises(LockTimeout):
            rw.shared.acquire(deadline=0.2)
        assert rw.shared.try_acquire() is None
        assert writer.unlock is not None
        writer.unlock()
        with rw.shared.acquire(deadline=1), rw.shared.acquire(deadline=1):
            assert "shared by 2" in repr(rw)

    in_child(child_of_writer)
    assert rw.exclusive.locked()


@pytest.mark.parametrize("first", ["acquire", "try_acquire"])
@pytest.mark.parametrize("scope", ["SharableLock", "memory:"])
def test_a_writer_of_the_parent_queued_at_the_fork_holds_back_no_reader_in_the_child(
    holders: StartHolder, scope: str, first: str
) -> None:
    """A parent thread queued for the exclusive view behind a reader does not exist in the
    child: the child's readers join the reader group at once instead of waiting behind
    it (whether the first of them waits or only tries), and the child's own writer still
    gets in after them."""
    rw = SharableLock() if scope == "SharableLock" else LockManager().sharable_lock("rw")
    reader = holders(rw.shared.acquire)

    def wait_in_parent() -> None:
        with contextlib.suppress(LockTimeout):
            rw.exclusive.acquire(deadline=20)()

    writer = threading.Thread(target=wait_in_parent, daemon=True)
    writer.start()
    assert wait_until(lambda: "waiting=1" in repr(rw), 10), repr(rw)

    def child() -> None:
        assert rw.statistics().waiting == 0
        if first == "try_acquire":
            unlock = rw.shared.try_acquire()
            assert unlock is not None, "a reader of the child was held back"
            unlock()
        with rw.shared.acquire(deadline=1), rw.shared.acquire(deadline=1):
            assert "shared by 3" in repr(rw), repr(rw)
        assert reader.unlock is not None
        reader.unlock()
        with rw.exclusive.acquire(deadline=1):
            assert rw.exclusive.locked()

    in_child(child)
    reader.release()
    writer.join(25)
    assert not writer.is_alive()


# --- a lock free at the fork ------------------------------------------------------------------


def test_lock_free_at_fork_is_usable_in_child() -> None:
    lock = Lock()
    rw = SharableLock()
    lock.acquire()()  # used in the parent before the fork

    def child() -> None:
        assert not lock.locked()
        with lock:
            assert lock.locked()
        unlock = lock.acquire(deadline=1)
        # Threads of the child wait for the child's hold and get the lock after it.
        got: list[str] = []

        def contend(name: str) -> None:
            with lock.acquire(deadline=10):
                got.append(name)

        threads = [threading.Thread(target=contend, args=(f"t{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        end = time.monotonic() + 10
        while "waiting=3" not in repr(lock) and time.monotonic() < end:
            time.sleep(0.005)
        assert "waiting=3" in repr(lock)
        unlock()
        for t in threads:
            t.join(10)
        assert sorted(got) == ["t0", "t1", "t2"]
        assert not lock.locked() and "waiting=0" in repr(lock)

        # Tasks of an event loop created in the child, contending with a token.
        async def tasks() -> None:
            held = await lock.acquire_async()
            token = CancelToken()
            waiters = [asyncio.ensure_future(lock.acquire_async(token)) for _ in range(2)]
            await asyncio.sleep(0.05)
            assert "waiting=2" in repr(lock)
            held()
            for w in waiters:
                (await w)()
            async with rw.exclusive:
                assert rw.exclusive.locked()
            async with rw.shared:
                assert rw.shared.locked()

        asyncio.run(tasks())
        assert not lock.locked() and not rw.exclusive.locked()

    in_child(child)


# --- a lock held by the forking thread --------------------------------------------------------


#: The kinds that are locks of this process: a file-scope or postgres lock is shared by
#: processes, so a forked child is another client of it, not a copy of its holder (see the
#: test below).
PROCESS_KINDS = [k for k in KINDS if k.family.name not in ("file", "pg")]


def test_a_file_scope_manager_made_before_fork_fails_in_the_child(tmp_path: Path) -> None:
    # The child shares the parent's open file description, whose kernel locks are the
    # parent's holds: using the manager there would release or take them for the parent.
    mgr = LockManager(f"file://{tmp_path}")
    unlock = mgr.lock("held").acquire()

    def child() -> None:
        with pytest.raises(BackendError, match="fork"):
            mgr.lock("other").acquire(deadline=1)
        unlock()  # does not touch the parent's hold
        fresh = LockManager(f"file://{tmp_path}")
        assert fresh.lock("held").try_acquire() is None  # the parent still holds it
        fresh.lock("other").acquire(deadline=1)()
        fresh.close()

    try:
        in_child(child)
        assert mgr.lock("held").locked()
        assert not unlock.released
    finally:
        unlock()
        mgr.close()


@pytest.mark.parametrize("scope", ["file", "postgresql"])
def test_a_manager_made_before_fork_does_not_answer_for_the_parent_in_the_child(
    scope: str, tmp_path: Path
) -> None:
    # The child's copy of the manager holds the parent's records: it would show the
    # parent's hold as the child's (with the child's pid), and once the child called an
    # inherited Unlock, as free while the parent still holds it. So it raises, as its
    # acquires do; a manager made in the child answers.
    url = _scope_url(scope, tmp_path)
    mgr = LockManager(url)
    name = f"fork-{os.getpid()}-{time.monotonic_ns()}"
    lock, rw = mgr.lock(name), mgr.sharable_lock(name)
    unlock = lock.acquire(deadline=10)
    parent = os.getpid()

    def child() -> None:
        asks: list[Callable[[], object]] = [
            lock.locked,
            lock.statistics,
            rw.statistics,
            rw.shared.locked,
            mgr.query,
        ]
        for ask in asks:
            with pytest.raises(BackendError, match="fork"):
                ask()
        assert "of a parent process" in repr(lock)
        assert "of a parent process" in repr(rw)
        unlock()  # the parent's hold, untouched
        with pytest.raises(BackendError, match="fork"):
            lock.locked()
        fresh = LockManager(url)
        try:
            assert fresh.lock(name).locked()
            owners = [i.owner for i in fresh.query(name)]
            assert len(owners) == 1 and f":{parent}" in owners[0], owners
        finally:
            fresh.close()

    try:
        in_child(child)
        assert lock.locked() and not unlock.released
        assert [i.state for i in mgr.query(name)] == ["held"]
    finally:
        unlock()
        mgr.close()


@pytest.mark.parametrize("which", ["lock", "exclusive"])
@pytest.mark.parametrize("scope", ["file", "postgresql"])
def test_a_parent_s_async_with_does_not_stop_a_blocking_acquire_in_the_child(
    scope: str, which: str, tmp_path: Path
) -> None:
    # The forking thread is the same thread in the child (the same identity), but the
    # `async with` hold of the parent's task is the parent's: the child's blocking acquire
    # with no deadline, through a manager of its own, is not the self-deadlock that raises
    # RuntimeError. It waits for the parent, as for any other process, and gets the name
    # when the parent's task lets go.
    url = _scope_url(scope, tmp_path)
    mgr = LockManager(url)
    name = f"fork-{os.getpid()}-{time.monotonic_ns()}"

    def child() -> None:
        fresh = LockManager(url)
        try:
            unlock = contract.view(fresh, name, which).acquire()
            unlock()
        finally:
            fresh.close()

    async def hold_and_fork() -> tuple[int, int]:
        async with contract.view(mgr, name, which):
            forked = start_child(child)
            await asyncio.sleep(0.3)  # the child waits meanwhile (or raised at once)
        return forked

    try:
        forked = asyncio.run(hold_and_fork())
        reap_child(*forked)
        assert not mgr.lock(name).locked()
    finally:
        mgr.close()


def _scope_url(scope: str, tmp_path: Path) -> str:
    """The url of a scope that processes share: a directory of this test, or this process's
    PostgreSQL server (the test is skipped where none can start)."""
    if scope == "file":
        return f"file://{tmp_path}"
    missing = pg_server.missing()
    if missing is not None:
        pytest.skip(f"no PostgreSQL server can be started here: {missing}")
    return pg_server.shared().url


@over(PROCESS_KINDS)
def test_lock_held_by_forking_thread_is_released_in_child(kind: Kind) -> None:
    view = kind.new().view
    unlock = view.acquire()

    def child() -> None:
        assert view.locked()
        assert not unlock.released
        unlock()
        assert unlock.released
        assert not view.locked()
        unlock()  # still once-only
        with view.acquire(deadline=1):
            assert view.locked()
        assert not view.locked()

    try:
        in_child(child)
        assert view.locked()  # the child released its copy, not ours
        assert not unlock.released
    finally:
        unlock()
    assert not view.locked()


def test_unlock_on_cancel_registered_before_fork_works_in_child() -> None:
    lock = Lock()
    token = CancelToken()
    unlock = lock.acquire()
    unlock.unlock_on_cancel(token)

    def child() -> None:
        assert lock.locked()
        token.cancel("child")
        assert unlock.released and not lock.locked()

    try:
        in_child(child)
        assert lock.locked() and not token.cancelled
    finally:
        unlock()


# --- tokens and deadlines without the timer thread --------------------------------------------


def test_token_deadline_ends_waits_in_child() -> None:
    lock = Lock()
    unlock = lock.acquire()

    def child() -> None:
        # The child starts its own timer thread; the waiter may also expire it itself.
        token = CancelToken(deadline=0.1)
        calls: list[int] = []
        token.on_cancel(lambda: calls.append(1))
        assert token.wait(2) is True
        assert token.cancelled
        assert isinstance(token.reason, LockTimeout)
        end = time.monotonic() + 2
        while not calls and time.monotonic() < end:  # the timer may still be running it
            time.sleep(0.01)
        assert calls == [1]
        # A blocking acquire on a held lock ends at the token's deadline.
        with pytest.raises(LockTimeout):
            lock.acquire(CancelToken(deadline=0.1))
        # A child token's deadline, inherited from a parent made in this process.
        parent = CancelToken(deadline=0.1)
        with pytest.raises(LockTimeout):
            lock.acquire(parent.child())
        # A token made in the parent with a deadline that passes in the child.
        assert inherited.wait(2) is True

        # asyncio: the event loop's own timer ends the wait.
        async def wait_async() -> None:
            with pytest.raises(LockTimeout):
                await lock.acquire_async(CancelToken(deadline=0.1))
            with pytest.raises(LockTimeout):
                await lock.acquire_async(deadline=0.1)

        asyncio.run(wait_async())

    inherited = CancelToken(deadline=0.3)
    try:
        in_child(child)
    finally:
        unlock()


def test_token_wait_in_child_returns_true() -> None:
    def child() -> None:
        assert CancelToken(deadline=0.1).wait(2) is True

    in_child(child)


def test_token_wait_async_in_child_ends_at_deadline() -> None:
    """``await token.wait_async()`` must end at the token's deadline in the child too (the
    token "cancels itself" at its deadline), not only when a timer thread is running."""

    def child() -> None:
        async def main() -> None:
            token = CancelToken(deadline=0.1)
            await asyncio.wait_for(token.wait_async(), 3)
            assert token.cancelled

        asyncio.run(main())

    in_child(child)


def test_token_deadline_cancels_without_a_waiter_in_child() -> None:
    """A token with a deadline cancels itself (``cancelled``, ``on_cancel``, and
    ``unlock_on_cancel``) even when nobody waits on it, in a forked child too."""
    lock = Lock()

    def child() -> None:
        token = CancelToken(deadline=0.05)
        calls: list[int] = []
        token.on_cancel(lambda: calls.append(1))
        unlock = lock.acquire()
        unlock.unlock_on_cancel(token)
        # The token is cancelled first; its release and the user's callback (on a
        # callback thread) follow, so wait for all three.
        end = time.monotonic() + 3
        while time.monotonic() < end and not (token.cancelled and calls and unlock.released):
            time.sleep(0.01)
        assert token.cancelled, "the token's deadline passed but nothing cancelled it"
        assert calls == [1]
        assert unlock.released and not lock.locked()

    in_child(child)


def test_a_forked_child_restores_pickled_locks_from_managers_of_its_own() -> None:
    """Unpickling in a forked child never uses a manager the parent made (that would make the
    child the same client as its parent); the parent's are kept, unused, and the lock that
    guards them is a new one even if a parent thread held it at the fork."""
    from ctxlock import _restore

    parent = _restore.manager_for("memory:")

    def child() -> None:
        mine = _restore.manager_for("memory:")
        assert mine is not parent
        assert parent in _restore._inherited
        assert not parent.closed
        assert _restore.manager_for("memory:") is mine
        lock = _restore.restore("memory:", "fork-pickle", "exclusive")
        assert lock.manager is mine

    with _restore._managers_lock:
        in_child(child)
    assert _restore.manager_for("memory:") is parent
