"""ctxlock.Unlock: the once-only release of one acquire."""

from __future__ import annotations

import functools
import gc
import sys
import threading
import time
import warnings

import pytest
from conftest import PATIENCE
from ctxlock import CancelToken, Lock, SharableLock, Unlock


def test_unlock_releases_once():
    lock = Lock()
    u = lock.acquire()
    assert u.released is False
    assert u() is None
    assert u.released is True
    assert not lock.locked()
    assert u() is None  # later calls do nothing
    assert u.released is True
    assert not lock.locked()


def test_stale_unlock_never_releases_a_later_hold():
    lock = Lock()
    u1 = lock.acquire()
    u1()
    u2 = lock.acquire()
    u1()
    assert lock.locked()
    assert u2.released is False
    assert lock.try_acquire() is None
    u2()
    assert not lock.locked()


def test_stale_unlock_never_releases_another_threads_hold(spawn):
    lock = Lock()
    u1 = lock.acquire()
    u1()
    u2 = spawn(lock.acquire).result()
    u1()
    assert lock.locked()
    assert not u2.released
    u2()
    assert not lock.locked()


def test_context_manager_returns_itself_and_releases():
    lock = Lock()
    acquired = lock.acquire(deadline=30)
    with acquired as u:
        assert u is acquired
        assert isinstance(u, Unlock)
        assert lock.locked()
        assert not u.released
    assert u.released
    assert not lock.locked()


def test_context_manager_releases_on_exception():
    lock = Lock()
    with pytest.raises(KeyError), lock.acquire(deadline=30) as u:
        assert lock.locked()
        raise KeyError("boom")
    assert u.released
    assert not lock.locked()


def test_context_manager_after_manual_release_is_a_no_op():
    lock = Lock()
    with lock.acquire() as u:
        u()
        assert not lock.locked()
        other = lock.acquire()
    # Exiting the with-block must not release `other`.
    assert lock.locked()
    assert not other.released
    other()
    assert not lock.locked()


def test_unlock_from_another_thread(spawn):
    lock = Lock()
    u = lock.acquire()
    spawn(u).result()
    assert u.released
    assert not lock.locked()


def test_unlock_from_another_thread_wakes_a_waiter(spawn):
    lock = Lock()
    u = lock.acquire()
    started = threading.Event()

    def waiter():
        started.set()
        got = lock.acquire(deadline=30)
        got()
        return True

    w = spawn(waiter)
    assert started.wait(5)
    time.sleep(0.05)
    assert not w.done
    spawn(u).result()
    assert w.result(timeout=10) is True
    assert not lock.locked()


def test_concurrent_unlock_calls_release_once(spawn):
    for _ in range(50):
        lock = Lock()
        u = lock.acquire()
        barrier = threading.Barrier(3, timeout=PATIENCE)

        def call(u=u, barrier=barrier):
            barrier.wait()
            u()

        workers = [spawn(call) for _ in range(3)]
        for w in workers:
            w.result()
        assert u.released
        assert not lock.locked()
        u2 = lock.try_acquire()
        assert u2 is not None
        u2()


def test_an_unlock_called_by_its_maker_and_another_thread_through_one_partial_releases_once():
    # A call through `functools.partial` passes the Unlock borrowed: the only counted
    # reference is the partial's, kept on the thread that made both. So the callee cannot
    # tell from the reference counts that no other thread is calling too, and must decide
    # once-only atomically. Here the maker and a worker call one partial at once, and a
    # second shared hold shows a double release: it would end that hold too.
    rounds = 20_000 if not getattr(sys, "_is_gil_enabled", lambda: True)() else 50
    lock = SharableLock()
    shared = lock.shared
    box: list = [None]
    turn = [0]
    done = [0]
    end = time.monotonic() + 30

    def too_long() -> bool:
        if time.monotonic() > end:
            raise TimeoutError("the racing threads lost each other")
        return False

    # Tight spins, so that the two calls start within nanoseconds of each other; the
    # clock is read once in 65,536 turns.
    def worker() -> None:
        spins = 0
        for i in range(1, rounds + 1):
            while turn[0] != i:
                spins += 1
                if not spins & 0xFFFF:
                    too_long()
            box[0]()
            done[0] = i

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    doubled = 0
    for i in range(1, rounds + 1):
        keep = shared.acquire(deadline=10)
        call = box[0] = functools.partial(shared.acquire(deadline=10))
        turn[0] = i
        call()
        spins = 0
        while done[0] != i:
            spins += 1
            if not spins & 0xFFFF:
                too_long()
        doubled += not shared.locked()
        keep()
        del call
        box[0] = None
    t.join(10)
    assert doubled == 0, f"one Unlock released twice in {doubled} of {rounds} rounds"
    assert not shared.locked()


