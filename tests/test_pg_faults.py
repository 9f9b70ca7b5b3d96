"""LockManager("postgresql://…"): faults and races of the PostgreSQL scope, on a real server.

Each name of this scope is a session-level advisory lock of the server, so the server itself
is the oracle here: a superuser connection (psycopg, ``PgServer.admin()``) reads ``pg_locks``
and ``pg_stat_activity`` to see which sessions hold or wait, and ends sessions with
``pg_terminate_backend``. Each manager of a test gets an ``application_name`` of its own
(``ctxlock-f<test>-<role>``) through its url, so the server tells its sessions apart. The
file holds five parts:

- processes and sessions that die or stall: a holder process killed with SIGKILL while
  another waits, a waiting process (or waiting writer) killed, a holder's session
  terminated on the server (its ``unlock.lost`` fires, the name goes to the waiter, the
  manager reconnects), a waiting session terminated, a holder's backend that stops
  answering (SIGSTOP), the server stopped at once and started again, a server that cannot
  be reached or refuses the password;
- poolers: pgbouncer in transaction mode cannot keep a session's locks and is refused at
  construction; session mode works;
- races, over thousands of rounds: a grant against the waiter's deadline and against a
  cancel. After each round the waiter holds the name alone or holds nothing; at the end the
  server shows no advisory lock of any ctxlock session;
- waits the server sees: a cancel ends a wait within 0.5 s and withdraws it from the server;
  two hundred names held at once by one manager, on a handful of connections;
- TLS: a server with a self-signed CA (made with the ``openssl`` command), and the sslmode
  values of libpq.

The module starts servers of its own (``PgServer``, in a temporary directory; one for most
tests, one for each test that stops or reconfigures it) and is skipped only when no server
can be started here (``pg_server.missing()`` says why). Child processes are ``Repl``
children of ``test_file_scope.py`` (the same commands at any scope), killed and reaped at
teardown. Every wait is bounded; the measured figures (a waiter freed by a kill, a lost hold
noticed, a cancel, a restart) are printed (``pytest -s``) and checked against loose bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import test_file_scope as files
import test_lock_manager as contract
from conftest import PATIENCE, STRESS_SECONDS, wait_until
from ctxlock import (
    BackendError,
    Cancelled,
    CancelToken,
    LockManager,
    LockTimeout,
    NamedLock,
    Unlock,
)
from ctxlock._bench import pg_server

_MISSING = pg_server.missing()

pytestmark = [
    pytest.mark.skipif(
        _MISSING is not None, reason=f"no PostgreSQL server can be started here: {_MISSING}"
    ),
    pytest.mark.timeout(180),
]

Make = Callable[..., LockManager]
Admin = Any  # a psycopg connection

VIEWS = contract.VIEWS
view = contract.view

#: How long the server may take to drop what a raised acquire raced to get (the cleanup runs
#: right after the raise) or what a closed or killed client held.
CLEANUP = 2.0
#: How long a manager may take to notice that a hold's session is gone (pings ~1 s).
LOST_WITHIN = 15.0
#: Each race stops after this many rounds or seconds, whichever comes first.
RACE_ROUNDS = 3000
RACE_SECONDS = STRESS_SECONDS if STRESS_SECONDS and STRESS_SECONDS > 0 else 20.0


def figure(what: str, value: object) -> None:
    """Print a measured figure (shown with ``pytest -s``)."""
    print(f"\n[pg faults] {what}: {value}", flush=True)


# --- servers and urls ---------------------------------------------------------------------------


def with_params(url: str, **params: object) -> str:
    """``url`` with ``params`` added to its query string."""
    if not params:
        return url
    query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
    return url + ("&" if "?" in url else "?") + query


@pytest.fixture(scope="module")
def server() -> Iterator[pg_server.PgServer]:
    """This module's own server: the tests terminate its sessions and count its locks."""
    with pg_server.PgServer() as srv:
        yield srv


@pytest.fixture
def own_server() -> Iterator[pg_server.PgServer]:
    """A server for one test, which stops it or changes its settings."""
    with pg_server.PgServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def admin(server: pg_server.PgServer) -> Iterator[Admin]:
    conn = server.admin()
    yield conn
    conn.close()


@pytest.fixture
def tag() -> str:
    """This test's application_name prefix: ``ctxlock-f`` and a fresh hex string."""
    return f"ctxlock-f{uuid.uuid4().hex[:10]}"


def app_url(srv: pg_server.PgServer, app: str, **params: object) -> str:
    """The url of ``srv`` with ``application_name=app`` (and a 5 s connect_timeout unless
    ``params`` set one)."""
    return with_params(srv.url, **{"application_name": app, "connect_timeout": 5, **params})


@pytest.fixture
def make(server: pg_server.PgServer, tag: str) -> Iterator[Make]:
    """``make(role, **params)``: a manager of the module's server whose sessions are named
    ``<tag>-<role>``; every one is closed at teardown."""
    made: list[LockManager] = []

    def new(role: str, **params: object) -> LockManager:
        mgr = LockManager(app_url(server, f"{tag}-{role}", **params))
        made.append(mgr)
        return mgr

    yield new
    for mgr in made:
        mgr.close()


@pytest.fixture
def repls() -> Iterator[Callable[[str], files.Repl]]:
    """``repls(url)`` starts a child process with a manager of ``url``; all are killed at
    teardown."""
    started: list[files.Repl] = []

    def start(url: str) -> files.Repl:
        child = files.Repl(url)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()


# --- the server's view --------------------------------------------------------------------------

_ADVISORY = """
SELECT l.pid, a.application_name, l.mode, l.granted,
       (l.classid::bigint << 32) | l.objid::bigint AS key
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND a.application_name LIKE %s
ORDER BY l.pid, key
"""


def advisory(conn: Admin, app_like: str) -> list[tuple[int, str, str, bool, int]]:
    """Every advisory lock, held or waited for, of the sessions named like ``app_like``:
    (pid, application_name, mode, granted, key)."""
    with conn.cursor() as cur:
        cur.execute(_ADVISORY, (app_like,))
        return list(cur.fetchall())


def names_held(conn: Admin, app_like: str) -> list[tuple[int, str | None, str, bool]]:
    """(pid, name, mode, granted) of each advisory lock of those sessions, the name read from
    ``ctxlock_names`` by the lock's 64-bit key."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT l.pid, n.name, l.mode, l.granted FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid "
            "LEFT JOIN ctxlock_names n ON n.key = ((l.classid::bigint << 32) | l.objid::bigint) "
            "WHERE l.locktype = 'advisory' AND a.application_name LIKE %s ORDER BY n.name",
            (app_like,),
        )
        return list(cur.fetchall())


def sessions(conn: Admin, app_like: str) -> list[tuple[int, str]]:
    """(pid, application_name) of the client sessions named like ``app_like``."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pid, application_name FROM pg_stat_activity "
            "WHERE application_name LIKE %s AND backend_type = 'client backend' ORDER BY pid",
            (app_like,),
        )
        return list(cur.fetchall())


def no_advisory_within(conn: Admin, app_like: str, timeout: float = CLEANUP) -> None:
    """The sessions named like ``app_like`` hold and wait for no advisory lock, at the latest
    after ``timeout``."""
    assert wait_until(lambda: advisory(conn, app_like) == [], timeout), advisory(conn, app_like)


def take_and_release(mgr: LockManager, name: str) -> bool:
    """``mgr`` could take ``name`` exclusively now (and released it)."""
    unlock = mgr.lock(name).try_acquire()
    if unlock is None:
        return False
    unlock()
    return True


def acquire_with_retries(
    lock: NamedLock, within: float, deadline: float = 1.0
) -> tuple[Unlock, float, list[str]]:
    """Acquire ``lock``, retrying on ``BackendError`` and ``LockTimeout`` for ``within``
    seconds. Returns the hold, the seconds it took and what each failed try raised."""
    start = time.monotonic()
    errors: list[str] = []
    while True:
        try:
            return lock.acquire(deadline=deadline), time.monotonic() - start, errors
        except (BackendError, LockTimeout) as exc:
            errors.append(type(exc).__name__)
            if time.monotonic() - start > within:
                raise AssertionError(f"no acquire within {within} s: {errors}") from exc
            time.sleep(0.05)


