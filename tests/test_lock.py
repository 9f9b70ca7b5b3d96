"""ctxlock.Lock: exclusion, deadlines, cancellation, fairness, and the GIL."""

from __future__ import annotations

import copy
import pickle
import queue
import random
import threading
import time

import pytest
from conftest import PATIENCE, STRESS_SECONDS
from ctxlock import (
    Cancelled,
    CancelToken,
    Lock,
    LockError,
    LockTimeout,
    Unlock,
    WouldBlock,
)

# Slack for comparing a deadline with time.monotonic(): both use CLOCK_MONOTONIC.
EPS = 0.005
# An upper bound for "promptly": it bounds a hang (a lost wake-up), never measures speed.
PROMPT = PATIENCE


def hold_in_thread(spawn, lock):
    """Acquire ``lock`` in another thread; return its Unlock (callable from any thread)."""
    return spawn(lock.acquire).result()


# --- basics -----------------------------------------------------------------------------------


def test_acquire_returns_unlock_that_releases():
    lock = Lock()
    assert not lock.locked()
    u = lock.acquire()
    assert isinstance(u, Unlock)
    assert lock.locked()
    u()
    assert not lock.locked()


@pytest.mark.parametrize("fair", [False, True])
def test_fair_property(fair):
    assert Lock(fair=fair).fair is fair
    assert Lock().fair is False


def test_fair_is_keyword_only():
    with pytest.raises(TypeError):
        Lock(True)  # type: ignore[misc]


def test_try_acquire_and_locked():
    lock = Lock()
    u = lock.try_acquire()
    assert isinstance(u, Unlock)
    assert lock.locked()
    assert lock.try_acquire() is None
    assert lock.locked()
    u()
    assert not lock.locked()
    u2 = lock.try_acquire()
    assert u2 is not None
    u2()
    assert not lock.locked()


def test_try_acquire_from_another_thread_sees_the_hold(spawn):
    lock = Lock()
    u = lock.acquire()
    try:
        assert spawn(lock.try_acquire).result() is None
        assert spawn(lock.locked).result() is True
    finally:
        u()
    assert spawn(lock.locked).result() is False


def test_with_statement():
    lock = Lock()
    with lock as entered:
        assert entered is None
        assert lock.locked()
        assert lock.try_acquire() is None
    assert not lock.locked()


def test_with_statement_releases_on_exception():
    lock = Lock()
    with pytest.raises(ZeroDivisionError), lock:
        assert lock.locked()
        1 / 0  # noqa: B018
    assert not lock.locked()
    with lock:
        assert lock.locked()
    assert not lock.locked()


def test_exit_when_not_held_raises_runtime_error():
    lock = Lock()
    with pytest.raises(RuntimeError):
        lock.__exit__(None, None, None)
    with lock:
        pass
    with pytest.raises(RuntimeError):
        lock.__exit__(None, None, None)
    assert not lock.locked()
    u = lock.try_acquire()
    assert u is not None
    u()


# --- deadlines --------------------------------------------------------------------------------


def test_deadline_passes_raises_lock_timeout(spawn):
    lock = Lock()
    u = hold_in_thread(spawn, lock)
    try:
        t0 = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            lock.acquire(deadline=0.2)
        elapsed = time.monotonic() - t0
        assert type(info.value) is LockTimeout
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value, LockError)
        assert 0.2 - EPS <= elapsed < 0.2 + 5.0
        assert lock.locked()
    finally:
        u()
    assert not lock.locked()
    u2 = lock.try_acquire()
    assert u2 is not None
    u2()


def test_token_deadline_raises_lock_timeout(spawn):
    lock = Lock()
    u = hold_in_thread(spawn, lock)
    try:
        t0 = time.monotonic()
        token = CancelToken(deadline=0.2)
        with pytest.raises(LockTimeout):
            lock.acquire(token)
        elapsed = time.monotonic() - t0
        assert 0.2 - EPS <= elapsed < 0.2 + 5.0
        # A later deadline= does not extend the token's earlier one.
        token2 = CancelToken(deadline=0.1)
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            lock.acquire(token2, deadline=30)
        assert time.monotonic() - t0 < 5.0
    finally:
        u()
    assert not lock.locked()


