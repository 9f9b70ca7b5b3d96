"""What ``acquire_async()`` returns, token deadlines seen by waiters, and other event loops.

``acquire_async()`` returns a coroutine-like object: asyncio (``create_task``, ``TaskGroup``,
``gather``, ``wait_for``) and anyio (``start_soon``) accept it; it acquires only when
awaited; closing or throwing into it at any stage never leaks the lock or grants it twice.
A token's deadline that ends a wait is visible on the token when the waiter sees the error.
Under an event loop other than asyncio's, acquiring raises a clear error at once.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import gc
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio
import pytest
from conftest import PATIENCE
from ctxlock import CancelToken, Lock, LockTimeout, LockView, Unlock
from kinds import KINDS as LOCK_KINDS
from kinds import Kind


def assert_free(blocker: Lock | LockView) -> None:
    assert not blocker.locked()
    unlock = blocker.try_acquire()
    assert unlock is not None, "the lock leaked"
    unlock()


def waiting(blocker: Lock | LockView) -> int:
    """How many waiters the lock's queue has (from the repr of the lock that owns it)."""
    text = repr(blocker)
    if "waiting=" not in text:  # a view's repr shows no count
        return -1
    return int(text.split("waiting=")[1].split()[0].rstrip(">"))


async def settle(rounds: int = 5) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


@pytest.fixture(params=LOCK_KINDS, ids=[k.name for k in LOCK_KINDS])
def views(request: pytest.FixtureRequest) -> tuple[Lock | LockView, Lock | LockView]:
    """A fresh lock of each kind: the view under test and the exclusive view that blocks it."""
    kind: Kind = request.param
    return kind.factory()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# The three ways to call acquire_async: each takes a different path when it has to wait.
KINDS: dict[str, Callable[[Lock | LockView], Coroutine[Any, Any, Unlock]]] = {
    "plain": lambda v: v.acquire_async(),
    "token": lambda v: v.acquire_async(CancelToken()),
    "deadline": lambda v: v.acquire_async(deadline=60),
}


# --- what acquire_async returns --------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_acquire_async_is_a_coroutine_that_acquires_only_when_awaited(
    views: tuple[Lock | LockView, Lock | LockView], kind: str
) -> None:
    view, blocker = views
    aw = KINDS[kind](view)
    assert asyncio.iscoroutine(aw)
    assert isinstance(aw, collections.abc.Coroutine)
    assert not blocker.locked(), "acquire_async() took the lock before it was awaited"
    aw.close()  # harmless, like closing a coroutine that never ran
    aw.close()
    assert_free(blocker)
    # Never awaited and dropped: holds nothing.
    aw = KINDS[kind](view)
    del aw
    assert_free(blocker)

    async def main() -> None:
        aw = KINDS[kind](view)
        assert not blocker.locked()
        unlock = await aw
        assert blocker.try_acquire() is None
        unlock()

    asyncio.run(main())
    assert_free(blocker)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.asyncio
async def test_awaiting_twice_raises_like_a_coroutine(kind: str) -> None:
    lock = Lock()
    aw = KINDS[kind](lock)
    unlock = await aw
    with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
        await aw
    assert lock.locked()
    unlock()
    assert_free(lock)


async def _run_as(how: str, aw: Coroutine[Any, Any, Unlock]) -> Unlock:
    if how == "create_task":
        return await asyncio.wait_for(asyncio.create_task(aw), PATIENCE)
    if how == "ensure_future":
        return await asyncio.wait_for(asyncio.ensure_future(aw), PATIENCE)
    if how == "gather":
        (unlock,) = await asyncio.wait_for(asyncio.gather(aw), PATIENCE)
        return unlock
    if how == "wait_for":
        return await asyncio.wait_for(aw, PATIENCE)
    assert how == "TaskGroup"
    async with asyncio.timeout(PATIENCE), asyncio.TaskGroup() as tg:
        task = tg.create_task(aw)
    return task.result()


RUNNERS = ["create_task", "ensure_future", "gather", "wait_for", "TaskGroup"]


@pytest.mark.parametrize("contended", [False, True], ids=["free", "contended"])
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("how", RUNNERS)
@pytest.mark.asyncio
async def test_asyncio_runs_acquire_async_as_a_task(
    views: tuple[Lock | LockView, Lock | LockView], how: str, kind: str, contended: bool
) -> None:
    view, blocker = views
    holder = blocker.acquire() if contended else None
    if holder is not None:
        asyncio.get_running_loop().call_later(0.05, holder)
    unlock = await _run_as(how, KINDS[kind](view))
    assert isinstance(unlock, Unlock)
    assert blocker.try_acquire() is None
    unlock()
    assert_free(blocker)