def wait_in_thread(lock: NamedLock, **kwargs: Any) -> tuple[Callable[..., list[Any]], list[Any]]:
    """``lock.acquire(**kwargs)`` in a thread (see ``test_file_scope._wait_in_thread``)."""
    return files._wait_in_thread(lock, **kwargs)


def assert_no_password(exc: BaseException, password: str) -> None:
    for text in (str(exc), repr(exc), str(getattr(exc, "reason", ""))):
        assert password not in text, text


# --- the manager's sessions ---------------------------------------------------------------------


def test_sessions_are_named_ctxlock_and_the_url_keeps_no_password(
    server: pg_server.PgServer, admin: Admin
) -> None:
    # The tests find a manager's sessions by application_name: check the rule they rely on.
    with LockManager(with_params(server.url, connect_timeout=5)) as mgr:
        assert server.password not in mgr.url
        assert f"127.0.0.1:{server.port}" in mgr.url
        name = f"default-app-{uuid.uuid4().hex}"
        with mgr.lock(name).acquire(deadline=PATIENCE):
            rows = [r for r in names_held(admin, "%") if r[1] == name]
            assert len(rows) == 1, names_held(admin, "%")
            pid = rows[0][0]
            apps = [app for p, app in sessions(admin, "%") if p == pid]
            assert len(apps) == 1 and apps[0].startswith("ctxlock"), apps
            assert rows[0][2:] == ("ExclusiveLock", True), rows


def test_an_unreachable_server_is_a_backend_error_without_the_password() -> None:
    with socket.socket() as s:  # a port of 127.0.0.1 nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    password = uuid.uuid4().hex
    url = f"postgresql://ctxlock:{password}@127.0.0.1:{port}/ctxlock?connect_timeout=2"
    start = time.monotonic()
    with pytest.raises(BackendError) as caught:
        LockManager(url)
    took = time.monotonic() - start
    assert took < 5.0, took
    assert_no_password(caught.value, password)


def test_a_wrong_password_is_a_backend_error_without_either_password(
    server: pg_server.PgServer,
) -> None:
    wrong = uuid.uuid4().hex
    url = server.url.replace(server.password, wrong)
    with pytest.raises(BackendError) as caught:
        LockManager(with_params(url, connect_timeout=5))
    assert_no_password(caught.value, wrong)
    assert_no_password(caught.value, server.password)


# --- processes and sessions that die ------------------------------------------------------------


@pytest.mark.parametrize("held_as", ["lock", "exclusive", "shared"])
def test_killing_a_holder_process_frees_the_name_for_a_waiter_within_a_second(
    held_as: str,
    server: pg_server.PgServer,
    admin: Admin,
    tag: str,
    make: Make,
    repls: Callable[[str], files.Repl],
) -> None:
    child = repls(app_url(server, f"{tag}-child"))
    child_fence = child.acquire("h", "k", held_as)
    assert wait_until(lambda: len(advisory(admin, f"{tag}-child")) == 1), advisory(admin, "%")
    waiter = make("waiter")
    lock = waiter.lock("k")
    join, _ = wait_in_thread(lock, deadline=PATIENCE * 2)
    assert contract.waiting(lock), lock.statistics()
    killed_at = time.monotonic()
    child.proc.kill()
    got_at, unlock = join()
    assert isinstance(unlock, Unlock), unlock
    took = got_at - killed_at
    figure(f"SIGKILL of a holder ({held_as}) -> waiter holds", f"{took * 1000:.1f} ms")
    assert took < 1.0, f"the waiter got the name {took:.3f} s after the holder was killed"
    assert unlock.fence is not None and child_fence is not None
    assert unlock.fence > child_fence
    assert not unlock.lost.cancelled
    # The child's sessions are gone; the waiter's session holds the name.
    assert wait_until(lambda: sessions(admin, f"{tag}-child") == [], CLEANUP)
    held = advisory(admin, f"{tag}-%")
    assert [(app, mode, granted) for _, app, mode, granted, _ in held] == [
        (f"{tag}-waiter", "ExclusiveLock", True)
    ], held
    unlock()
    no_advisory_within(admin, f"{tag}-%")


def test_a_killed_waiting_process_never_gets_the_name(
    server: pg_server.PgServer,
    admin: Admin,
    tag: str,
    make: Make,
    repls: Callable[[str], files.Repl],
) -> None:
    # A backend blocked on a lock notices its client is gone only when it next talks to it
    # (unless client_connection_check_interval is set): the dead wait may stay queued on the
    # server until the name is released. What must hold: it is never a holder for long, the
    # name goes on to the next client. How long the server kept the dead wait is reported.
    holder, third = make("holder"), make("third")
    held = holder.lock("w").acquire(deadline=PATIENCE)
    child = repls(app_url(server, f"{tag}-child"))
    child.send("wait", "c", "w", "lock", 60)
    child.expect("waiting", "c")
    assert contract.waiting(holder.lock("w")), holder.lock("w").statistics()
    killed_at = time.monotonic()
    child.proc.kill()
    gone = wait_until(lambda: advisory(admin, f"{tag}-child") == [], 3.0)
    figure(
        "SIGKILL of a waiting process -> its wait gone from the server",
        f"{time.monotonic() - killed_at:.3f} s" if gone else "not within 3 s (kept until granted)",
    )
    held()
    assert wait_until(lambda: take_and_release(third, "w"), CLEANUP), advisory(admin, f"{tag}-%")
    assert wait_until(lambda: sessions(admin, f"{tag}-child") == [], CLEANUP)
    assert wait_until(lambda: holder.lock("w").statistics().waiting == 0, CLEANUP)
    contract.assert_free(third, "w")
    no_advisory_within(admin, f"{tag}-%")


def test_a_killed_waiting_writer_does_not_hold_readers_back(
    server: pg_server.PgServer,
    admin: Admin,
    tag: str,
    make: Make,
    repls: Callable[[str], files.Repl],
) -> None:
    # Phase-fair: a waiting writer holds new readers back, and when it gives up they get in
    # at once. A writer whose process dies gives up; its session's queued request must not
    # keep the readers out until the reader that holds now leaves. (PostgreSQL notices a
    # dead client of a blocked backend only with client_connection_check_interval set.)
    reader, other = make("reader"), make("other")
    held = reader.sharable_lock("rw").shared.acquire(deadline=PATIENCE)
    child = repls(app_url(server, f"{tag}-child"))
    child.send("wait", "w", "rw", "exclusive", 60)
    child.expect("waiting", "w")
    assert wait_until(lambda: any(not r[3] for r in advisory(admin, f"{tag}-child")), PATIENCE)
    assert other.sharable_lock("rw").shared.try_acquire() is None  # held back by the writer
    killed_at = time.monotonic()
    child.proc.kill()

    def reader_gets_in() -> bool:
        unlock = other.sharable_lock("rw").shared.try_acquire()
        if unlock is None:
            return False
        unlock()
        return True

    got_in = wait_until(reader_gets_in, 3.0)
    figure(
        "SIGKILL of a waiting writer -> a new reader gets in",
        f"{time.monotonic() - killed_at:.3f} s" if got_in else "not within 3 s",
    )
    rows = advisory(admin, f"{tag}-%")
    held()
    assert got_in, f"a new reader was kept out for 3 s by a killed writer's wait: {rows}"
    assert wait_until(lambda: take_and_release(other, "rw"), CLEANUP)
    no_advisory_within(admin, f"{tag}-%")


def _holding_pid(admin: Admin, app: str, name: str) -> int:
    rows = [r for r in names_held(admin, app) if r[1] == name and r[3]]
    assert len(rows) == 1, (name, names_held(admin, "%"))
    return int(rows[0][0])


def _terminate_holder(admin: Admin, app: str, name: str) -> None:
    """End, on the server, the one session of ``app`` that holds ``name``."""
    with admin.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (_holding_pid(admin, app, name),))
        assert cur.fetchone() == (True,)


