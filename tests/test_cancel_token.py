"""ctxlock.CancelToken: cancel, reasons, deadlines, children, wait and on_cancel."""

from __future__ import annotations

import asyncio
import gc
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import PATIENCE
from ctxlock import CancelToken, Lock, LockTimeout

EPS = 0.005
# An upper bound for "promptly": it bounds a hang (a lost wake-up), never measures speed.
PROMPT = PATIENCE


# --- cancel, cancelled, reason ----------------------------------------------------------------


def test_new_token_is_not_cancelled():
    token = CancelToken()
    assert token.cancelled is False
    assert token.reason is None
    assert token.deadline is None
    assert token.wait(0) is False


def test_cancel_sets_cancelled_and_reason():
    token = CancelToken()
    reason = object()
    assert token.cancel(reason) is None
    assert token.cancelled is True
    assert token.reason is reason


def test_cancel_is_idempotent_first_reason_wins():
    token = CancelToken()
    token.cancel("first")
    token.cancel("second")
    token.cancel()
    assert token.cancelled
    assert token.reason == "first"


def test_cancel_without_reason_then_with_one_keeps_none():
    token = CancelToken()
    token.cancel()
    assert token.cancelled
    assert token.reason is None
    token.cancel("late")
    assert token.reason is None


def test_first_reason_wins_across_racing_threads(spawn):
    token = CancelToken()
    barrier = threading.Barrier(4, timeout=PATIENCE)

    def cancel(i):
        barrier.wait()
        token.cancel(i)

    workers = [spawn(cancel, i) for i in range(4)]
    for w in workers:
        w.result()
    assert token.cancelled
    assert token.reason in range(4)
    reason = token.reason
    token.cancel("again")
    assert token.reason == reason


# --- deadline ---------------------------------------------------------------------------------


def test_deadline_is_on_the_monotonic_clock():
    t0 = time.monotonic()
    token = CancelToken(deadline=10)
    t1 = time.monotonic()
    assert isinstance(token.deadline, float)
    assert t0 + 10 - 0.05 <= token.deadline <= t1 + 10 + 0.05
    assert not token.cancelled


def test_deadline_passes_token_cancels_itself_with_lock_timeout():
    t0 = time.monotonic()
    token = CancelToken(deadline=0.2)
    assert token.wait(10) is True
    elapsed = time.monotonic() - t0
    assert 0.2 - EPS <= elapsed < 0.2 + 5.0
    assert token.cancelled
    assert isinstance(token.reason, LockTimeout)
    assert isinstance(token.reason, TimeoutError)


def test_deadline_zero_cancels_promptly():
    token = CancelToken(deadline=0)
    assert token.wait(PROMPT) is True
    assert isinstance(token.reason, LockTimeout)


@pytest.mark.parametrize("deadline", [0, 0.0003, 0.002])
def test_many_short_deadlines_all_cancel_themselves(deadline, wait_until):
    # Nobody waits on these tokens: only the timer can cancel them.
    n = 2000
    tokens = [CancelToken(deadline=deadline) for _ in range(n)]
    # Fewer with a callback: each runs on a runner thread that must take the GIL, and a
    # callback that fires while this loop still runs costs it a GIL switch interval
    # (5 ms): 2000 of them took this loop 10-20 s on a loaded machine, once over 60 s.
    m = 300
    calls: list[int] = []
    with_callback = []
    for _ in range(m):
        token = CancelToken(deadline=deadline)
        token.on_cancel(lambda: calls.append(1))
        with_callback.append(token)
    ok = wait_until(lambda: all(t.cancelled for t in tokens), timeout=5)
    assert ok, f"{sum(not t.cancelled for t in tokens)} of {n} tokens never cancelled"
    assert all(isinstance(t.reason, LockTimeout) for t in tokens)
    assert wait_until(lambda: len(calls) == m, timeout=5), f"{len(calls)} of {m} on_cancel ran"


