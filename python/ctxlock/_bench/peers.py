"""The locks compared: ctxlock's, the anchors and the optional peer libraries, and their labels.

Each factory makes one new lock. A peer library that is not installed raises ``PeerMissing``
from its factory, which skips its rows and benchmarks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Mapping
from types import TracebackType
from typing import Protocol

import ctxlock

__all__ = [
    "PEER_LABELS",
    "AsyncLock",
    "DualLock",
    "NoLock",
    "PeerMissing",
    "SyncLock",
    "Unavailable",
    "aiologic_lock",
    "asyncio_lock",
    "ctxlock_lock",
    "ctxlock_shared",
    "no_lock",
    "rwlock_reader",
    "threading_lock",
]


class SyncLock(Protocol):
    """Anything usable as ``with lock:``."""

    def __enter__(self) -> object: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> object: ...


class AsyncLock(Protocol):
    """Anything usable as ``async with lock:``."""

    def __aenter__(self) -> Awaitable[object]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Awaitable[object]: ...


class DualLock(SyncLock, AsyncLock, Protocol):
    """Usable both as ``with lock:`` (threads) and ``async with lock:`` (tasks)."""


class PeerMissing(Exception):
    """An optional peer library is not installed; its rows and benchmarks are skipped."""

    def __init__(self, package: str) -> None:
        super().__init__(
            f"skipped: {package} is not installed (pip install 'ctxlock[bench]' adds it)"
        )


class Unavailable(PeerMissing):
    """Something a row needs is not in this build or on this platform (not a package to
    install, unlike ``PeerMissing``): the row is skipped with ``note`` as its reason."""

    def __init__(self, note: str) -> None:
        Exception.__init__(self, note)


PEER_LABELS: Mapping[str, str] = {
    "ctxlock": "ctxlock",
    "threading": "threading.Lock",
    "threading_shaped": "threading.Lock in ctxlock's loop shape",
    "threading_kept": "threading.Lock keeping a reference to its lock per hold",
    "asyncio": "asyncio.Lock",
    "aiologic": "aiologic.Lock",
    "readerwriterlock": "RWLockFair reader",
    "weakdict": "WeakValueDictionary",
    "filelock": "filelock.FileLock",
    "fasteners": "fasteners InterProcessLock",
    "flock": "fcntl.flock",
    "ofd": "fcntl F_OFD_SETLK",
}


def threading_lock() -> SyncLock:
    return threading.Lock()


class NoLock:
    """A context manager that does nothing: the control for the longest-wait comparison.

    Four threads running the ``contended_4`` loop with it still see single "waits" of
    several milliseconds: a thread that the interpreter switches away from inside the timed
    window waits for the GIL, not for any lock. That is the floor a lock can reach without
    forcing thread switches of its own.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def no_lock() -> SyncLock:
    return NoLock()


def asyncio_lock() -> AsyncLock:
    return asyncio.Lock()


def ctxlock_lock() -> DualLock:
    return ctxlock.Lock()


def ctxlock_shared() -> DualLock:
    """The shared view of a new ``SharableLock`` (the view keeps its lock alive)."""
    return ctxlock.SharableLock().shared


def aiologic_lock() -> DualLock:
    try:
        import aiologic
    except ImportError as exc:
        raise PeerMissing("aiologic") from exc
    return aiologic.Lock()


def rwlock_reader() -> SyncLock:
    try:
        from readerwriterlock import rwlock
    except ImportError as exc:
        raise PeerMissing("readerwriterlock") from exc
    return rwlock.RWLockFair().gen_rlock()
