"""The hand-written entry points of ``acquire``, ``__enter__``, ``__exit__``, ``__aenter__``,
``__aexit__``, ``LockManager.lock`` and ``Unlock.__call__`` agree with the full ones, and the
objects made on every acquire (``Unlock``, ``NamedLock``), made and freed without PyO3's
constructor and deallocator, behave as any Python object.

``acquire()`` and ``acquire(deadline=<number>)`` on a free lock, ``__enter__`` on a free lock,
``__exit__`` with the three arguments a ``with`` statement passes, the same two of ``async with``
on a lock that does not record who holds it (the awaitable they return is finished: its own
``__await__`` and ``__next__`` slots), and every ``unlock()``, take a
shorter path than PyO3's generated functions (see ``src/python/vectorcall.rs``); every other call
is handed to the generated function. These tests pin the seam: each kind of call either side of
it, on each class that has the shortcut.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import math
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from ctxlock import (
    CancelToken,
    Lock,
    LockManager,
    LockTimeout,
    SharableLock,
    Unlock,
    _ctxlock,
)
from kinds import EXCLUSIVE_KINDS, KINDS

SIGNATURE = "(cancel=None, *, deadline=None, blocking=True)"


# A fresh view under test of each kind in the registry (tests/kinds.py).
MAKERS = [lambda kind=kind: kind.new().view for kind in KINDS]
EXCLUSIVE_MAKERS = [lambda kind=kind: kind.new().view for kind in EXCLUSIVE_KINDS]
IDS = [kind.name for kind in KINDS]
EXCLUSIVE_IDS = [kind.name for kind in EXCLUSIVE_KINDS]


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's C API only")
def test_every_fast_entry_point_is_installed() -> None:
    # A PyO3 upgrade that changes how methods are defined makes the module fall back to
    # PyO3's entry points silently (still correct, slower): this notices.
    assert sorted(_ctxlock._fast_calls) == [
        "Lock.__aenter__",
        "Lock.__aexit__",
        "Lock.__enter__",
        "Lock.__exit__",
        "Lock.acquire",
        "LockManager.lock",
        "LockView.__aenter__",
        "LockView.__aexit__",
        "LockView.__enter__",
        "LockView.__exit__",
        "LockView.acquire",
        "NamedLock (made and freed here)",
        "NamedLock.__enter__",
        "NamedLock.__exit__",
        "NamedLock.acquire",
        "Unlock (made and freed here)",
        "Unlock.__call__",
        "_Ready.__await__ and __next__",
    ]
    have_vectorcall = 1 << 11  # Py_TPFLAGS_HAVE_VECTORCALL
    assert Unlock.__flags__ & have_vectorcall


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_signature_and_name_are_the_generated_ones(make: Callable[[], Lock]) -> None:
    lock = make()
    assert str(inspect.signature(lock.acquire)) == SIGNATURE
    assert lock.acquire.__name__ == "acquire"
    assert type(lock).acquire.__qualname__ == f"{type(lock).__name__}.acquire"


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"deadline": 30},
        {"deadline": 30.0},
        {"deadline": 0},
        {"deadline": 0.0},
        {"deadline": math.inf},
        {"deadline": 10**30},
        {"deadline": True},  # an int subclass: the generated path, same answer
        {"deadline": None},
        {"".join(["dead", "line"]): 5.0},  # a keyword name that is not interned
    ],
    ids=repr,
)
def test_acquire_on_a_free_lock_holds_and_unlock_releases(
    make: Callable[[], Lock], kwargs: dict[str, object]
) -> None:
    lock = make()
    u = lock.acquire(**kwargs)  # type: ignore[arg-type]
    assert isinstance(u, Unlock)
    assert lock.locked()
    assert u.released is False
    assert u() is None
    assert u.released is True
    assert not lock.locked()


@pytest.mark.parametrize("make", EXCLUSIVE_MAKERS, ids=EXCLUSIVE_IDS)
@pytest.mark.parametrize("deadline", [0, 0.0, 0.01])
def test_acquire_with_deadline_on_a_held_lock_times_out(
    make: Callable[[], Lock], deadline: float
) -> None:
    lock = make()
    u = lock.acquire()
    with pytest.raises(LockTimeout):
        lock.acquire(deadline=deadline)
    assert lock.locked()
    u()
    assert not lock.locked()


def test_plain_acquire_on_a_held_lock_waits_for_the_release(spawn: Callable[..., Any]) -> None:
    # The shortcut only takes a free lock; on a taken one the call goes to the full acquire,
    # which waits.
    lock = Lock()
    u = lock.acquire()
    worker = spawn(lock.acquire)
    time.sleep(0.05)
    assert not worker.done
    u()
    got = worker.result()
    assert isinstance(got, Unlock)
    assert lock.locked()
    got()
    assert not lock.locked()


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_with_on_a_free_lock_holds_and_exit_releases(make: Callable[[], Lock]) -> None:
    lock = make()
    with lock:
        assert lock.locked()
        # Only a with's own exit releases a with's hold; an Unlock's is not touched.
        assert lock.statistics().holders == 1
    assert not lock.locked()
    # The statement's exit, called again, finds no scoped hold: the generated error.
    with pytest.raises(RuntimeError, match="not held by a with statement"):
        lock.__exit__(None, None, None)


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_the_with_exception_comes_out_and_the_lock_is_free(make: Callable[[], Lock]) -> None:
    lock = make()
    with pytest.raises(KeyError, match="mine"), lock:
        raise KeyError("mine")
    assert not lock.locked()


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_exit_never_releases_an_unlocks_hold(make: Callable[[], Lock]) -> None:
    lock = make()
    u = lock.acquire()
    with pytest.raises(RuntimeError, match="not held by a with statement"):
        lock.__exit__(None, None, None)
    assert lock.locked()
    u()
    assert not lock.locked()


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_enter_and_exit_with_other_arguments_raise_the_generated_errors(
    make: Callable[[], Lock],
) -> None:
    lock = make()
    name = type(lock).__name__
    with pytest.raises(TypeError, match=rf"{name}.__enter__\(\) takes no arguments"):
        lock.__enter__(1)  # type: ignore[call-arg]
    assert not lock.locked()
    lock.__enter__()
    with pytest.raises(TypeError, match="missing 2 required positional arguments"):
        lock.__exit__(None)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        lock.__exit__(None, None, None, extra=1)  # type: ignore[call-arg]
    assert lock.locked()
    # Keywords for the three go to the generated function, which releases too.
    lock.__exit__(_exc_type=None, _exc=None, _tb=None)  # type: ignore[call-arg]
    assert not lock.locked()


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_async_with_on_a_free_lock_holds_and_aexit_releases(make: Callable[[], Lock]) -> None:
    lock = make()

    async def main() -> None:
        async with lock:
            assert lock.locked()
            assert lock.statistics().holders == 1
        assert not lock.locked()
        # The statement's exit, called again, finds no scoped hold: the generated error.
        with pytest.raises(RuntimeError, match="not held by a with statement"):
            await lock.__aexit__(None, None, None)
        # The exception raised inside comes out, and the lock is free.
        with pytest.raises(KeyError, match="mine"):
            async with lock:
                raise KeyError("mine")
        assert not lock.locked()

    asyncio.run(main())


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_aenter_and_aexit_with_other_arguments_raise_the_generated_errors(
    make: Callable[[], Lock],
) -> None:
    lock = make()
    name = type(lock).__name__

    async def main() -> None:
        with pytest.raises(TypeError, match=rf"{name}.__aenter__\(\) takes no arguments"):
            lock.__aenter__(1)  # type: ignore[call-arg]
        assert not lock.locked()
        await lock.__aenter__()
        with pytest.raises(TypeError, match="missing 2 required positional arguments"):
            lock.__aexit__(None)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            lock.__aexit__(None, None, None, extra=1)  # type: ignore[call-arg]
        assert lock.locked()
        # Keywords for the three go to the generated function, which releases too.
        await lock.__aexit__(_exc_type=None, _exc=None, _tb=None)  # type: ignore[call-arg]
        assert not lock.locked()

    asyncio.run(main())


def test_aenter_on_a_held_lock_waits_for_the_release() -> None:
    # The shortcut only takes a free lock; on a taken one the call goes to the generated
    # __aenter__, whose awaitable waits.
    lock = Lock()

    async def main() -> None:
        u = lock.acquire()
        entered = asyncio.Event()

        async def enter_and_leave() -> bool:
            async with lock:
                entered.set()
                return lock.locked()

        task = asyncio.create_task(enter_and_leave())
        await asyncio.sleep(0.05)
        assert not task.done() and not entered.is_set()
        u()
        assert await asyncio.wait_for(task, 10) is True
        assert not lock.locked()

    asyncio.run(main())


def test_the_finished_awaitable_ends_at_once_with_none() -> None:
    # What __aenter__ on a free lock and every __aexit__ return: its own iterator, which
    # ends at once with None, whether reached through the slots (await, next) or by name.
    lock = Lock()

    async def main() -> None:
        ready = lock.__aenter__()
        assert lock.locked()
        assert ready.__await__() is ready
        assert type(ready).__await__(ready) is ready
        with pytest.raises(StopIteration) as stopped:
            next(ready)
        assert stopped.value.value is None
        with pytest.raises(StopIteration):
            ready.__next__()
        assert list(ready.__await__()) == []
        assert await ready is None
        assert await asyncio.ensure_future(ready) is None
        assert await lock.__aexit__(None, None, None) is None
        assert not lock.locked()

    asyncio.run(main())


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's reference counts")
def test_async_with_gives_back_every_reference_it_takes() -> None:
    # The finished awaitable is one shared object: a slot that returned it without a
    # new reference, or an entry point that kept one, would move its count.
    lock = Lock()

    async def main() -> tuple[int, int]:
        ready = lock.__aenter__()
        await ready
        await lock.__aexit__(None, None, None)
        before = (sys.getrefcount(ready), sys.getrefcount(lock))
        for _ in range(1000):
            async with lock:
                pass
        return before[0] - sys.getrefcount(ready), before[1] - sys.getrefcount(lock)

    assert asyncio.run(main()) == (0, 0)
    assert not lock.locked()


def test_enter_on_a_held_lock_waits_for_the_release(spawn: Callable[..., Any]) -> None:
    # The shortcut only takes a free lock; on a taken one the call goes to the generated
    # __enter__, which waits.
    lock = Lock()
    u = lock.acquire()

    def enter_and_leave() -> bool:
        with lock:
            return lock.locked()

    worker = spawn(enter_and_leave)
    time.sleep(0.05)
    assert not worker.done
    u()
    assert worker.result() is True
    assert not lock.locked()


def test_shared_holds_stack_through_the_shortcut() -> None:
    rw = SharableLock()
    a = rw.shared.acquire()
    b = rw.shared.acquire(deadline=1)
    assert "shared by 2" in repr(rw)
    assert rw.shared.statistics().holders == 2
    with pytest.raises(LockTimeout):
        rw.exclusive.acquire(deadline=0)
    a()
    b()
    assert not rw.exclusive.locked()


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((None,), {}),
        ((), {"cancel": None}),
        ((), {"blocking": True}),
        ((), {"deadline": 1, "blocking": True}),
        ((CancelToken(),), {"deadline": 1.5}),
    ],
)
def test_other_calls_go_to_the_full_acquire(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    lock = Lock()
    u = lock.acquire(*args, **kwargs)  # type: ignore[arg-type]
    assert lock.locked()
    u()
    assert not lock.locked()


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((), {"deadlin": 1}, "deadlin"),
        ((None, None), {}, "positional"),
        ((), {"deadline": "1"}, "deadline"),
        ((), {"deadline": -1}, "deadline"),
        ((), {"deadline": math.nan}, "deadline"),
    ],
)
def test_bad_calls_raise_the_full_acquires_errors(
    args: tuple[object, ...], kwargs: dict[str, object], match: str
) -> None:
    lock = Lock()
    with pytest.raises((TypeError, ValueError), match=match):
        lock.acquire(*args, **kwargs)  # type: ignore[arg-type]
    assert not lock.locked()


class _Keyword(str):
    """A keyword name whose ``__eq__`` is the user's: it raises, and counts its calls."""

    calls = 0

    def __eq__(self, other: object) -> bool:
        _Keyword.calls += 1
        raise KeyboardInterrupt

    __hash__ = str.__hash__