def test_short_deadlines_from_several_threads_all_cancel_themselves(spawn, wait_until):
    tokens: list[CancelToken] = []

    def make(seed):
        rng = random.Random(seed)
        for _ in range(1500):
            tokens.append(CancelToken(deadline=rng.choice([0, 0.0003, 0.0005, 0.002, 0.01])))
            if rng.random() < 0.1:
                time.sleep(0)

    for w in [spawn(make, i) for i in range(4)]:
        w.result(timeout=30)
    ok = wait_until(lambda: all(t.cancelled for t in tokens), timeout=5)
    assert ok, f"{sum(not t.cancelled for t in tokens)} of {len(tokens)} never cancelled"


def test_cancel_before_deadline_keeps_given_reason():
    token = CancelToken(deadline=0.1)
    token.cancel("early")
    time.sleep(0.2)
    assert token.reason == "early"


@pytest.mark.parametrize("deadline", [math.inf, 1e300])
def test_huge_deadline_means_no_limit(deadline):
    token = CancelToken(deadline=deadline)
    assert token.wait(0.05) is False
    assert not token.cancelled
    child = token.child(deadline=deadline)
    assert not child.cancelled
    token.cancel("x")
    assert child.wait(PROMPT)
    assert child.reason == "x"


# --- children ---------------------------------------------------------------------------------


def test_child_is_cancelled_with_parent_and_gets_its_reason():
    parent = CancelToken()
    child = parent.child()
    grandchild = child.child()
    assert not child.cancelled
    reason = object()
    parent.cancel(reason)
    assert child.cancelled
    assert grandchild.cancelled
    assert child.reason is reason
    assert grandchild.reason is reason


def test_child_of_cancelled_parent_is_cancelled_at_once():
    parent = CancelToken()
    parent.cancel("done")
    child = parent.child()
    assert child.cancelled
    assert child.reason == "done"


def test_cancelling_child_never_cancels_parent():
    parent = CancelToken()
    child = parent.child()
    sibling = parent.child()
    child.cancel("child only")
    assert child.cancelled
    assert not parent.cancelled
    assert parent.reason is None
    assert not sibling.cancelled
    # A cancelled child keeps its own reason when the parent is cancelled later.
    parent.cancel("parent")
    assert child.reason == "child only"
    assert sibling.reason == "parent"


def test_child_effective_deadline_is_the_earlier_one():
    parent = CancelToken(deadline=10)
    assert parent.deadline is not None
    later = parent.child(deadline=100)
    assert later.deadline == pytest.approx(parent.deadline, abs=0.05)
    plain = parent.child()
    assert plain.deadline == pytest.approx(parent.deadline, abs=0.05)
    t0 = time.monotonic()
    earlier = parent.child(deadline=1)
    assert t0 + 1 - 0.05 <= earlier.deadline <= time.monotonic() + 1 + 0.05
    assert earlier.deadline < parent.deadline
    no_parent_deadline = CancelToken().child(deadline=5)
    assert no_parent_deadline.deadline == pytest.approx(time.monotonic() + 5, abs=0.5)


def test_child_cancelled_by_parent_deadline():
    parent = CancelToken(deadline=0.1)
    child = parent.child(deadline=60)
    assert child.wait(10)
    assert parent.wait(10)
    assert isinstance(child.reason, LockTimeout)


def test_child_deadline_does_not_cancel_parent():
    parent = CancelToken()
    child = parent.child(deadline=0.05)
    assert child.wait(10)
    assert isinstance(child.reason, LockTimeout)
    assert not parent.cancelled


# --- wait -------------------------------------------------------------------------------------


def test_wait_times_out_with_false():
    token = CancelToken()
    t0 = time.monotonic()
    assert token.wait(0.2) is False
    assert 0.2 - EPS <= time.monotonic() - t0 < 5.0
    assert token.wait(0) is False


