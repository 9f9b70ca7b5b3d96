"""Named locks shared through a PostgreSQL server: ``LockManager("postgresql://...")``.

The rows here start a throwaway server of their own (``pg_server.shared()``: initdb in a
temporary directory, listening on 127.0.0.1 only): the first row to need it starts it, the
others of the run use it, and it is stopped and removed when the interpreter exits. Where no server
can be started (no PostgreSQL installed, ...) every row is skipped as "not available"
with the reason, and so is every row when ``LockManager("postgresql://...")`` raises
``BackendError`` (a build without the scope). The anchors are session-level advisory
locks taken by hand: ``SELECT pg_advisory_lock(key)`` / ``SELECT pg_advisory_unlock(key)``
with psycopg 3 (prepared, ``prepare=True``, on an autocommit connection) or asyncpg (whose
statements with arguments are prepared and cached by itself).

``pg_acquire_unlock``
    ``u = acq(); u()`` uncontended on one name (the manager and the handle made once,
    ``acq = lock.acquire`` pre-bound) against the two statements on one connection, both
    in this process, interleaved.
``pg_contended``
    ``PROCESSES`` child interpreters (``procs.Child``) of ``WORKERS`` threads each take one
    name over and over for a fixed window, with a tiny critical section (a
    read-modify-write of a counter in a shared ``mmap``, which the parent checks against
    the holds counted); ctxlock with one ``LockManager`` per process, psycopg with one
    connection per thread.
``pg_async``
    The same with ``WORKERS`` asyncio tasks per process: ``await lock.acquire_async()``
    against asyncpg, one connection per task.
``pg_cancel``
    A child process holds the name; a thread of this process waits in ``acquire(token)``
    (one manager for every round, a new token each); the token is cancelled. Timed from
    ``token.cancel()`` to the ``Cancelled`` raised in the waiter, and to the server no
    longer showing a waiting request (``pg_locks``: an advisory lock ``NOT granted`` in
    the database). Control: a psycopg connection waiting in ``pg_advisory_lock``
    cancelled with ``Connection.cancel()``.

Server statements. Every statement on an autocommit connection is one transaction, so the
rows count statements as the growth of ``xact_commit + xact_rollback`` in
``pg_stat_database`` for the database, read from a superuser connection to another
database (so that reading does not count). A backend publishes its counts when it has
been idle for a while or when it exits, so each count is taken around whole client
sessions: the clients are closed, the parent waits until the database has no backend left
and the count has stopped moving. A session's own overhead (connecting, and the one
warm-up hold that every client takes before the window) is measured once per kind with a
session of one hold and taken off, client by client: what is left is per hold.
``pg_acquire_unlock`` counts a session of ``1 + pg_count_pairs`` pairs less a session of
one pair.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import ctxlock
from ctxlock._bench import pg_server
from ctxlock._bench.config import Config
from ctxlock._bench.file import _shared_ints, _sleep_until, _write_ints
from ctxlock._bench.peers import PeerMissing, Unavailable
from ctxlock._bench.pg_server import PgServer
from ctxlock._bench.procs import (
    CHILD_ALARM_S,
    SETUP_TIMEOUT_S,
    Child,
    bench_dir,
    receive,
    send,
)
from ctxlock._bench.result import RowResult, format_value
from ctxlock._bench.row import Measure, Row
from ctxlock._bench.sampling import interleave, median
from ctxlock._bench.workload import BenchError, Sample, Workload, expect

__all__ = [
    "ANCHOR_KEY",
    "PG_NAME",
    "PROCESSES",
    "WAIT_LIMIT_S",
    "WORKERS",
    "PgAcquireUnlock",
    "PsycopgAdvisoryPair",
    "acquire_unlock_row",
    "cancel_row",
    "child_main",
    "contended_row",
]

#: The name ctxlock locks, and the advisory lock key the anchors lock.
PG_NAME = "bench:pg"
ANCHOR_KEY = 0x6374786C6F636B
#: Processes, and threads or tasks per process, of ``pg_contended`` and ``pg_async``.
PROCESSES = 4
WORKERS = 8
#: Longest any one acquire here may wait: a ctxlock ``deadline``, an anchor's
#: ``lock_timeout`` (the longest waits seen are well under a second; a lock that strands a
#: waiter makes its row an error after this long, not a hang).
WAIT_LIMIT_S = 10.0
_LOCK_TIMEOUT = f"{int(WAIT_LIMIT_S * 1000)}ms"
#: The children of a window start together this long after the parent says go, in ns.
_START_MARGIN_NS = 200_000_000
#: How long ``pg_cancel`` gives its waiter to reach the server before cancelling, at most.
_CANCEL_SETTLE_S = 1.0
#: How long ``pg_cancel`` polls the server for the cancelled request to go, at most.
_GONE_LIMIT_S = 5.0
#: How long the statement count may take to settle after the clients closed, at most.
_SETTLE_LIMIT_S = 10.0

_LOCK_SQL = "SELECT pg_advisory_lock(%s)"
_UNLOCK_SQL = "SELECT pg_advisory_unlock(%s)"
_MODULE = "ctxlock._bench.pg"

MS = 1_000_000


# --- the server, the peers and the statement count -----------------------------------------


def _psycopg() -> Any:
    """The ``psycopg`` module; ``PeerMissing`` if it is not installed."""
    try:
        return importlib.import_module("psycopg")
    except ImportError as exc:
        raise PeerMissing("psycopg") from exc


def _asyncpg() -> Any:
    try:
        return importlib.import_module("asyncpg")
    except ImportError as exc:
        raise PeerMissing("asyncpg") from exc


_server_failed: str | None = None


def _the_server() -> PgServer:
    """The run's one server (``pg_server.shared()``: started by the first row that asks,
    stopped when the interpreter exits); ``Unavailable`` where none can be started."""
    global _server_failed
    if _server_failed is None:
        reason = pg_server.missing()
        if reason is None:
            try:
                return pg_server.shared()
            except pg_server.PgServerError as exc:
                reason = f"the server did not start: {exc}"
        _server_failed = f"not available: no PostgreSQL server could be started: {reason}"
    raise Unavailable(_server_failed)


def _check_scope(url: str) -> None:
    """``Unavailable`` (the row is skipped) if this build has no PostgreSQL scope."""
    try:
        manager = ctxlock.LockManager(url)
    except ctxlock.BackendError as exc:
        raise Unavailable(
            f"not available: LockManager('postgresql://...') raised BackendError: {exc}"
        ) from exc
    manager.close()


def _ready(anchor: str) -> tuple[PgServer, str]:
    """The server and its url once the row can run against ``anchor`` ("psycopg" or
    "asyncpg"): the peers installed, a server started, this build's scope there."""
    _psycopg()  # the statement count and pg_locks are read with psycopg
    if anchor == "asyncpg":
        _asyncpg()
    server = _the_server()
    url = server.url
    _check_scope(url)
    return server, url