def test_an_unlock_called_by_its_maker_and_another_thread_never_ends_the_next_hold():
    # The same race on a fair Lock, whose Unlock decides once-only by its hold's id on a
    # free-threaded build. A third thread waits in the queue before the two calls, so
    # the call that releases hands the lock straight to it: if the other call released
    # too, it would end that thread's hold.
    free_threaded = not getattr(sys, "_is_gil_enabled", lambda: True)()
    rounds = 2_000 if free_threaded else 30
    lock = Lock(fair=True)
    box: list = [None]
    turn = [0]
    called = [0]
    made_call = [0]
    ended: list[int] = []
    end = time.monotonic() + 60

    def spin_until(cond) -> None:
        spins = 0
        while not cond():
            spins += 1
            if not spins & 0xFF:
                if time.monotonic() > end:
                    raise TimeoutError("the racing threads lost each other")
                time.sleep(0)

    def worker() -> None:
        for i in range(1, rounds + 1):
            spin_until(lambda i=i: turn[0] == i)
            box[0]()
            called[0] = i

    for i in range(1, rounds + 1):
        call = box[0] = functools.partial(lock.acquire(deadline=10))
        queued = threading.Event()

        def waiter(i: int = i, queued: threading.Event = queued) -> None:
            queued.set()
            got = lock.acquire(deadline=10)
            spin_until(lambda: called[0] == i and made_call[0] == i)
            if not lock.locked() or got.released:
                ended.append(i)
            got()

        if i == 1:
            threading.Thread(target=worker, daemon=True).start()
        taker = threading.Thread(target=waiter, daemon=True)
        taker.start()
        assert queued.wait(10)
        spin_until(lambda: lock.statistics().waiting == 1)
        turn[0] = i
        call()
        made_call[0] = i
        taker.join(10)
        assert not taker.is_alive()
        del call
        box[0] = None
    assert ended == [], f"a second call of one Unlock ended the next hold {len(ended)} times"
    assert not lock.locked()


# --- unlock_on_cancel -------------------------------------------------------------------------


def test_unlock_on_cancel_releases_when_token_cancelled(wait_until):
    lock = Lock()
    u = lock.acquire()
    token = CancelToken()
    assert u.unlock_on_cancel(token) is None
    assert lock.locked()
    assert not u.released
    token.cancel()
    assert wait_until(lambda: u.released, timeout=5)
    assert not lock.locked()


def test_unlock_on_cancel_from_another_thread(spawn, wait_until):
    lock = Lock()
    u = lock.acquire()
    token = CancelToken()
    u.unlock_on_cancel(token)
    spawn(token.cancel, "bye").result()
    assert wait_until(lambda: u.released, timeout=5)
    assert not lock.locked()


def test_unlock_on_cancel_releases_on_token_deadline(wait_until):
    lock = Lock()
    u = lock.acquire()
    u.unlock_on_cancel(CancelToken(deadline=0.1))
    assert lock.locked()
    assert wait_until(lambda: u.released, timeout=10)
    assert not lock.locked()


