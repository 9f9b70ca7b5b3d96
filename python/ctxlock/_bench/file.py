"""Named locks shared by the processes of one machine: ``LockManager("file:///dir")``.

``file_acquire_unlock`` and ``file_vs_flock`` time ``u = acq(); u()`` on one name of a
file-scope manager (the handle made once, ``acq = lock.acquire`` pre-bound, in a temporary
directory) in this process, against ``filelock.FileLock``'s ``acquire()`` / ``release()``
and against a bare ``fcntl.flock(fd, LOCK_EX)`` / ``fcntl.flock(fd, LOCK_UN)`` on a file
kept open, each in a temporary directory of its own (the workloads below, scenario
``file_acquire_unlock``).

The other rows run child interpreters (``procs.py``; started fresh, never forked):

``file_contended_4p`` / ``file_contended_vs_fasteners``
    ``PROCESSES`` processes of ``THREADS`` threads each take one name over and over for a
    fixed window and do a tiny critical section (a read-modify-write of a counter in a
    shared ``mmap``, which the parent checks against the holds counted: a lock that lets
    two holders in loses increments). Cost per hold is the window over all the holds;
    each process's share of the holds, the share of holds taken over from another
    process (the previous hold was not this process's) and the longest single wait are in
    the note.
``file_handoff``
    Two processes pass the lock back and forth. The waiter announces itself in a shared
    ``mmap`` slot and calls ``acquire``; the holder sees the announcement, sleeps
    ``HANDOFF_PAUSE_S`` (so the waiter is really waiting), reads the clock and calls
    ``unlock()``; the waiter reads the clock as soon as ``acquire`` returns. Both read
    ``time.perf_counter_ns`` (``CLOCK_MONOTONIC`` on Linux: one clock for every process of
    the machine). The same ping-pong with a blocking ``fcntl.flock`` is the control.
``file_crash``
    A holder process is killed (SIGKILL) while another waits; the time from the kill to
    the waiter's ``acquire`` returning. The same with ``fcntl.flock`` is the control.

When this build has no file scope (``LockManager("file:///...")`` raises ``BackendError``)
every row here is skipped as "not available".
"""

from __future__ import annotations

import importlib
import math
import os
import signal
import struct
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import repeat
from mmap import mmap
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from ctxlock._bench.config import Config
from ctxlock._bench.peers import PEER_LABELS, Unavailable
from ctxlock._bench.procs import (
    ACQUIRE_TIMEOUT_S,
    CHILD_ALARM_S,
    LOCK_NAME,
    SETUP_TIMEOUT_S,
    Child,
    bench_dir,
    file_manager,
    need_fcntl,
    need_peer,
    open_lock,
    receive,
    send,
)
from ctxlock._bench.result import RowResult, format_value
from ctxlock._bench.row import Measure, Row
from ctxlock._bench.sampling import median, percentile
from ctxlock._bench.workload import BenchError, Sample, Workload, expect

__all__ = [
    "CRASH_HARD_LIMIT_NS",
    "CRASH_WAIT_S",
    "HANDOFF_PAUSE_S",
    "PROCESSES",
    "THREADS",
    "FileAcquireUnlock",
    "FileLockAcquireRelease",
    "FlockLockUnlock",
    "child_main",
    "contended_row",
    "crash_row",
    "handoff_row",
]

#: Processes and threads per process of the contended rows.
PROCESSES = 4
THREADS = 2
#: How long the holder of ``file_handoff`` lets the announced waiter settle, in seconds.
HANDOFF_PAUSE_S = 0.0005
#: How long the waiter of ``file_crash`` waits for the dead holder's lock, in seconds.
CRASH_WAIT_S = 5.0
#: ``file_crash``'s hard limit: no single round may take this long, in ns.
CRASH_HARD_LIMIT_NS = 1_000_000_000
#: How long the parent lets ``file_crash``'s waiter settle into its wait before the kill.
CRASH_SETTLE_S = 0.05
#: How long ``file_handoff``'s processes sleep between looks at the other's slot.
_POLL_S = 0.00002
#: The contended children start together this long after the parent says go, in ns.
_START_MARGIN_NS = 100_000_000

