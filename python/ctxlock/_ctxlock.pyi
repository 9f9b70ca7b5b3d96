"""Type stubs and documentation of the Rust extension ``ctxlock._ctxlock``.

Every class here is re-exported by ``ctxlock``; import it from there.
"""

from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, final

__version__: str
#: The hand-written entry points in use (CPython); empty where PyO3's own serve.
_fast_calls: list[str]

@final
class CancelToken:
    """A cancellation signal with an optional deadline, shared by any number of acquires.

    A token is cancelled once: by ``cancel(reason)``, by its deadline passing (the reason
    is then a ``LockTimeout`` instance), or with its parent (with the parent's reason).
    Cancelling wakes at once every thread and task waiting with this token or one of its
    descendants. Tokens are safe to use from any thread and any event loop.

    Raises:
        ValueError: ``deadline`` is negative or NaN.
        TypeError: ``deadline`` is not a number.
    """

    def __new__(cls, *, deadline: float | None = None) -> CancelToken: ...
    def child(self, *, deadline: float | None = None) -> CancelToken:
        """A token cancelled with this one (and its reason) or by its own deadline.

        Cancelling the child never cancels the parent. The child's effective deadline is
        the earlier of its own and its parent's.
        """
    def cancel(self, reason: object = None) -> None:
        """Cancel the token and its descendants. Idempotent: the first reason wins.

        The ``on_cancel`` functions this runs run before it returns. An exception one of
        them raises goes to ``sys.unraisablehook``, except a ``KeyboardInterrupt`` (a
        Ctrl-C while it ran), ``SystemExit`` or other ``BaseException`` that is not an
        ``Exception``: the first such comes out of ``cancel()``, once all have run.
        """
    @property
    def cancelled(self) -> bool:
        """True once the token has been cancelled."""
    @property
    def reason(self) -> object:
        """The reason given to the first ``cancel()``; ``None`` until then.

        Go's ``context.Cause``.
        """
    @property
    def deadline(self) -> float | None:
        """The effective deadline on the ``time.monotonic()`` clock, or ``None``."""
    def wait(self, timeout: float | None = None) -> bool:
        """Block (with the GIL released) until cancelled or ``timeout`` seconds pass.

        Returns True if the token is cancelled. Signal handlers run while waiting in the
        main thread (Ctrl-C raises ``KeyboardInterrupt``).
        """
    def wait_async(self) -> Coroutine[Any, Any, None]:
        """Wait in an asyncio task until the token is cancelled (from any thread or loop)."""
    def on_cancel(self, fn: Callable[[], object]) -> Callable[[], bool]:
        """Run ``fn()`` once when the token is cancelled; at once if it already is.

        Where ``fn`` runs: for ``cancel()`` (of this token or an ancestor), in the
        caller's thread before ``cancel()`` returns; for a deadline, in a callback
        thread of ctxlock's own, one per callback running at the same time, so a ``fn``
        that blocks delays neither the token (``cancelled``, waiters, releases by
        ``unlock_on_cancel``) nor other callbacks. ``fn`` must not assume the thread it
        runs in, and a ``fn`` that blocks keeps its thread (and delays a ``cancel()``
        caller). An exception it raises goes to ``sys.unraisablehook``, except that a
        ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``) comes out
        of the ``cancel()`` or ``LockManager.close()`` that ran ``fn``.

        ``fn`` runs even if nothing else references the token: a registration keeps
        the token until ``fn`` has run or been unregistered. Returns a function that
        unregisters ``fn`` and returns True if that stopped ``fn`` from running (Go's
        ``context.AfterFunc``).

        At interpreter exit, ctxlock's ``atexit`` hook waits up to 2 s for ``fn`` calls
        under way; once finalization has begun, a ``fn`` due in any thread but the
        exiting one is skipped (see the README's "Interpreter exit").
        """