@pytest.mark.parametrize("keyword", ["deadline", "timeout"])
def test_a_keyword_name_of_a_str_subclass_is_never_compared_by_the_shortcut(
    keyword: str,
) -> None:
    # f(**{name: value}) may pass a str subclass as a keyword name. The shortcut never
    # calls its __eq__ (whose exception it would have to drop); the full acquire parses
    # the call as CPython does.
    _Keyword.calls = 0
    lock = Lock()
    if keyword == "deadline":
        lock.acquire(**{_Keyword(keyword): 1})()
    else:
        with pytest.raises(TypeError, match="timeout"):
            lock.acquire(**{_Keyword(keyword): 1})
    assert _Keyword.calls == 0
    assert not lock.locked()


def test_descriptor_checks_the_instance_type() -> None:
    lock = Lock()
    u = Lock.acquire(lock)
    assert lock.locked()
    u()
    with pytest.raises(TypeError):
        Lock.acquire(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Lock.acquire(SharableLock().shared)  # type: ignore[arg-type]


@pytest.mark.parametrize(("args", "kwargs"), [((1,), {}), ((), {"x": 1}), ((None,), {})])
def test_unlock_with_arguments_raises_and_keeps_the_hold(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    lock = Lock()
    u = lock.acquire()
    with pytest.raises(TypeError, match="no arguments"):
        u(*args, **kwargs)  # type: ignore[call-arg]
    assert lock.locked()
    assert not u.released
    u()
    assert not lock.locked()


@pytest.mark.parametrize(
    "call",
    [
        lambda u: u.__call__(),  # the tp_call slot, through a method-wrapper
        lambda u: type(u).__call__(u),
        lambda u: Unlock.__call__(u),
    ],
)
def test_unlock_through_tp_call_releases_once(call: Callable[[Unlock], object]) -> None:
    lock = Lock()
    u = lock.acquire()
    assert call(u) is None
    assert u.released
    assert not lock.locked()
    u2 = lock.acquire()
    assert call(u) is None  # stale: does not release the later hold
    assert lock.locked()
    u2()


def test_unlock_drops_its_cancel_registrations_at_once() -> None:
    # A registration holds a reference to its Unlock; the release through the vectorcall slot
    # must drop it there and then, not leave it for later.
    lock = Lock()
    token = CancelToken()
    u = lock.acquire()
    before = sys.getrefcount(u)
    u.unlock_on_cancel(token)
    assert sys.getrefcount(u) == before + 1
    u()
    assert sys.getrefcount(u) == before
    token.cancel()
    assert not lock.locked()
    u2 = lock.acquire()
    token.cancel()
    assert lock.locked()
    u2()


# --- LockManager.lock(name) -------------------------------------------------------------


class NameWithItsOwnHash(str):
    def __hash__(self) -> int:
        return 7


def test_lock_by_name_keeps_the_generated_signature() -> None:
    mgr = LockManager()
    assert str(inspect.signature(mgr.lock)) == "(name)"
    assert LockManager.lock.__qualname__ == "LockManager.lock"
    assert mgr.lock.__name__ == "lock"


@pytest.mark.parametrize(
    "lookup",
    [
        lambda mgr, name: mgr.lock(name),
        lambda mgr, name: mgr.lock(name=name),
        lambda mgr, name: mgr.lock(NameWithItsOwnHash(name)),
        lambda mgr, name: mgr.sharable_lock(NameWithItsOwnHash(name)).exclusive,
    ],
    ids=["positional", "keyword", "str-subclass", "sharable-str-subclass"],
)
def test_every_way_to_name_a_lock_gives_the_same_lock(lookup: Callable[..., Any]) -> None:
    mgr = LockManager()
    name = f"entry-points:{time.monotonic_ns()}"
    unlock = mgr.lock(name).acquire()
    try:
        other = lookup(mgr, name)
        assert other.name == name
        assert other.locked()
        with pytest.raises(LockTimeout):
            other.acquire(deadline=0)
    finally:
        unlock()
    held = lookup(mgr, name).acquire()
    assert mgr.lock(name).locked()
    held()
    assert not mgr.lock(name).locked()


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((1,), {}, TypeError, "must be a str"),
        ((b"x",), {}, TypeError, "must be a str"),
        (("",), {}, ValueError, "empty"),
        (("x" * 1025,), {}, ValueError, "1024"),
        ((), {}, TypeError, "missing 1 required"),
        (("a", "b"), {}, TypeError, "positional"),
        ((), {"nme": "x"}, TypeError, "unexpected keyword"),
        (("a",), {"name": "b"}, TypeError, "multiple values"),
    ],
)
def test_bad_calls_of_lock_raise_the_generated_errors(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        LockManager().lock(*args, **kwargs)


# --- the objects made on every acquire --------------------------------------------------


def test_freed_objects_clear_their_weak_references_and_call_back() -> None:
    mgr = LockManager()
    fired: list[str] = []
    named = mgr.lock("entry-points:weak")
    unlock = named.acquire()
    refs = [
        weakref.ref(unlock, lambda _: fired.append("unlock")),
        weakref.ref(named, lambda _: fired.append("named")),
    ]
    unlock()
    del unlock
    assert fired == ["unlock"] and refs[0]() is None
    del named
    assert fired == ["unlock", "named"] and refs[1]() is None


def test_freed_objects_give_back_every_reference_they_held() -> None:
    mgr = LockManager()
    name = "entry-points:references"
    plain = Lock()
    before = sys.getrefcount(mgr), sys.getrefcount(name), sys.getrefcount(plain)
    for _ in range(1_000):
        mgr.lock(name).acquire()()
        plain.acquire()()
        with mgr.lock(name):
            pass
    assert (sys.getrefcount(mgr), sys.getrefcount(name), sys.getrefcount(plain)) == before


def test_references_taken_and_given_back_on_other_threads_balance() -> None:
    # Without a GIL, the thread that made an object counts its references in a local
    # count and every other thread in a shared one (`refcount.rs`). An Unlock's reference
    # to its lock is taken by the acquiring thread and given back by whichever thread
    # frees the Unlock: here every mix of the lock's maker and other threads.
    lock = Lock()
    before = sys.getrefcount(lock)
    handed: list[Unlock] = []

    def acquire_here(n: int) -> None:
        for _ in range(n):
            lock.acquire()()  # taken and given back on this thread
        handed.append(lock.acquire())  # given back on another

    worker = threading.Thread(target=acquire_here, args=(1_000,))
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    # (Counted before anything else is asked of `lock`: pytest's assertions keep what
    # they evaluated, the bound `lock.locked` too.)
    assert sys.getrefcount(lock) == before + 1
    assert lock.locked()
    handed.pop()()  # released and freed here, by the lock's maker
    assert sys.getrefcount(lock) == before
    assert not lock.locked()

    acquire_here(1_000)
    freer = threading.Thread(target=lambda: handed.pop()())
    freer.start()
    freer.join(timeout=30)
    assert not freer.is_alive()
    assert sys.getrefcount(lock) == before
    assert not lock.locked()

    # A lock whose maker has ended, held by an Unlock from yet another thread.
    made: list[Lock] = []
    maker = threading.Thread(target=lambda: made.append(Lock()))
    maker.start()
    maker.join(timeout=30)
    orphan = made.pop()
    gone = weakref.ref(orphan)
    worker = threading.Thread(target=lambda lk: handed.append(lk.acquire()), args=(orphan,))
    worker.start()
    worker.join(timeout=30)
    del orphan
    assert gone() is not None  # the Unlock keeps it
    handed.pop()()
    assert gone() is None


def test_an_unlock_freed_while_holding_still_releases_and_warns() -> None:
    mgr = LockManager()
    named = mgr.lock("entry-points:forgotten")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        named.acquire()
        gc.collect()
    assert not named.locked()
    assert any(issubclass(w.category, ResourceWarning) for w in caught)


def test_an_unlock_whose_lost_token_was_asked_for_is_freed_whole() -> None:
    mgr = LockManager()
    named = mgr.lock("entry-points:lost")
    unlock = named.acquire()
    lost = unlock.lost
    ref = weakref.ref(unlock)
    unlock()
    del unlock
    assert ref() is None
    assert not lost.cancelled
    mgr.close()
    assert not lost.cancelled


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's C API only")
def test_the_objects_made_per_acquire_are_not_tracked_by_the_collector() -> None:
    # Their classes show the collector nothing but their type, so tracking them would
    # only cost a list insertion and removal each (src/python/freelist.rs).
    mgr = LockManager()
    fresh = [mgr.lock(f"entry-points:gc:{i}") for i in range(100)]  # more than a list holds
    unlocks = [named.acquire() for named in fresh]
    assert not any(gc.is_tracked(o) for o in [*fresh, *unlocks])
    for unlock in unlocks:
        unlock()
    plain = Lock().acquire()
    assert not gc.is_tracked(plain)
    plain()