MS = 1_000_000
US = 1_000


# --- file_acquire_unlock and file_vs_flock: one process, one thread ------------------------


class _InTempDir(Workload):
    """A workload whose lock files live in a temporary directory of its own."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="ctxlock-bench-file-")
        self._dir = Path(self._tmp.name)

    def close(self) -> None:
        self._tmp.cleanup()


class FileAcquireUnlock(_InTempDir):
    """``u = acq(); u()``, ``acq = lock.acquire`` pre-bound, ``lock`` one name of a
    file-scope ``LockManager`` made once."""

    def __init__(self) -> None:
        super().__init__()
        try:
            self._manager = file_manager(self._dir / "ctxlock")
        except BaseException:
            self._tmp.cleanup()
            raise
        self._lock = self._manager.lock(LOCK_NAME)

    def run(self, n: int) -> Sample:
        acq = self._lock.acquire
        start = perf_counter_ns()
        for _ in repeat(None, n):
            u = acq()
            u()
        elapsed = perf_counter_ns() - start
        expect(not self._lock.locked(), "the file-scope lock was left held")
        return Sample(n, elapsed)

    def close(self) -> None:
        self._manager.close()
        super().close()


class FileLockAcquireRelease(_InTempDir):
    """``filelock.FileLock(path)``'s pre-bound ``acquire()`` / ``release()``."""

    def __init__(self) -> None:
        need_peer("filelock")
        super().__init__()
        filelock = importlib.import_module("filelock")
        self._lock = filelock.FileLock(str(self._dir / "filelock.lock"))

    def run(self, n: int) -> Sample:
        acquire, release = self._lock.acquire, self._lock.release
        start = perf_counter_ns()
        for _ in repeat(None, n):
            acquire()
            release()
        elapsed = perf_counter_ns() - start
        expect(not self._lock.is_locked, "the FileLock was left held")
        return Sample(n, elapsed)


class FlockLockUnlock(_InTempDir):
    """``flock(fd, LOCK_EX); flock(fd, LOCK_UN)`` on a file opened once, all pre-bound."""

    def __init__(self) -> None:
        fcntl = need_fcntl()
        super().__init__()
        self._flock, self._ex, self._un = fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN
        self._file = open(self._dir / "flock.lock", "wb")  # closed in close()

    def run(self, n: int) -> Sample:
        flock, fd, ex, un = self._flock, self._file.fileno(), self._ex, self._un
        start = perf_counter_ns()
        for _ in repeat(None, n):
            flock(fd, ex)
            flock(fd, un)
        return Sample(n, perf_counter_ns() - start)

    def close(self) -> None:
        self._file.close()
        super().close()


class OfdLockUnlock(_InTempDir):
    """A write lock on one byte with ``fcntl(fd, F_OFD_SETLK)``, then its unlock, on a file
    opened once, from Python: the kernel primitive the file scope holds names with (an
    open-file-description lock on the name's byte of ``ctxlock.table``), bare."""

    def __init__(self) -> None:
        fcntl = need_fcntl()
        super().__init__()
        setlk = getattr(fcntl, "F_OFD_SETLK", None)
        if setlk is None:
            raise Unavailable("skipped: needs fcntl.F_OFD_SETLK (Linux)")
        # struct flock on 64-bit Linux: l_type, l_whence (short), l_start, l_len (off_t),
        # l_pid (pid_t, 0 for OFD locks), padded to 32 bytes.
        layout = "hh4xqqi4x"
        self._fcntl, self._setlk = fcntl.fcntl, setlk
        self._lock = struct.pack(layout, fcntl.F_WRLCK, os.SEEK_SET, 64, 1, 0)
        self._unlock = struct.pack(layout, fcntl.F_UNLCK, os.SEEK_SET, 64, 1, 0)
        self._file = open(self._dir / "ofd.lock", "wb")  # closed in close()

    def run(self, n: int) -> Sample:
        call, fd, setlk = self._fcntl, self._file.fileno(), self._setlk
        lock, unlock = self._lock, self._unlock
        start = perf_counter_ns()
        for _ in repeat(None, n):
            call(fd, setlk, lock)
            call(fd, setlk, unlock)
        return Sample(n, perf_counter_ns() - start)

    def close(self) -> None:
        self._file.close()
        super().close()