class _Stats:
    """A superuser connection to the server's ``postgres`` database (its own statements do
    not count), reading what the bench database's clients did."""

    def __init__(self, server: PgServer) -> None:
        psycopg = _psycopg()
        conninfo = psycopg.conninfo
        self.database: str = conninfo.conninfo_to_dict(server.url)["dbname"]
        admin_url = conninfo.make_conninfo(server.superuser_url, dbname="postgres")
        self._conn = psycopg.connect(admin_url, autocommit=True)
        #: Backends of the database that were there before (the server's own, if any).
        self._baseline = self.backends()

    def _one(self, sql: str) -> int:
        row = self._conn.execute(sql, (self.database,), prepare=True).fetchone()
        return int(row[0] or 0)

    def transactions(self) -> int:
        """``xact_commit + xact_rollback`` of the database, as published so far."""
        return self._one(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s"
        )

    def backends(self) -> int:
        return self._one("SELECT count(*) FROM pg_stat_activity WHERE datname = %s")

    def waiting(self) -> int:
        """Advisory lock requests of the database that wait (``NOT granted``)."""
        return self._one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = %s)"
        )

    def settled(self) -> int:
        """The statement count once the database has no client left and every backend's
        counts are in (two reads 50 ms apart agree)."""
        limit = time.monotonic() + _SETTLE_LIMIT_S
        while self.backends() > self._baseline and time.monotonic() < limit:
            time.sleep(0.01)
        expect(self.backends() <= self._baseline, f"clients of {self.database!r} still connected")
        last = self.transactions()
        while time.monotonic() < limit:
            time.sleep(0.05)
            now = self.transactions()
            if now == last:
                return now
            last = now
        raise BenchError("the statement count did not settle")

    def close(self) -> None:
        self._conn.close()