def test_wait_returns_true_when_cancelled_from_another_thread(spawn):
    token = CancelToken()
    w = spawn(token.wait)
    time.sleep(0.1)
    assert not w.done
    t_cancel = time.monotonic()
    token.cancel("go")
    assert w.result(timeout=10) is True
    assert time.monotonic() - t_cancel < PROMPT


def test_wait_on_cancelled_token_returns_true_at_once():
    token = CancelToken()
    token.cancel()
    assert token.wait() is True
    assert token.wait(0) is True
    assert token.wait(100) is True


def test_wait_wakes_on_parent_cancel(spawn):
    parent = CancelToken()
    child = parent.child()
    w = spawn(child.wait, 30)
    time.sleep(0.1)
    parent.cancel()
    assert w.result(timeout=10) is True


# --- on_cancel --------------------------------------------------------------------------------


def test_on_cancel_runs_once_in_the_cancelling_thread(spawn):
    token = CancelToken()
    calls: list[int] = []
    token.on_cancel(lambda: calls.append(threading.get_ident()))
    assert calls == []
    w = spawn(lambda: (token.cancel("a"), token.cancel("b"), threading.get_ident())[-1])
    canceller_ident = w.result()
    token.cancel("c")
    assert calls == [canceller_ident]


def test_on_cancel_runs_at_once_if_already_cancelled():
    token = CancelToken()
    token.cancel()
    calls: list[int] = []
    stop = token.on_cancel(lambda: calls.append(threading.get_ident()))
    assert calls == [threading.get_ident()]
    assert stop() is False
    assert calls == [threading.get_ident()]


def test_on_cancel_stop_before_cancel_returns_true_and_fn_never_runs():
    token = CancelToken()
    calls: list[str] = []
    stop = token.on_cancel(lambda: calls.append("x"))
    keep = token.on_cancel(lambda: calls.append("kept"))
    assert callable(stop)
    assert stop() is True
    assert stop() is False  # nothing left to stop
    token.cancel()
    assert calls == ["kept"]
    assert keep() is False


def test_on_cancel_stop_after_fn_ran_returns_false():
    token = CancelToken()
    calls: list[str] = []
    stop = token.on_cancel(lambda: calls.append("x"))
    token.cancel()
    assert calls == ["x"]
    assert stop() is False


def test_on_cancel_runs_on_parent_cancel():
    parent = CancelToken()
    child = parent.child()
    calls: list[object] = []
    child.on_cancel(lambda: calls.append(child.reason))
    parent.cancel("p")
    assert calls == ["p"]


def test_on_cancel_runs_in_a_callback_thread_on_deadline(wait_until):
    token = CancelToken(deadline=0.05)
    idents: list[int] = []
    token.on_cancel(lambda: idents.append(threading.get_ident()))
    assert wait_until(lambda: idents, timeout=5)  # nobody waits on the token itself
    assert len(idents) == 1
    assert idents[0] != threading.get_ident()
    assert token.cancelled


def test_deadline_runs_on_cancel_once_while_threads_wait(spawn, wait_until):
    # The timer and the waiting threads race to notice the deadline; whichever wins, each
    # callback runs exactly once, and in one of ctxlock's callback threads, never in a
    # waiter (which must not wait for it).
    waiter_idents: set[int] = set()
    callback_idents: list[int] = []

    def wait_on(token):
        waiter_idents.add(threading.get_ident())
        return token.wait(10)

    for _ in range(20):
        token = CancelToken(deadline=0.02)
        token.on_cancel(lambda: callback_idents.append(threading.get_ident()))
        waiters = [spawn(wait_on, token) for _ in range(3)]
        assert wait_on(token)
        assert all(w.result() for w in waiters)
    assert wait_until(lambda: len(callback_idents) == 20, timeout=5)
    time.sleep(0.05)
    assert len(callback_idents) == 20
    python_threads = {t.ident for t in threading.enumerate()}
    for ident in callback_idents:
        # ctxlock's callback threads are Rust threads, unknown to `threading`.
        assert ident not in waiter_idents and ident not in python_threads


