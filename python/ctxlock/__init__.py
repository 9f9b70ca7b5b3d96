"""Locks with deadlines and cancellation tokens, for threads and asyncio alike."""

from ctxlock._ctxlock import (
    CancelToken,
    Lock,
    LockStatistics,
    LockView,
    SharableLock,
    Unlock,
    __version__,
)
from ctxlock._errors import Cancelled, LockError, LockTimeout, WouldBlock

__all__ = [
    "CancelToken",
    "Cancelled",
    "Lock",
    "LockError",
    "LockStatistics",
    "LockTimeout",
    "LockView",
    "SharableLock",
    "Unlock",
    "WouldBlock",
    "__version__",
]
