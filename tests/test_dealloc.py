"""Destroying a binding object while an exception is in flight, or in odd interpreter
states: the user's exception must come out unchanged, the lock must be released, and the
process must not crash. Each case runs in its own interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 60


def run(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *flags, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def assert_clean_exit(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "Fatal Python error" not in proc.stderr
    assert "SystemError" not in proc.stderr


LOCKS = {
    "Lock": "ctxlock.Lock()",
    "fair Lock": "ctxlock.Lock(fair=True)",
    "exclusive view": "ctxlock.SharableLock().exclusive",
    "shared view": "ctxlock.SharableLock().shared",
}

# Each statement drops a still-holding Unlock while its own exception propagates.
DROPS = {
    "async with an Unlock": (
        """
        async def main():
            async with lock.acquire(deadline=5):
                pass
        asyncio.run(main())
        """,
        "TypeError",
    ),
    "unlock_on_cancel(5)": ("lock.acquire().unlock_on_cancel(5)", "TypeError"),
    "index a list": ("[lock.acquire()][5]", "IndexError"),
}


@pytest.mark.parametrize(
    "flags", [("-W", "always::ResourceWarning"), ("-W", "error")], ids=["warn", "-W error"]
)
@pytest.mark.parametrize("kind", list(LOCKS))
@pytest.mark.parametrize("drop", list(DROPS))
def test_an_exception_survives_the_drop_of_a_holding_unlock(
    drop: str, kind: str, flags: tuple[str, ...]
) -> None:
    statement, expected = DROPS[drop]
    code = f"""
import asyncio, sys, ctxlock
lock = {LOCKS[kind]}
try:
{textwrap.indent(textwrap.dedent(statement), "    ")}
except BaseException as e:
    print("raised", type(e).__name__)
else:
    print("raised nothing")
print("locked", lock.locked())
"""
    proc = run(code, *flags)
    assert_clean_exit(proc)
    assert proc.stdout.split("\n")[:2] == [f"raised {expected}", "locked False"], proc.stdout
    # The leak is still reported: as a warning, or with -W error as an unraisable error.
    assert "ResourceWarning" in proc.stderr


def test_a_drop_that_hands_the_lock_to_a_task_keeps_the_exception_and_the_task() -> None:
    # Dropping the Unlock grants the lock to a task of this thread's loop, whose doorbell
    # (Python calls on its future) runs while the IndexError is in flight.
    code = """
    import asyncio, ctxlock

    async def main():
        lock = ctxlock.Lock()
        held = [lock.acquire()]
        waiter = asyncio.ensure_future(lock.acquire_async())
        await asyncio.sleep(0)
        assert lock.locked() and not waiter.done()
        try:
            held.pop()[5]
        except TypeError:
            print("raised TypeError")
        unlock = await asyncio.wait_for(waiter, 10)
        print("task acquired", not unlock.released)
        unlock()

    asyncio.run(main())
    """
    proc = run(code)
    assert_clean_exit(proc)
    assert proc.stdout.split("\n")[:2] == ["raised TypeError", "task acquired True"], proc.stdout


def test_a_dropped_waiting_task_passes_the_lock_on_and_keeps_the_exception() -> None:
    # A contended `__aenter__` is stepped by hand until the lock is handed to it, then
    # destroyed while a TypeError propagates: it passes the lock to the next task (a
    # doorbell rung from the deallocator), and the TypeError comes out.
    code = """
    import asyncio, ctxlock

    async def main():
        lock = ctxlock.Lock()
        unlock = lock.acquire()
        entering = lock.__aenter__().__await__()
        entering.send(None)  # queued
        nxt = asyncio.ensure_future(lock.acquire_async())
        await asyncio.sleep(0)  # queued behind it
        unlock()  # handed to the hand-stepped waiter
        box = [entering]
        del entering
        try:
            box.pop()[5]
        except TypeError:
            print("raised TypeError")
        got = await asyncio.wait_for(nxt, 10)
        print("next task acquired", not got.released)
        got()
        print("locked", lock.locked())

    asyncio.run(main())
    """
    proc = run(code)
    assert_clean_exit(proc)
    lines = proc.stdout.split("\n")[:3]
    assert lines == ["raised TypeError", "next task acquired True", "locked False"], proc.stdout


@pytest.mark.parametrize("flags", [(), ("-W", "error")], ids=["default", "-W error"])
def test_a_holding_unlock_alive_at_interpreter_exit(flags: tuple[str, ...]) -> None:
    # Module globals, a reference cycle and a daemon thread's frame still hold Unlocks
    # when the interpreter shuts down.
    code = """
    import threading, time, ctxlock

    lock = ctxlock.Lock()
    kept = lock.acquire()

    class Cycle:
        pass

    c = Cycle()
    c.me = c
    c.unlock = ctxlock.SharableLock().shared.acquire()
    del c

    started = threading.Event()

    def hold():
        u = ctxlock.Lock().acquire()
        started.set()
        time.sleep(60)

    threading.Thread(target=hold, daemon=True).start()
    assert started.wait(10)
    print("done")
    """
    proc = run(code, *flags)
    assert_clean_exit(proc)
    assert proc.stdout == "done\n"


@pytest.mark.parametrize("token", ["kept", "dropped", "with a deadline"])
def test_an_unlock_left_to_unlock_on_cancel(token: str) -> None:
    """An ``Unlock`` handed to ``unlock_on_cancel`` and dropped stays alive (and holding)
    as long as its token can still be cancelled: by a handle the program keeps, or by its
    deadline. Once nothing can cancel the token, the ``Unlock`` is unreachable: it is
    collected, releases and warns, as any other, instead of holding its lock forever."""
    proc = run(
        f"""
        import gc, time, warnings, weakref, ctxlock
        lock = ctxlock.Lock()
        token = ctxlock.CancelToken(deadline=0.2 if {token!r} == "with a deadline" else None)
        unlock = lock.acquire()
        unlock.unlock_on_cancel(token)
        ref = weakref.ref(unlock)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del unlock
            if {token!r} != "kept":
                del token
            gc.collect()
            if {token!r} == "dropped":
                assert ref() is None, "the Unlock is still alive"
                assert not lock.locked(), "the lock is still held"
                assert any(issubclass(w.category, ResourceWarning) for w in caught), caught
            else:
                assert ref() is not None and lock.locked(), "released before its token"
                if {token!r} == "kept":
                    token.cancel()
                end = time.monotonic() + 10
                while lock.locked() and time.monotonic() < end:
                    time.sleep(0.01)
                assert not lock.locked(), "the token's cancel did not release"
                assert not caught, caught
        lock.acquire()()
        print("ok")
        """
    )
    assert_clean_exit(proc)
    assert proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_unlock_with_a_registration_called_from_del_at_exit() -> None:
    """``unlock()`` from a ``__del__`` run while the interpreter shuts down, with an
    ``unlock_on_cancel`` registration to drop: no panic, no error at exit."""
    proc = run(
        """
        import ctxlock
        lock = ctxlock.Lock()
        token = ctxlock.CancelToken()

        class Holder:
            def __init__(self):
                self.unlock = lock.acquire()
                self.unlock.unlock_on_cancel(token)

            def __del__(self):
                self.unlock()

        holder = Holder()
        print("ok")
        """
    )
    assert_clean_exit(proc)
    assert "Panic" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == "ok"
