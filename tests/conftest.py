"""Shared fixtures for the ctxlock test suite.

Keep this file small: one section per helper, each used by several test files.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kinds import EXCLUSIVE_KINDS, KINDS, PG_MISSING, Kind, Target

# --- constants ----------------------------------------------------------------------------------

#: How long a test waits for something that should happen at once before it fails.
PATIENCE = 5.0


def _stress_seconds() -> float | None:
    value = os.environ.get("CTXLOCK_STRESS_SECONDS", "").strip()
    return float(value) if value else None


#: ``CTXLOCK_STRESS_SECONDS`` (``make stress``), or None when unset. Each file keeps its own
#: default: the races of the other files run briefly when it is unset (treat it as 0),
#: ``test_stress.py`` splits 6 s among its runs (a family's exclusive lock, its sharable lock).
STRESS_SECONDS: float | None = _stress_seconds()
#: Rounds of each race; a race also stops at RACE_SECONDS so a slow machine stays quick.
#: `make stress` (CTXLOCK_STRESS_SECONDS) runs each race for that long instead.
RACE_ROUNDS = 2000 if not STRESS_SECONDS or STRESS_SECONDS <= 0 else 1 << 62
RACE_SECONDS = 2.0 if not STRESS_SECONDS or STRESS_SECONDS <= 0 else STRESS_SECONDS

# --- PostgreSQL: a server of the tests' own, or a loud failure where one must start ------------
# The postgres scope's tests (tests/test_pg_scope.py, the "pg" family of tests/kinds.py) start
# a server of their own (ctxlock._bench.pg_server). Where none can start they are skipped,
# unless CTXLOCK_REQUIRE_PG=1 (.ci/run sets it) or, unset, on Linux as root: there
# scripts/ensure-postgres.sh (`make test`) installs PostgreSQL, so its absence is a fault of
# the machine, and the session stops at once saying so. CTXLOCK_REQUIRE_PG=0 skips anyway.


def _pg_required() -> bool:
    value = os.environ.get("CTXLOCK_REQUIRE_PG", "").strip()
    if value:
        return value != "0"
    return sys.platform.startswith("linux") and os.geteuid() == 0


def pytest_configure(config: pytest.Config) -> None:
    if PG_MISSING is not None and _pg_required():
        raise pytest.UsageError(
            f"no PostgreSQL server can start here, and the postgres scope's tests must run: "
            f"{PG_MISSING}. Run scripts/ensure-postgres.sh (as root), or set "
            f"CTXLOCK_REQUIRE_PG=0 to skip them."
        )


# --- threads: `spawn` -------------------------------------------------------------------------
# Runs a function in a daemon thread and keeps its result or exception for the test, so a
# failure inside a thread fails the test instead of becoming a stray thread warning.


class Worker:
    """A daemon thread running ``fn(*args, **kwargs)`` once."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn(*self._args, **self._kwargs)
        except BaseException as exc:
            self._error = exc
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float = 10.0) -> None:
        """Wait for the function to return or raise; fail the test after ``timeout``."""
        if not self._done.wait(timeout):
            raise AssertionError(f"thread still running after {timeout} s")

    def result(self, timeout: float = 10.0) -> Any:
        """The function's return value; re-raises what it raised."""
        self.wait(timeout)
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self, timeout: float = 10.0) -> BaseException | None:
        """What the function raised, or None if it returned."""
        self.wait(timeout)
        return self._error