# --- the children (see procs.py for how they are started and talked to) -------------------


@contextmanager
def _shared_ints(path: Path, count: int) -> Iterator[memoryview]:
    """``count`` native 64-bit integers in the file ``path``, mapped shared."""
    with open(path, "r+b") as file, mmap(file.fileno(), 8 * count) as mapped:
        raw = memoryview(mapped)
        ints = raw.cast("q")
        try:
            yield ints
        finally:
            ints.release()
            raw.release()


def _write_ints(path: Path, values: Sequence[int]) -> None:
    path.write_bytes(array("q", values).tobytes())


def _sleep_until(t_ns: int) -> None:
    while (left := t_ns - perf_counter_ns()) > 0:
        time.sleep(min(left / 1e9, 0.01))


def _contend_child(kind: str, directory: Path, index_text: str, threads_text: str) -> None:
    """``file_contended_*``: threads take the lock in a loop over the window the parent
    sends; reports this process's holds, how many of them came from another process, the
    longest wait and the last release.

    The shared ``counter`` is the count of holds and the number (1 up) of the process
    that held last."""
    tag, threads = int(index_text) + 1, int(threads_text)
    acquire, close = open_lock(kind, directory)
    with _shared_ints(directory / "counter", 2) as counter:
        acquire(ACQUIRE_TIMEOUT_S)()  # warm-up: the files opened, a first grant
        go = threading.Event()
        window = [0, 0]
        reports: list[tuple[int, int, int, int]] = []
        errors: list[str] = []

        def worker() -> None:
            try:
                go.wait(SETUP_TIMEOUT_S)
                start, end = window
                _sleep_until(start)
                clock, holds, crossed, longest = perf_counter_ns, 0, 0, 0
                while (before := clock()) < end:
                    release = acquire(ACQUIRE_TIMEOUT_S)
                    after = clock()
                    counter[0] += 1  # not atomic: two holders at once lose increments
                    if counter[1] != tag:
                        counter[1] = tag
                        crossed += 1
                    release()
                    holds += 1
                    longest = max(longest, after - before)
                reports.append((holds, crossed, longest, clock()))
            except BaseException as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

        workers = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
        for thread in workers:
            thread.start()
        send({"ready": True})
        message = receive()
        window[:] = [int(message["start"]), int(message["end"])]
        go.set()
        for thread in workers:
            thread.join(CHILD_ALARM_S)
        if errors or len(reports) != threads:
            raise BenchError(f"{threads - len(reports)} threads failed: {errors}")
        send(
            {
                "holds": sum(r[0] for r in reports),
                "crossed": sum(r[1] for r in reports),
                "longest": max(r[2] for r in reports),
                "last": max(r[3] for r in reports),
            }
        )
    close()


def _await_slot(slots: memoryview, index: int, value: int) -> None:
    """Poll until ``slots[index]`` reaches ``value``, sleeping between looks: a process
    spinning here would take one of the CPUs that the hand-off being timed needs."""
    limit = perf_counter_ns() + int(ACQUIRE_TIMEOUT_S * 1e9)
    while slots[index] < value:
        if perf_counter_ns() > limit:
            raise BenchError(f"the other process never wrote {value} into its slot")
        time.sleep(_POLL_S)