@pytest.mark.parametrize("held_as", ["lock", "shared"])
def test_terminating_the_holders_session_loses_the_hold_and_hands_the_name_on(
    held_as: str, admin: Admin, tag: str, make: Make
) -> None:
    holder, waiter_mgr, third = make("holder"), make("waiter"), make("third")
    unlock = view(holder, "t:a", held_as).acquire(deadline=PATIENCE)
    other = holder.lock("t:b").acquire(deadline=PATIENCE)
    lost_at: list[float] = []
    unlock.lost.on_cancel(lambda: lost_at.append(time.monotonic()))
    waiter_lock = waiter_mgr.lock("t:a")
    join, _ = wait_in_thread(waiter_lock, deadline=LOST_WITHIN * 2)
    assert contract.waiting(waiter_lock), waiter_lock.statistics()

    pid = _holding_pid(admin, f"{tag}-holder", "t:a")
    other_pid = _holding_pid(admin, f"{tag}-holder", "t:b")
    terminated_at = time.monotonic()
    with admin.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert cur.fetchone() == (True,)

    # The server freed the name at once: the waiter has it.
    got_at, theirs = join()
    assert isinstance(theirs, Unlock), theirs
    figure(
        f"pg_terminate_backend ({held_as}) -> waiter holds",
        f"{(got_at - terminated_at) * 1000:.1f} ms",
    )
    assert theirs.fence > unlock.fence
    # The holder's manager notices that its session is gone.
    assert unlock.lost.wait(LOST_WITHIN), "unlock.lost not cancelled"
    assert wait_until(lambda: lost_at, PATIENCE), lost_at
    figure(f"pg_terminate_backend ({held_as}) -> lost", f"{lost_at[0] - terminated_at:.3f} s")
    assert isinstance(unlock.lost.reason, BackendError), unlock.lost.reason
    assert isinstance(unlock.lost.reason.reason, str) and unlock.lost.reason.reason
    # Its repr says so before and after its unlock(): it released nothing.
    assert " lost lock=" in repr(unlock), repr(unlock)
    assert " holding lock=" in repr(theirs), repr(theirs)
    # A hold on another session of the manager is not lost; one on the same session is.
    if other_pid == pid:
        assert other.lost.wait(PATIENCE)
        assert take_and_release(third, "t:b")
    else:
        assert not other.lost.cancelled
        assert _holding_pid(admin, f"{tag}-holder", "t:b") == other_pid
        assert not take_and_release(third, "t:b")
    other()
    # The lost hold's unlock() is harmless: it never releases the waiter's hold.
    unlock()
    unlock()
    assert " lost lock=" in repr(unlock), repr(unlock)
    assert not take_and_release(third, "t:a")
    assert not theirs.lost.cancelled
    # The terminated manager works again for new acquires.
    again, took, errors = acquire_with_retries(holder.lock("t:c"), 3.0)
    figure(
        "after terminate (and lost): a new acquire of that manager",
        f"{took:.3f} s, failed tries {Counter(errors)}",
    )
    assert not again.lost.cancelled
    assert not take_and_release(third, "t:c")
    again()
    theirs()
    mine = holder.lock("t:a").acquire(deadline=PATIENCE)
    assert mine.fence > theirs.fence
    mine()
    no_advisory_within(admin, f"{tag}-%")


@pytest.mark.parametrize("held_as", ["lock", "shared"])
def test_a_hold_passed_on_by_a_waiting_session_is_not_passed_on_after_that_session_ends(
    held_as: str, admin: Admin, tag: str, make: Make
) -> None:
    # A name granted through a server wait stays on that waiting session while the
    # manager's threads pass it on among themselves. The session is terminated: the
    # server frees the name and another client takes it. From then on the manager may
    # hand on only what its batch already had (fences below the other client's), never
    # start a batch with a later fence while the other holds, and it is not left stuck.
    mgr, other = make("mgr"), make("other")
    name = "t:batch"
    blocker = other.lock(name).acquire(deadline=PATIENCE)
    join, _ = wait_in_thread(view(mgr, name, held_as), deadline=PATIENCE * 2)
    assert wait_until(lambda: any(not r[3] for r in advisory(admin, f"{tag}-mgr")), PATIENCE), (
        f"the server shows no wait of the manager's sessions: {advisory(admin, '%')}"
    )
    waiting_pids = {r[0] for r in advisory(admin, f"{tag}-mgr") if not r[3]}
    blocker()
    _, first = join()
    assert isinstance(first, Unlock), first
    holding = _holding_pid(admin, f"{tag}-mgr", name)
    assert holding in waiting_pids, (holding, waiting_pids)

    other_holds = threading.Event()
    stop = threading.Event()
    # (fence, lost token) of each of the manager's holds taken while `other` held the name.
    overlapping: list[tuple[int, CancelToken]] = []
    taken = [0]

    def worker() -> None:
        while not stop.is_set():
            try:
                unlock = view(mgr, name, held_as).acquire(deadline=0.5)
            except (LockTimeout, BackendError):
                continue
            taken[0] += 1
            if other_holds.is_set():
                overlapping.append((unlock.fence, unlock.lost))
            time.sleep(0.0002)
            unlock()

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(2)]
    for w in workers:
        w.start()
    first()
    assert wait_until(lambda: taken[0] > 20, PATIENCE), taken
    with admin.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (holding,))
        assert cur.fetchone() == (True,)
    # A wait of the other client's on the server: the manager's next batch check sees it.
    theirs = other.lock(name).acquire(deadline=PATIENCE * 2)
    other_holds.set()
    time.sleep(0.5)
    other_holds.clear()
    theirs()
    stop.set()
    for w in workers:
        w.join(PATIENCE * 2)
        assert not w.is_alive(), "a worker did not stop"
    figure(
        f"a waiting session ({held_as}) terminated -> the manager's holds while another held",
        f"{len(overlapping)} (of {taken[0]} in all)",
    )
    later = [f for f, _ in overlapping if f > theirs.fence]
    assert later == [], f"{len(later)} holds with a fence after the other client's {theirs.fence}"
    # Those left are hand-offs of a batch that began before the server freed the name (a
    # hold released before the loss was found is not told; storage refuses its fence).
    told = sum(lost.wait(0) for _, lost in overlapping)
    figure("of which told lost", f"{told} of {len(overlapping)}")
    # The manager goes on, after the other client.
    again, _, _ = acquire_with_retries(view(mgr, name, held_as), PATIENCE * 2)
    assert again.fence > theirs.fence
    again()
    no_advisory_within(admin, f"{tag}-%")


@pytest.mark.asyncio
async def test_an_async_with_whose_session_was_lost_does_not_stop_a_blocking_acquire(
    admin: Admin, tag: str, make: Make
) -> None:
    # The task's `async with` hold went with its session before the `with` exits: a
    # blocking acquire with no deadline on this loop's thread, through another manager,
    # behind a third client's hold, waits for that hold and takes the name (no
    # RuntimeError). (If it hangs, closing its manager ends the wait, and the test fails.)
    holder, other, third = make("holder"), make("other"), make("third")
    name = "t:tagged"
    rescue = threading.Timer(LOST_WITHIN + PATIENCE, other.close)
    rescue.start()
    try:
        async with holder.lock(name):
            _terminate_holder(admin, f"{tag}-holder", name)
            # The manager noticed: its hold is not listed any more.
            assert wait_until(lambda: holder.query(name) == [], LOST_WITHIN)
            contract.acquire_behind_a_release(other.lock(name), third.lock(name))
    finally:
        rescue.cancel()