def test_parent_token_deadline_raises_lock_timeout_through_child(spawn):
    lock = Lock()
    u = hold_in_thread(spawn, lock)
    try:
        child = CancelToken(deadline=0.15).child()
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            lock.acquire(child)
        assert 0.15 - EPS <= time.monotonic() - t0 < 5.0
    finally:
        u()


def test_explicit_deadline_earlier_than_token(spawn):
    lock = Lock()
    u = hold_in_thread(spawn, lock)
    try:
        token = CancelToken(deadline=60)
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            lock.acquire(token, deadline=0.1)
        assert 0.1 - EPS <= time.monotonic() - t0 < 5.0
        assert not token.cancelled  # the acquire's deadline does not cancel the token
    finally:
        u()


# --- cancellation -----------------------------------------------------------------------------


@pytest.mark.parametrize("fair", [False, True])
def test_cancel_from_another_thread_wakes_blocked_acquire(spawn, fair):
    lock = Lock(fair=fair)
    holder = lock.acquire()
    token = CancelToken()
    reason = object()
    started = threading.Event()

    def waiter():
        started.set()
        return lock.acquire(token, deadline=30)

    w = spawn(waiter)
    assert started.wait(5)
    time.sleep(0.1)
    assert not w.done
    t_cancel = time.monotonic()
    token.cancel(reason)
    exc = w.exception(timeout=10)
    woke = time.monotonic() - t_cancel
    assert isinstance(exc, Cancelled), exc
    assert exc.reason is reason
    assert woke < PROMPT
    # The cancelled waiter left the queue: the hand-off goes nowhere, the lock is free.
    assert lock.locked()
    holder()
    assert not lock.locked()
    u = lock.try_acquire()
    assert u is not None
    u()


@pytest.mark.parametrize(
    "kwargs", [{}, {"deadline": 0}, {"deadline": 30}, {"blocking": False}], ids=repr
)
def test_already_cancelled_token_raises_at_once_on_free_lock(kwargs):
    lock = Lock()
    token = CancelToken()
    token.cancel("gone")
    with pytest.raises(Cancelled) as info:
        lock.acquire(token, **kwargs)
    assert info.value.reason == "gone"
    assert not lock.locked()


def test_already_cancelled_token_without_reason():
    lock = Lock()
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled) as info:
        lock.acquire(token)
    assert info.value.reason is None
    assert not lock.locked()


def test_token_cancelled_with_lock_timeout_reason_raises_lock_timeout():
    lock = Lock()
    token = CancelToken()
    token.cancel(LockTimeout("manual"))
    with pytest.raises(LockTimeout):
        lock.acquire(token)
    assert not lock.locked()


def test_token_whose_deadline_passed_raises_lock_timeout_on_free_lock():
    lock = Lock()
    token = CancelToken(deadline=0.05)
    assert token.wait(10)
    with pytest.raises(LockTimeout):
        lock.acquire(token)
    child = token.child()
    with pytest.raises(LockTimeout):
        lock.acquire(child)
    assert not lock.locked()


def test_tokens_whose_deadline_passed_unobserved_raise_lock_timeout():
    # Nothing waits on these tokens; by the time of the acquire their deadlines have long
    # passed, so each cancelled itself with a LockTimeout reason.
    lock = Lock()
    tokens = [CancelToken(deadline=d) for d in (0, 0.001, 0.01) for _ in range(100)]
    time.sleep(0.3)
    acquired = 0
    for token in tokens:
        try:
            u = lock.acquire(token)
        except LockTimeout:
            continue
        acquired += 1
        u()
    assert acquired == 0, f"{acquired} of {len(tokens)} acquires ignored a passed token deadline"
    assert not lock.locked()