@final
class Unlock:
    """The once-only release of one acquire (Go's ``UnlockFunc``).

    The first call releases the lock; later calls do nothing. It may be called from any
    thread or event loop. As a context manager it releases on exit. Only its own
    ``Unlock`` releases a hold: the lock's ``__exit__``/``__aexit__`` release only holds
    taken by ``with``/``async with``.

    An ``Unlock`` that is garbage-collected while still holding its lock releases it and
    emits a ``ResourceWarning``: a lock is never left held by an object nobody can reach.
    """

    def __call__(self) -> None:
        """Release the lock if this ``Unlock`` still holds it; otherwise do nothing."""
    @property
    def released(self) -> bool:
        """True once this ``Unlock`` has released its lock."""
    @property
    def fence(self) -> int | None:
        """The fence number of this hold (named locks), or ``None`` (``Lock``, ``SharableLock``).

        Per name, fences never decrease in grant order, and every exclusive hold's fence is
        greater than that of every earlier hold of that name, whichever client took it: give
        it to the storage the lock protects and let the storage refuse older fences.
        """
    @property
    def lost(self) -> CancelToken | None:
        """A ``CancelToken`` cancelled if this hold ends without this ``Unlock`` (named locks;
        ``None`` for ``Lock`` and ``SharableLock``, which never lose a hold).

        Its reason is a ``BackendError`` saying why (the manager was closed). Releasing by
        this ``Unlock`` never cancels it. Pass it as ``cancel=`` to work that must not
        outlive the hold. Every look returns the same token.
        """
    def unlock_on_cancel(self, token: CancelToken) -> None:
        """Release when ``token`` is cancelled (at once if it already is)."""
    def __enter__(self) -> Unlock: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

@final
class LockStatistics:
    """A snapshot of one lock or view, returned by ``statistics()``.

    ``locked`` and ``holders`` are in the view's own mode: for ``rw.shared``, ``holders``
    is the number of readers; for ``Lock`` and ``rw.exclusive`` it is 0 or 1. ``waiting``
    counts the threads and tasks queued on the whole lock, in either mode (the two views
    of a ``SharableLock`` share one queue, so both report the same number). The lock may
    change hands as soon as the snapshot is taken.
    """

    @property
    def locked(self) -> bool:
        """True while the lock is held in the view's mode (``holders > 0``)."""
    @property
    def holders(self) -> int:
        """Holds in the view's mode: 0 or 1 when exclusive, the reader count for ``rw.shared``."""
    @property
    def waiting(self) -> int:
        """Threads and tasks queued on the lock, in either mode."""
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Lock:
    """An exclusive lock with deadlines and cancellation: Go's channel of capacity one.

    Fairness: by default a lock just released may be re-taken by a running thread
    (barging, which keeps throughput high under the GIL), but a thread that has waited
    about 1 ms is handed the lock directly by the next unlock, so no waiter waits without
    bound. ``fair=True`` hands the lock over in strict FIFO order every time. Asyncio
    waiters are always served in FIFO order by hand-off.
    """

    def __new__(cls, *, fair: bool = False) -> Lock: ...
    @property
    def fair(self) -> bool:
        """Whether the lock hands over in strict FIFO order."""

    def acquire(
        self,
        cancel: CancelToken | None = None,
        *,
        deadline: float | None = None,
        blocking: bool = True,
    ) -> Unlock:
        """Acquire, waiting with the GIL released, and return the ``Unlock`` that releases.

        ``deadline`` is in seconds from now: ``None`` waits without limit, ``0`` tries
        once. ``blocking=False`` tries once and raises ``WouldBlock``. A ``cancel`` token
        that is already cancelled raises at once, even if the lock is free.

        Cancellation: a waiter that times out, is cancelled or is interrupted by a signal
        leaves the queue and does not hold the lock. If the lock was handed to it at that
        very moment, a timeout keeps it (the acquire succeeds) and a cancellation or
        signal passes it to the next waiter. Either way the lock is never leaked.

        Raises:
            LockTimeout: the deadline (``deadline=`` or the token's) passed.
            Cancelled: the token was cancelled; ``.reason`` is its reason.
            WouldBlock: ``blocking=False`` and the lock is taken.
            KeyboardInterrupt: (or whatever a signal handler raises) while waiting.
            BackendError: a named lock's manager is closed (or its scope failed).
            ValueError: ``deadline`` is negative or NaN, or given with ``blocking=False``.
            TypeError: ``deadline`` is not a number or ``cancel`` is not a ``CancelToken``.
            RuntimeError: the wait could never end: no deadline and no token, on an event
                loop's thread while a task of that loop holds the lock by ``async with``
                (only its ``__aexit__``, on this blocked loop, could release it), and the
                acquire would have to wait. A hold owned by an ``Unlock`` never raises
                this (the ``Unlock`` may be called from another thread); nor does a wait
                with a deadline or a token (it ends with ``LockTimeout``/``Cancelled``).
        """
    def try_acquire(self) -> Unlock | None:
        """Acquire without waiting; ``None`` if the lock is taken."""
    def locked(self) -> bool:
        """True while the lock is held (in this view's mode, for a ``SharableLock`` view).

        A named lock of a closed manager, or of a manager made before ``fork()`` (in the
        child), raises ``BackendError``.
        """
    def statistics(self) -> LockStatistics:
        """A snapshot: ``locked``, ``holders`` (in this view's mode) and ``waiting`` (on the lock).

        See ``LockStatistics``. Both views of a ``SharableLock`` report the same
        ``waiting``: the lock has one queue. Nothing is waited for or changed. A named lock
        of a closed manager, or of a manager made before ``fork()`` (in the child), raises
        ``BackendError``.
        """
    def acquire_async(
        self, cancel: CancelToken | None = None, *, deadline: float | None = None
    ) -> Coroutine[Any, Any, Unlock]:
        """``await`` to acquire from an asyncio task; the same queue as threads use.

        Returns a coroutine (``asyncio.create_task``, ``TaskGroup.create_task`` and anyio
        accept it) that acquires only when awaited; closing it unawaited is harmless.
        Raises ``RuntimeError`` when awaited with no running asyncio event loop (trio).

        Completes without touching the event loop when the lock is free. Waiting tasks are
        served in FIFO order. ``task.cancel()``, ``asyncio.timeout()``, the token and the
        deadline each end the wait (CancelledError, TimeoutError, ``Cancelled``,
        ``LockTimeout``), and in every race the lock is never leaked or held twice.
        """
    def __enter__(self) -> None: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def __aenter__(self) -> Awaitable[None]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Awaitable[None]: ...

