"""The exception hierarchy and how acquire rejects bad input."""

from __future__ import annotations

import math
import threading
import time
from decimal import Decimal

import ctxlock
import pytest
from conftest import PATIENCE
from ctxlock import (
    Cancelled,
    CancelToken,
    Lock,
    LockError,
    LockTimeout,
    WouldBlock,
)
from kinds import KINDS, over

# --- hierarchy --------------------------------------------------------------------------------


def test_hierarchy():
    assert issubclass(LockError, Exception)
    assert issubclass(LockTimeout, LockError)
    assert issubclass(LockTimeout, TimeoutError)
    assert issubclass(Cancelled, LockError)
    assert not issubclass(Cancelled, TimeoutError)
    assert issubclass(WouldBlock, LockError)
    assert not issubclass(WouldBlock, TimeoutError)
    assert not issubclass(LockTimeout, Cancelled)
    assert not issubclass(Cancelled, LockTimeout)


def test_exceptions_are_the_ones_in_errors_module():
    from ctxlock import _errors

    for name in ("LockError", "LockTimeout", "Cancelled", "WouldBlock"):
        assert getattr(ctxlock, name) is getattr(_errors, name)


def test_lock_timeout_caught_as_timeout_error():
    with pytest.raises(TimeoutError):
        raise LockTimeout("late")


def test_a_token_cancelled_with_a_users_lock_timeout_times_out_without_naming_a_deadline(
    target,
):
    # The user's own LockTimeout is the cause; only a token's deadline is said to have
    # passed, for the token itself and for a child cancelled with it.
    mine = LockTimeout("my own reason")
    token = CancelToken()
    token.cancel(mine)
    for t in (token, token.child()):
        with pytest.raises(LockTimeout, match="cancelled with a LockTimeout") as info:
            target.view.acquire(t)
        assert info.value.__cause__ is mine
        assert "deadline" not in str(info.value)
    due = CancelToken(deadline=0.01)
    assert due.wait(PATIENCE)
    for t in (due, due.child()):
        with pytest.raises(LockTimeout, match="the cancel token's deadline passed") as info:
            target.view.acquire(t)
        assert info.value.__cause__ is due.reason
    _assert_usable(target.view)


def test_cancelled_reason():
    reason = object()
    assert Cancelled(reason).reason is reason
    assert Cancelled().reason is None
    assert Cancelled(reason="r").reason == "r"
    assert str(Cancelled()) == "cancelled"
    assert "'r'" in str(Cancelled("r"))


def test_raised_errors_have_the_exact_types(spawn):
    lock = Lock()
    u = spawn(lock.acquire).result()
    try:
        with pytest.raises(LockTimeout) as t:
            lock.acquire(deadline=0)
        assert type(t.value) is LockTimeout
        with pytest.raises(WouldBlock) as w:
            lock.acquire(blocking=False)
        assert type(w.value) is WouldBlock
        token = CancelToken()
        token.cancel(42)
        with pytest.raises(Cancelled) as c:
            lock.acquire(token)
        assert type(c.value) is Cancelled
        assert c.value.reason == 42
    finally:
        u()


# --- bad input --------------------------------------------------------------------------------

BAD_INPUTS = [
    ({"deadline": -1}, ValueError, "deadline"),
    ({"deadline": -0.001}, ValueError, "deadline"),
    # What it got, as Python writes it (not 300 digits).
    ({"deadline": -1e-300}, ValueError, "deadline must not be negative, got -1e-300"),
    ({"deadline": math.nan}, ValueError, "deadline"),
    # Decimal's own __float__ refuses a signaling NaN: still a NaN deadline, by name.
    ({"deadline": Decimal("sNaN")}, ValueError, "deadline must not be NaN, got sNaN"),
    ({"deadline": Decimal("-sNaN")}, ValueError, "deadline must not be NaN, got -sNaN"),
    ({"deadline": -math.inf}, ValueError, "deadline"),
    ({"deadline": "x"}, TypeError, "deadline"),
    ({"deadline": [1]}, TypeError, "deadline"),
    ({"deadline": object()}, TypeError, "deadline"),
    ({"cancel": object()}, TypeError, "cancel"),
    ({"cancel": "token"}, TypeError, "cancel"),
    ({"cancel": 5}, TypeError, "cancel"),
    ({"blocking": False, "deadline": 1}, ValueError, None),
    ({"blocking": False, "deadline": 0}, ValueError, None),
    ({"blocking": False, "deadline": math.inf}, ValueError, None),
]


