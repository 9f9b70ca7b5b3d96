"""Child interpreters for the rows between processes (``file.py``, ``pg.py``), and the
file rows' locks.

The parent starts each child with ``subprocess`` (a fresh interpreter, never a fork) and
talks to it in JSON lines: the child's on its stdout, the parent's on its stdin. Nothing
waits without a limit: the parent reads each line with a timeout and kills every child it
started when it is done (``Child.close``, also on errors), and a child arms ``signal.alarm``
so that it dies by itself should the parent be gone or a wait hang; a child also exits when
its stdin ends.

``open_lock`` gives a child (or the parent) one of the locks compared, by kind: ctxlock's
file scope, ``filelock.FileLock``, fasteners' ``InterProcessLock`` behind a
``threading.Lock``, or a bare ``fcntl.flock`` on an open file.
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import ctxlock
from ctxlock._bench.peers import PeerMissing, Unavailable
from ctxlock._bench.workload import BenchError

__all__ = [
    "ACQUIRE_TIMEOUT_S",
    "CHILD_ALARM_S",
    "KINDS",
    "LOCK_NAME",
    "SETUP_TIMEOUT_S",
    "Acquire",
    "Child",
    "bench_dir",
    "file_manager",
    "file_url",
    "open_lock",
    "receive",
    "send",
]

#: The one name every row between processes locks.
LOCK_NAME = "bench:file"
#: The kinds of lock ``open_lock`` makes.
KINDS = ("ctxlock", "filelock", "fasteners", "flock")
#: Longest any one acquire in a child may wait (a child that times out reports an error).
ACQUIRE_TIMEOUT_S = 30.0
#: A child kills itself (SIGALRM) after this many seconds, whatever it is doing.
CHILD_ALARM_S = 150
#: Longest the parent waits for a child to start (import, open its lock) and say so.
SETUP_TIMEOUT_S = 60.0

#: ``acquire(timeout_s)`` takes the lock and returns the function that releases it.
Acquire = Callable[[float], Callable[[], object]]

#: What a child runs: ``child_main(argv)`` of the module named first (``file`` or ``pg``).
_CHILD = "import importlib, sys; importlib.import_module(sys.argv[1]).child_main(sys.argv[2:])"


def file_url(directory: Path) -> str:
    """The ``LockManager`` url of the file scope in ``directory`` (an absolute path)."""
    return "file://" + str(directory.absolute())


def file_manager(directory: Path) -> ctxlock.LockManager:
    """``LockManager("file://<directory>")``; ``Unavailable`` (a skip) if this build has no
    file scope (the constructor raises ``BackendError``)."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        return ctxlock.LockManager(file_url(directory))
    except ctxlock.BackendError as exc:
        raise Unavailable(
            f"not available: LockManager('file:///...') raised BackendError: {exc}"
        ) from exc