@pytest.mark.asyncio
async def test_a_hold_handed_to_a_task_is_not_shown_once_its_session_was_lost(
    admin: Admin, tag: str, make: Make
) -> None:
    holder, other = make("holder"), make("other")
    name = "t:arriving"
    first = holder.lock(name).acquire(deadline=PATIENCE)
    task = asyncio.create_task(
        holder.lock(name).acquire_async(deadline=LOST_WITHIN * 2), name=f"arriving-{tag}"
    )
    assert await contract.until(lambda: holder.lock(name).statistics().waiting == 1)
    first()  # handed to the task here: the session keeps the name for it
    assert wait_until(lambda: [i.state for i in holder.query(name)] == ["held"])
    _terminate_holder(admin, f"{tag}-holder", name)
    # Still no await: the task has not run. Its hold went with the session: once the
    # manager noticed, the task is shown holding nothing, and another client takes it.
    assert wait_until(lambda: holder.query(name) == [], LOST_WITHIN), holder.query(name)
    unlock = other.lock(name).acquire(deadline=PATIENCE)
    try:
        shown = [(i.state, f"arriving-{tag}" in i.owner) for i in holder.query(name)]
        assert shown == [("held", False)], holder.query(name)
    finally:
        unlock()
    with pytest.raises(BackendError, match="lost"):
        await contract.bounded(task)


@pytest.mark.parametrize("held_as", ["lock", "shared"])
def test_the_exit_of_a_with_whose_hold_was_lost_gives_back_no_other_with(
    held_as: str, admin: Admin, tag: str, make: Make
) -> None:
    # A `with` has no handle: its exit gives back the scoped hold of its thread (or
    # task), else any of the manager's in that mode. Once its own hold was lost (its
    # session terminated) and another thread's `with` of the same manager took the
    # name, the exit must give back nothing, not that thread's hold, and it must let the
    # body's own exception out.
    holder, other = make("holder"), make("other")
    name = "t:with"
    lock = view(holder, name, held_as)
    inside, leave = threading.Event(), threading.Event()
    second_raised: list[BaseException] = []

    def second() -> None:
        try:
            with lock:
                inside.set()
                leave.wait(PATIENCE)
        except BaseException as exc:
            second_raised.append(exc)

    def free_here() -> bool:
        # The first `with`'s hold ended in the manager, which took the name again.
        return take_and_release(holder, name)

    def lose_the_hold() -> None:
        assert not free_here()
        _terminate_holder(admin, f"{tag}-holder", name)
        assert wait_until(free_here, LOST_WITHIN), "the lost hold never ended"

    thread = threading.Thread(target=second, daemon=True)
    with pytest.raises(ValueError, match="the body's own"):
        with lock:
            lose_the_hold()
            thread.start()
            assert inside.wait(PATIENCE), "the second with never got in"
            raise ValueError("the body's own")
    # The second `with` still holds the name, on the server too.
    assert other.lock(name).try_acquire() is None, "the first exit released the second's hold"
    assert not free_here()
    leave.set()
    thread.join(PATIENCE)
    assert not thread.is_alive()
    assert second_raised == []
    assert take_and_release(other, name)
    # Alone, the exit of a lost hold finds it ended: nothing to give back, nothing raised.
    with lock:
        lose_the_hold()
    assert take_and_release(other, name)
    no_advisory_within(admin, f"{tag}-%")


@pytest.mark.asyncio
@pytest.mark.parametrize("held_as", ["lock", "shared"])
async def test_the_exit_of_a_lost_async_with_gives_back_no_hold_of_a_task_of_its_name(
    held_as: str, admin: Admin, tag: str, make: Make
) -> None:
    # Tasks of one name on one loop (anyio names every task by its function) look alike
    # to an exit. The first's hold is lost and the second takes the name: the first's
    # exit takes its ended hold, never the second's.
    holder, other = make("holder"), make("other")
    name = "t:tasks"
    lock = view(holder, name, held_as)
    entered = [asyncio.Event(), asyncio.Event()]
    leave = [asyncio.Event(), asyncio.Event()]

    async def hold(i: int) -> None:
        async with lock:
            entered[i].set()
            await asyncio.wait_for(leave[i].wait(), PATIENCE)

    first = asyncio.create_task(hold(0), name="worker")
    await asyncio.wait_for(entered[0].wait(), PATIENCE)
    _terminate_holder(admin, f"{tag}-holder", name)
    end = time.monotonic() + LOST_WITHIN
    while not take_and_release(holder, name):
        assert time.monotonic() < end, "the lost hold never ended"
        await asyncio.sleep(0.02)
    second = asyncio.create_task(hold(1), name="worker")
    await asyncio.wait_for(entered[1].wait(), PATIENCE)
    leave[0].set()
    await asyncio.wait_for(first, PATIENCE)
    assert other.lock(name).try_acquire() is None, "the first exit released the second's hold"
    leave[1].set()
    await asyncio.wait_for(second, PATIENCE)
    assert take_and_release(other, name)
    no_advisory_within(admin, f"{tag}-%")


#: Daemon threads loop on a manager's acquires (argv[3]: "lock" or "shared") while its
#: sessions are terminated (by the superuser url argv[2]) and another manager takes the
#: name; then the interpreter exits with them still waiting, a hold never released.
_EXIT_IN_WAITS = """
import sys, threading, time
import psycopg
from ctxlock import BackendError, LockManager, LockTimeout
url, superuser, mode, threads, pause = sys.argv[1:6]
app = "ctxlock-exit-%d" % time.monotonic_ns()
mgr = LockManager(url + "?application_name=" + app)
other = LockManager(url)
def view(m):
    return m.lock("x") if mode == "lock" else m.sharable_lock("x").shared
first = view(mgr).acquire(deadline=5)
def loop():
    while True:
        try:
            unlock = view(mgr).acquire(deadline=0.5)
            time.sleep(0.0005)
            unlock()
        except (LockTimeout, BackendError):
            pass
for _ in range(int(threads)):
    threading.Thread(target=loop, daemon=True).start()
time.sleep(0.05)
with psycopg.connect(superuser, autocommit=True) as admin:
    sql = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
    assert admin.execute(sql, (app,)).fetchall(), "no session of the manager to terminate"
try:
    other.lock("x").acquire(deadline=2)
except (LockTimeout, BackendError):
    pass
time.sleep(float(pause))
print("end", flush=True)
"""


@pytest.mark.parametrize("held_as", ["lock", "shared"])
def test_a_process_exits_cleanly_with_threads_in_waits_of_a_manager_that_lost_its_hold(
    held_as: str, server: pg_server.PgServer
) -> None:
    # Exit with daemon threads inside the manager's acquires, right after its sessions
    # were lost (one run of a test suite stopped there once with SIGABRT at exit).
    for threads, pause in [(1, 0.0), (4, 0.01), (2, 0.1), (4, 0.5)]:
        proc = files._run(
            _EXIT_IN_WAITS, server.url, server.superuser_url, held_as, str(threads), str(pause)
        )
        files._assert_no_crash(proc)
        assert proc.stdout.split() == ["end"], proc.stdout + proc.stderr


#: A TCP proxy of 127.0.0.1 to the port in argv[1], in a process of its own (a manager's
#: round trip on the calling thread holds the GIL, which a proxy in the test's own process
#: needs to pass it on): prints its port; after SIGUSR1 it accepts new connections and
#: never answers them (a server, or a pooler in front of one, that hangs).
_SILENT_PROXY = """
import signal, socket, sys, threading
upstream = int(sys.argv[1])
listener = socket.create_server(("127.0.0.1", 0))
silent = threading.Event()
signal.signal(signal.SIGUSR1, lambda *_: silent.set())
kept = []
def pump(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
print(listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    kept.append(conn)
    if silent.is_set():
        continue
    up = socket.create_connection(("127.0.0.1", upstream))
    kept.append(up)
    for a, b in ((conn, up), (up, conn)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()
"""