def test_child_of_cancelled_parent_raises_parent_reason():
    lock = Lock()
    parent = CancelToken()
    child = parent.child()
    reason = object()
    parent.cancel(reason)
    with pytest.raises(Cancelled) as info:
        lock.acquire(child)
    assert info.value.reason is reason
    assert not lock.locked()


# --- fairness ---------------------------------------------------------------------------------


def test_fair_lock_is_fifo(spawn, wait_until):
    lock = Lock(fair=True)
    holder = lock.acquire()
    order: list[int] = []
    n = 5

    def waiter(i):
        u = lock.acquire(deadline=30)
        order.append(i)
        time.sleep(0.002)
        u()

    workers = []
    for i in range(n):
        workers.append(spawn(waiter, i))
        # Waiter i is queued before waiter i + 1 starts.
        assert wait_until(lambda queued=i + 1: lock.statistics().waiting == queued, timeout=10)
    assert order == []
    holder()
    # Strict FIFO: the unlock handed the lock to waiter 0; this thread cannot barge in.
    barged = lock.try_acquire()
    if barged is not None:
        barged()
    assert barged is None
    for w in workers:
        w.result(timeout=20)
    assert order == list(range(n))
    assert not lock.locked()


def test_unfair_lock_does_not_starve_a_waiter(spawn, wait_until):
    lock = Lock()
    stop = threading.Event()
    spins = 0

    def hog():
        nonlocal spins
        while not stop.is_set():
            with lock:
                spins += 1

    h = spawn(hog)
    try:
        assert wait_until(lambda: spins > 1000, timeout=10)
        w = spawn(lambda: lock.acquire(deadline=10))
        u = w.result(timeout=20)  # LockTimeout here means the waiter starved
        spins_while_held = spins
        time.sleep(0.05)
        assert spins == spins_while_held  # the hog really was shut out
        u()
        assert wait_until(lambda: spins > spins_while_held + 100, timeout=10)
    finally:
        stop.set()
    h.result(timeout=10)
    assert not lock.locked()


# --- the GIL ----------------------------------------------------------------------------------


def test_other_threads_run_while_one_is_blocked_in_acquire(spawn):
    lock = Lock()
    holder = lock.acquire()
    stop = threading.Event()
    counter = 0

    def count():
        nonlocal counter
        while not stop.is_set():
            counter += 1

    started = threading.Event()

    def waiter():
        started.set()
        u = lock.acquire(deadline=5)
        u()

    c = spawn(count)
    w = spawn(waiter)
    try:
        assert started.wait(5)
        time.sleep(0.1)
        before = counter
        time.sleep(0.3)
        after = counter
        # If the waiter held the GIL while blocked, this thread could not have run again
        # before its 5 s deadline.
        assert not w.done
        assert after > before
    finally:
        stop.set()
        holder()
    w.result()
    c.result()
    assert not lock.locked()


# --- re-entrance ------------------------------------------------------------------------------


def test_reentrant_acquire_with_deadline_times_out_and_leaves_lock_consistent():
    lock = Lock()
    u = lock.acquire()
    with pytest.raises(LockTimeout):
        lock.acquire(deadline=0.1)
    with pytest.raises(LockTimeout):
        lock.acquire(deadline=0)
    with pytest.raises(WouldBlock):
        lock.acquire(blocking=False)
    assert lock.locked()
    assert not u.released
    u()
    assert not lock.locked()
    u2 = lock.try_acquire()
    assert u2 is not None
    u2()
    assert not lock.locked()


# --- pickling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dump", [pickle.dumps, copy.copy, copy.deepcopy], ids=lambda f: f.__name__)
def test_lock_and_token_cannot_be_pickled_or_copied(dump):
    with pytest.raises(TypeError):
        dump(Lock())
    with pytest.raises(TypeError):
        dump(Lock(fair=True))
    with pytest.raises(TypeError):
        dump(CancelToken())


@pytest.mark.parametrize("dump", [pickle.dumps, copy.copy, copy.deepcopy], ids=lambda f: f.__name__)
def test_unlock_cannot_be_pickled_or_copied(dump):
    lock = Lock()
    u = lock.acquire()
    try:
        with pytest.raises(TypeError):
            dump(u)
        assert lock.locked()
    finally:
        u()
    assert not lock.locked()