@pytest.fixture
def spawn() -> Iterator[Callable[..., Worker]]:
    """``spawn(fn, *args, **kwargs)`` starts ``fn`` in a thread; all are joined at teardown."""
    workers: list[Worker] = []

    def start(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Worker:
        worker = Worker(fn, *args, **kwargs)
        workers.append(worker)
        return worker

    yield start
    end = time.monotonic() + 15.0
    stuck = 0
    for worker in workers:
        worker.thread.join(max(0.0, end - time.monotonic()))
        stuck += worker.thread.is_alive()
    if stuck:
        pytest.fail(f"{stuck} spawned thread(s) still running at teardown")


# --- polling: `wait_until` --------------------------------------------------------------------


def wait_until(predicate: Callable[[], object], timeout: float = PATIENCE) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes; returns the last answer."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= end:
            return bool(predicate())
        time.sleep(0.002)
    return True


@pytest.fixture(name="wait_until")
def _wait_until_fixture() -> Callable[..., bool]:
    """``wait_until(predicate, timeout=5.0)``: poll until true; returns the last answer."""
    return wait_until


# --- lock kinds: `kind`, `target`, `exclusive_target`, `assert_free` --------------------------
# The registry is tests/kinds.py; these fixtures run a test once per kind, named by the kind.


@pytest.fixture(params=KINDS, ids=[k.name for k in KINDS])
def target(request: pytest.FixtureRequest) -> Target:
    """A fresh lock of each kind in ``KINDS``."""
    kind: Kind = request.param
    return kind.new()


@pytest.fixture(params=EXCLUSIVE_KINDS, ids=[k.name for k in EXCLUSIVE_KINDS])
def exclusive_target(request: pytest.FixtureRequest) -> Target:
    """A fresh lock of each exclusive kind."""
    kind: Kind = request.param
    return kind.new()


def assert_free(target: Target) -> None:
    """Nothing holds the lock in any mode, nothing waits on it, and it can be taken."""
    for view in (target.view, target.blocker):
        stats = view.statistics()
        assert not view.locked(), f"{target.name}: still held: {stats}"
        assert (stats.locked, stats.holders, stats.waiting) == (False, 0, 0), (
            f"{target.name}: not free: {stats}"
        )
    unlock = target.blocker.try_acquire()
    assert unlock is not None, f"{target.name}: the lock leaked"
    unlock()
    if target.view is not target.blocker:
        unlock = target.view.try_acquire()
        assert unlock is not None, f"{target.name}: the lock leaked"
        unlock()


# --- races: `Holders`, `in_thread`, `settle`, `other_thread` --------------------------------


@dataclass
class Holders:
    """Counts the holders of each mode and records any overlap that exclusion forbids."""

    readers: int = 0
    writers: int = 0
    entries: int = 0
    overlaps: list[str] = field(default_factory=list)
    meta: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, exclusive: bool, who: str = "") -> None:
        with self.meta:
            if self.writers or (exclusive and self.readers):
                self.overlaps.append(
                    f"{who} entered {'exclusive' if exclusive else 'shared'} with "
                    f"{self.readers} readers, {self.writers} writers"
                )
            if exclusive:
                self.writers += 1
            else:
                self.readers += 1
            self.entries += 1

    def leave(self, exclusive: bool) -> None:
        with self.meta:
            if exclusive:
                self.writers -= 1
            else:
                self.readers -= 1


def in_thread(fn: Callable[[], object]) -> concurrent.futures.Future[object]:
    """Run ``fn`` in a new thread; the future has its result or exception."""
    future: concurrent.futures.Future[object] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


async def settle(rounds: int = 5) -> None:
    """Let every ready task run until it waits on something."""
    for _ in range(rounds):
        await asyncio.sleep(0)


@pytest.fixture
def other_thread() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        yield pool


# --- processes: `rss`, `default_sigint` ---------------------------------------------------------


def rss() -> int:
    """The resident set size in bytes, after a full collection (Linux: /proc/self/statm)."""
    gc.collect()
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Ctrl-C raises ``KeyboardInterrupt`` during the test, whatever the runner installed."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# --- failed tests: drop what they still hold ---------------------------------------------------
# A test that fails while holding an Unlock keeps it alive through its traceback; when a later
# test's garbage collection frees it, its ResourceWarning (an error here) would fail that
# unrelated test. After a failed test, free such leftovers at once and silence their warning.

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture(autouse=True)
def _free_leftovers_of_failed_test(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if request.node.stash.get(_FAILED, False):
        for name in ("last_exc", "last_type", "last_value", "last_traceback"):
            if hasattr(sys, name):
                setattr(sys, name, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