def test_on_cancel_exception_goes_to_unraisablehook(monkeypatch):
    seen: list[tuple[type[BaseException] | None, str]] = []

    def hook(unraisable):
        seen.append((unraisable.exc_type, str(unraisable.exc_value)))

    monkeypatch.setattr(sys, "unraisablehook", hook)
    token = CancelToken()
    calls: list[str] = []

    def boom():
        calls.append("boom")
        raise ValueError("from on_cancel")

    token.on_cancel(boom)
    token.on_cancel(lambda: calls.append("other"))
    token.cancel()  # must not raise
    assert sorted(calls) == ["boom", "other"]
    assert seen == [(ValueError, "from on_cancel")]
    # Registering on a cancelled token runs fn at once; its exception is reported too.
    token.on_cancel(boom)
    assert len(seen) == 2
    assert seen[1][0] is ValueError


@pytest.mark.usefixtures("default_sigint")
def test_a_ctrl_c_in_an_on_cancel_function_comes_out_of_cancel(monkeypatch):
    # A Ctrl-C that arrives while a callback runs raises KeyboardInterrupt in it: it must
    # reach the program, not sys.unraisablehook. Every callback still runs; the first
    # such interrupt comes out of cancel(), a second one and Exceptions go to the hook.
    seen: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))
    token = CancelToken()
    calls: list[str] = []

    def ctrl_c() -> None:
        calls.append("ctrl-c")
        os.kill(os.getpid(), signal.SIGINT)  # Python's handler raises at the next check
        for _ in range(1000):
            time.sleep(0.001)

    def exit_too() -> None:
        calls.append("exit")
        raise SystemExit(3)

    def error() -> None:
        calls.append("error")
        raise ValueError("an error")

    for fn in (ctrl_c, exit_too, error):
        token.on_cancel(fn)
    with pytest.raises(KeyboardInterrupt):
        token.cancel("stop")
    assert sorted(calls) == ["ctrl-c", "error", "exit"]
    assert token.cancelled and token.reason == "stop"
    assert sorted(map(str, seen)) == sorted(map(str, [SystemExit, ValueError]))
    # On a cancelled token, fn runs in on_cancel(): its interrupt comes out there.
    with pytest.raises(SystemExit):
        token.on_cancel(exit_too)
    # Through a parent, and from a cancel() inside a callback: each call raises its own.
    parent = CancelToken()
    inner = CancelToken()
    inner.on_cancel(exit_too)
    caught: list[BaseException] = []

    def cancels_inner() -> None:
        try:
            inner.cancel()
        except SystemExit as exc:
            caught.append(exc)

    parent.child().on_cancel(cancels_inner)
    parent.cancel()  # the inner interrupt was the callback's to catch, and it did
    assert [type(e) for e in caught] == [SystemExit]


def test_on_cancel_exception_from_timer_goes_to_unraisablehook(monkeypatch, wait_until):
    seen: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))
    token = CancelToken(deadline=0.05)

    def boom():
        raise KeyError("timer")

    token.on_cancel(boom)
    assert token.wait(10)
    assert wait_until(lambda: seen, timeout=5)
    assert seen == [KeyError]


def test_on_cancel_fn_may_use_the_token():
    token = CancelToken()
    seen: list[object] = []
    token.on_cancel(lambda: seen.append((token.cancelled, token.reason)))
    token.on_cancel(lambda: token.cancel("re-entrant"))  # must not deadlock
    token.cancel("r")
    assert seen == [(True, "r")]
    assert token.reason == "r"