def _ids(case):
    return repr(case[0])


def _assert_usable(lock):
    assert not lock.locked()
    u = lock.try_acquire()
    assert u is not None
    assert lock.locked()
    u()
    u = lock.acquire(deadline=5)
    u()
    assert not lock.locked()


@pytest.mark.parametrize("case", BAD_INPUTS, ids=_ids)
def test_bad_input_on_free_lock(case, target):
    kwargs, exc_type, name = case
    lock = target.view
    with pytest.raises(exc_type, match=name) as info:
        lock.acquire(**kwargs)()  # (the release only runs if the bad input was accepted)
    assert not isinstance(info.value, LockError)
    _assert_usable(lock)


class _Seconds:
    """A deadline whose ``__float__`` raises ``error``: the user's own exception."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __float__(self) -> float:
        raise self.error


@pytest.mark.parametrize("error", [ZeroDivisionError("mine"), KeyboardInterrupt()])
def test_an_exception_of_a_deadlines_float_comes_out_as_is(error, target):
    # Only "not a number" (a TypeError) becomes ctxlock's TypeError naming the parameter;
    # what the user's __float__ raises comes out unchanged, from every taker of seconds.
    lock = target.view
    seconds = _Seconds(error)
    for call in (
        lambda: lock.acquire(deadline=seconds),
        lambda: CancelToken(deadline=seconds),
        lambda: CancelToken().child(deadline=seconds),
        lambda: CancelToken().wait(seconds),
    ):
        with pytest.raises(type(error)) as info:
            call()
        assert info.value is error
    _assert_usable(lock)


class _Index:
    """A number of seconds known by its ``__index__`` only."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


@pytest.mark.parametrize("wrap", [int, _Index], ids=["int", "__index__"])
def test_an_int_too_large_for_a_float_is_no_limit_or_negative(target, wrap):
    # 10**400 seconds is beyond any limit, as inf is; -10**400 is negative.
    lock = target.view
    lock.acquire(deadline=wrap(10**400))()
    assert CancelToken(deadline=wrap(10**400)).deadline is None
    with pytest.raises(ValueError, match="deadline must not be negative"):
        lock.acquire(deadline=wrap(-(10**400)))
    _assert_usable(lock)


def test_a_deadline_that_is_no_number_names_the_parameter_and_keeps_the_cause(target):
    with pytest.raises(TypeError, match="deadline must be a number of seconds") as info:
        target.view.acquire(deadline=_Seconds(TypeError("not mine to name")))
    assert isinstance(info.value.__cause__, TypeError)
    _assert_usable(target.view)


@pytest.mark.parametrize("case", BAD_INPUTS, ids=_ids)
def test_bad_input_on_held_lock(case, target, spawn):
    kwargs, exc_type, name = case
    lock = target.view
    u = spawn(target.blocker.acquire).result()
    try:
        # In a thread, so that a bad input taken for a wait without limit fails the test
        # instead of hanging it.
        attempt = spawn(lambda: lock.acquire(**kwargs)())
        with pytest.raises(exc_type, match=name):
            attempt.result(PATIENCE)  # (the release only runs if the bad input was accepted)
        assert target.blocker.locked()
        assert not u.released
    finally:
        u()
    _assert_usable(lock)


def test_bad_input_does_not_cancel_a_valid_token():
    lock = Lock()
    token = CancelToken()
    with pytest.raises(ValueError, match="deadline"):
        lock.acquire(token, deadline=-1)
    assert not token.cancelled
    u = lock.acquire(token)
    u()


