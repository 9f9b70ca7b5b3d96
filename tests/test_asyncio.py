"""acquire_async and ``async with`` on Lock and both SharableLock views.

Tasks wait in the same queue as threads, on any number of event loops. The races here run
a few thousand times each (task cancellation, token cancellation, deadlines against unlock)
and check after every round that the lock is free and was never held twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import random
import threading
import time
import warnings
import weakref

import anyio
import pytest
from conftest import PATIENCE, Holders, assert_free, in_thread, settle
from ctxlock import (
    CancelToken,
    Lock,
    LockTimeout,
    LockView,
    SharableLock,
    Unlock,
)
from kinds import Target


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- the basics ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_uncontended_acquire_does_not_yield_to_the_loop(target: Target) -> None:
    loop = asyncio.get_running_loop()
    ran: list[str] = []
    loop.call_soon(ran.append, "callback")

    unlock = await target.view.acquire_async()
    assert ran == [], "acquire_async on a free lock went through the event loop"
    unlock()
    unlock = await target.view.acquire_async(CancelToken(), deadline=PATIENCE)
    unlock()
    async with target.view:
        pass
    assert ran == []

    await asyncio.sleep(0)
    assert ran == ["callback"]
    assert_free(target)


@pytest.mark.asyncio
async def test_shared_tasks_hold_together() -> None:
    rw = SharableLock()
    inside = 0
    most = 0
    all_in = asyncio.Event()

    async def reader() -> None:
        nonlocal inside, most
        async with rw.shared:
            inside += 1
            most = max(most, inside)
            if inside == 5:
                all_in.set()
            await asyncio.wait_for(all_in.wait(), PATIENCE)
            inside -= 1

    await asyncio.gather(*(reader() for _ in range(5)))
    assert most == 5


# --- arguments -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_bad_arguments(target: Target) -> None:
    with pytest.raises(ValueError):
        await target.view.acquire_async(deadline=-1)
    with pytest.raises(ValueError):
        await target.view.acquire_async(deadline=float("nan"))
    with pytest.raises(TypeError):
        await target.view.acquire_async(cancel=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await target.view.acquire_async(deadline="soon")  # type: ignore[arg-type]
    assert_free(target)


# --- many clients: threads and tasks on two loops --------------------------------------------


@pytest.mark.parametrize("kind", ["Lock", "SharableLock"])
def test_threads_and_two_event_loops_share_one_lock(kind: str) -> None:
    if kind == "Lock":
        lock = Lock()
        views: list[tuple[Lock | LockView, bool]] = [(lock, True)]
        blocker: Lock | LockView = lock
    else:
        rw = SharableLock()
        views = [(rw.exclusive, True), (rw.shared, False)]
        blocker = rw.exclusive
    holders = Holders()
    progress: dict[str, int] = {}
    stop_at = time.monotonic() + 1.5
    handed_over = 0

    def thread_client(name: str) -> None:
        rng = random.Random(name)
        progress[name] = 0
        while time.monotonic() < stop_at:
            view, exclusive = rng.choice(views)
            if rng.random() < 0.5:
                with view:
                    holders.enter(exclusive, name)
                    time.sleep(0)
                    holders.leave(exclusive)
            else:
                unlock = view.acquire(deadline=PATIENCE)
                holders.enter(exclusive, name)
                time.sleep(0)
                holders.leave(exclusive)
                unlock()
            progress[name] += 1

    async def task_client(name: str, releaser: concurrent.futures.ThreadPoolExecutor) -> None:
        nonlocal handed_over
        rng = random.Random(name)
        progress[name] = 0
        while time.monotonic() < stop_at:
            view, exclusive = rng.choice(views)
            how = rng.randrange(3)
            if how == 0:
                async with view:
                    holders.enter(exclusive, name)
                    await asyncio.sleep(0)
                    holders.leave(exclusive)
            else:
                unlock = await view.acquire_async(deadline=PATIENCE)
                holders.enter(exclusive, name)
                await asyncio.sleep(0)
                holders.leave(exclusive)
                if how == 1:
                    unlock()
                else:
                    # Released by another thread while this task goes on to queue again.
                    releaser.submit(unlock)
                    handed_over += 1
            progress[name] += 1

    def loop_client(name: str) -> None:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as releaser:

            async def main() -> None:
                await asyncio.gather(*(task_client(f"{name}-task{i}", releaser) for i in range(3)))

            asyncio.run(main())

    futures = [in_thread(lambda n=n: thread_client(n)) for n in ("thread0", "thread1")]
    futures += [in_thread(lambda n=n: loop_client(n)) for n in ("loop0", "loop1")]
    for future in futures:
        future.result(timeout=PATIENCE * 4)
    assert not holders.overlaps, holders.overlaps[:3]
    assert len(progress) == 8
    assert all(count > 0 for count in progress.values()), progress
    assert handed_over > 0
    unlock = blocker.try_acquire()
    assert unlock is not None, "the lock leaked"
    unlock()


# --- blocking acquire on a loop thread -------------------------------------------------------


# The rule (raise only when the wait can never end) and its counterpart (an `Unlock`
# handed to a thread) are tested in test_holds.py.


# --- CancelToken.wait_async ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_token_wait_async_returns_when_cancelled_from_a_thread() -> None:
    token = CancelToken()
    timer = threading.Timer(0.1, token.cancel, args=("done",))
    timer.start()
    try:
        await asyncio.wait_for(token.wait_async(), PATIENCE)
    finally:
        timer.cancel()
    assert token.cancelled
    assert token.reason == "done"
    # Already cancelled: returns at once.
    await asyncio.wait_for(token.wait_async(), PATIENCE)


@pytest.mark.asyncio
async def test_token_wait_async_can_be_cancelled() -> None:
    token = CancelToken()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(token.wait_async(), 0.05)
    assert not token.cancelled


@pytest.mark.asyncio
async def test_token_wait_async_ends_at_the_token_deadline() -> None:
    token = CancelToken(deadline=0.1)
    await asyncio.wait_for(token.wait_async(), PATIENCE)
    assert token.cancelled
    assert isinstance(token.reason, LockTimeout)


# --- waiters that can no longer be woken -----------------------------------------------------


def wait_in_a_loop_then_close_it(target: Target, keep: list[object]) -> None:
    """Run a loop in a thread with a task waiting on the lock; stop and close the loop.

    The task is never cancelled: it is left pending on a closed loop. It goes into ``keep``
    (if the caller wants it kept alive) or is dropped with everything else of that loop.
    """
    waiting = threading.Event()

    async def waiter() -> None:
        waiting.set()
        async with target.view:
            pytest.fail("a task on a closed loop got the lock")

    def run() -> None:
        loop = asyncio.new_event_loop()
        try:
            task = loop.create_task(waiter())
            keep.append(task)
            loop.run_until_complete(asyncio.sleep(0.2))
            assert not task.done()
            assert waiting.is_set()
        finally:
            loop.close()

    in_thread(run).result(timeout=PATIENCE)


@pytest.mark.parametrize("waiter_kept_alive", [True, False])
def test_a_waiter_on_a_closed_loop_never_blocks_the_queue(
    target: Target, waiter_kept_alive: bool
) -> None:
    holder = target.blocker.acquire()
    keep: list[object] = []
    wait_in_a_loop_then_close_it(target, keep)
    if not waiter_kept_alive:
        keep.clear()
        gc.collect()

    # A thread queued behind the dead waiter still gets the lock.
    got_in = threading.Event()

    def thread_waiter() -> None:
        with target.view.acquire(deadline=PATIENCE):
            got_in.set()

    done = in_thread(thread_waiter)
    time.sleep(0.2)
    holder()
    assert got_in.wait(PATIENCE), "the waiter on a closed loop blocked the queue"
    done.result(timeout=PATIENCE)
    # And with nobody else queued, releasing past a dead waiter frees the lock.
    holder = target.blocker.acquire()
    wait_in_a_loop_then_close_it(target, keep)
    holder()
    unlock = target.blocker.acquire(deadline=PATIENCE)
    unlock()
    keep.clear()
    gc.collect()
    assert_free(target)


def wait_on_an_idle_loop(target: Target) -> tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]:
    """A new loop of this thread with a task queued on the (held) lock, the loop idle
    now; the task must never run again."""
    loop = asyncio.new_event_loop()

    async def waiter() -> None:
        async with target.view:
            pytest.fail("a task whose loop went away got the lock")

    task = loop.create_task(waiter())
    loop.run_until_complete(asyncio.sleep(0.05))
    assert not task.done()
    return loop, task


def test_a_waiter_on_a_closed_loop_of_the_releasing_thread_never_blocks_the_queue(
    target: Target,
) -> None:
    # The release runs on the thread of the waiter's loop, so the doorbell completes the
    # future directly instead of through call_soon_threadsafe; the loop is closed by then.
    holder = target.blocker.acquire()
    loop, task = wait_on_an_idle_loop(target)
    loop.close()
    holder()
    assert_free(target)
    del task
    gc.collect()


@pytest.mark.parametrize("released_from", ["another thread", "the loop's thread"])
@pytest.mark.parametrize("loop_ends", ["closed", "dropped"])
def test_a_grant_to_a_task_whose_loop_went_away_before_running_it_is_passed_on(
    target: Target, released_from: str, loop_ends: str
) -> None:
    # The loop is idle but open when the lock is handed to its task, so the doorbell
    # rings; then the loop is closed (or dropped) without running the task again. The
    # task, its future and the wait are garbage then, and freeing them passes the lock on.
    holder = target.blocker.acquire()
    loop, task = wait_on_an_idle_loop(target)
    if released_from == "another thread":
        in_thread(holder).result(timeout=PATIENCE)
    else:
        holder()
    if loop_ends == "closed":
        loop.close()
    del task, loop
    with warnings.catch_warnings():
        # An event loop dropped unclosed says so as it is freed.
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    unlock = target.blocker.acquire(deadline=PATIENCE)
    unlock()
    assert_free(target)


@pytest.mark.asyncio
async def test_a_queued_task_nobody_refers_to_outlives_the_collector(target: Target) -> None:
    # Nothing but the wait keeps a queued task (asyncio holds its tasks weakly): a
    # collection before the grant, and one after the doorbell rang but before the loop
    # ran the task, must leave it to get the lock.
    holder = target.blocker.acquire()
    got: list[bool] = []

    async def waiter() -> None:
        async with target.view:
            got.append(True)

    task = weakref.ref(asyncio.get_running_loop().create_task(waiter()))
    await asyncio.sleep(0.05)
    gc.collect()
    assert task() is not None, "a queued task was collected"
    holder()
    gc.collect()
    assert task() is not None, "a task the lock was handed to was collected"
    deadline = time.monotonic() + PATIENCE
    while not got and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert got == [True]
    assert_free(target)


def test_a_waiter_on_a_stopped_loop_of_the_releasing_thread_gets_the_lock_when_it_runs(
    target: Target,
) -> None:
    # As above with the loop stopped, not closed: the task gets the lock once the loop runs.
    holder = target.blocker.acquire()
    loop = asyncio.new_event_loop()
    got: list[bool] = []

    async def waiter() -> None:
        async with target.view:
            got.append(target.blocker.try_acquire() is None)

    try:
        task = loop.create_task(waiter())
        loop.run_until_complete(asyncio.sleep(0.05))
        assert not task.done()
        holder()
        assert not got
        loop.run_until_complete(asyncio.wait_for(task, PATIENCE))
        assert got == [True]
    finally:
        loop.close()
    assert_free(target)


@pytest.mark.asyncio
async def test_aenter_awaited_through_ensure_future(exclusive_target: Target) -> None:
    # `ensure_future` drives the awaitable with `yield from`, so it needs `__iter__`.
    holder = exclusive_target.blocker.acquire()
    entered = asyncio.ensure_future(exclusive_target.view.__aenter__())
    await settle()
    assert not entered.done()
    holder()
    assert await asyncio.wait_for(entered, PATIENCE) is None
    assert exclusive_target.view.locked()
    await exclusive_target.view.__aexit__(None, None, None)
    assert_free(exclusive_target)


@pytest.mark.parametrize("how", ["close", "throw instance", "throw type and value", "drop"])
@pytest.mark.asyncio
async def test_a_contended_aenter_given_up_by_hand_leaves_the_queue(
    exclusive_target: Target, how: str
) -> None:
    # Drive `__aenter__` by hand: one step queues and yields the future; then give up.
    holder = exclusive_target.blocker.acquire()
    steps = exclusive_target.view.__aenter__().__await__()
    yielded = steps.send(None)
    assert isinstance(yielded, asyncio.Future)
    assert exclusive_target.view.statistics().waiting == 1
    if how == "close":
        steps.close()
    elif how == "throw instance":
        with pytest.raises(KeyError):
            steps.throw(KeyError("gone"))
    elif how == "throw type and value":
        with pytest.raises(KeyError):
            steps.throw(KeyError, KeyError("gone"))
    else:
        del steps
        gc.collect()
    holder()
    assert_free(exclusive_target)


# --- anyio -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_anyio_acquire_and_async_with(target: Target) -> None:
    unlock = await target.view.acquire_async()
    assert target.view.locked()
    unlock()
    async with target.view:
        assert target.view.locked()
    assert_free(target)


@pytest.mark.anyio
async def test_anyio_move_on_after_cancels_a_waiter_without_leaking(target: Target) -> None:
    holder = target.blocker.acquire()
    got: list[str] = []

    async def second() -> None:
        await anyio.sleep(0.05)  # queue behind the first waiter
        async with target.view:
            got.append("second")

    async with anyio.create_task_group() as tg:
        tg.start_soon(second)
        with anyio.move_on_after(0.2) as scope:
            await target.view.acquire_async()
            got.append("first")
        assert scope.cancelled_caught
        holder()
    assert got == ["second"]
    assert_free(target)


@pytest.mark.anyio
async def test_anyio_tasks_exclude_each_other(exclusive_target: Target) -> None:
    lock = exclusive_target.view
    out: list[int] = []
    inside = 0

    async def worker(i: int) -> None:
        nonlocal inside
        await anyio.sleep(i * 0.005)
        async with lock:
            inside += 1
            assert inside == 1
            await anyio.sleep(0.01)
            inside -= 1
            out.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(worker, i)
    assert sorted(out) == list(range(8))
    assert_free(exclusive_target)


@pytest.mark.asyncio
async def test_blocking_acquire_behind_a_task_shared_hold_raises_instead_of_hanging() -> None:
    # A task of this loop holds the shared side by `async with`; an exclusive acquire on
    # the loop's thread would wait for that task forever, and so would a shared one queued
    # behind a writer.
    rw = SharableLock()
    await rw.shared.__aenter__()
    rescue = threading.Timer(PATIENCE, rw.shared.__exit__, (None, None, None))
    rescue.start()
    writer_unlocks: list[Unlock] = []
    try:
        with pytest.raises(RuntimeError, match=r"(?i)deadlock"):
            rw.exclusive.acquire()
        writer = threading.Thread(
            target=lambda: writer_unlocks.append(rw.exclusive.acquire(deadline=PATIENCE))
        )
        writer.start()
        while rw.exclusive.statistics().waiting != 1:
            await asyncio.sleep(0.01)
        with pytest.raises(RuntimeError, match=r"(?i)deadlock"):
            rw.shared.acquire()
        # A non-blocking try is no deadlock: it just fails, as the writer waits.
        assert rw.shared.try_acquire() is None
    finally:
        rescue.cancel()
        await rw.shared.__aexit__(None, None, None)
    writer.join(PATIENCE)
    assert len(writer_unlocks) == 1
    writer_unlocks[0]()
    assert not rw.exclusive.locked() and not rw.shared.locked()