@pytest.mark.asyncio
async def test_a_refused_taskgroup_create_task_leaves_the_lock_free() -> None:
    lock = Lock()
    async with asyncio.TaskGroup() as tg:
        pass
    aw = lock.acquire_async()
    with pytest.raises(RuntimeError):
        tg.create_task(aw)  # the group is finished
    # Nothing to wait for: no cyclic collection, no await.
    assert not lock.locked()
    aw.close()
    assert_free(lock)


@pytest.mark.anyio
async def test_anyio_start_soon_runs_acquire_async() -> None:
    lock = Lock()
    got: list[Unlock] = []

    async def keep(aw: Coroutine[Any, Any, Unlock]) -> None:
        got.append(await aw)

    # start_soon takes the bound method itself: its result must be a coroutine.
    holder = lock.acquire()
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lock.acquire_async)  # waits, then is cancelled below
            tg.start_soon(keep, lock.acquire_async(CancelToken()))
            await settle()
            assert waiting(lock) == 2
            tg.cancel_scope.cancel()
    assert got == []
    assert waiting(lock) == 0
    holder()
    assert_free(lock)

    with pytest.warns(ResourceWarning), anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lock.acquire_async)  # acquires; its Unlock is dropped
        gc.collect()
    assert_free(lock)


STAGES = ["unstarted", "queued", "granted", "returned"]


@pytest.mark.parametrize("how", ["close", "throw", "drop"])
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.asyncio
async def test_close_or_throw_at_every_stage_never_leaks_or_grants_twice(
    kind: str, stage: str, how: str
) -> None:
    # Drive acquire_async by hand, as a task would, and give up at `stage`.
    lock = Lock()
    holder = lock.acquire()
    aw = KINDS[kind](lock)
    unlock: Unlock | None = None
    if stage != "unstarted":
        fut = aw.send(None)
        assert isinstance(fut, asyncio.Future)
        assert waiting(lock) == 1
    if stage in ("granted", "returned"):
        holder()
        holder = None
        await asyncio.wait_for(asyncio.shield(fut), PATIENCE)  # the doorbell rang
        assert lock.locked()  # handed to the waiter, which has not yet run
    if stage == "returned":
        with pytest.raises(StopIteration) as stop:
            aw.send(None)
        unlock = stop.value.value
        assert isinstance(unlock, Unlock)
    if how == "close":
        aw.close()
    elif how == "throw":
        with pytest.raises(KeyError):
            aw.throw(KeyError("gone"))
    else:
        del aw
        gc.collect()
    assert waiting(lock) == 0
    if unlock is not None:
        # The finished acquire keeps its hold; closing it afterwards changes nothing.
        assert lock.try_acquire() is None
        unlock()
    if holder is not None:
        assert lock.try_acquire() is None
        holder()
    assert_free(lock)


@pytest.mark.asyncio
async def test_send_rules_of_a_coroutine() -> None:
    lock = Lock()
    aw = lock.acquire_async()
    with pytest.raises(TypeError, match="non-None"):
        aw.send(1)
    assert not lock.locked()
    with pytest.raises(StopIteration) as stop:  # still unstarted: it runs now
        aw.send(None)
    unlock = stop.value.value
    assert isinstance(unlock, Unlock)
    with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
        aw.send(None)
    with pytest.raises(KeyError):
        aw.throw(KeyError("late"))
    aw.close()
    assert lock.locked()
    unlock()
    assert_free(lock)


def test_uvloop_runs_acquire_async_if_installed() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        lock = Lock()
        holder = lock.acquire()
        asyncio.get_running_loop().call_later(0.05, holder)
        for aw in (lock.acquire_async(), lock.acquire_async(CancelToken(), deadline=60)):
            unlock = await asyncio.wait_for(asyncio.create_task(aw), PATIENCE)
            unlock()
        token = CancelToken(deadline=0.05)
        holder = lock.acquire()
        try:
            with pytest.raises(LockTimeout, match="token's deadline"):
                await asyncio.wait_for(lock.acquire_async(token, deadline=60), PATIENCE)
            assert token.cancelled
            assert isinstance(token.reason, LockTimeout)
        finally:
            holder()
        assert_free(lock)

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


# --- a token's deadline ends the wait: the token says so ------------------------------------

ROUNDS = 5


@contextlib.contextmanager
def stalled_timer() -> Iterator[None]:
    """Keep ctxlock's timer thread busy, so token deadlines pass with nobody expiring them.

    A token's ``on_cancel`` function for a deadline runs in the timer thread: one that
    blocks holds the thread until the block ends (bounded by PATIENCE).
    """
    release = threading.Event()
    started = threading.Event()
    stall_soon = CancelToken(deadline=0.05)

    def block() -> None:
        started.set()
        release.wait(PATIENCE)

    stall_soon.on_cancel(block)
    assert started.wait(PATIENCE)
    try:
        yield
    finally:
        release.set()


