"""Threads for the threaded workloads: start, join with a timeout, count switches."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ctxlock._bench.workload import RUN_TIMEOUT_S, expect

__all__ = ["Workers", "switches", "wait_until"]


def switches() -> int:
    """Context switches of this process so far (0 where the platform does not say)."""
    try:
        import resource
    except ImportError:
        return 0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


class Workers:
    """Daemon threads running one function; ``join`` re-raises the first exception."""

    def __init__(self, target: Callable[[], None], count: int) -> None:
        self._errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._guard, args=(target,), daemon=True) for _ in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _guard(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:
            self._errors.append(exc)

    def join(self, timeout: float = RUN_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._errors:
            raise self._errors[0]
        expect(
            not any(thread.is_alive() for thread in self._threads),
            f"worker threads still running after {timeout:g} s (a hang?)",
        )


def wait_until(predicate: Callable[[], bool], timeout: float = RUN_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        expect(time.monotonic() < deadline, f"gave up waiting after {timeout:g} s")
        time.sleep(0.0005)