def _psycopg_connect(url: str) -> Any:
    return _psycopg().connect(url, autocommit=True, options=f"-c lock_timeout={_LOCK_TIMEOUT}")


def _statements_per(value: float) -> str:
    return f"{value:.3g}"


# --- pg_acquire_unlock: one process, one thread --------------------------------------------


class PgAcquireUnlock(Workload):
    """``u = acq(); u()``, ``acq = lock.acquire`` pre-bound, ``lock`` one name of a
    PostgreSQL-scope ``LockManager`` made once."""

    def __init__(self, url: str) -> None:
        self._manager = ctxlock.LockManager(url)
        self._lock = self._manager.lock(PG_NAME)

    def run(self, n: int) -> Sample:
        acq = self._lock.acquire
        start = perf_counter_ns()
        for _ in repeat(None, n):
            u = acq()
            u()
        elapsed = perf_counter_ns() - start
        expect(not self._lock.locked(), "the PostgreSQL-scope lock was left held")
        return Sample(n, elapsed)

    def close(self) -> None:
        self._manager.close()


class PsycopgAdvisoryPair(Workload):
    """``SELECT pg_advisory_lock(key)`` then ``SELECT pg_advisory_unlock(key)`` on one
    autocommit psycopg connection, prepared (``prepare=True``), all pre-bound."""

    def __init__(self, url: str) -> None:
        self._conn = _psycopg_connect(url)
        self._cursor = self._conn.cursor()

    def run(self, n: int) -> Sample:
        execute, fetchone, params = self._cursor.execute, self._cursor.fetchone, (ANCHOR_KEY,)
        lock, unlock = _LOCK_SQL, _UNLOCK_SQL
        start = perf_counter_ns()
        for _ in repeat(None, n):
            execute(lock, params, prepare=True)
            execute(unlock, params, prepare=True)
        elapsed = perf_counter_ns() - start
        expect(fetchone() == (True,), "pg_advisory_unlock found the lock not held")
        return Sample(n, elapsed)

    def close(self) -> None:
        self._conn.close()


def _session_statements(stats: _Stats, make: Callable[[], Workload], pairs: int) -> int:
    """Server statements of one whole session of ``pairs`` pairs, connecting included."""
    before = stats.settled()
    with make() as workload:
        workload.run(pairs)
    return stats.settled() - before