def test_deadline_and_blocking_are_keyword_only():
    lock = Lock()
    with pytest.raises(TypeError):
        lock.acquire(None, 5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        lock.acquire(None, None, False)  # type: ignore[misc]
    _assert_usable(lock)


def test_unknown_keyword_is_a_type_error():
    lock = Lock()
    with pytest.raises(TypeError):
        lock.acquire(timeout=1)  # type: ignore[call-arg]
    _assert_usable(lock)


# --- accepted edge values ---------------------------------------------------------------------


@pytest.mark.parametrize("deadline", [math.inf, 1e300, 10**12, 2**64], ids=repr)
def test_huge_deadline_means_no_limit_on_free_lock(deadline):
    lock = Lock()
    u = lock.acquire(deadline=deadline)
    assert lock.locked()
    u()
    _assert_usable(lock)


@pytest.mark.parametrize("deadline", [math.inf, 1e300], ids=repr)
def test_huge_deadline_waits_on_held_lock(deadline, spawn):
    lock = Lock()
    holder = lock.acquire()
    started = threading.Event()

    def waiter():
        started.set()
        got = lock.acquire(deadline=deadline)
        got()
        return True

    w = spawn(waiter)
    assert started.wait(5)
    time.sleep(0.2)
    assert not w.done, w.exception(0)  # a huge deadline must not overflow into "now"
    holder()
    assert w.result(timeout=10) is True
    _assert_usable(lock)


@pytest.mark.parametrize("deadline", [0, 0.0, 1, 2.5], ids=repr)
def test_int_and_float_deadlines_accepted(deadline):
    lock = Lock()
    u = lock.acquire(deadline=deadline)
    u()
    _assert_usable(lock)


def test_none_values_are_the_defaults():
    lock = Lock()
    u = lock.acquire(None, deadline=None, blocking=True)
    u()
    u = lock.acquire(None, deadline=None, blocking=False)
    u()
    _assert_usable(lock)


# --- blocking= takes a truth value, as threading.Lock.acquire does ----------------------------

FALSY = [False, 0, 0.0, "", [], None]
TRUTHY = [True, 1, 2, -1, 0.5, "no", [0], object()]


@over(KINDS)
@pytest.mark.parametrize("blocking", FALSY + TRUTHY, ids=repr)
def test_blocking_takes_any_truth_value_on_a_free_lock(kind, blocking):
    lock, _ = kind.factory()
    u = lock.acquire(blocking=blocking)
    assert lock.locked()
    u()
    assert not lock.locked()


@over(KINDS)
@pytest.mark.parametrize("blocking", FALSY + TRUTHY, ids=repr)
def test_blocking_truth_value_decides_whether_a_taken_lock_is_waited_for(kind, blocking, spawn):
    lock, blocker = kind.factory()
    holder = spawn(blocker.acquire).result()
    try:
        if blocking:
            with pytest.raises(LockTimeout):  # it waited, until the deadline
                lock.acquire(blocking=blocking, deadline=0.02)
        else:
            with pytest.raises(WouldBlock):
                lock.acquire(blocking=blocking)
            with pytest.raises(WouldBlock):
                lock.acquire(None, blocking=blocking)
    finally:
        holder()


def test_blocking_whose_truth_value_fails_raises_that_error():
    class NoTruth:
        def __bool__(self) -> bool:
            raise ZeroDivisionError("no truth value")

    lock = Lock()
    with pytest.raises(ZeroDivisionError, match="no truth value"):
        lock.acquire(blocking=NoTruth())
    _assert_usable(lock)


# --- timeout= is threading's name: the error points at deadline= -------------------------------


@over(KINDS)
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {"timeout": 1}), ((None,), {"timeout": 1}), ((), {"deadline": 1, "timeout": 0})],
    ids=repr,
)
def test_timeout_keyword_hints_at_deadline(kind, args, kwargs):
    lock, _ = kind.factory()
    name = type(lock).__name__
    with pytest.raises(TypeError) as info:
        lock.acquire(*args, **kwargs)
    message = str(info.value)
    assert f"{name}.acquire() got an unexpected keyword argument 'timeout'" in message
    assert "deadline=" in message
    _assert_usable(lock)