@final
class LockView:
    """One mode of a ``SharableLock``: ``rw.shared`` or ``rw.exclusive``.

    It has the members of ``Lock`` with the same guarantees and errors, in its own mode.
    """

    def acquire(
        self,
        cancel: CancelToken | None = None,
        *,
        deadline: float | None = None,
        blocking: bool = True,
    ) -> Unlock:
        """Acquire, waiting with the GIL released, and return the ``Unlock`` that releases.

        ``deadline`` is in seconds from now: ``None`` waits without limit, ``0`` tries
        once. ``blocking=False`` tries once and raises ``WouldBlock``. A ``cancel`` token
        that is already cancelled raises at once, even if the lock is free.

        Cancellation: a waiter that times out, is cancelled or is interrupted by a signal
        leaves the queue and does not hold the lock. If the lock was handed to it at that
        very moment, a timeout keeps it (the acquire succeeds) and a cancellation or
        signal passes it to the next waiter. Either way the lock is never leaked.

        Raises:
            LockTimeout: the deadline (``deadline=`` or the token's) passed.
            Cancelled: the token was cancelled; ``.reason`` is its reason.
            WouldBlock: ``blocking=False`` and the lock is taken.
            KeyboardInterrupt: (or whatever a signal handler raises) while waiting.
            BackendError: a named lock's manager is closed (or its scope failed).
            ValueError: ``deadline`` is negative or NaN, or given with ``blocking=False``.
            TypeError: ``deadline`` is not a number or ``cancel`` is not a ``CancelToken``.
            RuntimeError: the wait could never end: no deadline and no token, on an event
                loop's thread while a task of that loop holds the lock by ``async with``
                (only its ``__aexit__``, on this blocked loop, could release it), and the
                acquire would have to wait. A hold owned by an ``Unlock`` never raises
                this (the ``Unlock`` may be called from another thread); nor does a wait
                with a deadline or a token (it ends with ``LockTimeout``/``Cancelled``).
        """
    def try_acquire(self) -> Unlock | None:
        """Acquire without waiting; ``None`` if the lock is taken."""
    def locked(self) -> bool:
        """True while the lock is held (in this view's mode, for a ``SharableLock`` view).

        A named lock of a closed manager, or of a manager made before ``fork()`` (in the
        child), raises ``BackendError``.
        """
    def statistics(self) -> LockStatistics:
        """A snapshot: ``locked``, ``holders`` (in this view's mode) and ``waiting`` (on the lock).

        See ``LockStatistics``. Both views of a ``SharableLock`` report the same
        ``waiting``: the lock has one queue. Nothing is waited for or changed. A named lock
        of a closed manager, or of a manager made before ``fork()`` (in the child), raises
        ``BackendError``.
        """
    def acquire_async(
        self, cancel: CancelToken | None = None, *, deadline: float | None = None
    ) -> Coroutine[Any, Any, Unlock]:
        """``await`` to acquire from an asyncio task; the same queue as threads use.

        Returns a coroutine (``asyncio.create_task``, ``TaskGroup.create_task`` and anyio
        accept it) that acquires only when awaited; closing it unawaited is harmless.
        Raises ``RuntimeError`` when awaited with no running asyncio event loop (trio).

        Completes without touching the event loop when the lock is free. Waiting tasks are
        served in FIFO order. ``task.cancel()``, ``asyncio.timeout()``, the token and the
        deadline each end the wait (CancelledError, TimeoutError, ``Cancelled``,
        ``LockTimeout``), and in every race the lock is never leaked or held twice.
        """
    def __enter__(self) -> None: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def __aenter__(self) -> Awaitable[None]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Awaitable[None]: ...
    @property
    def shared(self) -> bool:
        """True for ``rw.shared``, False for ``rw.exclusive``."""