def test_a_reconnect_to_a_server_that_never_answers_keeps_deadlines_tokens_and_the_loop(
    server: pg_server.PgServer, admin: Admin, tag: str
) -> None:
    # The manager's sessions end, and the server (through a proxy) now accepts connections
    # and never answers: an acquire may not wait for the connection (5 s here) past its
    # deadline or its token, and a task's acquire may not hold its event loop meanwhile.
    proxy = subprocess.Popen(
        [sys.executable, "-c", _SILENT_PROXY, str(server.port)], stdout=subprocess.PIPE, text=True
    )
    mgr = None
    try:
        assert proxy.stdout is not None
        port = int(proxy.stdout.readline())
        url = app_url(server, f"{tag}-mgr").replace(f":{server.port}/", f":{port}/")
        assert f":{port}/" in url, url
        mgr = LockManager(url)
        mgr.lock("p").acquire(deadline=PATIENCE)()
        proxy.send_signal(signal.SIGUSR1)
        with admin.cursor() as cur:
            for pid, _ in sessions(admin, f"{tag}-mgr"):
                cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert wait_until(lambda: sessions(admin, f"{tag}-mgr") == [], PATIENCE)

        def timed(**kwargs: Any) -> tuple[float, BaseException | None]:
            start = time.monotonic()
            try:
                mgr.lock("p").acquire(**kwargs)()
            except (LockTimeout, Cancelled, BackendError) as exc:
                return time.monotonic() - start, exc
            return time.monotonic() - start, None

        took, outcome = timed(deadline=0.5)
        figure(
            "a reconnect that is never answered -> acquire(deadline=0.5)",
            f"{outcome!r} in {took:.3f} s",
        )
        assert isinstance(outcome, (LockTimeout, BackendError)), outcome
        assert took < 0.5 + 1.5, took

        token = CancelToken()
        threading.Timer(0.3, token.cancel, args=("stop",)).start()
        took, outcome = timed(cancel=token, deadline=PATIENCE * 2)
        figure("... acquire(token cancelled at 0.3 s)", f"{outcome!r} in {took:.3f} s")
        assert isinstance(outcome, (Cancelled, BackendError)), outcome
        assert took < 0.3 + 1.5, took

        async def on_a_loop() -> tuple[float, float, BaseException | None]:
            stalls = [0.0]
            stop = False

            async def ticker() -> None:
                last = time.monotonic()
                while not stop:
                    await asyncio.sleep(0.01)
                    now = time.monotonic()
                    stalls[0] = max(stalls[0], now - last)
                    last = now

            tick = asyncio.create_task(ticker())
            await asyncio.sleep(0.05)
            start = time.monotonic()
            outcome: BaseException | None = None
            try:
                (await mgr.lock("p").acquire_async(deadline=0.5))()
            except (LockTimeout, BackendError) as exc:
                outcome = exc
            took = time.monotonic() - start
            stop = True
            await tick
            return took, stalls[0], outcome

        took, stall, outcome = asyncio.run(on_a_loop())
        figure(
            "... acquire_async(deadline=0.5)",
            f"{outcome!r} in {took:.3f} s, loop stalled {stall:.3f} s at most",
        )
        assert outcome is not None and took < 0.5 + 1.5, (outcome, took)
        # A withdrawn server wait may hold the loop up to 1 s (`WITHDRAW_WAIT`, README).
        assert stall < 1.0 + 0.5, stall
    finally:
        if mgr is not None:
            mgr.close()
        proxy.kill()
        proxy.wait(PATIENCE)
        if proxy.stdout is not None:
            proxy.stdout.close()


def test_a_stalled_session_loses_its_hold_without_stalling_the_rest_of_the_manager(
    admin: Admin, tag: str, make: Make
) -> None:
    # The backend of a session that holds a name stops answering (SIGSTOP: a hung server
    # process, or a network that drops packets): the watchdog's ping times out and the
    # hold is lost. Meanwhile the manager's other acquires, on other names and sessions,
    # end within the ping's timeout. Once the backend runs again the name is free (the manager
    # closed the session it gave up on).
    mgr, blocker, third = make("mgr"), make("blocker"), make("third")
    # A hold that lives on a session of its own: granted after a wait.
    first = blocker.lock("st").acquire(deadline=PATIENCE)
    join, _ = wait_in_thread(mgr.lock("st"), deadline=PATIENCE * 2)
    assert contract.waiting(mgr.lock("st"))
    first()
    _, unlock = join()
    assert isinstance(unlock, Unlock), unlock
    pid = _holding_pid(admin, f"{tag}-mgr", "st")
    # Whatever happens here, the backend runs again after a while: a guard process sends
    # SIGCONT (so a stuck acquire ends, and the server can stop at teardown).
    guard = subprocess.Popen(["sh", "-c", f"sleep {LOST_WITHIN + 5}; kill -CONT {pid}"])
    stopped_at = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        slowest = 0.0
        tries = 0
        while not unlock.lost.cancelled and time.monotonic() - stopped_at < LOST_WITHIN:
            start = time.monotonic()
            try:
                mgr.lock(f"st:other:{tries % 3}").acquire(deadline=0.5)()
            except (LockTimeout, BackendError):
                pass
            slowest = max(slowest, time.monotonic() - start)
            tries += 1
            time.sleep(0.05)
        lost_after = time.monotonic() - stopped_at
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        guard.kill()
        guard.wait(PATIENCE)
    figure(
        "SIGSTOP of a holding session's backend",
        f"lost after {lost_after:.3f} s; other acquires (deadline 0.5 s): {tries}, "
        f"slowest {slowest:.3f} s",
    )
    assert unlock.lost.cancelled, f"not lost within {LOST_WITHIN} s"
    assert isinstance(unlock.lost.reason, BackendError), unlock.lost.reason
    # Bounded, not prompt: the watchdog pings a holding session under the manager's gate
    # mutex, so acquires through the manager wait for the ping's 5 s timeout at most (the
    # README says so; a try on a stalled main session could not be cut short anyway).
    assert slowest < 7.0, (
        f"while a session's backend was stopped, an acquire of another name with a 0.5 s "
        f"deadline took {slowest:.3f} s"
    )
    assert lost_after < LOST_WITHIN, lost_after
    unlock()
    assert wait_until(lambda: take_and_release(third, "st"), PATIENCE), advisory(admin, "%")
    again, _, _ = acquire_with_retries(mgr.lock("st"), 3.0)
    again()
    no_advisory_within(admin, f"{tag}-%")


def test_terminating_a_waiting_session_never_hangs_nor_leaks_the_wait(
    admin: Admin, tag: str, make: Make
) -> None:
    # The wait's session ends under it: the acquire may wait on (on a new session) and get
    # the name once it is released, or raise BackendError; it may not hang past its
    # deadline, nor leave a hold or a wait behind on the server.
    holder, waiter_mgr, third = make("holder"), make("waiter"), make("third")
    held = holder.lock("tw").acquire(deadline=PATIENCE)
    lock = waiter_mgr.lock("tw")
    join, _ = wait_in_thread(lock, deadline=4.0)
    assert contract.waiting(lock), lock.statistics()
    assert wait_until(lambda: any(not r[3] for r in advisory(admin, f"{tag}-waiter")), PATIENCE), (
        f"the server shows no wait of the waiter's sessions: {advisory(admin, '%')}"
    )
    pids = {r[0] for r in advisory(admin, f"{tag}-waiter") if not r[3]}
    with admin.cursor() as cur:
        for pid in pids:
            cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
    terminated_at = time.monotonic()
    time.sleep(0.5)
    held()
    ended_at, outcome = join(PATIENCE * 2)
    figure(
        "pg_terminate_backend of a waiting session -> the acquire",
        f"{type(outcome).__name__} after {ended_at - terminated_at:.3f} s",
    )
    assert isinstance(outcome, (Unlock, BackendError, LockTimeout)), outcome
    if isinstance(outcome, Unlock):
        assert not take_and_release(third, "tw")
        held_rows = advisory(admin, f"{tag}-%")
        assert [(r[1], r[3]) for r in held_rows] == [(f"{tag}-waiter", True)], held_rows
        outcome()
    assert wait_until(lambda: take_and_release(third, "tw"), CLEANUP), advisory(admin, "%")
    no_advisory_within(admin, f"{tag}-%")
    # The manager works on.
    again, took, errors = acquire_with_retries(waiter_mgr.lock("tw"), PATIENCE * 2)
    figure("after terminating the wait: a new acquire", f"{took:.3f} s, failed {Counter(errors)}")
    again()