# --- memory -----------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_dropped_children_are_freed():
    parent = CancelToken()

    def churn(n):
        for _ in range(n):
            child = parent.child()
            child.child()
        gc.collect()

    churn(20_000)  # warm up allocator pools
    before = _rss_bytes()
    churn(300_000)
    grown = _rss_bytes() - before
    # Each leaked child would cost well over 100 bytes: 300k of them > 30 MB.
    assert grown < 16 * 1024 * 1024, f"RSS grew by {grown / 1e6:.1f} MB"
    live = parent.child()
    calls: list[str] = []
    live.on_cancel(lambda: calls.append("live"))
    parent.cancel("end")
    assert live.cancelled
    assert live.reason == "end"
    assert calls == ["live"]


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, -0.5, math.nan, -math.inf])
def test_bad_deadline_value_error(bad):
    with pytest.raises(ValueError, match="deadline"):
        CancelToken(deadline=bad)
    parent = CancelToken()
    with pytest.raises(ValueError, match="deadline"):
        parent.child(deadline=bad)
    assert not parent.cancelled
    ok = parent.child(deadline=1)
    assert not ok.cancelled


@pytest.mark.parametrize("bad", ["x", [1], object()], ids=repr)
def test_non_number_deadline_type_error(bad):
    with pytest.raises(TypeError, match="deadline"):
        CancelToken(deadline=bad)
    with pytest.raises(TypeError, match="deadline"):
        CancelToken().child(deadline=bad)


