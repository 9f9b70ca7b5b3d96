"""Locks with deadlines and cancellation tokens, for threads and asyncio alike."""

from ctxlock._ctxlock import (
    CancelToken,
    Lock,
    LockInfo,
    LockManager,
    LockStatistics,
    LockView,
    NamedLock,
    NamedSharableLock,
    SharableLock,
    Unlock,
    __version__,
)
from ctxlock._errors import BackendError, Cancelled, LockError, LockTimeout, WouldBlock

__all__ = [
    "BackendError",
    "CancelToken",
    "Cancelled",
    "Lock",
    "LockError",
    "LockInfo",
    "LockManager",
    "LockStatistics",
    "LockTimeout",
    "LockView",
    "NamedLock",
    "NamedSharableLock",
    "SharableLock",
    "Unlock",
    "WouldBlock",
    "__version__",
]