# --- stress -----------------------------------------------------------------------------------


@pytest.mark.stress
@pytest.mark.parametrize("fair", [False, True])
def test_stress_unlock_races_cancel_and_deadlines(spawn, wait_until, fair):
    """Holders never overlap and the lock never leaks while unlocks race cancels."""
    stress_seconds = STRESS_SECONDS or 0.0
    per_worker = 10**9 if stress_seconds else 600
    end = time.monotonic() + (stress_seconds or 15.0)
    lock = Lock(fair=fair)
    n_workers = 4
    guard = threading.Lock()
    inside = 0
    overlaps = 0
    stats = {"acquired": 0, "timeout": 0, "cancelled": 0, "cancels": 0}
    exposed: list[CancelToken] = []  # tokens the canceller thread may cancel at any moment
    # Unlocks left to a token: released by its deadline (a timer thread) or the canceller.
    pending: list[tuple[Unlock, CancelToken]] = []
    unlock_queue: queue.SimpleQueue[Unlock | None] = queue.SimpleQueue()
    stop = threading.Event()

    def count(key):
        with guard:
            stats[key] += 1

    def worker(seed):
        nonlocal inside, overlaps
        rng = random.Random(seed)
        for _ in range(per_worker):
            if time.monotonic() > end:
                break
            token = CancelToken(deadline=rng.choice([None, None, 0.0005, 0.002]))
            exposed.append(token)
            deadline = rng.choice([None, 0, 0.0002, 0.001, 0.005])
            try:
                u = lock.acquire(token, deadline=deadline)
            except LockTimeout:
                count("timeout")
                continue
            except Cancelled as exc:
                assert exc.reason == "stress"
                count("cancelled")
                continue
            with guard:
                inside += 1
                if inside != 1:
                    overlaps += 1
            assert lock.locked()
            if rng.random() < 0.3:
                time.sleep(0)
            with guard:
                inside -= 1
                stats["acquired"] += 1
            mode = rng.randrange(4)
            if mode == 0:
                u()
            elif mode == 1:
                # unlock() races the canceller's cancel() of the release token.
                release = CancelToken()
                u.unlock_on_cancel(release)
                exposed.append(release)
                u()
            elif mode == 2:
                # Released by a token deadline (a timer thread), or by the canceller.
                release = CancelToken(deadline=rng.choice([0, 0.0003]))
                u.unlock_on_cancel(release)
                exposed.append(release)
                with guard:
                    pending.append((u, release))
            else:
                # Released by another thread, racing the canceller.
                release = CancelToken()
                u.unlock_on_cancel(release)
                exposed.append(release)
                unlock_queue.put(u)

    def canceller(seed):
        rng = random.Random(seed)
        while not stop.is_set():
            try:
                token = exposed.pop() if rng.random() < 0.7 else exposed.pop(0)
            except IndexError:
                time.sleep(0.0001)
                continue
            token.cancel("stress")
            count("cancels")

    def unlocker():
        while (u := unlock_queue.get()) is not None:
            u()

    c = spawn(canceller, 1000)
    un = spawn(unlocker)
    workers = [spawn(worker, i) for i in range(n_workers)]
    try:
        for w in workers:
            w.result(timeout=max(30.0, stress_seconds + 30.0))
    finally:
        stop.set()
        unlock_queue.put(None)
    c.result()
    un.result()

    assert overlaps == 0, stats
    assert stats["acquired"] > 0, stats
    assert stats["cancels"] > 0, stats
    assert wait_until(lambda: all(u.released for u, _ in pending), timeout=10), [
        f"unlock_on_cancel did not release: token.cancelled={t.cancelled} reason={t.reason!r}"
        for u, t in pending
        if not u.released
    ]
    assert wait_until(lambda: not lock.locked(), timeout=10), stats
    u = lock.try_acquire()
    assert u is not None, "the lock leaked"
    u()
    assert not lock.locked()
