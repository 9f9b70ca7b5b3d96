"""ctxlock.Unlock: the once-only release of one acquire."""

from __future__ import annotations

import gc
import threading
import time
import warnings
import weakref

import pytest
from ctxlock import CancelToken, Lock, Unlock


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
        barrier = threading.Barrier(3)

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


def test_an_unlock_called_through_its_only_reference_releases_once():
    # `u()` on its own line calls through the local variable's reference alone, and
    # `lock.acquire()()` through the call's: without a GIL both decide once-only without
    # the atomic swap (no other thread can reach the object). Still once only.
    lock = Lock()
    lock.acquire()()
    assert not lock.locked()
    u = lock.acquire()
    u()
    assert not lock.locked()
    later = lock.acquire()
    u()
    assert lock.locked()
    assert not later.released
    later()
    assert not lock.locked()


def test_an_unlock_with_a_weak_reference_releases_once(spawn):
    # A weak reference is a way for another thread to reach the Unlock: the call must
    # then decide with the swap, and still release once.
    lock = Lock()
    u = lock.acquire()
    ref = weakref.ref(u)
    u()
    assert not lock.locked()
    later = lock.acquire()
    spawn(lambda: ref()()).result()
    assert lock.locked()
    later()


def test_racing_calls_of_one_unlock_never_release_the_next_hold(spawn):
    # Two threads call one Unlock at once while a third takes the lock as soon as it is
    # free: if both calls released, the second would end the third's hold.
    for _ in range(300):
        lock = Lock()
        u = lock.acquire()
        barrier = threading.Barrier(3)
        called = threading.Event()

        def call(u=u, barrier=barrier) -> None:
            barrier.wait(timeout=10)
            u()

        def take(lock=lock, barrier=barrier, called=called) -> bool:
            barrier.wait(timeout=10)
            got = lock.acquire(deadline=10)
            assert called.wait(10)
            held = lock.locked() and not got.released
            got()
            return held

        taker = spawn(take)
        callers = [spawn(call), spawn(call)]
        for c in callers:
            c.result(timeout=10)
        called.set()
        assert taker.result(timeout=10), "a second call of one Unlock ended another hold"
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