def acquire_unlock_row(row: Row, cfg: Config) -> RowResult:
    """``pg_acquire_unlock``: cost per pair against psycopg's two statements, and the
    server statements per pair of both."""
    server, url = _ready("psycopg")
    makers: dict[str, Callable[[], Workload]] = {
        "ctxlock": lambda: PgAcquireUnlock(url),
        "psycopg": lambda: PsycopgAdvisoryPair(url),
    }
    with makers["psycopg"]() as theirs, makers["ctxlock"]() as ours:
        theirs.run(max(1, cfg.pg_pairs // 10))  # warm-up: statements prepared
        ours.run(max(1, cfg.pg_pairs // 10))
        ours_samples, their_samples = interleave(ours, theirs, cfg.pg_pairs, cfg.repeat)
    ours_ns = median([s.per_op_ns for s in ours_samples])
    their_ns = median([s.per_op_ns for s in their_samples])
    stats = _Stats(server)
    try:
        per_pair = {}
        for kind, make in makers.items():
            one = _session_statements(stats, make, 1)
            more = _session_statements(stats, make, 1 + cfg.pg_count_pairs)
            per_pair[kind] = (more - one) / cfg.pg_count_pairs
    finally:
        stats.close()
    note = (
        f"{cfg.pg_pairs:,} pairs a sample; server statements per pair (counted over "
        f"{cfg.pg_count_pairs:,} pairs): ctxlock {_statements_per(per_pair['ctxlock'])}, "
        f"psycopg {_statements_per(per_pair['psycopg'])}"
    )
    extra = {
        "ours_statements_per_pair": per_pair["ctxlock"],
        "anchor_statements_per_pair": per_pair["psycopg"],
    }
    return row.result(ours_ns, their_ns, ours_ns / their_ns, note=note, extra=extra)


# --- the children of pg_contended and pg_async ---------------------------------------------

#: ``acquire()`` takes the lock and returns what releases it.
_Acquire = Callable[[], Callable[[], object]]
#: ``await acquire()`` takes the lock and returns what releases it (whose result, if
#: awaitable, is awaited).
_AsyncAcquire = Callable[[], Awaitable[Callable[[], object]]]


def _thread_locks(kind: str, url: str, count: int) -> tuple[list[_Acquire], Callable[[], None]]:
    """One acquire per worker thread and what closes them all; every one has taken and
    released the lock once (the warm-up the statement count takes off)."""
    if kind == "ctxlock":
        manager = ctxlock.LockManager(url)
        take = manager.lock(PG_NAME).acquire

        def acquire_ctxlock() -> Callable[[], object]:
            return take(deadline=WAIT_LIMIT_S)

        acquire_ctxlock()()
        return [acquire_ctxlock] * count, manager.close
    if kind == "psycopg":
        conns = [_psycopg_connect(url) for _ in range(count)]

        def make(conn: Any) -> _Acquire:
            cursor = conn.cursor()
            execute, params = cursor.execute, (ANCHOR_KEY,)

            def release() -> None:
                execute(_UNLOCK_SQL, params, prepare=True)

            def acquire_psycopg() -> Callable[[], object]:
                execute(_LOCK_SQL, params, prepare=True)
                return release

            return acquire_psycopg

        acquires = [make(conn) for conn in conns]
        for acquire in acquires:
            acquire()()

        def close() -> None:
            for conn in conns:
                conn.close()

        return acquires, close
    raise ValueError(f"unknown lock kind {kind!r}")


async def _task_locks(
    kind: str, url: str, count: int
) -> tuple[list[_AsyncAcquire], Callable[[], Awaitable[object]]]:
    """One acquire per task and what closes them all, each warmed up like the threads'."""
    if kind == "ctxlock":
        manager = ctxlock.LockManager(url)
        take = manager.lock(PG_NAME).acquire_async

        async def acquire_ctxlock() -> Callable[[], object]:
            unlock: Callable[[], object] = await take(deadline=WAIT_LIMIT_S)
            return unlock

        (await acquire_ctxlock())()

        async def close_manager() -> None:
            manager.close()

        return [acquire_ctxlock] * count, close_manager
    if kind == "asyncpg":
        asyncpg = _asyncpg()
        settings = {"lock_timeout": _LOCK_TIMEOUT}
        conns = [await asyncpg.connect(url, server_settings=settings) for _ in range(count)]

        def make(conn: Any) -> _AsyncAcquire:
            fetchval = conn.fetchval

            def release() -> object:
                return fetchval("SELECT pg_advisory_unlock($1)", ANCHOR_KEY)

            async def acquire_asyncpg() -> Callable[[], object]:
                await fetchval("SELECT pg_advisory_lock($1)", ANCHOR_KEY)
                return release

            return acquire_asyncpg

        acquires = [make(conn) for conn in conns]
        for acquire in acquires:
            await _release(await acquire())

        async def close_all() -> None:
            for conn in conns:
                await conn.close()

        return acquires, close_all
    raise ValueError(f"unknown lock kind {kind!r}")


@dataclass
class _Worker:
    """What one thread or task of a child counted over the window."""

    holds: int = 0
    crossed: int = 0
    longest: int = 0
    last: int = 0


async def _release(release: Callable[[], object]) -> None:
    released = release()
    if inspect.isawaitable(released):
        await released


def _report(workers: Sequence[_Worker]) -> dict[str, int]:
    return {
        "holds": sum(w.holds for w in workers),
        "crossed": sum(w.crossed for w in workers),
        "longest": max(w.longest for w in workers),
        "last": max(w.last for w in workers),
    }


def _contend_child(kind: str, url: str, directory: Path, index_text: str) -> None:
    """``pg_contended``: ``WORKERS`` threads take the lock in a loop over the window the
    parent sends. The shared ``counter`` is the count of holds and the number (1 up) of
    the process that held last."""
    tag = int(index_text) + 1
    acquires, close = _thread_locks(kind, url, WORKERS)
    go = threading.Event()
    window = [0, 0]
    done: list[_Worker] = []
    errors: list[str] = []
    with _shared_ints(directory / "counter", 2) as counter:

        def work(acquire: _Acquire) -> None:
            try:
                go.wait(SETUP_TIMEOUT_S)
                me = _Worker()
                start, end = window
                _sleep_until(start)
                clock = perf_counter_ns
                while (before := clock()) < end:
                    release = acquire()
                    after = clock()
                    counter[0] += 1  # not atomic: two holders at once lose increments
                    if counter[1] != tag:
                        counter[1] = tag
                        me.crossed += 1
                    release()
                    me.holds += 1
                    me.longest = max(me.longest, after - before)
                me.last = clock()
                done.append(me)
            except BaseException as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=work, args=(a,), daemon=True) for a in acquires]
        for thread in threads:
            thread.start()
        send({"ready": True})
        message = receive()
        window[:] = [int(message["start"]), int(message["end"])]
        go.set()
        for thread in threads:
            thread.join(CHILD_ALARM_S)
    close()
    if errors or len(done) != WORKERS:
        raise BenchError(
            f"{WORKERS - len(done)} of {WORKERS} threads failed: {'; '.join(sorted(set(errors)))}"
        )
    send(_report(done))


async def _async_contend(kind: str, url: str, counter: memoryview, tag: int) -> list[_Worker]:
    acquires, close = await _task_locks(kind, url, WORKERS)
    send({"ready": True})
    message = await asyncio.get_running_loop().run_in_executor(None, receive)
    start, end = int(message["start"]), int(message["end"])

    async def work(acquire: _AsyncAcquire) -> _Worker:
        me = _Worker()
        clock = perf_counter_ns
        await asyncio.sleep(max(0, start - clock()) / 1e9)
        while (before := clock()) < end:
            release = await acquire()
            after = clock()
            counter[0] += 1  # no await in between: a second holder would lose increments
            if counter[1] != tag:
                counter[1] = tag
                me.crossed += 1
            released = release()
            if inspect.isawaitable(released):
                await released
            me.holds += 1
            me.longest = max(me.longest, after - before)
        me.last = clock()
        return me

    try:
        return list(await asyncio.gather(*(work(a) for a in acquires)))
    finally:
        await close()


def _async_child(kind: str, url: str, directory: Path, index_text: str) -> None:
    """``pg_async``: ``WORKERS`` tasks on one event loop, as ``_contend_child``'s threads."""
    with _shared_ints(directory / "counter", 2) as counter:
        workers = asyncio.run(_async_contend(kind, url, counter, int(index_text) + 1))
    send(_report(workers))


def _hold_child(kind: str, url: str, directory: Path) -> None:
    """``pg_cancel``'s holder: takes the lock, says so, and releases when told."""
    if kind != "ctxlock":
        raise ValueError(f"unknown lock kind {kind!r}")
    with ctxlock.LockManager(url) as manager:
        unlock = manager.lock(PG_NAME).acquire(deadline=WAIT_LIMIT_S)
        send({"held": True})
        receive()
        unlock()
    send({"released": True})


_ROLES: dict[str, Callable[..., None]] = {
    "contend": _contend_child,
    "async": _async_child,
    "hold": _hold_child,
}


def _write_url(directory: Path, url: str) -> None:
    """Leave the server's url (with its password) for the children in ``directory``: not
    on their command lines, which error messages and ``ps`` show."""
    path = directory / "url"
    path.touch(0o600)
    path.write_text(url)


def child_main(argv: Sequence[str]) -> None:
    """A child's entry point: ``ROLE KIND DIRECTORY ARGS...``; the url is in
    ``DIRECTORY/url``."""
    import signal

    if hasattr(signal, "alarm"):
        signal.alarm(CHILD_ALARM_S)
    role, kind, directory, *args = argv
    try:
        url = (Path(directory) / "url").read_text()
        _ROLES[role](kind, url, Path(directory), *args)
    except SystemExit:
        raise
    except BaseException as exc:
        send({"error": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(1) from None


# --- pg_contended and pg_async: the parent's side ------------------------------------------


@dataclass(frozen=True)
class _Contended:
    """One window of ``pg_contended`` or ``pg_async`` with one kind of lock."""

    ns_per_hold: float
    holds: tuple[int, ...]  # per process
    crossed: int
    longest_ns: int
    #: Server statements of the window less the clients' sessions (connect, warm-up).
    statements: float


def _overhead(stats: _Stats, role: str, kind: str, url: str) -> int:
    """Server statements of one client's session with its one warm-up hold, as the
    children of ``role`` open it: a manager for ctxlock, a connection for the anchors."""
    before = stats.settled()
    if role == "contend":
        _, close = _thread_locks(kind, url, 1)
        close()
    else:

        async def session() -> None:
            _, close = await _task_locks(kind, url, 1)
            await close()

        asyncio.run(session())
    return stats.settled() - before


def _contend_run(
    role: str, kind: str, url: str, directory: Path, seconds: float, stats: _Stats, each: int
) -> _Contended:
    """One window; ``each`` is the statements of one client's session (``_overhead``)."""
    _write_ints(directory / "counter", [0, 0])
    _write_url(directory, url)
    before = stats.settled()
    with ExitStack() as stack:
        children = [
            stack.enter_context(Child(role, kind, str(directory), str(p), module=_MODULE))
            for p in range(PROCESSES)
        ]
        for child in children:
            child.recv(SETUP_TIMEOUT_S)
        start = perf_counter_ns() + _START_MARGIN_NS
        end = start + int(seconds * 1e9)
        for child in children:
            child.send({"start": start, "end": end})
        reports = [child.recv(seconds + WAIT_LIMIT_S + 30) for child in children]
        for child in children:
            child.proc.wait(SETUP_TIMEOUT_S)  # its connections closed, its backends gone
    statements = stats.settled() - before
    holds = tuple(int(r["holds"]) for r in reports)
    with _shared_ints(directory / "counter", 2) as counter:
        counted = counter[0]
    expect(sum(holds) > 0, f"{kind}: no worker got the lock in {seconds:g} s")
    expect(counted == sum(holds), f"{kind}: {sum(holds)} holds but {counted} increments")
    clients = PROCESSES if kind == "ctxlock" else PROCESSES * WORKERS
    elapsed = max(int(r["last"]) for r in reports) - start
    return _Contended(
        ns_per_hold=elapsed / sum(holds),
        holds=holds,
        crossed=sum(int(r["crossed"]) for r in reports),
        longest_ns=max(int(r["longest"]) for r in reports),
        statements=statements - clients * each,
    )


def _per_hold(runs: Sequence[_Contended]) -> float:
    """Server statements per hold over the windows."""
    return sum(run.statements for run in runs) / sum(sum(run.holds) for run in runs)


def _taken_over(runs: Sequence[_Contended]) -> float:
    return sum(run.crossed for run in runs) / sum(sum(run.holds) for run in runs)


def _contended_text(label: str, runs: Sequence[_Contended]) -> str:
    per_process = [sum(run.holds[p] for run in runs) for p in range(PROCESSES)]
    total = sum(per_process)
    shares = "/".join(f"{100 * h / total:.0f}" for h in per_process)
    rate = 1e9 / median([run.ns_per_hold for run in runs])
    longest = max(run.longest_ns for run in runs)
    return (
        f"{label} {rate:,.0f} holds/s, {_statements_per(_per_hold(runs))} server statements "
        f"per hold, shares of the holds by process {shares} %, "
        f"{100 * _taken_over(runs):.0f} % of holds taken over from another process, "
        f"longest single wait {format_value(longest, 'ns')}"
    )


def contended_row(role: str, anchor: str) -> Measure:
    """``pg_contended`` (``role`` "contend", threads, against psycopg) or ``pg_async``
    (``role`` "async", tasks, against asyncpg): ``cfg.pg_repeat`` windows each,
    interleaved. The row also fails if ctxlock's statements per hold exceed
    ``max_statements``."""

    def measure(row: Row, cfg: Config) -> RowResult:
        server, url = _ready(anchor)
        runs: dict[str, list[_Contended]] = {"ctxlock": [], anchor: []}
        stats = _Stats(server)
        try:
            each = {kind: _overhead(stats, role, kind, url) for kind in runs}
            with bench_dir() as directory:
                for i in range(cfg.pg_repeat):
                    for kind in ("ctxlock", anchor)[:: 1 if i % 2 == 0 else -1]:
                        runs[kind].append(
                            _contend_run(
                                role, kind, url, directory, cfg.pg_seconds, stats, each[kind]
                            )
                        )
        finally:
            stats.close()
        ours = median([run.ns_per_hold for run in runs["ctxlock"]])
        theirs = median([run.ns_per_hold for run in runs[anchor]])
        workers = "threads" if role == "contend" else "tasks"
        note = (
            f"{PROCESSES} processes x {WORKERS} {workers}, {cfg.pg_seconds:g} s windows, "
            f"{cfg.pg_repeat} each; {_contended_text('ctxlock', runs['ctxlock'])}; "
            f"{_contended_text(anchor, runs[anchor])}; a client's session (connecting, "
            f"one warm-up hold) took {each['ctxlock']} statements for ctxlock, "
            f"{each[anchor]} for {anchor}, taken off"
        )
        per_hold = _per_hold(runs["ctxlock"])
        extra = {
            "ours_holds_per_s": 1e9 / ours,
            "anchor_holds_per_s": 1e9 / theirs,
            "ours_statements_per_hold": per_hold,
            "anchor_statements_per_hold": _per_hold(runs[anchor]),
            "ours_longest_wait_ns": float(max(r.longest_ns for r in runs["ctxlock"])),
            "anchor_longest_wait_ns": float(max(r.longest_ns for r in runs[anchor])),
            "ours_taken_over_share": _taken_over(runs["ctxlock"]),
            "anchor_taken_over_share": _taken_over(runs[anchor]),
        }
        also_ok = role != "contend" or per_hold <= MAX_STATEMENTS_PER_HOLD
        return row.result(ours, theirs, ours / theirs, note=note, extra=extra, also_ok=also_ok)

    return measure


#: ``pg_contended``'s second target: server statements per hold, for ctxlock.
MAX_STATEMENTS_PER_HOLD = 0.5


# --- pg_cancel -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cancelled:
    """One round: ns from the cancel to the raise, and to the server's request gone."""

    raised_ns: int
    gone_ns: int
    #: Whether the server showed the waiting request before the cancel.
    seen: bool


def _await_waiting(stats: _Stats) -> bool:
    """Wait until the server shows a waiting advisory request (at most
    ``_CANCEL_SETTLE_S``); then a little longer, so that the waiter is really asleep."""
    limit = time.monotonic() + _CANCEL_SETTLE_S
    while time.monotonic() < limit:
        if stats.waiting():
            time.sleep(0.02)
            return True
        time.sleep(0.005)
    return False


def _gone_after(stats: _Stats, cancelled_at: int) -> int:
    """ns from ``cancelled_at`` until the server shows no waiting advisory request."""
    limit = cancelled_at + int(_GONE_LIMIT_S * 1e9)
    while stats.waiting():
        expect(perf_counter_ns() < limit, "the cancelled request still waits at the server")
    return perf_counter_ns() - cancelled_at


def _cancel_rounds_ctxlock(stats: _Stats, url: str, rounds: int) -> list[_Cancelled]:
    """``rounds`` waiters of one manager, each cancelled, while another process holds."""
    got: list[_Cancelled] = []
    with bench_dir() as directory:
        _write_url(directory, url)
        with Child("hold", "ctxlock", str(directory), module=_MODULE) as holder:
            holder.recv(SETUP_TIMEOUT_S)
            with ctxlock.LockManager(url) as manager:
                lock = manager.lock(PG_NAME)
                for _ in range(rounds):
                    got.append(_cancel_round_ctxlock(stats, lock))
            holder.send({"release": True})
            holder.recv(SETUP_TIMEOUT_S)
    return got


def _cancel_round_ctxlock(stats: _Stats, lock: ctxlock.NamedLock) -> _Cancelled:
    token = ctxlock.CancelToken()
    outcome: list[object] = []

    def wait() -> None:
        try:
            lock.acquire(token, deadline=WAIT_LIMIT_S)()
            outcome.append("acquired")
        except ctxlock.Cancelled:
            outcome.append(perf_counter_ns())
        except BaseException as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    seen = _await_waiting(stats)
    if not seen:
        time.sleep(0.05)
    cancelled_at = perf_counter_ns()
    token.cancel()
    gone = _gone_after(stats, cancelled_at) if seen else 0
    waiter.join(WAIT_LIMIT_S)
    expect(len(outcome) == 1 and isinstance(outcome[0], int), f"the waiter: {outcome}")
    raised = outcome[0]
    assert isinstance(raised, int)
    return _Cancelled(raised - cancelled_at, gone, seen)


def _cancel_round_psycopg(stats: _Stats, url: str) -> _Cancelled:
    psycopg = _psycopg()
    outcome: list[object] = []
    with _psycopg_connect(url) as holder, _psycopg_connect(url) as conn:
        holder.execute(_LOCK_SQL, (ANCHOR_KEY,))

        def wait() -> None:
            try:
                conn.execute(_LOCK_SQL, (ANCHOR_KEY,))
                outcome.append("acquired")
            except psycopg.errors.QueryCanceled:
                outcome.append(perf_counter_ns())
            except BaseException as exc:
                outcome.append(f"{type(exc).__name__}: {exc}")

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        seen = _await_waiting(stats)
        cancelled_at = perf_counter_ns()
        conn.cancel()
        gone = _gone_after(stats, cancelled_at)
        waiter.join(WAIT_LIMIT_S)
        holder.execute(_UNLOCK_SQL, (ANCHOR_KEY,))
    expect(seen, "psycopg's waiting request never showed in pg_locks")
    expect(len(outcome) == 1 and isinstance(outcome[0], int), f"the waiter: {outcome}")
    raised = outcome[0]
    assert isinstance(raised, int)
    return _Cancelled(raised - cancelled_at, gone, seen)


def _cancel_text(label: str, rounds: Sequence[_Cancelled]) -> str:
    raised = [r.raised_ns for r in rounds]
    gone = [r.gone_ns for r in rounds]
    return (
        f"{label}: cancel to the raise median {format_value(median(raised), 'ns')}, "
        f"max {format_value(max(raised), 'ns')}; cancel to no waiting request at the "
        f"server median {format_value(median(gone), 'ns')}, "
        f"max {format_value(max(gone), 'ns')}"
    )


def cancel_row(row: Row, cfg: Config) -> RowResult:
    """``pg_cancel``: the median ms from ``token.cancel()`` to ``Cancelled`` raised in the
    waiter, against a budget; the control is psycopg's ``Connection.cancel()``."""
    server, url = _ready("psycopg")
    stats = _Stats(server)
    try:
        ours = _cancel_rounds_ctxlock(stats, url, cfg.pg_cancel_rounds)
        control = [_cancel_round_psycopg(stats, url) for _ in range(cfg.pg_cancel_rounds)]
    finally:
        stats.close()
    mid = median([r.raised_ns for r in ours])
    seen = sum(r.seen for r in ours)
    note = (
        f"{cfg.pg_cancel_rounds} round(s) of one manager's waiters, another process holding: "
        f"{_cancel_text('ctxlock', ours)}"
    )
    if seen < len(ours):
        note += (
            f" ({len(ours) - seen} round(s) showed no waiting request at the server before "
            f"the cancel, counted as 0)"
        )
    note += "; control, psycopg Connection.cancel() of a waiting pg_advisory_lock: "
    note += _cancel_text("psycopg", control).removeprefix("psycopg: ")
    extra = {
        "median_ns": mid,
        "max_ns": float(max(r.raised_ns for r in ours)),
        "gone_median_ns": median([r.gone_ns for r in ours]),
        "gone_max_ns": float(max(r.gone_ns for r in ours)),
        "psycopg_median_ns": median([r.raised_ns for r in control]),
        "psycopg_gone_median_ns": median([r.gone_ns for r in control]),
    }
    return row.result(mid, None, mid / MS, note=note, extra=extra)