@final
class SharableLock:
    """A phase-fair readers-writer lock: Go's ``SharableLock`` on one slot.

    Shared holders form a reader group that holds the exclusive slot together; the last
    one out gives it back. While an exclusive acquirer waits, new shared acquirers queue
    (writers are not starved). When an exclusive holder unlocks, every shared acquirer
    that was waiting then gets in before the next exclusive one (readers are not starved).
    An exclusive waiter that gives up lets the readers it held back in at once (if
    another exclusive waiter is still queued, they stay behind it and get in right after).
    """

    def __new__(cls) -> SharableLock: ...
    @property
    def shared(self) -> LockView:
        """The shared view: its holders form the reader group (Go's ``SharedLock``)."""
    @property
    def exclusive(self) -> LockView:
        """The exclusive view: one holder, nobody else (Go's ``ExclusiveLock``)."""
    def statistics(self) -> LockStatistics:
        """A snapshot of the whole lock: ``locked`` in either mode, ``holders`` (one writer or
        the readers) and ``waiting`` (both modes share one queue).
        """

@final
class LockManager:
    """Named locks shared by every client of one scope: this process (``"memory:"``, the
    default), the processes of this machine (``"file:///dir"``) or many machines
    (``"postgresql://…"``).

    ``lock(name)`` and ``sharable_lock(name)`` return named locks with the members, rules
    and errors of ``Lock`` and ``SharableLock``; a name is held in one namespace per scope,
    so ``lock(n)`` excludes both modes of ``sharable_lock(n)``. Two managers of the same
    url are two clients of the same locks. A named lock costs no memory while nobody holds
    or waits for it. ``close()`` (or leaving ``with LockManager(...)``) ends this manager's
    holds, cancelling their ``Unlock.lost`` tokens, and fails its waiters, later acquires and
    ``query()``, ``locked()`` and ``statistics()`` with ``BackendError``.
    At ``"file:///dir"`` (Linux) the directory is made if missing and holds one
    file, ``ctxlock.table``; a process's holds there are kernel locks, freed when it dies.
    A manager made before ``fork()`` raises ``BackendError`` in the child (its acquires,
    and ``query()``, ``statistics()`` and ``locked()`` of it and its locks).

    Raises:
        TypeError: ``url`` is not a str.
        ValueError: ``url`` has another scheme or no UTF-8 (a lone surrogate), or a
            ``file:`` url has no absolute path.
        BackendError: the scope cannot be reached (or is not available in this build): a
            directory that cannot be made or used, a damaged ``ctxlock.table``, ...
    """

    def __new__(cls, url: str | None = None) -> LockManager: ...
    @property
    def url(self) -> str:
        """The scope's url, without any password."""
    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
    def lock(self, name: str) -> NamedLock:
        """The exclusive lock of ``name`` (the exclusive mode of ``sharable_lock(name)``).

        Raises:
            TypeError: ``name`` is not a str.
            ValueError: ``name`` is empty, longer than 1024 UTF-8 bytes, or has no UTF-8
                (a lone surrogate).
        """
    def sharable_lock(self, name: str) -> NamedSharableLock:
        """The shared/exclusive lock of ``name``: ``.shared`` and ``.exclusive``, phase-fair.

        Raises:
            TypeError: ``name`` is not a str.
            ValueError: ``name`` is empty, longer than 1024 UTF-8 bytes, or has no UTF-8
                (a lone surrogate).
        """
    def query(self, prefix: str = "") -> list[LockInfo]:
        """Every hold and every waiter whose name starts with ``prefix``, of every client of
        the scope, as ``LockInfo`` objects (ordered by name, then by ``since``).

        Raises:
            BackendError: the manager is closed, or (in a child process) was made before
                ``fork()``.
        """
    def close(self) -> None:
        """End this manager: its holds end (each ``Unlock.lost`` is cancelled with a
        ``BackendError``), its waiters, later acquires, ``query()``, ``locked()`` and
        ``statistics()`` raise ``BackendError``. Other
        managers of the scope are not affected. Calling it again does nothing. A manager
        garbage-collected without ``close()`` ends its holds the same way (only a ``with``
        entered and never exited can have left one: the rest keep their manager alive).
        """
    def __enter__(self) -> LockManager: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