@pytest.mark.parametrize("deadline", [None, 60.0], ids=["token", "token+deadline"])
@pytest.mark.parametrize("child", [False, True], ids=["own", "parent's"])
@pytest.mark.asyncio
async def test_a_token_deadline_that_ends_an_async_wait_is_on_the_token(
    views: tuple[Lock | LockView, Lock | LockView], deadline: float | None, child: bool
) -> None:
    view, blocker = views
    holder = blocker.acquire()
    try:
        with stalled_timer():
            for _ in range(ROUNDS):
                root = CancelToken(deadline=0.02)
                token = root.child() if child else root
                with pytest.raises(LockTimeout) as err:
                    await asyncio.wait_for(view.acquire_async(token, deadline=deadline), PATIENCE)
                # Seen at the moment the waiter gets the error, before anything else runs.
                seen = (token.cancelled, token.reason)
                assert seen[0], "the token's deadline ended the wait; the token is not cancelled"
                assert isinstance(seen[1], LockTimeout)
                assert "token's deadline" in str(err.value)
    finally:
        holder()
    assert_free(blocker)


@pytest.mark.asyncio
async def test_an_own_deadline_before_the_token_deadline_leaves_the_token_alone() -> None:
    lock = Lock()
    holder = lock.acquire()
    token = CancelToken(deadline=60)
    try:
        with pytest.raises(LockTimeout, match="the deadline passed"):
            await asyncio.wait_for(lock.acquire_async(token, deadline=0.02), PATIENCE)
        assert not token.cancelled
    finally:
        holder()
    assert_free(lock)


@pytest.mark.parametrize("deadline", [None, 60.0], ids=["token", "token+deadline"])
def test_a_token_deadline_that_ends_a_thread_wait_is_on_the_token(
    views: tuple[Lock | LockView, Lock | LockView], deadline: float | None
) -> None:
    view, blocker = views
    seen: list[tuple[bool, object, str]] = []

    def waiter() -> None:
        for _ in range(ROUNDS):
            token = CancelToken(deadline=0.02)
            try:
                view.acquire(token, deadline=deadline)
            except LockTimeout as e:
                seen.append((token.cancelled, token.reason, str(e)))

    holder = blocker.acquire()
    try:
        with stalled_timer():
            t = threading.Thread(target=waiter, daemon=True)
            t.start()
            t.join(PATIENCE)
            assert not t.is_alive()
    finally:
        holder()
    assert len(seen) == ROUNDS
    for cancelled, reason, text in seen:
        assert cancelled
        assert isinstance(reason, LockTimeout)
        assert "token's deadline" in text
    assert_free(blocker)


# --- no running asyncio event loop: a clear error at once -------------------------------------

NO_LOOP = r"need a running asyncio event loop"


@pytest.mark.parametrize("contended", [False, True], ids=["free", "contended"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_acquire_async_without_a_running_loop_raises_at_once(
    views: tuple[Lock | LockView, Lock | LockView], kind: str, contended: bool
) -> None:
    # Driven by hand with no event loop running, as another event loop would drive it.
    view, blocker = views
    holder = blocker.acquire() if contended else None
    aw = KINDS[kind](view)
    with pytest.raises(RuntimeError, match=NO_LOOP):
        aw.send(None)
    with pytest.raises(RuntimeError, match="cannot reuse"):
        aw.send(None)
    if holder is not None:
        assert waiting(blocker) in (0, -1)
        holder()
    assert_free(blocker)


def test_trio_gets_a_clear_error_contended_or_not() -> None:
    # In a subprocess: importing trio into this test process would change how every later
    # `async with` checks for its event loop.
    pytest.importorskip("trio")
    code = r"""
import trio
from ctxlock import CancelToken, Lock

NO_LOOP = "need a running asyncio event loop"


async def expect_error(lock, how):
    try:
        with trio.fail_after(5):
            if how == "async with":
                async with lock:
                    pass
            elif how == "token":
                (await lock.acquire_async(CancelToken(), deadline=60))()
            else:
                (await lock.acquire_async())()
    except RuntimeError as e:
        assert NO_LOOP in str(e), e
    else:
        raise AssertionError(f"{how}: no error under trio")


async def main():
    lock = Lock()
    for how in ("plain", "token", "async with"):
        await expect_error(lock, how)
        holder = lock.acquire()
        await expect_error(lock, how)
        holder()
        assert not lock.locked()
    print("ok")


trio.run(main)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert out.stderr == ""