def test_deadline_is_keyword_only():
    with pytest.raises(TypeError):
        CancelToken(5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        CancelToken().child(5)  # type: ignore[misc]


def test_integer_deadline_accepted():
    token = CancelToken(deadline=3)
    assert token.deadline == pytest.approx(time.monotonic() + 3, abs=0.5)


# --- deep token trees: cancel and drop at any depth -------------------------------------------
# Each snippet runs in a subprocess: a recursion too deep for a thread's stack would crash
# the interpreter (SIGSEGV), so the test checks the exit status and stderr.

_CHAIN = """
import sys
from ctxlock import CancelToken
n = int(sys.argv[1])
root = CancelToken({root})
scope = root
for _ in range(n):
    scope = scope.child(deadline=30)  # the loop that builds such a chain
"""

_DEEP_SNIPPETS = {
    # The timer thread cancels the whole chain at the root's deadline.
    "deadline": """
assert scope.wait(timeout=60), "the chain's last token was never cancelled"
assert type(scope.reason).__name__ == "LockTimeout", scope.reason
print("ok")
""",
    # The main thread cancels it.
    "cancel": """
root.cancel("stop")
assert scope.cancelled and scope.reason == "stop"
print("ok")
""",
    # The chain is freed: explicitly, then (for the exit case) by the interpreter at exit.
    "drop": """
del root, scope
print("ok")
""",
    "exit": """
print("ok")
""",
}


def _run_snippet(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("levels", [10_000, 100_000, 1_000_000])
@pytest.mark.parametrize("how", sorted(_DEEP_SNIPPETS))
def test_deep_chains_cancel_and_drop_without_crashing(how, levels):
    # The deadline is far enough for building the chain, near enough for a short test;
    # if building takes longer, the later children are born cancelled, which is fine.
    root = "deadline=1.0" if how == "deadline" else ""
    proc = _run_snippet(_CHAIN.format(root=root) + _DEEP_SNIPPETS[how], str(levels))
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "ok", "")


# --- deadline callbacks never wait for one another --------------------------------------------


@pytest.fixture
def blocked_callback():
    """A token whose deadline callback blocks until the test ends (at most 20 s)."""
    started = threading.Event()
    release = threading.Event()
    token = CancelToken(deadline=0.01)
    token.on_cancel(lambda: (started.set(), release.wait(20)))
    assert started.wait(PROMPT * 5), "the blocking callback never started"
    yield release
    release.set()


def test_a_blocked_deadline_callback_does_not_delay_another_tokens_callback(blocked_callback):
    ran = threading.Event()
    token = CancelToken(deadline=0.2)
    token.on_cancel(ran.set)
    assert ran.wait(10), "the 0.2 s deadline's callback waited for the blocked one"
    assert not blocked_callback.is_set()


def test_blocked_deadline_callbacks_do_not_delay_each_other(blocked_callback):
    started = [threading.Event() for _ in range(3)]
    tokens = [CancelToken(deadline=0.05) for _ in started]
    for token, event in zip(tokens, started, strict=True):
        token.on_cancel(lambda event=event: (event.set(), blocked_callback.wait(20)))
    for event in started:
        assert event.wait(10), "a deadline callback waited for another, blocked one"


def test_a_blocked_deadline_callback_does_not_delay_cancelled(blocked_callback, wait_until):
    # Nobody waits on the token: only the timer can notice its deadline.
    token = CancelToken(deadline=0.1)
    assert wait_until(lambda: token.cancelled, timeout=10)
    assert isinstance(token.reason, LockTimeout)
    assert not blocked_callback.is_set()


def test_a_blocked_deadline_callback_does_not_delay_wait_async(blocked_callback):
    token = CancelToken(deadline=0.1)
    asyncio.run(asyncio.wait_for(token.wait_async(), 10))
    assert token.cancelled
    assert not blocked_callback.is_set()


def test_a_blocked_deadline_callback_does_not_delay_unlock_on_cancel(blocked_callback, wait_until):
    lock = Lock()
    unlock = lock.acquire()
    unlock.unlock_on_cancel(CancelToken(deadline=0.1))
    assert wait_until(lambda: unlock.released, timeout=10)
    assert not lock.locked()
    assert not blocked_callback.is_set()


def test_explicit_cancel_runs_callbacks_in_the_cancelling_thread_children_too():
    parent = CancelToken()
    child = parent.child()
    idents: list[int] = []
    parent.on_cancel(lambda: idents.append(threading.get_ident()))
    child.on_cancel(lambda: idents.append(threading.get_ident()))
    parent.cancel()
    assert idents == [threading.get_ident()] * 2


# --- on_cancel runs even when nothing else references its token -------------------------------


def test_on_cancel_of_an_unreferenced_child_runs_on_parent_cancel():
    parent = CancelToken()
    calls: list[str] = []
    parent.child().on_cancel(lambda: calls.append("child"))
    parent.child().child(deadline=3600).on_cancel(lambda: calls.append("grandchild"))
    gc.collect()
    parent.cancel("stop")
    assert sorted(calls) == ["child", "grandchild"]


def test_on_cancel_of_an_unreferenced_token_runs_at_its_deadline(wait_until):
    ran = threading.Event()
    CancelToken(deadline=0.05).on_cancel(ran.set)
    gc.collect()
    assert ran.wait(10), "the token was freed with its callback"


def test_unregistering_the_callback_of_an_unreferenced_child_frees_it():
    parent = CancelToken()
    calls: list[str] = []
    stop = parent.child().on_cancel(lambda: calls.append("child"))
    gc.collect()
    assert stop() is True
    parent.cancel()
    assert calls == []


# --- calls into Python as the interpreter exits -----------------------------------------------
# Before 3.14, CPython ends a thread that takes the GIL during finalization with a forced
# unwind, which aborts the process when it meets ctxlock's Rust frames. Each snippet runs
# in a subprocess whose exit status is the test.

_AT_EXIT = {
    # Deadline callbacks run on runner threads; several are still sleeping (giving up and
    # taking the GIL again) as the script ends. Each writes "s" as it starts and "e" as it
    # ends: the exit waits for those under way.
    "callbacks under way": """
import os, threading, time
from ctxlock import CancelToken
started = threading.Event()
def callback():
    os.write(1, b"s")
    started.set()
    for _ in range(100):
        time.sleep(0.002)
    os.write(1, b"e")
tokens = [CancelToken(deadline=0.05 + i * 0.002) for i in range(50)]
for token in tokens:
    token.on_cancel(callback)
assert started.wait(30)
""",
    # A deadline fires while the interpreter finalizes (an object torn down with the main
    # module sleeps, giving up the GIL): its callback on a runner thread, and the release
    # of a lock tied to it on the timer thread, would each take the GIL. (This one did
    # not abort before the gate either; it pins down that the callback is turned away.)
    # The callback is a partial, not a lambda: a lambda's globals would make a cycle that
    # keeps `slow` alive past the point where `__del__` can run.
    "deadline during finalization": """
import functools, os, time
from ctxlock import CancelToken, Lock
token = CancelToken(deadline=0.5)
token.on_cancel(functools.partial(os.write, 1, b"late callback ran"))
lock = Lock()
unlock = lock.acquire()
unlock.unlock_on_cancel(token)
class Slow:
    def __del__(self):
        time.sleep(1.0)
        os.write(1, b"cancelled %d" % self.keep[0].cancelled)
slow = Slow()
slow.keep = (token, lock, unlock)
""",
    # A callback forks; the child goes on from inside it and then uses deadlines: the
    # child counts its own call under way, and only that one.
    "fork in a callback": """
import os, threading
from ctxlock import CancelToken
def fork_here():
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        os._exit(0)
token = CancelToken()
token.on_cancel(fork_here)
token.cancel()
ran = threading.Event()
CancelToken(deadline=0.05).on_cancel(ran.set)
print(ran.wait(10))
""",
    # An atexit handler registered before ctxlock was imported runs after ctxlock's hook,
    # and waits for a lock that a deadline releases on the timer thread: nothing is
    # turned away before finalization begins.
    "atexit handler registered before the import": """
import atexit
def cleanup():
    lock.acquire(deadline=10)
    print("got")
atexit.register(cleanup)
import ctxlock
lock = ctxlock.Lock()
unlock = lock.acquire()
unlock.unlock_on_cancel(ctxlock.CancelToken(deadline=0.3))
""",
    # A daemon thread drops an Unlock that still holds, and the ResourceWarning's
    # handler (a slow logging handler, say) sleeps into the finalization, which an object
    # torn down with the main module makes last. The handler's globals are its own: the
    # main module's would keep `slow` alive.
    "forgotten Unlock warned in a daemon thread": """
import threading, time, warnings
import ctxlock
warnings.simplefilter("always")
handler = {"time": time}
exec("def show(*args, **kwargs): time.sleep(0.5)", handler)
warnings.showwarning = handler["show"]
lock = ctxlock.Lock()
threading.Thread(target=lock.acquire, daemon=True).start()
class Slow:
    def __del__(self, sleep=time.sleep):
        sleep(1)
slow = Slow()
time.sleep(0.1)
""",
    # A callback that never returns cannot hold the exit open.
    "callback that never returns": """
import threading
from ctxlock import CancelToken
started = threading.Event()
def callback():
    started.set()
    threading.Event().wait()
token = CancelToken(deadline=0.01)
token.on_cancel(callback)
assert started.wait(30)
""",
}


@pytest.mark.parametrize("case", sorted(_AT_EXIT))
def test_calls_into_python_at_exit_do_not_abort(case):
    proc = _run_snippet(_AT_EXIT[case])
    assert (proc.returncode, proc.stderr) == (0, ""), (proc.returncode, proc.stderr)
    if case == "callbacks under way":
        assert proc.stdout.count("s") >= 1, proc.stdout
        assert proc.stdout.count("s") == proc.stdout.count("e"), proc.stdout
    if case == "fork in a callback":
        assert proc.stdout == "True\n", proc.stdout
    if case == "atexit handler registered before the import":
        assert proc.stdout == "got\n", proc.stdout
    if case == "deadline during finalization":
        # The deadline passed during finalization, when only the exiting thread calls
        # Python: the callback was turned away.
        assert proc.stdout == "cancelled 1", proc.stdout