@final
class LockInfo:
    """One hold or waiter of a named lock, as ``LockManager.query()`` reports it."""

    @property
    def name(self) -> str:
        """The lock's name."""
    @property
    def mode(self) -> str:
        """``"exclusive"`` or ``"shared"``."""
    @property
    def state(self) -> str:
        """``"held"`` or ``"waiting"``. A hold handed to a waiter that has not taken it up
        yet (a task its event loop has not run since) is ``"held"``."""
    @property
    def owner(self) -> str:
        """Who: ``"host:pid"``, then the thread's name (and the task's, where known)."""
    @property
    def since(self) -> float:
        """When the hold was granted or the wait began (a ``time.time()`` timestamp; a grant's
        is read from the coarse clock, up to one clock tick, a few ms, early). For a hold
        not yet taken up, when its wait began.
        """

@final
class NamedLock:
    """A named lock in one mode, from ``LockManager.lock(name)`` or a mode of
    ``LockManager.sharable_lock(name)``.

    It has the members of ``Lock``, with the same rules and errors, plus ``BackendError``
    once its manager is closed (or, at the other scopes, when the scope fails). Its
    ``Unlock`` has a ``fence`` and a ``lost`` token. ``locked()`` and ``statistics()``
    count the holds and waiters of every client of the scope.

    Pickling (for ``multiprocessing`` children) gives the same lock at a scope other
    processes share: it pickles as its manager's url, its name and its mode, and is restored
    from this process's one ``LockManager`` of that url, another client than the pickled
    lock's manager. A ``"memory:"`` lock is a lock of this process only: pickling it raises
    ``TypeError``.
    """

    def acquire(
        self,
        cancel: CancelToken | None = None,
        *,
        deadline: float | None = None,
        blocking: bool = True,
    ) -> Unlock:
        """Acquire, waiting with the GIL released, and return the ``Unlock`` that releases.

        ``deadline`` is in seconds from now: ``None`` waits without limit, ``0`` tries
        once. ``blocking=False`` tries once and raises ``WouldBlock``. A ``cancel`` token
        that is already cancelled raises at once, even if the lock is free.

        Cancellation: a waiter that times out, is cancelled or is interrupted by a signal
        leaves the queue and does not hold the lock. If the lock was handed to it at that
        very moment, a timeout keeps it (the acquire succeeds) and a cancellation or
        signal passes it to the next waiter. Either way the lock is never leaked.

        Raises:
            LockTimeout: the deadline (``deadline=`` or the token's) passed.
            Cancelled: the token was cancelled; ``.reason`` is its reason.
            WouldBlock: ``blocking=False`` and the lock is taken.
            KeyboardInterrupt: (or whatever a signal handler raises) while waiting.
            BackendError: a named lock's manager is closed (or its scope failed).
            ValueError: ``deadline`` is negative or NaN, or given with ``blocking=False``.
            TypeError: ``deadline`` is not a number or ``cancel`` is not a ``CancelToken``.
            RuntimeError: the wait could never end: no deadline and no token, on an event
                loop's thread while a task of that loop holds the lock by ``async with``
                (only its ``__aexit__``, on this blocked loop, could release it), and the
                acquire would have to wait. A hold owned by an ``Unlock`` never raises
                this (the ``Unlock`` may be called from another thread); nor does a wait
                with a deadline or a token (it ends with ``LockTimeout``/``Cancelled``).
        """
    def try_acquire(self) -> Unlock | None:
        """Acquire without waiting; ``None`` if the lock is taken."""
    def locked(self) -> bool:
        """True while the lock is held (in this view's mode, for a ``SharableLock`` view).

        A named lock of a closed manager, or of a manager made before ``fork()`` (in the
        child), raises ``BackendError``.
        """
    def statistics(self) -> LockStatistics:
        """A snapshot: ``locked``, ``holders`` (in this view's mode) and ``waiting`` (on the lock).

        See ``LockStatistics``. Both views of a ``SharableLock`` report the same
        ``waiting``: the lock has one queue. Nothing is waited for or changed. A named lock
        of a closed manager, or of a manager made before ``fork()`` (in the child), raises
        ``BackendError``.
        """
    def acquire_async(
        self, cancel: CancelToken | None = None, *, deadline: float | None = None
    ) -> Coroutine[Any, Any, Unlock]:
        """``await`` to acquire from an asyncio task; the same queue as threads use.

        Returns a coroutine (``asyncio.create_task``, ``TaskGroup.create_task`` and anyio
        accept it) that acquires only when awaited; closing it unawaited is harmless.
        Raises ``RuntimeError`` when awaited with no running asyncio event loop (trio).

        Completes without touching the event loop when the lock is free. Waiting tasks are
        served in FIFO order. ``task.cancel()``, ``asyncio.timeout()``, the token and the
        deadline each end the wait (CancelledError, TimeoutError, ``Cancelled``,
        ``LockTimeout``), and in every race the lock is never leaked or held twice.
        """
    def __enter__(self) -> None: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release the hold this ``with`` took: the calling thread's (or task's), else,
        for an exit called from a thread with no ``with`` of its own here, one taken
        through this manager (as ``threading.Lock`` lets any thread release). A hold that
        ended first (its manager closed, its connection lost) leaves nothing to release:
        the exit returns quietly, the body's exception comes out, and no other ``with`` of
        the manager loses its hold."""
    def __aenter__(self) -> Awaitable[None]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Awaitable[None]: ...
    @property
    def name(self) -> str:
        """The lock's name."""
    @property
    def mode(self) -> str:
        """``"exclusive"`` or ``"shared"``."""
    @property
    def manager(self) -> LockManager:
        """The ``LockManager`` it came from."""

@final
class NamedSharableLock:
    """The shared/exclusive lock of one name: ``.shared`` and ``.exclusive``, phase-fair as
    ``SharableLock`` across every client of the scope.

    It pickles as ``NamedLock`` does (url and name; ``TypeError`` at the ``"memory:"`` scope).
    """

    @property
    def name(self) -> str:
        """The lock's name."""
    @property
    def manager(self) -> LockManager:
        """The ``LockManager`` it came from."""
    def statistics(self) -> LockStatistics:
        """A snapshot of the whole lock, across every client of the scope: ``locked`` in either
        mode, ``holders`` (one writer or the readers) and ``waiting`` (both modes share one
        queue). ``BackendError`` for a closed manager, or in the child for a manager made
        before ``fork()``.
        """
    @property
    def shared(self) -> NamedLock:
        """The shared mode: its holders share the lock."""
    @property
    def exclusive(self) -> NamedLock:
        """The exclusive mode: one holder, nobody else (the same lock as ``manager.lock(name)``)."""