@pytest.mark.parametrize("deadline", [0, 0.001])
def test_unlock_on_cancel_releases_on_short_token_deadline(deadline, wait_until):
    for _ in range(100):
        lock = Lock()
        u = lock.acquire()
        token = CancelToken(deadline=deadline)
        u.unlock_on_cancel(token)
        assert wait_until(lambda u=u: u.released, timeout=5), (token.cancelled, token.reason)
        assert not lock.locked()


def test_unlock_on_cancel_releases_on_parent_cancel(wait_until):
    lock = Lock()
    u = lock.acquire()
    parent = CancelToken()
    child = parent.child()
    u.unlock_on_cancel(child)
    parent.cancel()
    assert wait_until(lambda: u.released, timeout=5)
    assert not lock.locked()
    assert child.cancelled


def test_unlock_on_cancel_with_unreferenced_child_token(wait_until):
    # `u.unlock_on_cancel(parent.child())`: nothing but the registration refers to the child,
    # and the release must still happen when the parent is cancelled.
    lock = Lock()
    u = lock.acquire()
    parent = CancelToken()
    u.unlock_on_cancel(parent.child())
    gc.collect()
    parent.cancel()
    assert wait_until(lambda: u.released, timeout=5)
    assert not lock.locked()


def test_unlock_on_cancel_with_cancelled_token_releases_at_once():
    lock = Lock()
    u = lock.acquire()
    token = CancelToken()
    token.cancel()
    u.unlock_on_cancel(token)
    assert u.released
    assert not lock.locked()


def test_unlock_on_cancel_after_manual_release_does_not_touch_later_hold():
    lock = Lock()
    u = lock.acquire()
    token = CancelToken()
    u.unlock_on_cancel(token)
    u()
    assert not lock.locked()
    later = lock.acquire()
    token.cancel()
    assert lock.locked()
    assert not later.released
    later()
    assert not lock.locked()


def test_unlock_on_cancel_on_released_unlock_does_nothing():
    lock = Lock()
    u = lock.acquire()
    u()
    later = lock.acquire()
    token = CancelToken()
    token.cancel()
    u.unlock_on_cancel(token)
    assert lock.locked()
    later()


@pytest.mark.parametrize("bad", [None, object(), "token", Lock()], ids=repr)
def test_unlock_on_cancel_rejects_non_token(bad):
    lock = Lock()
    u = lock.acquire()
    try:
        with pytest.raises(TypeError):
            u.unlock_on_cancel(bad)
        assert lock.locked()
        assert not u.released
    finally:
        u()
    assert not lock.locked()


# --- garbage collection -----------------------------------------------------------------------


def test_unlock_collected_while_holding_releases_with_resource_warning():
    lock = Lock()
    u = lock.acquire()
    assert lock.locked()
    with pytest.warns(ResourceWarning):
        del u
        gc.collect()
    assert not lock.locked()
    u2 = lock.try_acquire()
    assert u2 is not None
    u2()


def test_unlock_collected_in_a_cycle_releases_with_resource_warning():
    lock = Lock()
    holder: list[object] = []
    holder.append(holder)
    holder.append(lock.acquire())
    with pytest.warns(ResourceWarning):
        del holder
        gc.collect()
    assert not lock.locked()


def test_unlock_collected_wakes_a_waiter(spawn):
    lock = Lock()
    u = lock.acquire()
    started = threading.Event()

    def waiter():
        started.set()
        got = lock.acquire(deadline=30)
        got()

    w = spawn(waiter)
    assert started.wait(5)
    time.sleep(0.05)
    with pytest.warns(ResourceWarning):
        del u
        gc.collect()
    w.result(timeout=10)
    assert not lock.locked()


def test_released_unlock_collected_without_warning():
    lock = Lock()
    u = lock.acquire()
    u()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del u
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert not lock.locked()


def test_try_acquire_none_result_emits_nothing():
    lock = Lock()
    u = lock.acquire()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lock.try_acquire() is None
        gc.collect()
    assert caught == []
    u()