@contextmanager
def bench_dir() -> Iterator[Path]:
    """A fresh temporary directory for the lock files, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ctxlock-bench-file-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def need_fcntl() -> Any:
    """The ``fcntl`` module; ``Unavailable`` where there is none (Windows)."""
    try:
        return importlib.import_module("fcntl")
    except ImportError as exc:
        raise Unavailable("skipped: needs fcntl.flock (POSIX)") from exc


def need_peer(kind: str) -> None:
    """``PeerMissing`` if the peer library of ``kind`` is not installed (checked in the
    parent, before any child starts)."""
    if kind in ("filelock", "fasteners"):
        try:
            importlib.import_module(kind)
        except ImportError as exc:
            raise PeerMissing(kind) from exc
    elif kind == "flock":
        need_fcntl()


def open_lock(kind: str, directory: Path) -> tuple[Acquire, Callable[[], None]]:
    """One lock of ``kind`` on the lock files in ``directory``, and what closes it.

    Every kind excludes the threads of one process from each other as well as other
    processes: ``filelock.FileLock`` does by itself (a descriptor per thread), fasteners'
    ``InterProcessLock`` (a POSIX record lock, which a process's threads share) is taken
    under a ``threading.Lock``, as its documentation has threads do. ``flock`` is one open
    descriptor: for one thread per process only.
    """
    if kind == "ctxlock":
        manager = file_manager(directory / "ctxlock")
        take = manager.lock(LOCK_NAME).acquire

        def acquire_ctxlock(timeout: float) -> Callable[[], object]:
            return take(deadline=timeout)

        return acquire_ctxlock, manager.close
    if kind == "filelock":
        filelock = importlib.import_module("filelock")
        file_lock = filelock.FileLock(str(directory / "filelock.lock"))

        def acquire_filelock(timeout: float) -> Callable[[], object]:
            file_lock.acquire(timeout=timeout)
            release: Callable[[], object] = file_lock.release
            return release

        return acquire_filelock, _nothing
    if kind == "fasteners":
        fasteners = importlib.import_module("fasteners")
        process_lock = fasteners.InterProcessLock(str(directory / "fasteners.lock"))
        guard = threading.Lock()

        def release_fasteners() -> None:
            process_lock.release()
            guard.release()

        def acquire_fasteners(timeout: float) -> Callable[[], object]:
            if not guard.acquire(timeout=timeout):
                raise TimeoutError("fasteners: the threading.Lock guard timed out")
            if not process_lock.acquire(timeout=timeout):
                guard.release()
                raise TimeoutError("fasteners: InterProcessLock.acquire timed out")
            return release_fasteners

        return acquire_fasteners, _nothing
    if kind == "flock":
        fcntl = need_fcntl()
        fd = os.open(directory / "flock.lock", os.O_RDWR | os.O_CREAT, 0o644)
        flock, ex, un = fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN

        def unlock_flock() -> None:
            flock(fd, un)

        def acquire_flock(timeout: float) -> Callable[[], object]:
            flock(fd, ex)  # no timeout of its own: the child's alarm bounds it
            return unlock_flock

        return acquire_flock, lambda: os.close(fd)
    raise ValueError(f"unknown lock kind {kind!r}")


def _nothing() -> None:
    return None


# --- the child's side ----------------------------------------------------------------------


def send(message: dict[str, Any]) -> None:
    """Send one JSON line to the parent."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def receive() -> dict[str, Any]:
    """The parent's next JSON line; exits quietly when the parent closed stdin."""
    line = sys.stdin.readline()
    if not line:
        raise SystemExit(0)
    message: dict[str, Any] = json.loads(line)
    return message


# --- the parent's side ---------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    package_root = str(Path(ctxlock.__file__).absolute().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


class Child:
    """A child interpreter running ``child_main(args)`` of ``module`` (by default
    ``ctxlock._bench.file``).

    ``recv`` returns its next JSON line or raises ``BenchError`` (timed out, exited, or
    reported an error); ``close`` kills it if it still runs. Use it as a context manager.
    """

    def __init__(self, *args: str, module: str = "ctxlock._bench.file") -> None:
        self.args = args
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=_child_env(),
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        for line in stdout:
            self._lines.put(line)
        self._lines.put(None)

    def send(self, message: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(message) + "\n")
        stdin.flush()

    def recv(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise BenchError(
                f"child {' '.join(self.args)} sent nothing for {timeout:g} s{self._tail()}"
            ) from None
        if line is None:
            try:
                code = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
            raise BenchError(f"child {' '.join(self.args)} exited ({code}){self._tail()}")
        message: dict[str, Any] = json.loads(line)
        if "error" in message:
            raise BenchError(f"child {' '.join(self.args)}: {message['error']}{self._tail()}")
        return message

    def _tail(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace").strip()
        return f": {text[-400:]}" if text else ""

    def kill(self) -> None:
        """SIGKILL (``TerminateProcess`` on Windows), and reap it."""
        self.proc.kill()
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        finally:
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    try:
                        pipe.close()
                    except OSError:
                        pass
            self._stderr.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
