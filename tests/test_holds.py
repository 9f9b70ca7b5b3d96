"""Who may release a hold: an `Unlock` releases only its own hold, `__exit__`/`__aexit__`
only one taken by `with`/`async with`; and when a blocking acquire on an event loop's
thread is a self-deadlock (it raises) and when it is not (it waits)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import PATIENCE
from ctxlock import Cancelled, CancelToken, Lock, LockTimeout, LockView, SharableLock, Unlock
from kinds import KINDS, Kind, over


def assert_exclusion(exclusive: Lock | LockView) -> None:
    """Nobody may take the exclusive side now: somebody still holds."""
    intruder = exclusive.try_acquire()
    if intruder is not None:
        intruder()
        pytest.fail("the lock was free although a holder had not released")


def assert_free(view: Lock | LockView, exclusive: Lock | LockView) -> None:
    assert not view.locked()
    unlock = exclusive.try_acquire()
    assert unlock is not None
    unlock()


# --- an Unlock's hold is released only by that Unlock ----------------------------------------


@over(KINDS)
def test_exit_never_releases_the_hold_of_an_unlock(kind: Kind) -> None:
    view, exclusive = kind.factory()
    unlock = view.acquire()
    with pytest.raises(RuntimeError, match="not held by a with statement"):
        view.__exit__(None, None, None)
    assert view.locked()
    assert not unlock.released
    assert_exclusion(exclusive)
    unlock()
    assert_free(view, exclusive)


@over(KINDS)
def test_a_stale_unlock_never_releases_the_next_holders_hold(
    kind: Kind, spawn: Callable[..., Any]
) -> None:
    view, exclusive = kind.factory()
    first = view.acquire()
    with contextlib.suppress(RuntimeError):
        view.__exit__(None, None, None)  # misuse: must not free `first`'s hold

    def take_at_once() -> Unlock | None:
        try:
            return view.acquire(deadline=0.05)
        except LockTimeout:
            return None

    # The next holder, in another thread: a reader joins at once; an exclusive acquire
    # has to wait until `first` is really released.
    second = spawn(take_at_once).result()
    first()
    if second is None:
        second = spawn(view.acquire, deadline=PATIENCE).result()
    first()  # stale: released already
    assert view.locked()
    assert not second.released
    assert_exclusion(exclusive)
    second()
    assert_free(view, exclusive)


def test_with_and_unlock_readers_are_told_apart() -> None:
    rw = SharableLock()
    with rw.shared:
        unlock = rw.shared.acquire()
    assert rw.shared.locked()
    assert not unlock.released
    with pytest.raises(RuntimeError, match="not held by a with statement"):
        rw.shared.__exit__(None, None, None)
    assert_exclusion(rw.exclusive)
    unlock()
    assert_free(rw.shared, rw.exclusive)


def test_each_view_counts_its_own_with_holds() -> None:
    rw = SharableLock()
    rw.shared.__enter__()
    rw.shared.__enter__()
    with pytest.raises(RuntimeError, match="not held by a with statement"):
        rw.exclusive.__exit__(None, None, None)
    rw.shared.__exit__(None, None, None)
    assert rw.shared.locked()
    rw.shared.__exit__(None, None, None)
    with pytest.raises(RuntimeError, match="not held by a with statement"):
        rw.shared.__exit__(None, None, None)
    assert_free(rw.shared, rw.exclusive)


@over(KINDS)
def test_with_may_end_in_another_thread(kind: Kind, spawn: Callable[..., Any]) -> None:
    # As with threading.Lock, a hold taken by `__enter__` may be released elsewhere.
    view, exclusive = kind.factory()
    view.__enter__()
    spawn(view.__exit__, None, None, None).result()
    assert_free(view, exclusive)


@pytest.mark.asyncio
@over(KINDS)
async def test_aexit_never_releases_the_hold_of_an_unlock(kind: Kind) -> None:
    view, exclusive = kind.factory()
    unlock = await view.acquire_async()
    with pytest.raises(RuntimeError, match="not held by a with statement"):
        await view.__aexit__(None, None, None)
    assert not unlock.released
    assert_exclusion(exclusive)
    unlock()
    async with view:
        assert view.locked()
    assert_free(view, exclusive)


# --- self-deadlock detection on an event loop's thread ---------------------------------------

# (what a task holds, what the loop's thread then acquires)
PAIRS = ["Lock", "fair Lock", "exclusive then exclusive", "exclusive then shared"]
PAIRS_WITH_READERS = [*PAIRS, "shared then exclusive"]


def pair(case: str) -> tuple[Lock | LockView, Lock | LockView]:
    if case == "Lock":
        lock = Lock()
        return lock, lock
    if case == "fair Lock":
        lock = Lock(fair=True)
        return lock, lock
    rw = SharableLock()
    held = rw.shared if case.startswith("shared") else rw.exclusive
    return held, rw.shared if case.endswith("shared") else rw.exclusive


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["plain", "deadline", "token"])
@pytest.mark.parametrize("case", PAIRS_WITH_READERS)
async def test_blocking_acquire_on_the_loop_waits_for_an_unlock_handed_to_a_thread(
    case: str, how: str
) -> None:
    held, blocked = pair(case)
    unlock = await held.acquire_async()

    # The task hands its Unlock to a thread, which releases once this thread waits:
    # the wait ends.
    def release_once_waiting() -> None:
        end = time.monotonic() + PATIENCE
        while blocked.statistics().waiting == 0 and time.monotonic() < end:
            time.sleep(0.001)
        unlock()

    releaser = threading.Thread(target=release_once_waiting, daemon=True)
    releaser.start()
    try:
        if how == "plain":
            got = blocked.acquire()
        elif how == "deadline":
            got = blocked.acquire(deadline=PATIENCE)
        else:
            got = blocked.acquire(CancelToken(deadline=PATIENCE))
    finally:
        releaser.join(PATIENCE)
    assert unlock.released
    assert not got.released
    got()
    assert not held.locked() and not blocked.locked()


@pytest.mark.asyncio
@pytest.mark.parametrize("who", ["this task", "another task"])
@pytest.mark.parametrize("case", PAIRS_WITH_READERS)
async def test_blocking_acquire_behind_an_async_with_of_this_loop(case: str, who: str) -> None:
    held, blocked = pair(case)
    release = asyncio.Event()
    holding = asyncio.Event()

    async def hold() -> None:
        async with held:
            holding.set()
            await release.wait()

    if who == "this task":
        await held.__aenter__()
        other = None
    else:
        other = asyncio.create_task(hold())
        await asyncio.wait_for(holding.wait(), PATIENCE)
    # Should a no-limit acquire hang instead of raising, a thread releases the task's
    # hold and the test fails on the missing error.
    rescue = threading.Timer(PATIENCE, held.__exit__, (None, None, None))
    rescue.start()
    try:
        # No deadline, no token: only the task's `__aexit__` could free it, on this
        # very (blocked) loop. That raises.
        with pytest.raises(RuntimeError, match=r"(?i)deadlock"):
            blocked.acquire()
        with pytest.raises(RuntimeError, match=r"(?i)deadlock"):
            with blocked:
                pass
        # Detected: the rescue is not needed (and must not fire during what follows).
        rescue.cancel()
        # With a deadline or a token the wait ends by itself: no error of its own.
        with pytest.raises(LockTimeout):
            blocked.acquire(deadline=0.05)
        token = CancelToken()
        canceller = threading.Timer(0.05, token.cancel, ("enough",))
        canceller.start()
        with pytest.raises(Cancelled):
            blocked.acquire(token)
        canceller.join(PATIENCE)
    finally:
        rescue.cancel()
        if other is None:
            await held.__aexit__(None, None, None)
        else:
            release.set()
            await other
    assert not held.locked() and not blocked.locked()