@over(KINDS)
@pytest.mark.parametrize(
    "kwargs", [{"timeout": 1}, {"deadline": 1, "timeout": 0}, {"timeout": 1, "x": 2}], ids=repr
)
def test_timeout_keyword_of_acquire_async_hints_at_deadline(kind, kwargs):
    lock, _ = kind.factory()
    name = type(lock).__name__
    with pytest.raises(TypeError) as info:
        lock.acquire_async(**kwargs)  # type: ignore[call-arg]
    message = str(info.value)
    assert f"{name}.acquire_async() got an unexpected keyword argument 'timeout'" in message
    assert "deadline=" in message
    other = r"acquire_async\(\) got an unexpected keyword argument 'timout'$"
    with pytest.raises(TypeError, match=other):
        lock.acquire_async(timout=1)  # type: ignore[call-arg]
    _assert_usable(lock)


def test_other_unknown_keywords_stay_plain_type_errors():
    lock = Lock()
    with pytest.raises(TypeError, match="unexpected keyword argument 'timout'") as info:
        lock.acquire(timout=1)  # type: ignore[call-arg]
    assert "deadline=" not in str(info.value)
    _assert_usable(lock)


# --- other arguments of the wrong type: the message names the parameter -----------------------


@pytest.mark.parametrize("value", [1, "yes", None, 1.0], ids=repr)
def test_fair_takes_only_a_bool(value):
    with pytest.raises(TypeError) as info:
        Lock(fair=value)  # type: ignore[arg-type]
    assert str(info.value) == f"fair must be a bool, not {type(value).__name__}"
    assert Lock(fair=True).fair
    assert not Lock(fair=False).fair
    assert not Lock().fair


@pytest.mark.parametrize("value", [1, b"a:", None], ids=repr)
def test_query_prefix_must_be_a_str(value):
    with ctxlock.LockManager() as mgr:
        unlock = mgr.lock("q:1").acquire()
        with pytest.raises(TypeError) as info:
            mgr.query(value)  # type: ignore[arg-type]
        assert str(info.value) == f"query prefix must be a str, not {type(value).__name__}"
        with pytest.raises(TypeError, match="query prefix must be a str"):
            mgr.query(prefix=value)  # type: ignore[arg-type]
        assert [i.name for i in mgr.query("q:")] == ["q:1"]
        assert [i.name for i in mgr.query()] == ["q:1"]
        unlock()


def test_on_cancel_names_fn_and_the_token_still_works():
    token = CancelToken()
    with pytest.raises(TypeError, match=r"^on_cancel\(\) fn must be callable, not int$"):
        token.on_cancel(1)  # type: ignore[arg-type]
    seen = []
    token.on_cancel(lambda: seen.append(1))
    token.cancel()
    assert seen == [1]


def test_unlock_on_cancel_names_token_and_keeps_the_hold():
    lock = Lock()
    unlock = lock.acquire()
    with pytest.raises(
        TypeError, match=r"^unlock_on_cancel\(\) token must be a CancelToken, not str$"
    ):
        unlock.unlock_on_cancel("token")  # type: ignore[arg-type]
    assert lock.locked()
    unlock()
    _assert_usable(lock)


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (lambda mgr: mgr.lock("a\ud800"), "lock name"),
        (lambda mgr: mgr.sharable_lock("\udc00b"), "lock name"),
        (lambda mgr: mgr.query("\ud800"), "query prefix"),
        (lambda mgr: ctxlock.LockManager("file:///tmp/\ud800"), "LockManager url"),
    ],
    ids=["lock", "sharable_lock", "query", "url"],
)
def test_a_str_with_no_utf8_is_a_value_error_naming_the_parameter(call, what):
    with ctxlock.LockManager() as mgr:
        with pytest.raises(ValueError) as info:
            call(mgr)
        assert str(info.value) == f"{what} must be encodable as UTF-8 (no lone surrogates)"
        assert isinstance(info.value.__cause__, UnicodeEncodeError)
        assert mgr.query() == []
        mgr.lock("a").acquire()()
