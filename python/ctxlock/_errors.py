"""The exceptions ctxlock raises.

They live in Python because ``LockTimeout`` has two bases (``LockError`` and the builtin
``TimeoutError``), which an extension-defined exception type cannot have. The Rust
extension imports these classes once and raises them.
"""

from __future__ import annotations

__all__ = ["BackendError", "Cancelled", "LockError", "LockTimeout", "WouldBlock"]


class LockError(Exception):
    """Base class of every error an acquire can raise."""


class LockTimeout(LockError, TimeoutError):
    """A deadline passed before the lock was acquired.

    The deadline is the acquire's own ``deadline=`` or the deadline of the
    ``CancelToken`` passed as ``cancel`` (or of one of its ancestors). A token whose
    deadline passes cancels itself with a ``LockTimeout`` instance as its reason.
    """


class Cancelled(LockError):
    """The ``CancelToken`` passed to the acquire was cancelled.

    ``reason`` is the value given to ``CancelToken.cancel()`` (``None`` if none was).
    """

    def __init__(self, reason: object = None) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return "cancelled" if self.reason is None else f"cancelled: {self.reason!r}"


class WouldBlock(LockError):
    """``acquire(blocking=False)`` found the lock taken."""


class BackendError(LockError):
    """The scope behind a ``LockManager`` failed, cannot be reached, or was closed.

    ``reason`` says what happened, in words an operator can act on. A hold that ends
    this way cancels its ``Unlock.lost`` token with a ``BackendError`` as the reason.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