def test_an_immediate_stop_loses_holds_ends_waits_and_a_restart_brings_the_scope_back(
    own_server: pg_server.PgServer, tag: str
) -> None:
    srv = own_server
    made: list[LockManager] = []
    try:
        holder = LockManager(app_url(srv, f"{tag}-holder"))
        made.append(holder)
        waiter_mgr = LockManager(app_url(srv, f"{tag}-waiter"))
        made.append(waiter_mgr)
        unlock = holder.lock("s").acquire(deadline=PATIENCE)
        shared_hold = holder.sharable_lock("s:r").shared.acquire(deadline=PATIENCE)
        wait_deadline = 4.0
        join, _ = wait_in_thread(waiter_mgr.lock("s"), deadline=wait_deadline)
        assert contract.waiting(waiter_mgr.lock("s")), waiter_mgr.lock("s").statistics()

        # The throwaway server runs with synchronous_commit=off: a crash could lose the last
        # values of the fence sequence, which keeping is the server's durability, not the
        # scope's. A checkpoint first makes them durable.
        with srv.admin() as conn:
            conn.execute("CHECKPOINT")
        stopped_at = time.monotonic()
        srv.stop_immediate()
        stop_took = time.monotonic() - stopped_at
        # The holds are lost, each noticed within LOST_WITHIN.
        assert unlock.lost.wait(LOST_WITHIN), "unlock.lost not cancelled after the stop"
        lost_after = time.monotonic() - stopped_at
        figure("stop_immediate -> lost", f"{lost_after:.3f} s (pg_ctl took {stop_took:.3f} s)")
        assert isinstance(unlock.lost.reason, BackendError), unlock.lost.reason
        assert shared_hold.lost.wait(PATIENCE)
        assert isinstance(shared_hold.lost.reason, BackendError)
        # The waiter raised, by BackendError or at its deadline: it never hangs.
        ended_at, outcome = join(wait_deadline + PATIENCE)
        figure(
            "stop_immediate -> the waiter raised",
            f"{type(outcome).__name__} after {ended_at - stopped_at:.3f} s",
        )
        assert isinstance(outcome, (BackendError, LockTimeout)), outcome
        # While the server is down, an acquire raises promptly or at its deadline...
        for mgr in (holder, waiter_mgr):
            start = time.monotonic()
            with pytest.raises((BackendError, LockTimeout)) as caught:
                mgr.lock("s:new").acquire(deadline=1.0)
            took = time.monotonic() - start
            figure("server down: acquire(deadline=1) raised", f"{caught.typename} in {took:.3f} s")
            assert took < 1.0 + PATIENCE, took
            start = time.monotonic()
            with pytest.raises(BackendError):
                mgr.lock("s:new").try_acquire()
            assert time.monotonic() - start < PATIENCE * 2
            with pytest.raises((BackendError, LockTimeout)):
                asyncio.run(asyncio.wait_for(mgr.lock("s:new").acquire_async(deadline=1.0), 10))
        # ... and so does a new manager, at construction.
        with pytest.raises(BackendError) as refused:
            LockManager(app_url(srv, f"{tag}-new", connect_timeout=2))
        assert_no_password(refused.value, srv.password)
        # The tests' own client says why the server is gone: its log's last lines.
        with pytest.raises(pg_server.PgServerError, match="immediate shutdown request"):
            srv.admin()
        assert_no_password(outcome, srv.password)
        assert_no_password(unlock.lost.reason, srv.password)
        unlock()  # the lost holds' unlock() is harmless
        shared_hold()

        restarted_at = time.monotonic()
        srv.start_again()
        figure("start_again (pg_ctl)", f"{time.monotonic() - restarted_at:.3f} s")
        for role, mgr in (("waiter", waiter_mgr), ("holder", holder)):
            again, took, errors = acquire_with_retries(mgr.lock("s"), 15.0)
            figure(
                f"after restart: the {role}'s acquire", f"{took:.3f} s, failed {Counter(errors)}"
            )
            assert again.fence > unlock.fence
            assert not again.lost.cancelled
            again()
        with LockManager(app_url(srv, f"{tag}-new")) as fresh:
            contract.assert_free(fresh, "s")
            contract.assert_free(fresh, "s:r")
            with holder.lock("s").acquire(deadline=PATIENCE):
                contract.assert_taken(fresh.lock("s"))
            with srv.admin() as conn:
                no_advisory_within(conn, f"{tag}-%")
    finally:
        for mgr in made:
            mgr.close()


# --- poolers ------------------------------------------------------------------------------------


def _bouncer(srv: pg_server.PgServer, pool_mode: str) -> str:
    try:
        return srv.pgbouncer(pool_mode=pool_mode)
    except pg_server.PgServerError as exc:
        if pg_server.pgbouncer_path() is None:
            pytest.skip(f"no pgbouncer here: {exc}")
        raise


def test_pgbouncer_in_transaction_mode_is_refused_and_session_mode_works(
    own_server: pg_server.PgServer, tag: str
) -> None:
    url = with_params(_bouncer(own_server, "transaction"), connect_timeout=5)
    with pytest.raises(BackendError) as caught:
        LockManager(url)
    reason = str(caught.value.reason).lower()
    assert "pool" in reason or "bouncer" in reason, caught.value.reason
    assert_no_password(caught.value, own_server.password)

    session_url = with_params(
        _bouncer(own_server, "session"), connect_timeout=5, application_name=f"{tag}-b"
    )
    with LockManager(session_url) as one, LockManager(session_url) as two:
        held = one.lock("b").acquire(deadline=PATIENCE)
        contract.assert_taken(two.lock("b"))
        join, _ = wait_in_thread(two.lock("b"), deadline=PATIENCE)
        assert contract.waiting(two.lock("b"))
        held()
        _, theirs = join()
        assert isinstance(theirs, Unlock), theirs
        assert theirs.fence > held.fence
        theirs()
        contract.assert_free(one, "b")
    with own_server.admin() as conn:
        no_advisory_within(conn, "ctxlock%")


# --- races --------------------------------------------------------------------------------------


