"""Shared fixtures for the ctxlock test suite.

Keep this file small: one section per helper, each used by several test files.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

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


def _wait_until(predicate: Callable[[], object], timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= end:
            return bool(predicate())
        time.sleep(0.002)
    return True


@pytest.fixture
def wait_until() -> Callable[..., bool]:
    """``wait_until(predicate, timeout=5.0)``: poll until true; returns the last answer."""
    return _wait_until


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
