"""Properties every exclusive lock must have: ``Lock``, a fair ``Lock`` and ``rw.exclusive``.

Each test takes a factory from ``FACTORIES`` (as trio's lock tests do) and checks one
property; a new kind of exclusive lock only needs a new entry there.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import ctxlock
import pytest
from ctxlock import Cancelled, CancelToken, LockError, LockTimeout, Unlock, WouldBlock

FACTORIES: list[Callable[[], Any]] = [
    ctxlock.Lock,
    lambda: ctxlock.Lock(fair=True),
    lambda: ctxlock.SharableLock().exclusive,
]
IDS = ["Lock", "Lock(fair=True)", "SharableLock().exclusive"]

EPS = 0.005


@pytest.fixture(params=FACTORIES, ids=IDS)
def lock(request):
    return request.param()


def test_mutual_exclusion_under_4_threads(lock, spawn):
    guard = threading.Lock()
    inside = 0
    max_inside = 0
    total = 0
    n_threads, n_iter = 4, 300

    def work(seed):
        nonlocal inside, max_inside, total
        rng = random.Random(seed)
        for _ in range(n_iter):
            how = rng.randrange(3)
            u = None
            if how == 0:
                u = lock.acquire()
            elif how == 1:
                u = lock.acquire(deadline=30)
            else:
                lock.__enter__()
            with guard:
                inside += 1
                max_inside = max(max_inside, inside)
            value = total
            if rng.random() < 0.3:
                time.sleep(0)
            total = value + 1
            with guard:
                inside -= 1
            if u is None:
                lock.__exit__(None, None, None)
            else:
                u()

    workers = [spawn(work, i) for i in range(n_threads)]
    for w in workers:
        w.result(timeout=30)
    assert max_inside == 1
    assert total == n_threads * n_iter
    assert not lock.locked()


def test_try_acquire_and_locked_are_consistent(lock, spawn):
    assert lock.locked() is False
    u = lock.try_acquire()
    assert isinstance(u, Unlock)
    assert lock.locked() is True
    assert lock.try_acquire() is None
    assert spawn(lock.try_acquire).result() is None
    with pytest.raises(WouldBlock):
        lock.acquire(blocking=False)
    assert lock.locked() is True
    u()
    assert lock.locked() is False
    assert spawn(lock.locked).result() is False
    with lock:
        assert lock.locked() is True
    assert lock.locked() is False
    u = lock.acquire(blocking=False)
    assert lock.locked() is True
    u()
    assert lock.locked() is False


def test_deadline(lock, spawn):
    holder = spawn(lock.acquire).result()
    try:
        with pytest.raises(LockTimeout):
            lock.acquire(deadline=0)
        t0 = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            lock.acquire(deadline=0.15)
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value, LockError)
        assert 0.15 - EPS <= time.monotonic() - t0 < 5.0
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            lock.acquire(CancelToken(deadline=0.15))
        assert 0.15 - EPS <= time.monotonic() - t0 < 5.0
        assert lock.locked()
    finally:
        holder()
    assert not lock.locked()


def test_token_cancel_ends_the_wait(lock, spawn):
    holder = lock.acquire()
    token = CancelToken()
    started = threading.Event()

    def waiter():
        started.set()
        return lock.acquire(token, deadline=30)

    w = spawn(waiter)
    assert started.wait(5)
    time.sleep(0.1)
    assert not w.done
    t_cancel = time.monotonic()
    token.cancel("stop")
    exc = w.exception(timeout=10)
    assert isinstance(exc, Cancelled), exc
    assert exc.reason == "stop"
    assert time.monotonic() - t_cancel < 2.0
    assert lock.locked()
    holder()
    assert not lock.locked()
    u = lock.try_acquire()
    assert u is not None
    u()


def test_already_cancelled_token_raises_even_if_free(lock):
    token = CancelToken()
    token.cancel("early")
    with pytest.raises(Cancelled) as info:
        lock.acquire(token)
    assert info.value.reason == "early"
    assert not lock.locked()


def test_no_leak_on_timeout(lock, spawn):
    holder = lock.acquire()
    waiters = [spawn(lock.acquire, deadline=0.05 + 0.02 * i) for i in range(3)]
    for w in waiters:
        assert isinstance(w.exception(timeout=10), LockTimeout)
    assert lock.locked()
    holder()
    assert not lock.locked()
    u = lock.try_acquire()
    assert u is not None
    u()


def test_no_leak_when_unlock_races_the_deadline(lock, spawn):
    """A waiter whose deadline passes as the lock is handed to it either keeps it or not."""
    rng = random.Random(7)
    outcomes = {"acquired": 0, "timeout": 0}

    def attempt(deadline):
        try:
            u = lock.acquire(deadline=deadline)
        except LockTimeout:
            return "timeout"
        u()
        return "acquired"

    for _ in range(25):
        holder = lock.acquire()
        w = spawn(attempt, 0.01)
        time.sleep(rng.uniform(0.005, 0.015))
        holder()
        outcomes[w.result(timeout=10)] += 1
        assert not lock.locked(), outcomes
        u = lock.try_acquire()
        assert u is not None, outcomes
        u()


def test_no_leak_when_unlock_races_cancel(lock, spawn):
    rng = random.Random(11)

    def attempt(token):
        try:
            u = lock.acquire(token, deadline=10)
        except Cancelled:
            return "cancelled"
        u()
        return "acquired"

    for _ in range(25):
        holder = lock.acquire()
        token = CancelToken()
        started = threading.Event()
        w = spawn(lambda token=token, started=started: (started.set(), attempt(token))[1])
        assert started.wait(5)
        time.sleep(rng.uniform(0.0, 0.01))
        releaser = spawn(holder)
        token.cancel()
        releaser.result()
        assert w.result(timeout=10) in ("cancelled", "acquired")
        assert not lock.locked()
        u = lock.try_acquire()
        assert u is not None
        u()
