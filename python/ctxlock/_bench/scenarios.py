"""Every scenario and the workload of each peer in it; the rows and the pytest-benchmark
suite both take their workloads from here, so the two cannot measure different things."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from ctxlock._bench.file import (
    FileAcquireUnlock,
    FileLockAcquireRelease,
    FlockLockUnlock,
    OfdLockUnlock,
)
from ctxlock._bench.loops import (
    AsyncWith,
    CtxlockAcquireDeadline,
    CtxlockAcquireUnlock,
    ThreadingAcquireKept,
    ThreadingAcquireRelease,
    ThreadingAcquireTimeout,
    WithLoop,
)
from ctxlock._bench.named import (
    DictAcquireRelease,
    NamedAcquireUnlock,
    WeakDictAcquireRelease,
)
from ctxlock._bench.peers import (
    aiologic_lock,
    asyncio_lock,
    ctxlock_lock,
    ctxlock_shared,
    no_lock,
    rwlock_reader,
    threading_lock,
)
from ctxlock._bench.tasks import Mixed, Tasks, TasksThrough
from ctxlock._bench.threads import (
    Contended,
    CtxlockContendedAcquire,
    Drain,
    NoLockContendedAcquire,
    ThreadingContendedAcquire,
    ThreadingKeptAcquire,
    ThreadingShapedAcquire,
)
from ctxlock._bench.workload import InAnotherThread, Workload

__all__ = ["SCENARIOS", "WorkloadFactory"]

WorkloadFactory = Callable[[], Workload]

#: scenario -> peer -> workload factory. ``ctxlock`` is in every scenario.
SCENARIOS: Mapping[str, Mapping[str, WorkloadFactory]] = {
    "acquire_unlock": {
        "ctxlock": CtxlockAcquireUnlock,
        "threading": ThreadingAcquireRelease,
    },
    # The same, each lock made by the main thread and used by another one.
    "acquire_unlock_elsewhere": {
        "ctxlock": lambda: InAnotherThread(CtxlockAcquireUnlock()),
        "threading": lambda: InAnotherThread(ThreadingAcquireRelease()),
        "threading_kept": lambda: InAnotherThread(ThreadingAcquireKept()),
    },
    "with": {
        "ctxlock": functools.partial(WithLoop, ctxlock_lock),
        "threading": functools.partial(WithLoop, threading_lock),
        "aiologic": functools.partial(WithLoop, aiologic_lock),
    },
    "acquire_deadline": {
        "ctxlock": CtxlockAcquireDeadline,
        "threading": ThreadingAcquireTimeout,
    },
    "shared_with": {
        "ctxlock": functools.partial(WithLoop, ctxlock_shared),
        "threading": functools.partial(WithLoop, threading_lock),
        "readerwriterlock": functools.partial(WithLoop, rwlock_reader),
    },
    "contended_4": {
        "ctxlock": functools.partial(Contended, ctxlock_lock),
        "threading": functools.partial(Contended, threading_lock),
        "aiologic": functools.partial(Contended, aiologic_lock),
        "nolock": functools.partial(Contended, no_lock, excludes=False),
    },
    "contended_2": {
        "ctxlock": functools.partial(Contended, ctxlock_lock, 2),
        "threading": functools.partial(Contended, threading_lock, 2),
        "aiologic": functools.partial(Contended, aiologic_lock, 2),
        "nolock": functools.partial(Contended, no_lock, 2, excludes=False),
    },
    # The same loops in one thread: what the contended rows cost with no contention.
    "contended_1": {
        "ctxlock": functools.partial(Contended, ctxlock_lock, 1),
        "threading": functools.partial(Contended, threading_lock, 1),
    },
    "contended_1_acquire": {
        "ctxlock": functools.partial(CtxlockContendedAcquire, 1),
        "threading": functools.partial(ThreadingContendedAcquire, 1),
        "threading_shaped": functools.partial(ThreadingShapedAcquire, 1),
        "threading_kept": functools.partial(ThreadingKeptAcquire, 1),
    },
    "contended_2_acquire": {
        "ctxlock": functools.partial(CtxlockContendedAcquire, 2),
        "threading": functools.partial(ThreadingContendedAcquire, 2),
        "threading_kept": functools.partial(ThreadingKeptAcquire, 2),
        "nolock": functools.partial(NoLockContendedAcquire, 2),
    },
    "contended_4_acquire": {
        "ctxlock": functools.partial(CtxlockContendedAcquire, 4),
        "threading": functools.partial(ThreadingContendedAcquire, 4),
        "threading_kept": functools.partial(ThreadingKeptAcquire, 4),
        "nolock": functools.partial(NoLockContendedAcquire, 4),
    },
    "drain_100": {
        "ctxlock": functools.partial(Drain, ctxlock_lock),
        "threading": functools.partial(Drain, threading_lock),
        "aiologic": functools.partial(Drain, aiologic_lock),
    },
    "async_with": {
        "ctxlock": functools.partial(AsyncWith, ctxlock_lock),
        "asyncio": functools.partial(AsyncWith, asyncio_lock),
        "aiologic": functools.partial(AsyncWith, aiologic_lock),
    },
    "tasks_100": {
        "ctxlock": functools.partial(Tasks, ctxlock_lock),
        "asyncio": functools.partial(Tasks, asyncio_lock),
        "aiologic": functools.partial(Tasks, aiologic_lock),
    },
    "tasks_through": {
        "ctxlock": functools.partial(TasksThrough, ctxlock_lock),
        "asyncio": functools.partial(TasksThrough, asyncio_lock),
        "aiologic": functools.partial(TasksThrough, aiologic_lock),
    },
    "mixed_2t2t": {
        "ctxlock": functools.partial(Mixed, ctxlock_lock),
        "aiologic": functools.partial(Mixed, aiologic_lock),
    },
    "named_acquire_unlock": {
        "ctxlock": NamedAcquireUnlock,
        "threading": DictAcquireRelease,
        "weakdict": WeakDictAcquireRelease,
    },
    "file_acquire_unlock": {
        "ctxlock": FileAcquireUnlock,
        "filelock": FileLockAcquireRelease,
        "flock": FlockLockUnlock,
        "ofd": OfdLockUnlock,
    },
}