def _handoff_child(
    kind: str, directory: Path, me_text: str, rounds_text: str, pause_text: str
) -> None:
    """``file_handoff``: process ``me`` (0 or 1) releases in its rounds (``r % 2 == me``)
    and acquires in the others; reports its clock reading of each round (the release time
    or the acquire time).

    Each process has a slot in the shared ``slots``: ``2r`` once it is about to wait in
    round ``r``, ``2r + 1`` once it got the lock. The holder releases only after the
    waiter's ``2r`` and a pause; the waiter of round ``r`` (the holder of ``r - 1``) starts
    waiting only after the other got round ``r - 1`` (so that a lock which lets the
    releaser take it straight back cannot run the rounds out of step).
    """
    me, rounds, pause = int(me_text), int(rounds_text), float(pause_text)
    other = 1 - me
    acquire, close = open_lock(kind, directory)
    with _shared_ints(directory / "slots", 2) as slots:
        # Process 0 holds before round 0; the parent says go once both are ready.
        release = acquire(ACQUIRE_TIMEOUT_S) if me == 0 else None
        send({"ready": True})
        receive()
        times = [0] * rounds
        clock = perf_counter_ns
        for r in range(rounds):
            if r % 2 == me:
                _await_slot(slots, other, 2 * r)
                time.sleep(pause)
                assert release is not None
                times[r] = clock()
                release()
                release = None
            else:
                if r > 0:
                    _await_slot(slots, other, 2 * r - 1)
                slots[me] = 2 * r
                release = acquire(ACQUIRE_TIMEOUT_S)
                times[r] = clock()
                slots[me] = 2 * r + 1
        if release is not None:
            release()
    close()
    send({"times": times})


def _hold_child(kind: str, directory: Path) -> None:
    """``file_crash``'s holder: takes the lock and waits to be killed."""
    acquire, close = open_lock(kind, directory)
    release = acquire(ACQUIRE_TIMEOUT_S)  # kept: a dropped ``Unlock`` releases
    send({"held": True})
    receive()  # never comes: the parent kills this process (or closes stdin)
    release()
    close()


def _wait_child(kind: str, directory: Path, wait_text: str) -> None:
    """``file_crash``'s waiter: on go, waits for the lock; reports when it got it."""
    acquire, close = open_lock(kind, directory)
    send({"ready": True})
    receive()
    send({"waiting": True})
    try:
        release = acquire(float(wait_text))
    except TimeoutError:
        send({"timeout": True})
        return
    acquired = perf_counter_ns()
    release()
    close()
    send({"acquired": acquired})


_ROLES: dict[str, Callable[..., None]] = {
    "contend": _contend_child,
    "handoff": _handoff_child,
    "hold": _hold_child,
    "wait": _wait_child,
}


