"""What a workload is: ``run(n)`` performs ``n`` operations and returns a ``Sample``."""

from __future__ import annotations

import abc
import asyncio
import threading
from dataclasses import dataclass
from types import TracebackType

__all__ = [
    "RUN_TIMEOUT_S",
    "AsyncWorkload",
    "BenchError",
    "InAnotherThread",
    "Sample",
    "Workload",
    "expect",
]

#: Longest a single workload run may take before it counts as hung, in seconds.
RUN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Sample:
    """What one workload run measured."""

    ops: int
    elapsed_ns: int
    #: Longest single acquire, for the workloads that time each one (else 0).
    max_wait_ns: int = 0
    #: Thread switches (voluntary and forced) in the process during the run, for the
    #: workloads that count them (else 0; 0 also where ``resource`` is missing).
    switches: int = 0
    #: Per-thread figures of the contended workloads (else empty): each thread's share of
    #: the operations completed before the first thread finished (``Progress``).
    shares: tuple[float, ...] = ()
    #: Threads that completed no operation before every other thread had finished.
    starved: int = 0
    #: One figure per waiter, for the workloads that time each one (``drain_100``: the
    #: time from the release to that waiter's own acquire), in ns.
    waits: tuple[int, ...] = ()

    @property
    def per_op_ns(self) -> float:
        return self.elapsed_ns / self.ops


class BenchError(RuntimeError):
    """A workload saw a broken invariant (a lost count, two holders) or hung."""


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise BenchError(what)


class Workload(abc.ABC):
    """One scenario with one lock implementation; ``run(n)`` does ``n`` operations.

    What an "operation" is depends on the scenario (see each class). A workload is a
    context manager: ``close()`` releases what it owns (an event loop).
    """

    @abc.abstractmethod
    def run(self, n: int) -> Sample:
        """Perform ``n`` operations and return how long they took."""

    def close(self) -> None:
        """Release owned resources; the default owns none."""
        return None

    def __enter__(self) -> Workload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncWorkload(Workload):
    """A workload timed inside a coroutine on an event loop it owns."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, n: int) -> Sample:
        return self._loop.run_until_complete(asyncio.wait_for(self._main(n), RUN_TIMEOUT_S))

    @abc.abstractmethod
    async def _main(self, n: int) -> Sample:
        """The timed part, on this workload's loop."""

    def close(self) -> None:
        self._loop.close()


class InAnotherThread(Workload):
    """``inner`` (made by the caller, with its lock, in the thread that makes this workload)
    run by a new thread on each ``run``: the lock is used by a thread that did not make it,
    as a lock made at import is by a server's worker threads. On the free-threaded build
    that is another path for reference counts (an object's count is split between the
    thread that made it and every other thread). The thread is a daemon: a run that hangs
    is an error after ``RUN_TIMEOUT_S``, and does not keep the process from exiting."""

    def __init__(self, inner: Workload) -> None:
        self._inner = inner

    def run(self, n: int) -> Sample:
        out: list[Sample | BaseException] = []

        def go() -> None:
            try:
                out.append(self._inner.run(n))
            except BaseException as e:  # handed to the caller's thread
                out.append(e)

        worker = threading.Thread(target=go, name="ctxlock-bench-elsewhere", daemon=True)
        worker.start()
        worker.join(RUN_TIMEOUT_S)
        expect(not worker.is_alive(), f"a run in another thread took over {RUN_TIMEOUT_S:.0f} s")
        (got,) = out
        if isinstance(got, BaseException):
            raise got
        return got

    def close(self) -> None:
        self._inner.close()