class Timer:
    """A thread that runs each round's functions at their ``time.monotonic()`` times (it
    spins for the last millisecond); ``run(*jobs)`` returns an Event set once all ran."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Any] = queue.Queue()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._loop, daemon=True, name="race-timer")
        self._thread.start()

    def _loop(self) -> None:
        while (item := self._jobs.get()) is not None:
            jobs, done = item
            for when, fn in sorted(jobs, key=lambda job: job[0]):
                while (left := when - time.monotonic()) > 0:
                    if left > 0.002:
                        time.sleep(left - 0.001)
                try:
                    fn()
                except BaseException as exc:
                    self.errors.append(exc)
            done.set()

    def run(self, *jobs: tuple[float, Callable[[], object]]) -> threading.Event:
        done = threading.Event()
        self._jobs.put((list(jobs), done))
        return done

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(PATIENCE)


@pytest.fixture
def timer() -> Iterator[Timer]:
    t = Timer()
    yield t
    t.close()
    assert t.errors == []


#: Each round nudges the moment of the release (or the cancel) by STEP toward the other
#: outcome, plus a random JITTER, so the rounds keep landing on the boundary of the race.
STEP = 0.0002
JITTER = 0.001


def _race_end(
    admin: Admin, tag: str, outcomes: Counter[str], rounds: int, mgrs: list[LockManager]
) -> None:
    figure(f"race over {rounds} rounds", dict(outcomes))
    for mgr in mgrs:
        for which in VIEWS:
            stats = view(mgr, "race", which).statistics()
            assert (stats.locked, stats.holders, stats.waiting) == (False, 0, 0), stats
    no_advisory_within(admin, f"{tag}-%")
    # No ctxlock session of the server holds or waits for anything.
    no_advisory_within(admin, "ctxlock%")


def test_a_grant_racing_the_waiters_deadline_leaves_one_holder_or_none(
    admin: Admin, tag: str, make: Make, timer: Timer
) -> None:
    holder_mgr, waiter_mgr, third = make("holder"), make("waiter"), make("third")
    rng = random.Random(5)
    wait_for = 0.003
    offset = 0.0
    outcomes: Counter[str] = Counter()
    cleanups: list[float] = []
    end = time.monotonic() + RACE_SECONDS
    rounds = 0
    for rounds in range(1, RACE_ROUNDS + 1):
        holder = view(holder_mgr, "race", rng.choice(["lock", "exclusive"])).acquire(
            deadline=PATIENCE
        )
        releasing = threading.Event()

        def release(holder: Unlock = holder, releasing: threading.Event = releasing) -> None:
            releasing.set()
            holder()

        start = time.monotonic()
        done = timer.run((start + wait_for + offset + rng.uniform(-JITTER, JITTER), release))
        which = rng.choice(VIEWS)
        try:
            got = view(waiter_mgr, "race", which).acquire(deadline=wait_for)
        except LockTimeout:
            outcomes["LockTimeout"] += 1
            offset -= STEP
            assert done.wait(PATIENCE)
            # The waiter holds nothing: once the holder released, a third client gets it.
            began = time.monotonic()
            assert wait_until(lambda: take_and_release(third, "race"), CLEANUP), (
                rounds,
                advisory(admin, f"{tag}-%"),
            )
            cleanups.append(time.monotonic() - began)
        else:
            outcomes["held"] += 1
            offset += STEP
            assert releasing.is_set(), f"round {rounds}: granted before the holder released"
            assert done.wait(PATIENCE)
            # The waiter is the only holder.
            assert not take_and_release(third, "race"), rounds
            if rounds % 64 == 0:
                held = advisory(admin, f"{tag}-%")
                assert [(r[1], r[3]) for r in held] == [(f"{tag}-waiter", True)], held
            got()
        offset = min(max(offset, -wait_for), 0.05)
        if time.monotonic() > end:
            break
    figure(
        "deadline race: third client's take after a LockTimeout",
        f"max {max(cleanups, default=0) * 1000:.1f} ms, "
        f"{sum(c > 0.001 for c in cleanups)} of {len(cleanups)} over 1 ms",
    )
    assert outcomes["held"] > 0 and outcomes["LockTimeout"] > 0, outcomes
    _race_end(admin, tag, outcomes, rounds, [holder_mgr, waiter_mgr, third])


def test_a_grant_racing_a_cancel_leaves_one_holder_or_none(
    admin: Admin, tag: str, make: Make, timer: Timer
) -> None:
    holder_mgr, waiter_mgr, third = make("holder"), make("waiter"), make("third")
    rng = random.Random(6)
    release_after = 0.002
    offset = 0.0
    outcomes: Counter[str] = Counter()
    end = time.monotonic() + RACE_SECONDS
    rounds = 0
    for rounds in range(1, RACE_ROUNDS + 1):
        holder = view(holder_mgr, "race", rng.choice(["lock", "exclusive"])).acquire(
            deadline=PATIENCE
        )
        releasing = threading.Event()

        def release(holder: Unlock = holder, releasing: threading.Event = releasing) -> None:
            releasing.set()
            holder()

        token = CancelToken()
        start = time.monotonic()
        done = timer.run(
            (start + release_after, release),
            (
                start + release_after + offset + rng.uniform(-JITTER, JITTER),
                lambda token=token: token.cancel("race"),
            ),
        )
        which = rng.choice(VIEWS)
        try:
            got = view(waiter_mgr, "race", which).acquire(token, deadline=PATIENCE)
        except Cancelled as exc:
            outcomes["Cancelled"] += 1
            offset += STEP
            assert exc.reason == "race", exc.reason
            assert done.wait(PATIENCE)
            assert wait_until(lambda: take_and_release(third, "race"), CLEANUP), (
                rounds,
                advisory(admin, f"{tag}-%"),
            )
        else:
            outcomes["held"] += 1
            offset -= STEP
            assert releasing.is_set(), f"round {rounds}: granted before the holder released"
            assert done.wait(PATIENCE)
            assert not take_and_release(third, "race"), rounds
            if rounds % 64 == 0:
                held = advisory(admin, f"{tag}-%")
                assert [(r[1], r[3]) for r in held] == [(f"{tag}-waiter", True)], held
            # A cancel after the grant does not end the hold.
            assert not got.lost.cancelled
            got()
        offset = min(max(offset, -release_after), 0.05)
        if time.monotonic() > end:
            break
    assert outcomes["held"] > 0 and outcomes["Cancelled"] > 0, outcomes
    _race_end(admin, tag, outcomes, rounds, [holder_mgr, waiter_mgr, third])


# --- waits the server sees ----------------------------------------------------------------------


@pytest.mark.parametrize("which", VIEWS)
def test_a_cancel_ends_a_wait_at_once_and_withdraws_it_from_the_server(
    which: str, admin: Admin, tag: str, make: Make
) -> None:
    holder, waiter_mgr = make("holder"), make("waiter")
    held = holder.lock("c").acquire(deadline=PATIENCE)
    latencies: list[float] = []
    withdrawn: list[float] = []
    seen_waiting = 0
    for i in range(10):
        token = CancelToken()
        lock = view(waiter_mgr, "c", which)
        join, _ = wait_in_thread(lock, cancel=token, deadline=PATIENCE * 4)
        assert contract.waiting(lock), lock.statistics()
        # Whether the server shows the wait (given a second the first time, and while it did).
        patience = 1.0 if i == 0 or seen_waiting else 0.05
        seen_waiting += wait_until(
            lambda: any(not r[3] for r in advisory(admin, f"{tag}-waiter")), patience
        )
        cancelled_at = time.monotonic()
        token.cancel("enough")
        ended_at, error = join()
        assert isinstance(error, Cancelled), error
        latencies.append(ended_at - cancelled_at)
        assert wait_until(lambda: advisory(admin, f"{tag}-waiter") == [], 1.0), advisory(
            admin, f"{tag}-%"
        )
        withdrawn.append(time.monotonic() - cancelled_at)
        assert lock.statistics().waiting == 0
        # The holder still holds, alone.
        assert [r[1:4] for r in advisory(admin, f"{tag}-%")] == [
            (f"{tag}-holder", "ExclusiveLock", True)
        ]
    figure(
        f"cancel of a waiting {which} -> raised",
        f"median {statistics.median(latencies) * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms;"
        f" gone from the server after max {max(withdrawn) * 1000:.1f} ms;"
        f" the server showed the wait {seen_waiting} of {len(latencies)} times",
    )
    # Withdrawn from the server: checked only if the server was seen to have it.
    assert seen_waiting >= 1, "the server never showed the wait"
    assert max(latencies) < 0.5, latencies
    held()
    contract.assert_free(waiter_mgr, "c")
    no_advisory_within(admin, f"{tag}-%")


@pytest.mark.asyncio
async def test_a_cancelled_task_withdraws_its_wait_from_the_server(
    admin: Admin, tag: str, make: Make
) -> None:
    holder, waiter_mgr, third = make("holder"), make("waiter"), make("third")
    held = holder.lock("a").acquire(deadline=PATIENCE)
    task = asyncio.ensure_future(waiter_mgr.lock("a").acquire_async(deadline=PATIENCE * 4))
    assert await contract.until(lambda: waiter_mgr.lock("a").statistics().waiting >= 1)
    cancelled_at = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, PATIENCE)
    took = time.monotonic() - cancelled_at
    figure("task.cancel() of an async wait -> raised", f"{took * 1000:.2f} ms")
    assert took < 0.5, took
    assert await contract.until(lambda: advisory(admin, f"{tag}-waiter") == [], CLEANUP)
    held()
    assert take_and_release(third, "a")
    no_advisory_within(admin, f"{tag}-%")


def test_a_deadline_ends_a_wait_in_time_and_withdraws_it(
    admin: Admin, tag: str, make: Make
) -> None:
    holder, waiter_mgr = make("holder"), make("waiter")
    held = holder.lock("d").acquire(deadline=PATIENCE)
    for which in VIEWS:
        start = time.monotonic()
        join, _ = wait_in_thread(view(waiter_mgr, "d", which), deadline=1.0)
        # The server shows the wait before its deadline, so that its end is a withdrawal.
        shown = wait_until(lambda: any(not r[3] for r in advisory(admin, f"{tag}-waiter")), 0.9)
        ended_at, error = join()
        assert isinstance(error, LockTimeout), error
        took = ended_at - start
        assert shown, (which, "the server never showed the wait")
        # Not before the deadline; the top only bounds a hang.
        assert 1.0 <= took < 1.0 + PATIENCE, (which, took)
        assert wait_until(lambda: advisory(admin, f"{tag}-waiter") == [], CLEANUP)
    held()
    no_advisory_within(admin, f"{tag}-%")


def test_two_hundred_names_held_by_one_manager_use_a_handful_of_connections(
    admin: Admin, tag: str, make: Make
) -> None:
    mgr, other = make("many"), make("other")
    app = f"{tag}-many"
    connections = [len(sessions(admin, app))]
    names = [f"many:{i:03d}" for i in range(200)]
    holds = []
    for i, name in enumerate(names):
        holds.append(view(mgr, name, "shared" if i % 2 else "lock").acquire(deadline=PATIENCE))
        if i % 25 == 0:
            connections.append(len(sessions(admin, app)))
    connections.append(len(sessions(admin, app)))
    rows = names_held(admin, app)
    assert sorted(r[1] or "" for r in rows) == names, rows[:5]
    assert all(r[3] for r in rows)
    modes = {r[1]: r[2] for r in rows}
    assert modes["many:000"] == "ExclusiveLock" and modes["many:001"] == "ShareLock", rows[:2]
    # Another client sees them held.
    assert not take_and_release(other, "many:000")
    assert not take_and_release(other, "many:001")
    shared_too = other.sharable_lock("many:001").shared.try_acquire()
    assert shared_too is not None
    shared_too()
    for unlock in holds:
        unlock()
    connections.append(len(sessions(admin, app)))
    no_advisory_within(admin, app)
    # Held again from many threads at once: still a few connections.
    threaded = [len(sessions(admin, app))]
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def take_many(k: int) -> None:
        try:
            barrier.wait(PATIENCE)
            mine = [mgr.lock(n).acquire(deadline=PATIENCE) for n in names[k::8]]
            threaded.append(len(sessions(admin, app)))  # psycopg serializes the calls
            for unlock in mine:
                unlock()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=take_many, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE * 4)
    assert errors == [] and not any(t.is_alive() for t in threads), errors
    figure("connections of one manager holding 200 names, one thread", f"{connections}")
    figure("connections of one manager, 8 threads taking 25 names each", f"{threaded}")
    assert max(connections) <= 5, connections
    assert max(threaded) <= 9, threaded
    no_advisory_within(admin, app)


# --- TLS ----------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(d: Path, stem: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{stem}.key", "-out", f"{stem}.crt", "-days", "2",
        "-subj", f"/CN=ctxlock test {stem}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip


def _make_server_cert(d: Path, stem: str, ca: str, alt_names: str) -> None:
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{stem}.key", "-out", f"{stem}.csr", "-subj", "/CN=ctxlock-db",
        cwd=d,
    )  # fmt: skip
    (d / f"{stem}.ext").write_text(
        f"subjectAltName={alt_names}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", f"{stem}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{stem}.crt", "-days", "2", "-extfile", f"{stem}.ext",
        cwd=d,
    )  # fmt: skip


def _serve_tls(conn: Admin, d: Path, stem: str | None) -> None:
    """Make the server use ``stem``.crt/.key of ``d`` (None: TLS off) and reload it."""
    with conn.cursor() as cur:
        if stem is None:
            cur.execute("ALTER SYSTEM SET ssl = off")
        else:
            cur.execute("SHOW data_directory")
            row = cur.fetchone()
            assert row is not None
            data = Path(row[0])
            owner = data.stat()
            for suffix in ("crt", "key"):
                target = data / f"ctxlock-test-{stem}.{suffix}"
                shutil.copyfile(d / f"{stem}.{suffix}", target)
                if os.geteuid() == 0:
                    os.chown(target, owner.st_uid, owner.st_gid)
                target.chmod(0o600)
            cur.execute(f"ALTER SYSTEM SET ssl_cert_file = 'ctxlock-test-{stem}.crt'")
            cur.execute(f"ALTER SYSTEM SET ssl_key_file = 'ctxlock-test-{stem}.key'")
            cur.execute("ALTER SYSTEM SET ssl = on")
        cur.execute("SELECT pg_reload_conf()")


def _tls_of(conn: Admin, app: str) -> list[bool]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid "
            "WHERE a.application_name = %s",
            (app,),
        )
        return [bool(r[0]) for r in cur.fetchall()]


def _libpq_connects(srv: pg_server.PgServer, **params: str) -> bool:
    try:
        psycopg.connect(with_params(srv.superuser_url, connect_timeout=5, **params)).close()
    except psycopg.OperationalError:
        return False
    return True


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command here")
def test_sslmodes_against_a_server_with_a_self_signed_ca(
    own_server: pg_server.PgServer, tmp_path: Path, tag: str
) -> None:
    srv = own_server
    _make_ca(tmp_path, "ca")
    _make_ca(tmp_path, "other-ca")
    _make_server_cert(tmp_path, "right", "ca", "IP:127.0.0.1,DNS:localhost")
    _make_server_cert(tmp_path, "wrong-host", "ca", "DNS:db.invalid")
    ca, other_ca = str(tmp_path / "ca.crt"), str(tmp_path / "other-ca.crt")
    outcomes: dict[str, str] = {}

    def connects(case: str, tls: bool | None, **params: str) -> None:
        app = f"{tag}-{case}"
        with LockManager(app_url(srv, app, **params)) as mgr, srv.admin() as conn:
            with mgr.lock("tls").acquire(deadline=PATIENCE):
                assert mgr.lock("tls").locked()
                states = _tls_of(conn, app)
            assert states, f"{case}: no session of the manager"
            if tls is not None:
                assert set(states) == {tls}, (case, states)
            outcomes[case] = f"connects, TLS {sorted(set(states))}"

    def refused(
        case: str,
        error: type[Exception] | tuple[type[Exception], ...] = BackendError,
        **params: str,
    ) -> None:
        with pytest.raises(error) as caught:
            LockManager(app_url(srv, f"{tag}-{case}", **params))
        assert_no_password(caught.value, srv.password)
        outcomes[case] = f"{caught.typename}: {getattr(caught.value, 'reason', caught.value)}"

    with srv.admin() as conn:
        _serve_tls(conn, tmp_path, "right")
    assert wait_until(lambda: _libpq_connects(srv, sslmode="require"), PATIENCE * 2)

    connects("verify-full", True, sslmode="verify-full", sslrootcert=ca)
    connects("verify-ca", True, sslmode="verify-ca", sslrootcert=ca)
    connects("require", True, sslmode="require")
    connects("prefer", True, sslmode="prefer")
    connects("disable", False, sslmode="disable")
    refused("verify-full-other-ca", sslmode="verify-full", sslrootcert=other_ca)
    refused("verify-ca-other-ca", sslmode="verify-ca", sslrootcert=other_ca)
    missing_file = str(tmp_path / "no-such-ca.crt")
    # A CA file that cannot be read: the url's fault or the connection's, either way refused.
    refused(
        "verify-full-missing-ca-file",
        (ValueError, BackendError),
        sslmode="verify-full",
        sslrootcert=missing_file,
    )

    # A certificate for another host name: verify-full refuses it, verify-ca takes it.
    with srv.admin() as conn:
        _serve_tls(conn, tmp_path, "wrong-host")
    assert wait_until(
        lambda: not _libpq_connects(srv, sslmode="verify-full", sslrootcert=ca), PATIENCE * 2
    )
    refused("verify-full-wrong-host", sslmode="verify-full", sslrootcert=ca)
    connects("verify-ca-wrong-host", True, sslmode="verify-ca", sslrootcert=ca)
    connects("require-wrong-host", True, sslmode="require")

    # TLS off: require is refused, prefer falls back to plain TCP.
    with srv.admin() as conn:
        _serve_tls(conn, tmp_path, None)
    assert wait_until(lambda: not _libpq_connects(srv, sslmode="require"), PATIENCE * 2)
    refused("require-no-tls", sslmode="require")
    connects("prefer-no-tls", False, sslmode="prefer")
    for case, outcome in outcomes.items():
        figure(f"TLS {case}", outcome)