def child_main(argv: Sequence[str]) -> None:
    """A child's entry point: ``ROLE KIND DIRECTORY ARGS...``."""
    if hasattr(signal, "alarm"):
        signal.alarm(CHILD_ALARM_S)
    role, kind, directory, *args = argv
    try:
        _ROLES[role](kind, Path(directory), *args)
    except SystemExit:
        raise
    except BaseException as exc:
        send({"error": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(1) from None


# --- the parent's side ---------------------------------------------------------------------


def _check_file_scope(directory: Path) -> None:
    """``Unavailable`` (the row is skipped) if this build has no file scope."""
    file_manager(directory / "ctxlock").close()


@dataclass(frozen=True)
class _Contended:
    """One window of ``file_contended_*`` with one kind of lock."""

    ns_per_hold: float
    holds: tuple[int, ...]  # per process
    #: Holds whose previous hold was another process's.
    crossed: int
    longest_ns: int


def _contend_run(kind: str, directory: Path, seconds: float) -> _Contended:
    _write_ints(directory / "counter", [0, 0])
    with ExitStack() as stack:
        children = [
            stack.enter_context(Child("contend", kind, str(directory), str(p), str(THREADS)))
            for p in range(PROCESSES)
        ]
        for child in children:
            child.recv(SETUP_TIMEOUT_S)
        start = perf_counter_ns() + _START_MARGIN_NS
        end = start + int(seconds * 1e9)
        for child in children:
            child.send({"start": start, "end": end})
        reports = [child.recv(seconds + ACQUIRE_TIMEOUT_S + 30) for child in children]
    holds = tuple(int(r["holds"]) for r in reports)
    with _shared_ints(directory / "counter", 2) as counter:
        counted = counter[0]
    expect(sum(holds) > 0, f"{kind}: no process got the lock in {seconds:g} s")
    expect(counted == sum(holds), f"{kind}: {sum(holds)} holds but {counted} increments")
    elapsed = max(int(r["last"]) for r in reports) - start
    crossed = sum(int(r["crossed"]) for r in reports)
    longest = max(int(r["longest"]) for r in reports)
    return _Contended(elapsed / sum(holds), holds, crossed, longest)


def _taken_over(runs: Sequence[_Contended]) -> float:
    """The share of the holds whose previous hold was another process's."""
    return sum(run.crossed for run in runs) / sum(sum(run.holds) for run in runs)


def _contended_text(label: str, runs: Sequence[_Contended]) -> str:
    per_process = [sum(run.holds[p] for run in runs) for p in range(PROCESSES)]
    total = sum(per_process)
    shares = "/".join(f"{100 * h / total:.0f}" for h in per_process)
    rate = 1e9 / median([run.ns_per_hold for run in runs])
    longest = max(run.longest_ns for run in runs)
    return (
        f"{label} {rate:,.0f} holds/s, shares of the holds by process {shares} %, "
        f"{100 * _taken_over(runs):.0f} % of holds taken over from another process, "
        f"longest single wait {format_value(longest, 'ns')}"
    )


def contended_row(anchor: str) -> Measure:
    """``file_contended_*``: ctxlock's file scope against ``anchor`` (a kind of
    ``procs.open_lock``), interleaved, ``cfg.file_repeat`` windows each."""

    def measure(row: Row, cfg: Config) -> RowResult:
        need_peer(anchor)
        runs: dict[str, list[_Contended]] = {"ctxlock": [], anchor: []}
        with bench_dir() as directory:
            _check_file_scope(directory)
            for i in range(cfg.file_repeat):
                for kind in ("ctxlock", anchor)[:: 1 if i % 2 == 0 else -1]:
                    runs[kind].append(_contend_run(kind, directory, cfg.file_seconds))
        ours = median([run.ns_per_hold for run in runs["ctxlock"]])
        theirs = median([run.ns_per_hold for run in runs[anchor]])
        note = (
            f"{PROCESSES} processes x {THREADS} threads, {cfg.file_seconds:g} s windows, "
            f"{cfg.file_repeat} each; {_contended_text('ctxlock', runs['ctxlock'])}; "
            f"{_contended_text(PEER_LABELS[anchor], runs[anchor])}"
        )
        extra = {
            "ours_holds_per_s": 1e9 / ours,
            "anchor_holds_per_s": 1e9 / theirs,
            "ours_longest_wait_ns": float(max(r.longest_ns for r in runs["ctxlock"])),
            "anchor_longest_wait_ns": float(max(r.longest_ns for r in runs[anchor])),
            "ours_taken_over_share": _taken_over(runs["ctxlock"]),
            "anchor_taken_over_share": _taken_over(runs[anchor]),
        }
        return row.result(ours, theirs, ours / theirs, note=note, extra=extra)

    return measure


def _handoff_run(kind: str, directory: Path, rounds: int) -> list[int]:
    """Latencies of ``rounds`` hand-offs between two processes, the first few left out."""
    _write_ints(directory / "slots", [-1, -1])
    args = (kind, str(directory))
    with ExitStack() as stack:
        children = [
            stack.enter_context(
                Child("handoff", *args, str(me), str(rounds), repr(HANDOFF_PAUSE_S))
            )
            for me in (0, 1)
        ]
        for child in children:
            child.recv(SETUP_TIMEOUT_S)
        for child in children:
            child.send({"go": True})
        budget = rounds * (HANDOFF_PAUSE_S + 0.01) + ACQUIRE_TIMEOUT_S
        times = [child.recv(budget)["times"] for child in children]
    warm = min(10, rounds // 5)
    # Round r: process r % 2 released, the other acquired.
    return [times[1 - r % 2][r] - times[r % 2][r] for r in range(warm, rounds)]


def handoff_row(row: Row, cfg: Config) -> RowResult:
    """``file_handoff``: p50 of the hand-off latency against a budget, in microseconds."""
    rounds = cfg.handoff_rounds
    with bench_dir() as directory:
        _check_file_scope(directory)
        ours = _handoff_run("ctxlock", directory, rounds)
        try:
            need_fcntl()
        except Unavailable:
            control = None
        else:
            control = _handoff_run("flock", directory, rounds)
    p50, p99 = percentile(ours, 0.5), percentile(ours, 0.99)
    note = (
        f"{len(ours):,} hand-offs between 2 processes (the waiter waiting "
        f"{HANDOFF_PAUSE_S * 1e6:g} us before each release): p50 {format_value(p50, 'ns')}, "
        f"p99 {format_value(p99, 'ns')}, max {format_value(max(ours), 'ns')}"
    )
    extra = {"p50_ns": p50, "p99_ns": p99, "max_ns": float(max(ours))}
    if control is not None:
        c50, c99 = percentile(control, 0.5), percentile(control, 0.99)
        note += (
            f"; control, a blocking fcntl.flock: p50 {format_value(c50, 'ns')}, "
            f"p99 {format_value(c99, 'ns')}"
        )
        extra |= {"flock_p50_ns": c50, "flock_p99_ns": c99}
    return row.result(p50, None, p50 / US, note=note, extra=extra)


def _crash_round(kind: str, directory: Path) -> int | None:
    """ns from the SIGKILL of the holder to the waiter's grant; None: no grant in
    ``CRASH_WAIT_S``."""
    args = (kind, str(directory))
    with Child("hold", *args) as holder, Child("wait", *args, repr(CRASH_WAIT_S)) as waiter:
        holder.recv(SETUP_TIMEOUT_S)
        waiter.recv(SETUP_TIMEOUT_S)
        waiter.send({"go": True})
        waiter.recv(SETUP_TIMEOUT_S)
        time.sleep(CRASH_SETTLE_S)
        killed = perf_counter_ns()
        holder.kill()
        got: dict[str, Any] = waiter.recv(CRASH_WAIT_S + 30)
    if got.get("timeout"):
        return None
    waited = int(got["acquired"]) - killed
    expect(waited > 0, f"{kind}: the waiter got the lock before its holder was killed")
    return waited


def crash_row(row: Row, cfg: Config) -> RowResult:
    """``file_crash``: median ms from a holder's SIGKILL to the next grant, against a
    budget; every round must also stay under ``CRASH_HARD_LIMIT_NS``."""
    with bench_dir() as directory:
        _check_file_scope(directory)
        ours = [_crash_round("ctxlock", directory) for _ in range(cfg.crash_rounds)]
        try:
            need_fcntl()
        except Unavailable:
            control = None
        else:
            control = [_crash_round("flock", directory) for _ in range(cfg.crash_rounds)]
    lost = ours.count(None)
    # A round with no grant counts as the whole wait (at least that long).
    waits = [CRASH_WAIT_S * 1e9 if t is None else float(t) for t in ours]
    mid, worst = median(waits), max(waits)
    note = (
        f"{cfg.crash_rounds} round(s), each a fresh holder killed while a waiter waits: "
        f"median {format_value(mid, 'ns')}, max {format_value(worst, 'ns')} "
        f"(hard limit {format_value(CRASH_HARD_LIMIT_NS, 'ns')})"
    )
    if lost:
        note += f"; {lost} rounds got no grant in {CRASH_WAIT_S:g} s"
    extra = {"median_ns": mid, "max_ns": worst, "no_grant_rounds": float(lost)}
    if control is not None:
        got = [t for t in control if t is not None]
        if got:
            note += (
                f"; control, fcntl.flock: median {format_value(median(got), 'ns')}, "
                f"max {format_value(max(got), 'ns')}"
            )
            extra |= {"flock_median_ns": median(got), "flock_max_ns": float(max(got))}
    ok = worst < CRASH_HARD_LIMIT_NS and not lost and math.isfinite(mid)
    return row.result(mid, None, mid / MS, note=note, extra=extra, also_ok=ok)
