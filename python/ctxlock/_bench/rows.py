"""The rows of ``python -m ctxlock bench``, in report order, and ``run_row``.

A *row* compares ctxlock with an anchor and checks the ratio against a target. Every ratio
row runs ctxlock and its anchor in this process, interleaved (ours first in even repeats,
the anchor first in odd ones), with the garbage collector collected and then disabled during
each sample; it reports the median over the repeats and ``ratio = ctxlock / anchor`` (cost
over cost, so lower is better). The rows:

``acquire_unlock``
    ``u = acq(); u()`` with ``acq = lock.acquire`` pre-bound, against ``threading.Lock``'s
    pre-bound ``acquire()`` / ``release()``. Target <= 1.0. The note has the same loop in
    a thread that did not make the lock (``InAnotherThread``), for both locks, and there
    ctxlock against ``threading.Lock``'s loop taking a reference to its lock on each hold
    (``acquire(); kept = lock; ...; release()``), as an ``Unlock`` takes one: on a free-threaded
    build that count is atomic in a thread that did not make the lock.
``with``
    ``with lock: pass`` on one reused lock, against the same with one ``threading.Lock``.
    Target <= 0.7.
``acquire_deadline``
    ``acq(deadline=30.0)()`` against ``tl.acquire(timeout=30.0); tl.release()``.
    Target <= 0.5.
``shared_with``
    ``with rw.shared: pass`` (the view bound once) against ``with threading.Lock()``.
    Target <= 1.5.
``shared_vs_rwlock``
    The same shared hold against a reader of ``readerwriterlock.rwlock.RWLockFair``
    (skipped if readerwriterlock is not installed). Target <= 0.15.
``contended_2``
    Two threads each increment a counter ``n`` times under ``with lock:``; ns per increment
    overall, against the same with a ``threading.Lock``. Target <= 1.0, and two more
    conditions, as for every ``contended_*`` row: ctxlock's longest single wait (each
    acquire is timed; the median over the repeats of each run's worst) must not be longer
    than ``threading.Lock``'s, and every thread must make progress. A thread is *starved*
    in a run when it acquired the lock for none of its ``n`` increments before every other
    thread had finished all of theirs (it only ran once it was alone); the row misses if
    any run of ctxlock starved a thread. The note has, for ctxlock, the anchor and a
    control run of the same loop with no lock at all (``NoLock``, whose longest "wait" and
    starved threads are the GIL's): the longest wait, the thread switches per 1,000
    increments, the threads starved over all the runs, and the smallest thread's share of
    the increments acquired from the start until the first thread finished (the median
    over the runs; fair is 50%). It also has the same loop run by one thread alone, for
    both locks, and their ratio: with no contention, to compare with the contended one.
``contended_4``
    The same with four threads (fair share 25%). Target <= 1.0.
``contended_2_acquire``
    Two threads each do ``u = acq(); counter += 1; u()`` ``n`` times with
    ``acq = lock.acquire`` pre-bound, against a ``threading.Lock``'s pre-bound
    ``acquire(); counter += 1; release()``; ns per increment. Target <= 1.0, with the
    longest-wait and progress conditions of ``contended_2`` and its note's figures. The
    note also times, in one thread alone, ``threading.Lock``'s loop in the shape of
    ctxlock's (``u = release; acquire(); counter += 1; u()``, its bound methods made by
    the looping thread) against ctxlock's: what the interpreter charges for that shape;
    and ``threading.Lock``'s loop taking a reference to its lock on each hold, as
    ``acquire_unlock``'s note does. That last control also runs contended, in the row's
    threads, against ctxlock again: its time per op, longest single wait and thread
    switches beside ctxlock's, since on a free-threaded build the reference is an atomic
    count on a cache line the threads share, inside every hold.
``contended_4_acquire``
    The same with four threads. Target <= 1.0.
``drain_100``
    100 threads block on a held lock; the time from the one release until every one of
    them has acquired and released once, per thread (the mean per thread). Each waiter
    also notes when its own acquire returned; the row also misses if the p90 of those
    times from the release (the median over the repeats of each run's p90) is longer for
    ctxlock than for ``threading.Lock``. The note has the mean, median and p90 of the
    waiters' times of both. Target <= 1.0.
``async_with``
    ``async with lock: pass`` in one task, uncontended, against ``asyncio.Lock``.
    Target <= 0.6.
``tasks_100``
    100 tasks each do ``async with lock: await asyncio.sleep(0)`` for a number of rounds;
    ns per hold, against ``asyncio.Lock``. Target <= 1.0.
``mixed_2t2t``
    Two threads (``with lock:``) and two tasks on one loop (``async with lock:``) share one
    lock and increment a counter; ns per increment against ``aiologic.Lock`` used the same
    way (skipped if aiologic is not installed). The ratio is ctxlock's cost over aiologic's;
    the target <= 0.2 means at least five times aiologic's throughput.
``memory_100k``
    RSS growth per lock for 100,000 ``Lock()`` against 100,000 ``threading.Lock()``, each
    side in a fresh interpreter; the tracemalloc peak is reported too (it does not see what
    the Rust core allocates itself, so the ratio uses RSS). Target <= 2.0.
``tasks_scaling``
    100,000 tasks queue on one held lock, then all pass through it once (``async with``);
    the time for that over the time for 10,000 tasks. Linear is 10; target <= 12.
``churn_rss``
    RSS growth over many acquire / timeout / cancel cycles (200,000 by default,
    ``--full-churn`` for 1,000,000). The ratio column is the growth in MB; target <= 2.
``named_acquire_unlock``
    ``u = lock(name).acquire(); u()`` with ``lock = LockManager().lock`` pre-bound, the
    lookup by name included, over 1,000 names cycled; against a ``threading.Lock`` fetched
    by the same name from a dict of 1,000 and acquired and released. Target <= 1.5. Its
    note gives the floor: the same loop with the scope's table left out (the handle made
    and dropped, then an ``Unlock`` of one plain ``Lock``), against the same anchor.
``named_vs_weakdict``
    The same named hold against what users build by hand: get-or-create in a
    ``weakref.WeakValueDictionary`` of ``threading.Lock`` guarded by a ``threading.Lock``,
    then acquire and release. Target <= 0.5.
``named_1m``
    RSS growth over 1,000,000 distinct names each taken once through a ``LockManager``
    (``mgr.lock(name).acquire()()``), in a fresh interpreter, measured after the first
    100,000 as warm-up: a name nobody holds or waits on takes no memory. The ratio column
    is the growth in MB; target <= 10.
``file_acquire_unlock``
    ``u = acq(); u()`` uncontended on one name of a ``LockManager("file:///dir")`` (the
    processes of one machine; the handle made once, ``acq`` pre-bound, a temporary
    directory), against ``filelock.FileLock``'s ``acquire()`` / ``release()`` on a file in
    a temporary directory. Target <= 0.1.
``file_vs_flock``
    The same against a bare ``fcntl.flock(fd, LOCK_EX)`` / ``fcntl.flock(fd, LOCK_UN)`` on
    a file kept open, from Python. Target <= 1.0.
``file_vs_ofd``
    The same against the kernel primitive the scope holds a name with, bare: a write lock
    on one byte with ``fcntl(fd, F_OFD_SETLK, ...)`` and its unlock, on a file kept open,
    from Python. Target <= 1.0. Beside ``file_vs_flock`` in the same run, its anchor shows
    what an open-file-description lock pair costs against a ``flock`` pair: the floor
    under ``file_vs_flock`` for a scope that keeps every name in one file.
``file_contended_4p``
    4 processes (fresh interpreters) x 2 threads take one name for a fixed window (2 s,
    3 windows each, interleaved) with a tiny critical section; ns per hold overall,
    against ``filelock.FileLock`` (one per process, shared by its threads). Target <= 0.1:
    at least 10 times the holds per second. The note has, for both, the holds per
    second, each process's share of the holds, the share of holds taken over from another
    process and the longest single wait.
``file_contended_vs_fasteners``
    The same against fasteners' ``InterProcessLock`` (one per process, taken under a
    ``threading.Lock``: its POSIX record lock does not exclude a process's own threads).
    Target <= 0.1.
``file_handoff``
    Two processes pass the lock back and forth 2,000 times; the time from ``unlock()`` in
    one to ``acquire`` returning in the other, on ``time.perf_counter_ns`` (one clock for
    the machine). The ratio column is the median in microseconds; target <= 50 us. The
    note has the p99 and, as a control, the same with a blocking ``fcntl.flock``.
``file_crash``
    A holder process is killed with SIGKILL while another process waits; the time from
    the kill to the waiter's grant, 5 rounds. The ratio column is the median in
    milliseconds; target <= 100 ms, and no round may reach 1 s (hard limit). Control:
    ``fcntl.flock``.

``pg_acquire_unlock``
    ``u = acq(); u()`` uncontended on one name of a ``LockManager("postgresql://...")``
    (the handle made once, ``acq`` pre-bound), against psycopg 3 running
    ``SELECT pg_advisory_lock(%s)`` / ``SELECT pg_advisory_unlock(%s)`` prepared on one
    autocommit connection. Target <= 1.0. The note has the server statements per pair of
    both (counted in ``pg_stat_database``, see ``pg.py``).
``pg_contended``
    4 processes x 8 threads take one name for a fixed window (2 s, 3 windows each,
    interleaved) with a tiny critical section; ns per hold, against psycopg with one
    connection per thread taking the advisory lock. Target <= 0.2 (at least 5 times the
    holds per second), and at most 0.5 server statements per hold for ctxlock. The note
    has the holds per second, statements per hold, each process's share of the holds and
    the longest single wait of both.
``pg_async``
    The same with 4 processes x 8 asyncio tasks (``await lock.acquire_async()``), against
    asyncpg with one connection per task. Target <= 0.2.
``pg_cancel``
    A child process holds the name; a thread waits in ``acquire(token)`` (one manager,
    a new token each round); the token is cancelled. The ratio column is the median time
    from ``token.cancel()`` to ``Cancelled`` raised, in milliseconds, over 20 rounds;
    target <= 100 ms. The note has the maximum and the time until the server shows no
    waiting request; the control is psycopg's ``Connection.cancel()`` of a waiting
    ``pg_advisory_lock``.

Across interpreters: with ``--pythons P1,P2`` (or ``CTXLOCK_BENCH_PYTHONS``, same format) the
rows of ``INTERPRETER_ROWS`` (``acquire_unlock``, ``with``, the four ``contended_*`` rows,
``drain_100`` and ``named_acquire_unlock``; those of them selected with ``--rows``) also run
in each of those interpreters, which must have ctxlock installed, as a child process
(``P -m ctxlock bench --rows ... --json`` with the same mode and repeats; ``interpreters.py``).
The report adds a table "Across interpreters": one line per row with, for this interpreter
(its figures are its own rows of the run) and each other one, ctxlock's figure, the
anchor's, the ratio and the result. An interpreter is labelled with its version, plus "t"
when it is a free-threaded build (``Py_GIL_DISABLED``): "3.11.7", "3.14.7", "3.14.7t". An
interpreter that cannot run the rows (no such file, no ctxlock, a crash) is an error line
with the reason; the run goes on.

The ``pg_*`` rows start a throwaway PostgreSQL server (``pg_server.py``) and stop it when the
run ends; they are skipped ("not available") where none can be started or where the build
has no PostgreSQL scope (``LockManager("postgresql://...")`` raises ``BackendError``).

The ``file_*`` rows are skipped ("not available") where the build has no file scope
(``LockManager("file:///...")`` raises ``BackendError``).

In quick mode every row runs with tiny counts: the numbers mean nothing, but every code path
runs and every workload checks its own invariants (counts, mutual exclusion).

A row whose peer library is not installed is skipped with a note; any other exception makes
the row an error with its traceback, and the run goes on.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence

from ctxlock._bench.churn import churn_row
from ctxlock._bench.config import Config
from ctxlock._bench.file import contended_row, crash_row, handoff_row
from ctxlock._bench.memory import memory_row
from ctxlock._bench.named import named_memory_row, named_row
from ctxlock._bench.pairs import pair
from ctxlock._bench.peers import PeerMissing
from ctxlock._bench.pg import acquire_unlock_row as pg_acquire_unlock_row
from ctxlock._bench.pg import cancel_row as pg_cancel_row
from ctxlock._bench.pg import contended_row as pg_contended_row
from ctxlock._bench.result import RowResult
from ctxlock._bench.row import Row
from ctxlock._bench.scaling import scaling_row

__all__ = ["INTERPRETER_ROWS", "ROWS", "ROW_KEYS", "run_row"]


def _micro(cfg: Config) -> int | None:
    return cfg.micro_ops


def _contended(cfg: Config) -> int:
    return cfg.contended_ops


ROWS: Sequence[Row] = (
    Row(
        "acquire_unlock",
        "u = acq(); u() vs threading.Lock acquire()/release(), all pre-bound",
        "threading.Lock",
        1.0,
        pair("acquire_unlock", "threading", _micro, elsewhere="acquire_unlock_elsewhere"),
    ),
    Row(
        "with",
        "with lock: vs with threading.Lock() (one lock reused)",
        "threading.Lock",
        0.7,
        pair("with", "threading", _micro),
    ),
    Row(
        "acquire_deadline",
        "lock.acquire(deadline=30)() vs tl.acquire(timeout=30); tl.release()",
        "threading.Lock",
        0.5,
        pair("acquire_deadline", "threading", _micro),
    ),
    Row(
        "shared_with",
        "with rw.shared: vs with threading.Lock()",
        "threading.Lock",
        1.5,
        pair("shared_with", "threading", _micro),
    ),
    Row(
        "shared_vs_rwlock",
        "with rw.shared: vs with RWLockFair().gen_rlock() (readerwriterlock)",
        "RWLockFair reader",
        0.15,
        pair("shared_with", "readerwriterlock", _micro),
    ),
    Row(
        "contended_2",
        "2 threads increment a counter under with lock:; ns per increment, longest wait",
        "threading.Lock",
        1.0,
        pair("contended_2", "threading", _contended, compare_wait=True, alone="contended_1"),
    ),
    Row(
        "contended_4",
        "4 threads increment a counter under with lock:; ns per increment, longest wait",
        "threading.Lock",
        1.0,
        pair("contended_4", "threading", _contended, compare_wait=True, alone="contended_1"),
    ),
    Row(
        "contended_2_acquire",
        "2 threads: u = acq(); counter += 1; u() vs acquire()/release(); longest wait",
        "threading.Lock",
        1.0,
        pair(
            "contended_2_acquire",
            "threading",
            _contended,
            compare_wait=True,
            alone="contended_1_acquire",
        ),
    ),
    Row(
        "contended_4_acquire",
        "4 threads: u = acq(); counter += 1; u() vs acquire()/release(); longest wait",
        "threading.Lock",
        1.0,
        pair(
            "contended_4_acquire",
            "threading",
            _contended,
            compare_wait=True,
            alone="contended_1_acquire",
        ),
    ),
    Row(
        "drain_100",
        "100 threads blocked on a held lock: release until all have passed once; p90",
        "threading.Lock",
        1.0,
        pair("drain_100", "threading", lambda c: c.drain_threads, compare_waiters=True),
        unit="ns/thread",
    ),
    Row(
        "async_with",
        "async with lock: uncontended in one task vs asyncio.Lock",
        "asyncio.Lock",
        0.6,
        pair("async_with", "asyncio", _micro),
    ),
    Row(
        "tasks_100",
        "100 tasks: async with lock: await asyncio.sleep(0), rounds; ns per hold",
        "asyncio.Lock",
        1.0,
        pair("tasks_100", "asyncio", lambda c: c.tasks_rounds),
    ),
    Row(
        "mixed_2t2t",
        "2 threads (with) + 2 tasks (async with) on one lock; cost per op vs aiologic",
        "aiologic.Lock",
        0.2,
        pair("mixed_2t2t", "aiologic", lambda c: c.mixed_ops),
    ),
    Row(
        "memory_100k",
        "RSS growth of 100,000 Locks vs 100,000 threading.Locks (fresh interpreters)",
        "threading.Lock",
        2.0,
        memory_row,
        unit="B/lock",
    ),
    Row(
        "tasks_scaling",
        "100,000 tasks queued on a held lock pass through, vs 10,000 (linear is 10)",
        "10x fewer tasks",
        12.0,
        scaling_row,
        unit="ns",
    ),
    Row(
        "churn_rss",
        "RSS growth over acquire/timeout/cancel cycles (ratio column: MB)",
        "budget",
        2.0,
        churn_row,
        unit="B",
        ratio_unit=" MB",
    ),
    Row(
        "named_acquire_unlock",
        "mgr.lock(name).acquire()() over 1,000 names vs a dict of 1,000 threading.Locks",
        "threading.Lock",
        1.5,
        named_row,
    ),
    Row(
        "named_vs_weakdict",
        "mgr.lock(name).acquire()() vs get-or-create in a guarded WeakValueDictionary",
        "WeakValueDictionary",
        0.5,
        pair("named_acquire_unlock", "weakdict", _micro),
    ),
    Row(
        "named_1m",
        "RSS growth over 1,000,000 distinct names taken once (ratio column: MB)",
        "budget",
        10.0,
        named_memory_row,
        unit="B",
        ratio_unit=" MB",
    ),
    Row(
        "file_acquire_unlock",
        "file:/// scope: u = acq(); u() on one name vs filelock.FileLock acquire()/release()",
        "filelock.FileLock",
        0.1,
        pair("file_acquire_unlock", "filelock", _micro),
    ),
    Row(
        "file_vs_flock",
        "file:/// scope: u = acq(); u() on one name vs fcntl.flock LOCK_EX/LOCK_UN, fd open",
        "fcntl.flock",
        1.0,
        pair("file_acquire_unlock", "flock", _micro),
    ),
    Row(
        "file_vs_ofd",
        "file:/// scope: u = acq(); u() on one name vs fcntl F_OFD_SETLK lock/unlock, fd open",
        "fcntl F_OFD_SETLK",
        1.0,
        pair("file_acquire_unlock", "ofd", _micro),
    ),
    Row(
        "file_contended_4p",
        "4 processes x 2 threads on one name, tiny critical section; ns per hold vs filelock",
        "filelock.FileLock",
        0.1,
        contended_row("filelock"),
        unit="ns/hold",
    ),
    Row(
        "file_contended_vs_fasteners",
        "4 processes x 2 threads on one name; ns per hold vs fasteners InterProcessLock",
        "fasteners",
        0.1,
        contended_row("fasteners"),
        unit="ns/hold",
    ),
    Row(
        "file_handoff",
        "unlock() in one process to acquire returning in another (ratio column: p50 us)",
        "budget",
        50.0,
        handoff_row,
        unit="ns",
        ratio_unit=" us",
    ),
    Row(
        "file_crash",
        "SIGKILL of a holder process to the next grant elsewhere (ratio column: median ms)",
        "budget",
        100.0,
        crash_row,
        unit="ns",
        ratio_unit=" ms",
    ),
    Row(
        "pg_acquire_unlock",
        "postgresql:// scope: u = acq(); u() on one name vs pg_advisory_lock/unlock (psycopg)",
        "psycopg",
        1.0,
        pg_acquire_unlock_row,
    ),
    Row(
        "pg_contended",
        "4 processes x 8 threads on one name, tiny critical section; ns per hold vs psycopg",
        "psycopg",
        0.2,
        pg_contended_row("contend", "psycopg"),
        unit="ns/hold",
    ),
    Row(
        "pg_async",
        "4 processes x 8 asyncio tasks on one name; ns per hold vs asyncpg",
        "asyncpg",
        0.2,
        pg_contended_row("async", "asyncpg"),
        unit="ns/hold",
    ),
    Row(
        "pg_cancel",
        "token.cancel() of a waiter to Cancelled raised (ratio column: median ms)",
        "budget",
        100.0,
        pg_cancel_row,
        unit="ns",
        ratio_unit=" ms",
    ),
)

ROW_KEYS: Sequence[str] = tuple(row.key for row in ROWS)

#: The rows that ``--pythons`` also runs in each other interpreter (see the module's
#: docstring): those that measure the interpreter's own threads and locks.
INTERPRETER_ROWS: Sequence[str] = (
    "acquire_unlock",
    "with",
    "contended_2",
    "contended_4",
    "contended_2_acquire",
    "contended_4_acquire",
    "drain_100",
    "named_acquire_unlock",
)
_ROWS_BY_KEY: Mapping[str, Row] = {row.key: row for row in ROWS}


def run_row(key: str, cfg: Config) -> RowResult:
    """Measure one row; never raises for a missing peer or a failed workload.

    A missing peer (``PeerMissing``) skips the row; any other exception makes it an error
    row carrying the exception's traceback.
    """
    row = _ROWS_BY_KEY[key]
    try:
        return row.measure(row, cfg)
    except PeerMissing as exc:
        return row.skipped(str(exc))
    except Exception as exc:
        return row.failed(f"error: {type(exc).__name__}: {exc}", traceback.format_exc())
