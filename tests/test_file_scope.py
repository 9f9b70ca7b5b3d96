"""LockManager("file:///abs/dir"): named locks shared by the processes of this machine.

Every test takes a fresh directory (``tmp_path``) as its scope. The file holds three parts:

- the manager: the directory and its one file (``ctxlock.table``), urls, and tables that
  are broken (truncated, garbage, another version), which must give ``BackendError`` at
  construction (checked in a subprocess, so a crash fails the test instead of the run);
- the contract of every scope: the tests of ``test_lock_manager.py`` that take their
  managers from the ``managers`` fixture run here again with managers of a file url
  (redefined below), so each rule of the memory scope is checked on this scope too;
- other processes: real child processes (``subprocess.Popen`` of ``sys.executable``, or
  multiprocessing's "spawn" context; never fork) hold, wait, die and race. Children are
  driven through pipes (handshakes, no sleeps as synchronization), every wait is bounded,
  and every child is killed and reaped at teardown.

Timing assertions (a waiter freed by a kill within 1 s, a cancel within 0.5 s) are loose
bounds that a correct implementation meets by orders of magnitude.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import itertools
import json
import multiprocessing
import os
import pickle
import queue
import random
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import test_lock_manager as contract
from conftest import PATIENCE, wait_until
from ctxlock import (
    BackendError,
    Cancelled,
    CancelToken,
    LockManager,
    LockTimeout,
    NamedLock,
    NamedSharableLock,
    Unlock,
    WouldBlock,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

Managers = Callable[[int], list[LockManager]]

TABLE = "ctxlock.table"
CLOCK_TICK = contract.CLOCK_TICK
HOST = socket.gethostname()


def owned_by(owner: str, pid: int) -> bool:
    """Whether a ``LockInfo.owner`` (``"host:pid thread ..."``) names process ``pid`` here.

    Not a substring test: pids wrap around, and a short pid is often part of another
    process's pid or of a thread id in the same string.
    """
    prefix = f"{HOST}:{pid}"
    return owner == prefix or owner.startswith(prefix + " ")


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def url(tmp_path: Path) -> str:
    """This test's own scope: a directory that does not exist yet."""
    return f"file://{tmp_path}/locks"


@pytest.fixture
def scope_url(url: str) -> str:
    """The url of this scope, for the contract tests that make a manager of their own."""
    return url


@pytest.fixture
def ns() -> str:
    """A name prefix (the scope is the test's own; the prefix keeps the contract tests as
    they are)."""
    return f"test-{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def managers(url: str) -> Iterator[Managers]:
    """``managers(k)``: k managers of this test's file scope; all are closed at teardown.

    This fixture is the one the contract tests of ``test_lock_manager.py`` (imported below)
    take their managers from, so here they run on the file scope.
    """
    made: list[LockManager] = []

    def make(k: int) -> list[LockManager]:
        new = [LockManager(url) for _ in range(k)]
        made.extend(new)
        return new

    yield make
    for mgr in made:
        mgr.close()


def view(mgr: LockManager, name: str, which: str) -> NamedLock:
    return contract.view(mgr, name, which)


# --- child processes ----------------------------------------------------------------------------

#: A child that obeys commands on stdin, one a line, and answers on stdout, one a line.
#: ``acquire KEY NAME VIEW DEADLINE`` takes a hold in the main thread and answers
#: ``held KEY FENCE`` or ``error KEY EXCEPTION``; ``try KEY NAME VIEW`` answers ``held`` or
#: ``none``; ``wait KEY NAME VIEW DEADLINE`` starts the acquire in a thread of its own
#: (cancellable with ``cancel KEY``) and answers ``waiting KEY`` at once, then ``held`` or
#: ``error`` when it ends; ``release KEY`` answers ``released KEY``; ``exit`` ends it.
_REPL = r"""
import os, sys, threading, ctxlock
mgr = ctxlock.LockManager(sys.argv[1])
holds, tokens = {}, {}
out_lock = threading.Lock()

def out(*words):
    with out_lock:
        sys.stdout.write(" ".join(str(w) for w in words) + "\n")
        sys.stdout.flush()

def view(name, which):
    if which == "lock":
        return mgr.lock(name)
    return getattr(mgr.sharable_lock(name), which)

def acquire(key, name, which, deadline, token=None):
    try:
        unlock = view(name, which).acquire(token, deadline=float(deadline))
    except ctxlock.LockError as exc:
        out("error", key, type(exc).__name__)
    else:
        holds[key] = unlock
        out("held", key, unlock.fence, threading.get_ident())

out("ready", os.getpid())
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "acquire":
        acquire(*args)
    elif cmd == "try":
        key, name, which = args
        unlock = view(name, which).try_acquire()
        if unlock is None:
            out("none", key)
        else:
            holds[key] = unlock
            out("held", key, unlock.fence)
    elif cmd == "wait":
        tokens[args[0]] = token = ctxlock.CancelToken()
        threading.Thread(target=acquire, args=(*args, token), name="waiter-" + args[0]).start()
        out("waiting", args[0])
    elif cmd == "cancel":
        tokens[args[0]].cancel("parent said so")
    elif cmd == "release":
        holds.pop(args[0])()
        out("released", args[0])
    elif cmd == "exit":
        break
mgr.close()
out("bye")
"""


class Child:
    """A child process running ``script`` with ``args``, read line by line."""

    def __init__(self, script: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pid = self.proc.pid
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._err_reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def line(self, timeout: float = PATIENCE) -> list[str]:
        """The next line the child writes, split in words (fails after ``timeout``)."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"child {self.pid} said nothing for {timeout} s; stderr: {self.stderr}"
            ) from None
        if line is None:
            self._reader.join(PATIENCE)
            self.proc.wait(PATIENCE)
            self._err_reader.join(PATIENCE)
            raise AssertionError(
                f"child {self.pid} ended (status {self.proc.returncode}); stderr: {self.stderr}"
            )
        return line.split()

    def expect(self, *words: str, timeout: float = PATIENCE) -> list[str]:
        """The next line, which must start with ``words``."""
        got = self.line(timeout)
        assert got[: len(words)] == list(words), (got, words, self.stderr)
        return got

    def send(self, *words: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = PATIENCE * 2) -> int:
        """Close its stdin and wait for it to exit; returns its status."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        status = self.proc.wait(timeout)
        self._reader.join(PATIENCE)
        self._err_reader.join(PATIENCE)
        return status

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(BrokenPipeError, OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        self.proc.wait(PATIENCE)
        self._reader.join(PATIENCE)
        self._err_reader.join(PATIENCE)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


class Repl(Child):
    """A child running ``_REPL`` on ``url``."""

    def __init__(self, url: str) -> None:
        super().__init__(_REPL, url)
        self.expect("ready", str(self.pid))

    def acquire(self, key: str, name: str, which: str = "lock", deadline: float = PATIENCE) -> int:
        self.send("acquire", key, name, which, deadline)
        return int(self.expect("held", key)[2])

    def release(self, key: str) -> None:
        self.send("release", key)
        self.expect("released", key)


@pytest.fixture
def children() -> Iterator[Callable[..., Child]]:
    """``children(script, *args)`` starts a Child; every child is killed at teardown."""
    started: list[Child] = []

    def start(script: str, *args: str) -> Child:
        child = Child(script, *args)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()


@pytest.fixture
def repls(url: str) -> Iterator[Callable[[], Repl]]:
    """``repls()`` starts a Repl child on this test's scope; all are killed at teardown."""
    started: list[Repl] = []

    def start() -> Repl:
        child = Repl(url)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()


def fresh_free(url: str, name: str) -> None:
    """A new manager of ``url`` sees ``name`` free in every mode, and can take it."""
    with LockManager(url) as mgr:
        contract.assert_free(mgr, name)
        assert [i for i in mgr.query() if i.name == name] == []


# --- the manager: directory, table, urls -------------------------------------------------------


def test_the_url_is_kept_as_given(url: str) -> None:
    with LockManager(url) as mgr:
        assert mgr.url == url
        assert not mgr.closed
    assert mgr.closed
    assert mgr.url == url
    with LockManager(url=url) as again:
        assert again.url == url


def test_the_directory_is_made_with_the_umask_and_holds_one_table(tmp_path: Path) -> None:
    where = tmp_path / "locks"
    assert not where.exists()
    old = os.umask(0o027)
    try:
        mgr = LockManager(f"file://{where}")
    finally:
        os.umask(old)
    try:
        assert where.is_dir()
        assert stat.S_IMODE(where.stat().st_mode) == 0o750, oct(where.stat().st_mode)
        assert os.listdir(where) == [TABLE]
        # Many names, held at once and one after another, add no file: the table is fixed.
        size = (where / TABLE).stat().st_size
        assert size > 0
        held = [mgr.lock(f"held-{i}").acquire() for i in range(50)]
        held += [mgr.sharable_lock(f"shared-{i}").shared.acquire() for i in range(50)]
        for i in range(500):
            mgr.lock(f"once-{i}").acquire()()
        assert os.listdir(where) == [TABLE]
        assert (where / TABLE).stat().st_size == size
        for unlock in held:
            unlock()
    finally:
        mgr.close()
    # The table stays when every manager is closed.
    assert os.listdir(where) == [TABLE]
    assert (where / TABLE).stat().st_size == size


def test_an_existing_directory_is_used_as_it_is(tmp_path: Path) -> None:
    where = tmp_path / "locks"
    where.mkdir(mode=0o700)
    (where / "unrelated").write_text("x")
    with LockManager(f"file://{where}") as mgr, mgr.lock("a"):
        assert mgr.lock("a").locked()
    assert sorted(os.listdir(where)) == sorted([TABLE, "unrelated"])
    assert stat.S_IMODE(where.stat().st_mode) == 0o700


def test_a_second_manager_uses_the_table_the_first_made(url: str, tmp_path: Path) -> None:
    first = LockManager(url)
    held = first.lock("a").acquire()
    table = tmp_path / "locks" / TABLE
    inode = table.stat().st_ino
    with LockManager(url) as second:
        contract.assert_taken(second.lock("a"))
        assert table.stat().st_ino == inode
    held()
    first.close()
    with LockManager(url) as third:
        # Reopened after every manager closed: the same file, the name free.
        assert table.stat().st_ino == inode
        contract.assert_free(third, "a")


@pytest.mark.parametrize(
    "rel", ["file://relative/path", "file://locks", "file:relative", "file:locks/x"]
)
def test_a_relative_directory_is_a_value_error(rel: str) -> None:
    with pytest.raises(ValueError):
        LockManager(rel)


def test_a_nul_byte_in_the_path_is_a_value_error_naming_the_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="url"):
        LockManager(f"file://{tmp_path}/a\0b")
    # Nothing was made, and the directory is still usable.
    assert list(tmp_path.iterdir()) == []
    with LockManager(f"file://{tmp_path}/ok") as mgr:
        mgr.lock("n").acquire(deadline=0)()


def test_a_directory_under_a_regular_file_is_a_backend_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a directory")
    where = blocker / "locks"
    with pytest.raises(BackendError) as caught:
        LockManager(f"file://{where}")
    assert isinstance(caught.value.reason, str)
    assert str(blocker) in caught.value.reason, caught.value.reason
    assert blocker.read_text() == "not a directory"


def test_a_table_path_that_is_a_directory_is_a_backend_error(tmp_path: Path) -> None:
    where = tmp_path / "locks"
    (where / TABLE).mkdir(parents=True)
    with pytest.raises(BackendError) as caught:
        LockManager(f"file://{where}")
    assert str(where) in caught.value.reason, caught.value.reason


needs_non_root = pytest.mark.skipif(
    os.geteuid() == 0, reason="root may write anywhere: permissions are not checked"
)


@needs_non_root
def test_a_directory_the_user_cannot_write_is_a_backend_error_naming_it(tmp_path: Path) -> None:
    where = tmp_path / "locks"
    where.mkdir()
    where.chmod(0o500)
    try:
        with pytest.raises(BackendError) as caught:
            LockManager(f"file://{where}")
        assert str(where) in caught.value.reason, caught.value.reason
        assert os.listdir(where) == []
    finally:
        where.chmod(0o700)


@needs_non_root
def test_a_directory_that_cannot_be_made_is_a_backend_error_naming_it(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        with pytest.raises(BackendError) as caught:
            LockManager(f"file://{parent}/locks")
        assert str(parent / "locks") in caught.value.reason, caught.value.reason
    finally:
        parent.chmod(0o700)


# --- a broken table: BackendError, never a crash, never a grant -------------------------------

_OPEN_BROKEN = """
import sys, ctxlock
try:
    mgr = ctxlock.LockManager(sys.argv[1])
except ctxlock.BackendError as exc:
    print("BackendError", repr(exc.reason))
    sys.exit(0)
# Constructed on a broken table: see what it would grant.
try:
    unlock = mgr.lock("a").acquire(deadline=1)
    print("granted", unlock.fence)
except Exception as exc:
    print("no BackendError at construction; then", type(exc).__name__, exc)
sys.exit(0)
"""


def _truncate_to(size: int) -> Callable[[bytearray], bytes]:
    return lambda data: bytes(data[:size])


def _garbage(data: bytearray) -> bytes:
    return random.Random(7).randbytes(len(data))


def _other_header(data: bytearray) -> bytes:
    # Every byte of the header changed (so whatever the version field is, it differs).
    head = bytes((b + 0x5A) % 256 for b in data[:64])
    return head + bytes(data[64:])


def _other_version_field(data: bytearray) -> bytes:
    # Another plausible header: the same first 8 bytes (a magic, say), the rest of the
    # first 64 zeroed (whatever the version, size or checksum fields were).
    return bytes(data[:8]) + bytes(56) + bytes(data[64:])


BREAKS: dict[str, Callable[[bytearray], bytes]] = {
    "truncated-to-10-bytes": _truncate_to(10),
    "truncated-to-half": lambda data: bytes(data[: len(data) // 2]),
    "truncated-by-one-byte": lambda data: bytes(data[:-1]),
    "garbage": _garbage,
    "header-of-another-version": _other_header,
    "header-zeroed-after-magic": _other_version_field,
    "grown-by-a-page": lambda data: bytes(data) + bytes(4096),
}


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def _assert_no_crash(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, f"status {proc.returncode}: {proc.stdout} {proc.stderr}"
    for bad in ("panicked", "Fatal Python error", "SystemError"):
        assert bad not in proc.stderr, proc.stderr


_MAKE_TABLE = """
import sys, ctxlock
with ctxlock.LockManager(sys.argv[1]) as mgr:
    mgr.lock("a").acquire()()
"""


@pytest.mark.parametrize("how", list(BREAKS))
def test_a_broken_table_is_a_backend_error_at_construction(
    how: str, url: str, tmp_path: Path
) -> None:
    # The table is made (and its manager closed) in one process, broken, then opened in
    # another: this process never maps it, so whatever happens stays in the children.
    table = tmp_path / "locks" / TABLE
    _assert_no_crash(_run(_MAKE_TABLE, url))
    data = bytearray(table.read_bytes())
    assert len(data) > 128, len(data)
    table.write_bytes(BREAKS[how](data))
    proc = _run(_OPEN_BROKEN, url)
    _assert_no_crash(proc)
    assert proc.stdout.startswith("BackendError"), proc.stdout + proc.stderr
    assert str(table.parent) in proc.stdout, proc.stdout


_BREAK_UNDER_A_CLOSED_MANAGER = """
import gc, sys, ctxlock
url, table, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
mgr = ctxlock.LockManager(url)
lock = mgr.lock("a")
lock.acquire()()
mgr.close()
with open(table, "r+b") as f:
    f.truncate(size)
try:
    ctxlock.LockManager(url)
except ctxlock.BackendError:
    print("BackendError", flush=True)
# The closed manager and its lock go now, after the table was broken.
del mgr, lock
gc.collect()
print("dropped", flush=True)
"""


@pytest.mark.parametrize("size", [10, 4096], ids=["to-10-bytes", "to-one-page"])
def test_a_closed_manager_outlives_its_table_being_truncated(
    size: int, url: str, tmp_path: Path
) -> None:
    # A process that used the scope and closed its manager is done with the table: another
    # program breaking the file afterwards must not crash it (a mapping kept past close()
    # and touched when the manager is freed would be a SIGBUS).
    proc = _run(_BREAK_UNDER_A_CLOSED_MANAGER, url, str(tmp_path / "locks" / TABLE), str(size))
    _assert_no_crash(proc)
    assert proc.stdout.split() == ["BackendError", "dropped"], proc.stdout + proc.stderr


_FILL_NAMES = """
import sys, ctxlock
try:
    with ctxlock.LockManager(sys.argv[1]) as mgr:
        for i in range(int(sys.argv[2])):
            mgr.lock(f"name-{i}").acquire()()
    print("used", flush=True)
except ctxlock.BackendError as e:
    print("BackendError", e, flush=True)
"""


@contextlib.contextmanager
def _small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` for the test (skips where mounting is not
    allowed: it needs root)."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], timeout=20, check=False)


def test_a_file_url_is_percent_decoded_as_path_as_uri_writes_it(tmp_path: Path) -> None:
    # Path.as_uri() percent-encodes (a space is %20): the directory is the decoded one,
    # and the url written either way is one scope.
    spaced = tmp_path / "my locks %"
    encoded = spaced.as_uri()
    assert "%20" in encoded and "%25" in encoded
    with LockManager(encoded) as a, LockManager(f"file://{tmp_path}/my locks %25") as b:
        assert (spaced / TABLE).exists()
        assert not (tmp_path / "my%20locks%20%25").exists()
        unlock = a.lock("x").acquire(deadline=PATIENCE)
        assert b.lock("x").try_acquire() is None
        unlock()
        assert a.url == encoded


@pytest.mark.parametrize(
    ("tail", "match"),
    [("?mode=ro", "query"), ("#part", "fragment"), ("%zz", "'%'"), ("a%00b", "%00")],
)
def test_a_file_url_with_a_query_fragment_or_bad_escape_is_a_value_error(
    tail: str, match: str, tmp_path: Path
) -> None:
    # Taken as part of the path, they named another directory: a scope of its own.
    with pytest.raises(ValueError, match=match):
        LockManager(f"file://{tmp_path}/locks{tail}")
    assert list(tmp_path.iterdir()) == []


def test_a_full_filesystem_is_a_backend_error_not_a_crash(tmp_path: Path) -> None:
    # On a filesystem with no room for the table's pages (1 MB, for a table of about
    # 13 MB), a sparse table was linked in and mapped, and the first write to a page the
    # filesystem had no block for killed the process with SIGBUS. The room is reserved
    # when the table is made: the manager fails instead, naming the cause.
    with _small_filesystem(tmp_path / "small", "1m") as small:
        url = (small / "locks").as_uri()
        proc = _run(_FILL_NAMES, url, "5000")
        _assert_no_crash(proc)
        assert proc.stdout.startswith("BackendError"), proc.stdout + proc.stderr
        assert "No space left" in proc.stdout, proc.stdout
        assert not (small / "locks" / TABLE).exists()
    # A table made sparse (as by an earlier version) gets its room when opened, or the
    # manager fails the same way.
    made = tmp_path / "made"
    _assert_no_crash(_run(_MAKE_TABLE, (made / "locks").as_uri()))
    with _small_filesystem(tmp_path / "small2", "1m") as small:
        (small / "locks").mkdir()
        subprocess.run(
            ["cp", "--sparse=always", str(made / "locks" / TABLE), str(small / "locks")],
            timeout=20,
            check=True,
        )
        proc = _run(_FILL_NAMES, (small / "locks").as_uri(), "5000")
        _assert_no_crash(proc)
        assert proc.stdout.startswith("BackendError"), proc.stdout + proc.stderr
        assert "reserve disk space" in proc.stdout, proc.stdout


def test_names_kept_idle_by_managers_give_way_when_the_table_is_full(url: str) -> None:
    # A manager keeps its slot pinned for up to 64 names it used and let go. Sixty-four
    # managers (as many worker processes) doing so filled the 4,096 slots, and a name
    # nobody held or waited for could then never be taken: nothing let go of idle
    # names for another manager. Now a manager that finds the table full lets go of its
    # own idle names, and asks the others' agents to let go of theirs.
    managers = [LockManager(url) for _ in range(64)]
    try:
        for i, mgr in enumerate(managers):
            for j in range(64):
                mgr.lock(f"idle-{i}-{j}").acquire(deadline=PATIENCE)()
        fresh = LockManager(url)
        try:
            fresh.lock("brand-new").acquire(deadline=PATIENCE)()
            managers[3].lock("another-new").acquire(deadline=PATIENCE)()
        finally:
            fresh.close()
    finally:
        for mgr in managers:
            mgr.close()


def test_a_manager_lets_go_of_its_own_idle_names_when_the_table_is_full(url: str) -> None:
    # Every slot but one held by one manager; another uses the last for a name and lets
    # it go (keeping it idle). Its next new name needs that slot: it lets go of its own.
    with LockManager(url) as holder, LockManager(url) as mgr:
        held = [holder.lock(f"held-{i}").acquire(deadline=PATIENCE) for i in range(TABLE_NAMES - 1)]
        try:
            mgr.lock("first").acquire(deadline=PATIENCE)()
            mgr.lock("second").acquire(deadline=PATIENCE)()
            assert holder.lock("first").acquire(deadline=PATIENCE)() is None
        finally:
            for unlock in held:
                unlock()


@pytest.mark.asyncio
async def test_a_task_waiting_for_a_slot_gets_one_its_manager_kept_idle(url: str) -> None:
    # A task's wait is retried by the manager's agent, not by a thread: it too lets go of
    # the manager's own idle names when the table is full.
    with LockManager(url) as holder, LockManager(url) as mgr:
        held = [holder.lock(f"held-{i}").acquire(deadline=PATIENCE) for i in range(TABLE_NAMES - 1)]
        try:
            last = mgr.lock("last").acquire(deadline=PATIENCE)  # the last slot
            waiting = asyncio.ensure_future(mgr.lock("new").acquire_async(deadline=PATIENCE))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            last()  # now idle, its slot kept by mgr: the task's retry must let it go
            unlock = await asyncio.wait_for(waiting, PATIENCE * 2)
            unlock()
        finally:
            for unlock in held:
                unlock()


@pytest.mark.asyncio
async def test_the_deadlock_check_knows_the_managers_of_the_same_directory_only(
    url: str, tmp_path: Path
) -> None:
    here = LockManager(url)
    os.symlink(tmp_path / "locks", tmp_path / "alias")
    alias, elsewhere = LockManager(f"file://{tmp_path}/alias"), LockManager(f"file://{tmp_path}/b")
    rescue = threading.Timer(PATIENCE, alias.close)
    rescue.start()
    try:
        # The same directory by another path: a task's `async with` through it blocks
        # this manager's blocking acquire forever, which raises instead.
        async with alias.lock("a"):
            with pytest.raises(RuntimeError, match=r"(?i)deadlock"):
                here.lock("a").acquire()
        # Another directory: its `async with` of the same name is no reason to raise;
        # the acquire waits for this directory's holder, released by another thread.
        held = here.lock("a").acquire()
        threading.Timer(0.05, held).start()
        async with elsewhere.lock("a"):
            here.lock("a").acquire()()
    finally:
        rescue.cancel()
        for m in (here, alias, elsewhere):
            m.close()


# --- the contract of every scope, on this one ---------------------------------------------------
# The tests of test_lock_manager.py that take their managers from the ``managers`` fixture run
# here with the fixture above: managers of this test's file url.

test_close_returns_once_the_holds_have_ended_even_while_another_close_runs = (
    contract.test_close_returns_once_the_holds_have_ended_even_while_another_close_runs
)
test_every_acquire_on_a_closed_manager_raises_backend_error = (
    contract.test_every_acquire_on_a_closed_manager_raises_backend_error
)
test_a_closed_manager_answers_who_holds_with_backend_error = (
    contract.test_a_closed_manager_answers_who_holds_with_backend_error
)
test_closing_one_manager_leaves_the_others_working = (
    contract.test_closing_one_manager_leaves_the_others_working
)
test_any_non_empty_str_up_to_1024_utf8_bytes_is_a_name = (
    contract.test_any_non_empty_str_up_to_1024_utf8_bytes_is_a_name
)
test_an_empty_or_too_long_name_is_a_value_error = (
    contract.test_an_empty_or_too_long_name_is_a_value_error
)
test_a_name_that_is_not_a_str_is_a_type_error = (
    contract.test_a_name_that_is_not_a_str_is_a_type_error
)
test_named_locks_carry_their_name_mode_and_manager = (
    contract.test_named_locks_carry_their_name_mode_and_manager
)
test_a_free_name_is_taken_at_once_every_way = contract.test_a_free_name_is_taken_at_once_every_way
test_a_held_name_refuses_each_way = contract.test_a_held_name_refuses_each_way
test_an_already_cancelled_token_raises_at_once_even_when_free = (
    contract.test_an_already_cancelled_token_raises_at_once_even_when_free
)
test_bad_deadlines_name_deadline = contract.test_bad_deadlines_name_deadline
test_a_waiter_is_cancelled_by_its_token_and_times_out_by_its_deadline = (
    contract.test_a_waiter_is_cancelled_by_its_token_and_times_out_by_its_deadline
)
test_two_managers_are_two_clients_of_the_same_locks = (
    contract.test_two_managers_are_two_clients_of_the_same_locks
)
test_the_modes_of_a_name_exclude_each_other_across_managers = (
    contract.test_the_modes_of_a_name_exclude_each_other_across_managers
)
test_the_exclusive_lock_of_a_name_is_the_exclusive_mode_of_its_sharable_lock = (
    contract.test_the_exclusive_lock_of_a_name_is_the_exclusive_mode_of_its_sharable_lock
)
test_a_blocked_acquire_gets_the_name_when_another_client_unlocks = (
    contract.test_a_blocked_acquire_gets_the_name_when_another_client_unlocks
)
test_unlock_returns_once_the_hold_is_released = (
    contract.test_unlock_returns_once_the_hold_is_released
)
test_locked_and_statistics_count_the_holds_of_every_manager = (
    contract.test_locked_and_statistics_count_the_holds_of_every_manager
)
test_exclusive_holds_never_overlap_across_managers_in_threads = (
    contract.test_exclusive_holds_never_overlap_across_managers_in_threads
)
test_shared_holds_of_many_managers_overlap = contract.test_shared_holds_of_many_managers_overlap
test_tasks_of_many_managers_exclude_each_other = (
    contract.test_tasks_of_many_managers_exclude_each_other
)
test_a_task_and_a_thread_of_different_managers_hand_over = (
    contract.test_a_task_and_a_thread_of_different_managers_hand_over
)
test_a_waiting_writer_holds_readers_back_until_it_gives_up = (
    contract.test_a_waiting_writer_holds_readers_back_until_it_gives_up
)
test_fences_are_ints = contract.test_fences_are_ints
test_exclusive_fences_strictly_increase_across_managers = (
    contract.test_exclusive_fences_strictly_increase_across_managers
)
test_fences_never_decrease_in_grant_order_and_writers_exceed_all_before = (
    contract.test_fences_never_decrease_in_grant_order_and_writers_exceed_all_before
)
test_fences_keep_their_order_under_threads_of_many_managers = (
    contract.test_fences_keep_their_order_under_threads_of_many_managers
)
test_lost_is_one_token_never_cancelled_by_unlock = (
    contract.test_lost_is_one_token_never_cancelled_by_unlock
)
test_closing_the_manager_loses_its_holds_and_frees_the_name = (
    contract.test_closing_the_manager_loses_its_holds_and_frees_the_name
)
test_lost_first_read_after_close_is_already_cancelled = (
    contract.test_lost_first_read_after_close_is_already_cancelled
)
test_lost_first_read_after_close_and_unlock_is_cancelled = (
    contract.test_lost_first_read_after_close_and_unlock_is_cancelled
)
test_an_unlock_of_a_lost_hold_dropped_uncalled_does_not_warn = (
    contract.test_an_unlock_of_a_lost_hold_dropped_uncalled_does_not_warn
)
test_close_wakes_whoever_waits_on_lost = contract.test_close_wakes_whoever_waits_on_lost
test_close_loses_every_hold_of_that_manager_and_no_other = (
    contract.test_close_loses_every_hold_of_that_manager_and_no_other
)
test_an_interrupt_in_a_lost_callback_comes_out_of_close = (
    contract.test_an_interrupt_in_a_lost_callback_comes_out_of_close
)
test_a_lost_callback_finds_its_name_free_everywhere = (
    contract.test_a_lost_callback_finds_its_name_free_everywhere
)
test_a_with_never_exited_ends_with_its_manager_garbage_collected = (
    contract.test_a_with_never_exited_ends_with_its_manager_garbage_collected
)
test_a_with_exit_releases_only_a_hold_of_its_own_manager = (
    contract.test_a_with_exit_releases_only_a_hold_of_its_own_manager
)
test_an_async_with_exit_releases_only_a_hold_of_its_own_manager = (
    contract.test_an_async_with_exit_releases_only_a_hold_of_its_own_manager
)
test_close_ends_a_thread_waiting_through_that_manager = (
    contract.test_close_ends_a_thread_waiting_through_that_manager
)
test_close_ends_both_the_hold_and_the_waiters_of_that_manager = (
    contract.test_close_ends_both_the_hold_and_the_waiters_of_that_manager
)
test_close_ends_a_task_waiting_through_that_manager = (
    contract.test_close_ends_a_task_waiting_through_that_manager
)
test_close_from_another_thread_ends_a_waiting_task = (
    contract.test_close_from_another_thread_ends_a_waiting_task
)
test_query_lists_the_holds_and_waiters_of_every_manager = (
    contract.test_query_lists_the_holds_and_waiters_of_every_manager
)
test_query_names_the_task_that_holds_or_waits = (
    contract.test_query_names_the_task_that_holds_or_waits
)
test_a_hold_handed_to_a_task_that_has_not_run_yet_shows_as_its_hold = (
    contract.test_a_hold_handed_to_a_task_that_has_not_run_yet_shows_as_its_hold
)
test_a_task_cancelled_before_it_took_its_handed_hold_gives_it_back = (
    contract.test_a_task_cancelled_before_it_took_its_handed_hold_gives_it_back
)
test_a_hold_handed_to_a_task_goes_with_its_manager_s_close = (
    contract.test_a_hold_handed_to_a_task_goes_with_its_manager_s_close
)
test_a_blocking_acquire_behind_an_async_with_of_another_manager_raises = (
    contract.test_a_blocking_acquire_behind_an_async_with_of_another_manager_raises
)
test_a_blocking_acquire_behind_an_async_with_of_a_closed_manager_gets_the_name = (
    contract.test_a_blocking_acquire_behind_an_async_with_of_a_closed_manager_gets_the_name
)
test_query_names_the_task_still_inside_async_with = (
    contract.test_query_names_the_task_still_inside_async_with
)
test_query_lists_each_shared_holder = contract.test_query_lists_each_shared_holder
test_query_forgets_a_lost_hold = contract.test_query_forgets_a_lost_hold
test_query_forgets_a_waiter_that_gave_up = contract.test_query_forgets_a_waiter_that_gave_up
test_unlock_twice_and_close_twice_are_harmless = (
    contract.test_unlock_twice_and_close_twice_are_harmless
)
test_an_unlock_called_from_another_thread_after_close_is_harmless = (
    contract.test_an_unlock_called_from_another_thread_after_close_is_harmless
)


# The contract tests that make their own managers, written again for a file url.


def test_with_returns_the_manager_and_closes_it(url: str) -> None:
    with LockManager(url) as mgr:
        assert isinstance(mgr, LockManager)
        unlock = mgr.lock("a").acquire()
    assert mgr.closed
    assert unlock.lost.cancelled
    assert isinstance(unlock.lost.reason, BackendError)
    unlock()
    fresh_free(url, "a")


def test_a_named_lock_keeps_its_manager_alive(url: str) -> None:
    lock = LockManager(url).lock("a")
    gc.collect()
    assert not lock.manager.closed
    with contextlib.closing(lock.manager):
        with lock:
            assert lock.locked()
            with LockManager(url) as other:
                contract.assert_taken(other.lock("a"))
        assert not lock.locked()


def test_fences_keep_growing_after_the_name_was_freed(url: str) -> None:
    first = LockManager(url)
    unlock = first.lock("a").acquire()
    before = unlock.fence
    unlock()
    first.close()
    del first, unlock
    gc.collect()
    # Every manager of the scope is gone; then many other names come and go.
    with LockManager(url) as churn:
        for i in range(5_000):
            churn.lock(f"other-{i}").acquire()()
    with LockManager(url) as second:
        unlock = second.lock("a").acquire()
        after = unlock.fence
        unlock()
        assert after > before
        reader = second.sharable_lock("a").shared.acquire()
        assert reader.fence >= after
        reader()
        writer = second.sharable_lock("a").exclusive.acquire()
        assert writer.fence > after
        writer()


def test_misuse_never_crashes(url: str) -> None:
    script = contract._MISUSE.replace("ctxlock.LockManager()", f"ctxlock.LockManager({url!r})")
    assert script.count(url) >= 6
    proc = subprocess.run(
        [sys.executable, "-X", "dev", "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=55,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    for bad in ("Fatal Python error", "panicked", "SystemError", "Segmentation"):
        assert bad not in proc.stderr, proc.stderr


# --- pickling ----------------------------------------------------------------------------------


def test_named_locks_of_a_file_scope_pickle(url: str) -> None:
    with LockManager(url) as mgr:
        lock, rw = mgr.lock("p:a"), mgr.sharable_lock("p:b")
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            again = pickle.loads(pickle.dumps(lock, protocol))
            assert isinstance(again, NamedLock)
            assert (again.name, again.mode, again.manager.url) == ("p:a", "exclusive", url)
            rw_again = pickle.loads(pickle.dumps(rw, protocol))
            assert isinstance(rw_again, NamedSharableLock)
            assert (rw_again.name, rw_again.manager.url) == ("p:b", url)
        # The lock unpickled is the same lock.
        held = lock.acquire()
        contract.assert_taken(pickle.loads(pickle.dumps(lock)))
        assert pickle.loads(pickle.dumps(mgr.sharable_lock("p:a"))).shared.try_acquire() is None
        held()
        with rw.shared:
            assert pickle.loads(pickle.dumps(rw)).shared.statistics().holders == 1
            contract.assert_taken(pickle.loads(pickle.dumps(rw)).exclusive)
        with rw.exclusive:
            assert pickle.loads(pickle.dumps(rw)).shared.try_acquire() is None


def test_a_copy_of_a_file_scope_lock_is_another_client_of_it(url: str) -> None:
    with LockManager(url) as mgr:
        lock, rw = mgr.lock("p:c"), mgr.sharable_lock("p:c")
        for copied in (copy.copy(lock), copy.deepcopy(lock)):
            assert isinstance(copied, NamedLock)
            assert (copied.name, copied.mode, copied.manager.url) == ("p:c", "exclusive", url)
            with lock:
                contract.assert_taken(copied)
            with copied:
                contract.assert_taken(lock)
                assert copy.copy(rw).shared.try_acquire() is None


def test_a_lock_of_a_closed_manager_still_pickles_and_names_the_lock(url: str) -> None:
    mgr = LockManager(url)
    lock = mgr.lock("p:d")
    mgr.close()
    again = pickle.loads(pickle.dumps(lock))
    assert not again.manager.closed
    with again:
        with LockManager(url) as other:
            contract.assert_taken(other.lock("p:d"))
    fresh_free(url, "p:d")


def test_memory_scope_locks_still_refuse_pickling() -> None:
    with LockManager("memory:") as mgr:
        for obj in (mgr.lock("a"), mgr.sharable_lock("b")):
            with pytest.raises(TypeError):
                pickle.dumps(obj)


def _spawned_child(lock: NamedLock, rw: NamedSharableLock, conn: Any) -> None:
    """In a spawned child: report what the unpickled locks see while the parent holds."""
    report: dict[str, Any] = {"pid": os.getpid(), "url": lock.manager.url}
    report["lock_free"] = lock.try_acquire() is not None
    report["lock_locked"] = lock.locked()
    report["shared_free"] = rw.shared.try_acquire() is not None
    conn.send(report)
    # The parent releases both; then both are taken here, and the fence is reported.
    if conn.poll(PATIENCE * 2):
        conn.recv()
        unlock = lock.acquire(deadline=PATIENCE)
        shared = rw.shared.acquire(deadline=PATIENCE)
        conn.send({"fence": unlock.fence})
        if conn.poll(PATIENCE * 2):
            conn.recv()
        unlock()
        shared()
    conn.close()


def test_a_lock_pickled_into_a_spawned_child_is_the_same_lock(url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    with LockManager(url) as mgr:
        lock, rw = mgr.lock("p:a"), mgr.sharable_lock("p:b")
        held = lock.acquire()
        held_rw = rw.exclusive.acquire()
        mine, theirs = ctx.Pipe()
        child = ctx.Process(target=_spawned_child, args=(lock, rw, theirs), daemon=True)
        child.start()
        try:
            theirs.close()
            assert mine.poll(30), "the spawned child said nothing"
            report = mine.recv()
            assert report["url"] == url
            assert report == {**report, "lock_free": False, "lock_locked": True}, report
            assert report["shared_free"] is False, report
            fence = held.fence
            held()
            held_rw()
            mine.send("go")
            assert mine.poll(PATIENCE * 2), "the child did not get the locks"
            got = mine.recv()
            assert got["fence"] > fence
            # The child's holds are seen here.
            assert lock.locked()
            assert rw.shared.statistics().holders == 1
            assert rw.exclusive.try_acquire() is None
            mine.send("done")
            child.join(PATIENCE * 2)
            assert child.exitcode == 0
        finally:
            if child.is_alive():
                child.kill()
                child.join(PATIENCE)
            mine.close()
            child.close()
        assert not lock.locked()
        contract.assert_free(mgr, "p:a")
        contract.assert_free(mgr, "p:b")


# --- other processes ----------------------------------------------------------------------------

_COUNTER = r"""
import os, sys, ctxlock
url, path, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
mgr = ctxlock.LockManager(url)
print("ready", flush=True)
sys.stdin.readline()  # go
for i in range(rounds):
    lock = mgr.lock("counter") if i % 2 else mgr.sharable_lock("counter").exclusive
    with lock.acquire(deadline=20):
        with open(path) as f:
            value = int(f.read())
        with open(path, "w") as f:
            f.write(str(value + 1))
mgr.close()
print("done", flush=True)
"""


def test_processes_exclude_each_other_on_a_shared_counter(
    url: str, tmp_path: Path, children: Callable[..., Child]
) -> None:
    n, k = 4, 250
    counter = tmp_path / "counter"
    counter.write_text("0")
    procs = [children(_COUNTER, url, str(counter), str(k)) for _ in range(n)]
    for child in procs:
        child.expect("ready", timeout=PATIENCE * 2)
    for child in procs:
        child.send("go")
    for child in procs:
        child.expect("done", timeout=40)
        assert child.finish() == 0, child.stderr
    assert int(counter.read_text()) == n * k
    fresh_free(url, "counter")


def test_shared_holds_of_processes_overlap_and_keep_a_writer_out(
    url: str, repls: Callable[[], Repl]
) -> None:
    first, second, writer = repls(), repls(), repls()
    first.acquire("r", "rw", "shared")
    # The second reader gets in while the first still holds: both hold at once.
    second.acquire("r", "rw", "shared", deadline=0)
    with LockManager(url) as mgr:
        stats = mgr.sharable_lock("rw").shared.statistics()
        assert (stats.locked, stats.holders) == (True, 2), stats
        for which in ("lock", "exclusive"):
            writer.send("try", "w", "rw", which)
            writer.expect("none", "w")
            writer.send("acquire", "w", "rw", which, 0)
            writer.expect("error", "w", "LockTimeout")
            writer.send("acquire", "w", "rw", which, 0.05)
            writer.expect("error", "w", "LockTimeout")
        assert mgr.lock("rw").try_acquire() is None
        with pytest.raises(WouldBlock):
            mgr.sharable_lock("rw").exclusive.acquire(blocking=False)
        first.release("r")
        writer.send("try", "w", "rw", "exclusive")
        writer.expect("none", "w")
        second.release("r")
        writer.acquire("w", "rw", "exclusive", deadline=0)
        assert mgr.sharable_lock("rw").shared.try_acquire() is None
        writer.release("w")
    fresh_free(url, "rw")


def _wait_in_thread(lock: NamedLock, **kwargs: Any) -> tuple[Callable[[], Any], list[Any]]:
    """Start ``lock.acquire(**kwargs)`` in a thread. Returns a join function and a list that
    gets (monotonic time it returned or raised, its Unlock or exception)."""
    result: list[Any] = []

    def run() -> None:
        try:
            got: Any = lock.acquire(**kwargs)
        except BaseException as exc:
            got = exc
        result.extend([time.monotonic(), got])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join(timeout: float = PATIENCE * 2) -> Any:
        thread.join(timeout)
        assert not thread.is_alive(), "the acquire did not return"
        return result

    return join, result


@pytest.mark.parametrize("held_as", ["lock", "exclusive", "shared"])
def test_killing_a_holder_frees_the_name_for_a_waiter_within_a_second(
    held_as: str, url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    child_fence = child.acquire("h", "k", held_as)
    with LockManager(url) as mgr:
        lock = mgr.lock("k")
        assert mgr.sharable_lock("k").statistics().locked
        join, _ = _wait_in_thread(lock, deadline=5)
        assert contract.waiting(lock)
        killed_at = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        got_at, unlock = join()
        assert isinstance(unlock, Unlock), unlock
        took = got_at - killed_at
        assert took < 1.0, f"the waiter got the name {took:.3f} s after the holder was killed"
        assert unlock.fence > child_fence
        infos = mgr.query("k")
        assert [(i.state, i.mode) for i in infos] == [("held", "exclusive")], infos
        assert all(owned_by(i.owner, os.getpid()) for i in infos), infos
        unlock()
    child.kill()
    fresh_free(url, "k")


def test_killing_a_process_ends_its_holds_and_its_waits(
    url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    child.acquire("a", "k:a", "lock")
    child.acquire("b", "k:b", "shared")
    with LockManager(url) as mgr:
        held = mgr.lock("k:c").acquire()
        child.send("wait", "c", "k:c", "lock", 30)  # waits on a name the parent holds
        child.expect("waiting", "c")
        assert contract.waiting(mgr.lock("k:c"))
        assert len(mgr.query("k:")) == 4
        child.kill()
        assert wait_until(lambda: not mgr.lock("k:a").locked(), 1.0)
        assert wait_until(lambda: not mgr.sharable_lock("k:b").shared.locked(), 1.0)
        assert wait_until(lambda: mgr.lock("k:c").statistics().waiting == 0, 1.0), mgr.query("k:")
        assert [(i.name, i.state) for i in mgr.query("k:")] == [("k:c", "held")]
        held()
    for name in ("k:a", "k:b", "k:c"):
        fresh_free(url, name)


def test_killing_one_of_two_readers_keeps_the_writer_out_until_the_other_leaves(
    url: str, repls: Callable[[], Repl]
) -> None:
    doomed, survivor = repls(), repls()
    doomed.acquire("r", "kr", "shared")
    survivor.acquire("r", "kr", "shared")
    with LockManager(url) as mgr:
        join, result = _wait_in_thread(mgr.lock("kr"), deadline=PATIENCE * 2)
        assert contract.waiting(mgr.lock("kr"))
        doomed.kill()
        assert wait_until(lambda: mgr.sharable_lock("kr").statistics().holders == 1, 1.0)
        assert result == [], "the writer got in while a reader still held"
        released_at = time.monotonic()
        survivor.release("r")
        got_at, unlock = join()
        assert isinstance(unlock, Unlock), unlock
        assert got_at - released_at < 1.0, got_at - released_at
        unlock()
    fresh_free(url, "kr")


_CHURN = r"""
import os, sys, ctxlock
url, marker = sys.argv[1], sys.argv[2]
mgr = ctxlock.LockManager(url)

PF_EXITING = 0x4  # set as a process starts to exit, before its files close


def alive(pid):
    # A killed process lets go of its locks as its files close, while it is still
    # exiting and before it is a zombie: one whose exit has begun counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or the read
        return False
    state, flags = fields[0], int(fields[6])
    return state not in ("Z", "X") and not flags & PF_EXITING

print("ready", flush=True)
i = 0
while True:
    i += 1
    which = ("lock", "exclusive", "shared")[i % 3]
    lock = mgr.lock("churn") if which == "lock" else getattr(mgr.sharable_lock("churn"), which)
    try:
        unlock = lock.acquire(deadline=5)
    except ctxlock.LockTimeout:
        print("stuck", i, flush=True)
        sys.exit(3)
    if which != "shared":
        try:
            os.symlink(str(os.getpid()), marker)  # made at once with its owner's pid in it
        except FileExistsError:
            owner = int(os.readlink(marker))
            if alive(owner):
                print("overlap", i, owner, flush=True)
                sys.exit(4)
            os.unlink(marker)  # left by a process killed inside its hold
            os.symlink(str(os.getpid()), marker)
        os.unlink(marker)
    unlock()
    if i == 200:
        print("running", flush=True)
"""


def test_processes_killed_at_any_moment_never_wedge_a_name(
    url: str, tmp_path: Path, children: Callable[..., Child]
) -> None:
    # Three processes churn on one name in every mode; one of them is killed at a random
    # moment (while it holds, waits, or is between the two), a new one takes its place, ten
    # times. The others go on; afterwards the name is free and nobody is queued on it.
    marker = tmp_path / "inside"
    rng = random.Random(3)

    def start() -> Child:
        child = children(_CHURN, url, str(marker))
        child.expect("ready", timeout=PATIENCE * 2)
        child.expect("running", timeout=PATIENCE * 2)
        return child

    procs = [start() for _ in range(3)]
    for _ in range(10):
        time.sleep(rng.uniform(0, 0.05))  # a random moment to kill one, not a handshake
        victim = procs.pop(rng.randrange(len(procs)))
        # Still running up to its kill: it found no overlap and was not stuck.
        assert victim.proc.poll() is None, (victim.proc.returncode, victim.stderr)
        victim.kill()  # a marker it leaves behind is cleared by the next exclusive holder
        procs.append(start())
        for child in procs:
            assert child.proc.poll() is None, (child.proc.returncode, child.stderr)
    for child in procs:
        assert child.proc.poll() is None, (child.proc.returncode, child.stderr)
        child.kill()
    with contextlib.suppress(FileNotFoundError):
        marker.unlink()
    # Every process is dead and reaped: within a second each mode can be taken, by a
    # waiting acquire and by one that does not wait.
    with LockManager(url) as mgr:
        for which in contract.VIEWS:
            try:
                view(mgr, "churn", which).acquire(deadline=1.0)()
            except LockTimeout:
                stats = mgr.sharable_lock("churn").statistics()
                pytest.fail(f"{which} still blocked after every process died: {stats}")

            def takeable(which: str = which) -> bool:
                unlock = view(mgr, "churn", which).try_acquire()
                if unlock is None:
                    return False
                unlock()
                return True

            assert wait_until(takeable, 1.0), (
                f"{which}: try_acquire() fails a second after every process died, though "
                f"{mgr.sharable_lock('churn').statistics()} and query() is {mgr.query()}"
            )
        assert mgr.query("churn") == []
    fresh_free(url, "churn")


#: Names held, waited for or cached at once in one directory (README, "Limits").
TABLE_NAMES = 4096


def test_a_full_table_makes_a_new_name_wait_for_a_slot(url: str, managers: Managers) -> None:
    mgr, other = managers(2)
    held: list[Unlock] = []
    try:
        for i in range(TABLE_NAMES):
            held.append(mgr.lock(f"full-{i}").acquire(deadline=PATIENCE))
    except LockTimeout:
        pytest.fail(f"only {len(held)} names could be held at once")
    try:
        # Every held name is still excluded; a new name waits for a slot.
        for i in range(0, TABLE_NAMES, 37):
            assert other.lock(f"full-{i}").try_acquire() is None, i
        with pytest.raises(LockTimeout):
            other.lock("one-more").acquire(deadline=0.2)
        join, _ = _wait_in_thread(other.lock("one-more"), deadline=PATIENCE)
        time.sleep(0.05)  # most likely waiting by now (not seen queued: it has no slot)
        released_at = time.monotonic()
        held.pop()()
        got_at, unlock = join()
        assert isinstance(unlock, Unlock), unlock
        assert got_at - released_at < 1.0, got_at - released_at
        contract.assert_taken(mgr.lock("one-more"))
        unlock()
    finally:
        for u in held:
            u()
    assert mgr.query("full-") == []


@pytest.mark.parametrize(
    ("held", "other"),
    [
        ("x" * 1023 + "a", "x" * 1023 + "b"),
        ("é" * 511 + "a", "é" * 511 + "b"),
        ("a", "a\0b"),
        ("a\0b", "a\0c"),
        ("🔒" * 256, "🔒" * 255),
        ("A", "a"),
    ],
    ids=[
        "1024-bytes-last-differs",
        "utf8-last-differs",
        "nul-suffix",
        "after-nul",
        "4-byte",
        "case",
    ],
)
def test_names_that_differ_anywhere_are_different_locks(
    held: str, other: str, url: str, repls: Callable[[], Repl], managers: Managers
) -> None:
    mgr, second = managers(2)
    with mgr.lock(held):
        theirs = second.lock(other).try_acquire()
        assert theirs is not None, f"{other!r} was taken while only {held!r} was held"
        theirs()
        contract.assert_taken(second.lock(held))
        (info,) = second.query(held)
        assert info.name == held
        assert [i.name for i in second.query(other)] == ([held] if held.startswith(other) else [])
    # Across processes too (the child takes the names through its argv-less commands, so
    # only names without whitespace or NUL go there).
    if not any(c.isspace() or c == "\0" for c in held + other):
        child = repls()
        child.acquire("h", held)
        assert mgr.lock(other).acquire(deadline=0)() is None
        contract.assert_taken(mgr.lock(held))
        assert [i.name for i in mgr.query(held)] == [held]
        child.release("h")
    fresh_free(url, held)
    fresh_free(url, other)


def test_many_names_of_two_processes_do_not_collide(url: str, repls: Callable[[], Repl]) -> None:
    # The table is fixed and names share its slots: no name's hold may block another's.
    child = repls()
    n = 300
    for i in range(n):
        child.send("acquire", f"c{i}", f"c-{i}", "lock" if i % 2 else "shared", 0)
    for i in range(n):
        child.expect("held", f"c{i}")
    with LockManager(url) as mgr:
        mine = [mgr.lock(f"p-{i}").acquire(deadline=0) for i in range(n)]
        for i in range(n):
            assert mgr.lock(f"c-{i}").try_acquire() is None, f"c-{i}"
        assert len(mgr.query("c-")) == n
        assert len(mgr.query("p-")) == n
        for unlock in mine:
            unlock()
    child.send("exit")
    child.expect("bye")
    assert child.finish() == 0
    with LockManager(url) as mgr:
        assert mgr.query() == []


@pytest.mark.parametrize("waiters", [1, 3])
def test_waiters_killed_while_waiting_get_no_turns(
    waiters: int, url: str, repls: Callable[[], Repl]
) -> None:
    # Processes wait for a name this one holds and die waiting. Once nobody is counted as
    # waiting, the name is free after each release: a try (or deadline=0) gets it at once,
    # from any manager, every time.
    kids = [repls() for _ in range(waiters)]
    with LockManager(url) as mgr, LockManager(url) as other:
        held = mgr.lock("z").acquire()
        for i, child in enumerate(kids):
            child.send("wait", "w", "z", contract.VIEWS[i % 3], 30)
            child.expect("waiting", "w")
        assert contract.waiting(mgr.lock("z"), waiters)
        for child in kids:
            child.kill()
        assert wait_until(lambda: mgr.lock("z").statistics().waiting == 0, 1.0), mgr.query()
        held()
        failures = []
        for i in range(20):
            for client, which in ((mgr, "lock"), (other, "exclusive"), (mgr, "shared")):
                unlock = view(client, "z", which).try_acquire()
                if unlock is None:
                    failures.append((i, which, client is mgr))
                else:
                    unlock()
        assert failures == [], (
            f"{len(failures)} of 60 tries failed on a free name whose waiters died "
            f"(round, view, through the manager that held): {failures[:6]}"
        )
    fresh_free(url, "z")


def test_a_name_its_queue_of_clients_let_go_is_free_for_the_next_at_once(url: str) -> None:
    # Two clients queue for a name two readers hold; when all four holds have ended, a
    # third client's deadline=0 gets it, every round. (A turn given to a waiting client
    # after it had taken the name already used to outlive its wait and keep the third out
    # for a few milliseconds; rare, and likelier on a busy machine.)
    with LockManager(url) as first, LockManager(url) as second, LockManager(url) as third:
        failures = []
        with ThreadPoolExecutor(2) as pool:
            for i in range(150):
                name = f"q{i}"
                readers = [m.sharable_lock(name).shared.acquire() for m in (first, second)]
                writers = [
                    pool.submit(contract.take_and_release, first.lock(name)),
                    pool.submit(contract.take_and_release, second.sharable_lock(name).exclusive),
                ]
                assert contract.waiting(third.lock(name), 2)
                for unlock in readers:
                    unlock()
                for writer in writers:
                    writer.result(PATIENCE)
                for which in ("lock", "shared"):
                    try:
                        view(third, name, which).acquire(deadline=0)()
                    except LockTimeout:
                        failures.append((i, which))
        assert failures == [], f"{len(failures)} of 300 tries failed (round, view): {failures[:6]}"


def test_a_waiting_writer_gets_the_name_as_the_readers_leave_though_a_reader_has_the_turn(
    url: str,
) -> None:
    # Phase-fair across clients: a reader of one client holds the name, a writer of a
    # second waits for it, and a reader of a third waits behind the writer. The release
    # gives the turn to the next waiting client after it, the reader's (a release cannot
    # tell the modes apart), which cannot use it while the writer waits: it must pass it
    # on at once, not keep the writer out until the turn's grace (5 ms) runs out.
    # (Managers made in this order are the table's clients 0, 1 and 2.)
    with (
        LockManager(url) as holder,
        LockManager(url) as reader,
        LockManager(url) as writer,
        ThreadPoolExecutor(2) as pool,
    ):

        def write(name: str) -> float:
            unlock = writer.sharable_lock(name).exclusive.acquire(deadline=PATIENCE)
            took = time.monotonic()
            unlock()
            return took

        waits = []
        for i in range(21):
            name = f"p{i}"
            held = holder.sharable_lock(name).shared.acquire()
            wrote = pool.submit(write, name)
            assert contract.waiting(holder.lock(name), 1)
            read = pool.submit(contract.take_and_release, reader.sharable_lock(name).shared)
            assert contract.waiting(holder.lock(name), 2)
            released = time.monotonic()
            held()
            waits.append(wrote.result(PATIENCE) - released)
            read.result(PATIENCE)
        waits.sort()
        assert waits[10] < 0.0025, (
            f"the writer got the name {waits[10] * 1e3:.2f} ms (median of 21) after the "
            f"readers left; longest {waits[-1] * 1e3:.2f} ms"
        )
    fresh_free(url, "p0")


def test_a_killed_waiting_writer_does_not_hold_readers_back(
    url: str, repls: Callable[[], Repl]
) -> None:
    # Phase-fair: a waiting writer holds new readers back, but a writer that died while
    # waiting waits for nothing any more.
    writer = repls()
    with LockManager(url) as mgr:
        reader = mgr.sharable_lock("k").shared.acquire()
        writer.send("wait", "w", "k", "exclusive", 30)
        writer.expect("waiting", "w")
        assert contract.waiting(mgr.lock("k"))
        assert mgr.sharable_lock("k").shared.try_acquire() is None
        killed_at = time.monotonic()
        writer.kill()
        late = mgr.sharable_lock("k").shared.acquire(deadline=PATIENCE)
        took = time.monotonic() - killed_at
        assert took < 1.0, f"a new reader got in {took:.3f} s after the waiting writer died"
        assert mgr.sharable_lock("k").shared.statistics().holders == 2
        late()
        reader()
    fresh_free(url, "k")


_TOGGLER = r"""
import os, sys, random, threading, ctxlock
url, marker = sys.argv[1], sys.argv[2]
mgr = ctxlock.LockManager(url)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
rng = random.Random(os.getpid())
holds = overlaps = 0
print("ready", flush=True)
while not stop.is_set():
    lock = mgr.lock("race") if rng.random() < 0.5 else mgr.sharable_lock("race").exclusive
    with lock.acquire(deadline=20):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            overlaps += 1
        else:
            os.close(fd)
            for _ in range(rng.randrange(40000)):  # holds for up to about 1 ms
                pass
            os.unlink(marker)
        holds += 1
    for _ in range(rng.randrange(20000)):
        pass
mgr.close()
print("done", holds, overlaps, flush=True)
"""


def test_cancel_and_deadline_races_against_another_process_leave_nothing_held(
    url: str, tmp_path: Path, children: Callable[..., Child]
) -> None:
    marker = tmp_path / "inside"
    child = children(_TOGGLER, url, str(marker))
    child.expect("ready", timeout=PATIENCE * 2)
    cancels: queue.Queue[tuple[CancelToken, float] | None] = queue.Queue()

    def canceller() -> None:
        while (item := cancels.get()) is not None:
            token, delay = item
            end = time.monotonic() + delay
            while time.monotonic() < end:
                pass
            token.cancel("race")

    cancelling = threading.Thread(target=canceller, daemon=True)
    cancelling.start()
    rng = random.Random(1)
    outcomes = {"held": 0, "LockTimeout": 0, "Cancelled": 0}
    overlaps = 0
    end = time.monotonic() + 8.0
    rounds = 0
    try:
        with LockManager(url) as mgr:
            for rounds in range(1, 2001):
                lock = mgr.lock("race") if rounds % 3 else mgr.sharable_lock("race").exclusive
                try:
                    if rounds % 2:
                        unlock = lock.acquire(deadline=rng.uniform(0, 0.001))
                    else:
                        token = CancelToken()
                        cancels.put((token, rng.uniform(0, 0.001)))
                        unlock = lock.acquire(token, deadline=PATIENCE)
                except (LockTimeout, Cancelled) as exc:
                    outcomes[type(exc).__name__] += 1
                else:
                    outcomes["held"] += 1
                    try:
                        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                    except FileExistsError:
                        overlaps += 1
                    else:
                        os.close(fd)
                        os.unlink(marker)
                    unlock()
                # Out of the lock a while, so the child takes it between our tries.
                pause = time.perf_counter() + rng.uniform(0, 0.0005)
                while time.perf_counter() < pause:
                    pass
                if time.monotonic() > end:
                    break
    finally:
        cancels.put(None)
        cancelling.join(PATIENCE)
    child.send("stop")
    _, holds, child_overlaps = child.expect("done", timeout=PATIENCE * 4)
    assert child.finish() == 0, child.stderr
    assert overlaps == 0 and int(child_overlaps) == 0, (overlaps, child_overlaps)
    assert outcomes["held"] > 0 and int(holds) > 0, (outcomes, holds)
    assert outcomes["LockTimeout"] + outcomes["Cancelled"] > 0, outcomes
    assert not marker.exists()
    with LockManager(url) as fresh:
        for which in contract.VIEWS:
            lock = view(fresh, "race", which)
            assert not lock.locked(), (rounds, outcomes)
            stats = lock.statistics()
            assert (stats.holders, stats.waiting) == (0, 0), (stats, rounds, outcomes)
        assert fresh.query() == []
    fresh_free(url, "race")


@pytest.mark.parametrize("gives_up_by", ["cancel", "deadline"])
def test_a_waiting_writer_of_another_process_holds_readers_back_until_it_gives_up(
    gives_up_by: str, url: str, repls: Callable[[], Repl]
) -> None:
    reader_a, writer_b = repls(), repls()
    reader_a.acquire("r", "pf", "shared")
    deadline = 1.0 if gives_up_by == "deadline" else 30
    writer_b.send("wait", "w", "pf", "exclusive", deadline)
    writer_b.expect("waiting", "w")
    with LockManager(url) as mgr:
        assert contract.waiting(mgr.lock("pf"))
        waiting_seen = time.monotonic()
        late = mgr.sharable_lock("pf").shared
        with pytest.raises(LockTimeout):
            late.acquire(deadline=0.2)
        assert late.try_acquire() is None
        with pytest.raises(WouldBlock):
            late.acquire(blocking=False)
        join, _ = _wait_in_thread(late, deadline=PATIENCE * 2)
        assert contract.waiting(mgr.lock("pf"), 2)
        if gives_up_by == "cancel":
            gave_up_at = time.monotonic()
            writer_b.send("cancel", "w")
            writer_b.expect("error", "w", "Cancelled")
            got_at, unlock = join()
            assert isinstance(unlock, Unlock), unlock
            took = got_at - gave_up_at
            assert took < 0.5, f"the held-back reader got in {took:.3f} s after the cancel"
        else:
            got_at, unlock = join()
            assert isinstance(unlock, Unlock), unlock
            writer_b.expect("error", "w", "LockTimeout")
            # It got in only once the writer's deadline had passed, and promptly then.
            took = got_at - waiting_seen
            assert took < deadline + 0.5, f"the reader got in {took:.3f} s after queuing"
        # A still holds: the reader held back joined it.
        assert mgr.sharable_lock("pf").shared.statistics().holders == 2
        unlock()
    reader_a.release("r")
    fresh_free(url, "pf")


def test_a_writer_deadline_is_what_lets_the_readers_in(url: str, repls: Callable[[], Repl]) -> None:
    # The reader queued behind the waiting writer does not get in before that writer's
    # deadline: it waits about as long as the writer has left.
    reader_a, writer_b = repls(), repls()
    reader_a.acquire("r", "pf", "shared")
    sent_at = time.monotonic()
    writer_b.send("wait", "w", "pf", "exclusive", 1.0)
    writer_b.expect("waiting", "w")
    with LockManager(url) as mgr:
        assert contract.waiting(mgr.lock("pf"))
        got = mgr.sharable_lock("pf").shared.acquire(deadline=PATIENCE)
        got_at = time.monotonic()
        writer_b.expect("error", "w", "LockTimeout")
        assert got_at - sent_at >= 1.0 - 0.02, got_at - sent_at
        got()
    reader_a.release("r")


_FENCES = r"""
import sys, random, ctxlock
url, path, rounds, mixed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "mixed"
mgr = ctxlock.LockManager(url)
rng = random.Random()
print("ready", flush=True)
sys.stdin.readline()  # go
for i in range(rounds):
    which = rng.choice(["lock", "exclusive", "shared"] if mixed else ["lock", "exclusive"])
    lock = mgr.lock("f") if which == "lock" else getattr(mgr.sharable_lock("f"), which)
    with lock.acquire(deadline=20) as unlock:
        with open(path, "a") as f:
            f.write(f"{int(which != 'shared')} {unlock.fence}\n")
mgr.close()
print("done", flush=True)
"""


@pytest.mark.parametrize("modes", ["exclusive", "mixed"])
def test_fences_keep_their_order_across_processes(
    modes: str, url: str, tmp_path: Path, children: Callable[..., Child]
) -> None:
    log = tmp_path / "fences"
    log.touch()
    rounds = 200
    procs = [children(_FENCES, url, str(log), str(rounds), modes) for _ in range(3)]
    for child in procs:
        child.expect("ready", timeout=PATIENCE * 2)
    for child in procs:
        child.send("go")
    for child in procs:
        child.expect("done", timeout=40)
        assert child.finish() == 0, child.stderr
    records = [
        (line.split()[0] == "1", int(line.split()[1]))
        for line in log.read_text().split("\n")
        if line
    ]
    assert len(records) == 3 * rounds
    top = top_writer = -1
    for i, (exclusive, fence) in enumerate(records):
        window = records[max(0, i - 5) : i + 1]
        if exclusive:
            assert fence > top, (i, window)
            top_writer = fence
        else:
            assert fence >= top_writer, (i, window)
        top = max(top, fence)
    if modes == "exclusive":
        fences = [fence for _, fence in records]
        assert all(a < b for a, b in itertools.pairwise(fences))
    fresh_free(url, "f")


def test_query_lists_the_holds_and_waits_of_another_process(
    url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    with LockManager(url) as mgr, LockManager(url) as other:
        parent_hold = mgr.lock("q:b").acquire()
        before = time.time()
        child.acquire("a", "q:a", "lock")
        held_after = time.time()
        child.send("wait", "b", "q:b", "shared", 30)
        child.expect("waiting", "b")
        assert contract.waiting(mgr.lock("q:b"))
        waiting_after = time.time()
        try:
            for client in (mgr, other):
                infos = client.query("q:")
                got = [(i.name, i.mode, i.state) for i in infos]
                assert got == [
                    ("q:a", "exclusive", "held"),
                    ("q:b", "exclusive", "held"),
                    ("q:b", "shared", "waiting"),
                ], infos
                a_held, b_held, b_waiting = infos
                assert owned_by(a_held.owner, child.pid), a_held
                assert owned_by(b_held.owner, os.getpid()), b_held
                assert threading.current_thread().name in b_held.owner, b_held
                assert owned_by(b_waiting.owner, child.pid), b_waiting
                assert before - CLOCK_TICK <= a_held.since <= held_after + 0.001, (
                    a_held,
                    before,
                    held_after,
                )
                assert held_after - CLOCK_TICK <= b_waiting.since <= waiting_after + 0.001, (
                    b_waiting,
                    held_after,
                    waiting_after,
                )
                only_a = [(i.name, i.mode, i.state, i.owner, i.since) for i in client.query("q:a")]
                assert only_a == [(a_held.name, a_held.mode, "held", a_held.owner, a_held.since)]
            assert mgr.query("q:c") == []
        finally:
            parent_hold()
        child.expect("held", "b")
        child.release("a")
        child.release("b")
        assert mgr.query("q:") == []


def all_stopped(pid: int) -> bool:
    """Every thread of process ``pid`` is stopped by a signal (state ``T`` in /proc)."""
    tasks = Path(f"/proc/{pid}/task")
    states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()]
    return all(state == "T" for state in states)


def test_asking_a_stopped_process_lets_this_process_s_other_threads_run(
    url: str, repls: Callable[[], Repl]
) -> None:
    # query(), locked() and statistics() wait for every live client's answer, up to a
    # second for one that is stopped: with the GIL released, so that this process's other
    # threads run meanwhile (one of them may be the agent a manager needs to answer).
    child = repls()
    child.acquire("a", "q:a")
    os.kill(child.pid, signal.SIGSTOP)
    # The signal stops the child's threads a moment later, each when it next runs: until
    # then its agent may still answer an ask at once.
    assert wait_until(lambda: all_stopped(child.pid)), "the child did not stop"
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        with LockManager(url) as mgr:
            asks: list[Callable[[], object]] = [
                lambda: mgr.query("q:"),
                lambda: mgr.lock("q:a").locked(),
                lambda: mgr.sharable_lock("q:a").statistics(),
                lambda: repr(mgr.lock("q:a")),
            ]
            for ask in asks:
                start = time.monotonic()
                ask()
                end = time.monotonic()
                ran = sum(start < t < end for t in ticks)
                assert ran >= 10, (ask, ran, end - start)
    finally:
        stop.set()
        os.kill(child.pid, signal.SIGCONT)
        ticker.join(PATIENCE)
    child.release("a")


def test_query_from_another_process_tells_the_thread_apart(
    url: str, repls: Callable[[], Repl]
) -> None:
    # The owner is "host:pid" and the thread: from another process, its id (the README:
    # thread names are known in-process only), so two threads of one process differ.
    child = repls()
    with LockManager(url) as mgr:
        held = mgr.lock("t:a").acquire()
        child.send("acquire", "m", "t:m", "lock", PATIENCE)  # in the child's main thread
        main_ident = child.expect("held", "m")[3]
        child.send("wait", "w", "t:a", "lock", 30)  # waits in a thread of its own
        child.expect("waiting", "w")
        assert contract.waiting(mgr.lock("t:a"))
        try:
            waiting_owner = {i.state: i.owner for i in mgr.query("t:a")}["waiting"]
        finally:
            held()
        waiter_ident = child.expect("held", "w")[3]
        owners = {(i.name, i.state): i.owner for i in mgr.query("t:")}
        for owner in owners.values():
            assert owned_by(owner, child.pid), owners
        assert waiter_ident in owners[("t:a", "held")], (waiter_ident, owners)
        assert waiter_ident in waiting_owner, (waiter_ident, waiting_owner)
        assert owners[("t:a", "held")] != owners[("t:m", "held")], owners
        assert main_ident in owners[("t:m", "held")], (main_ident, owners)
        child.release("w")
        child.release("m")


def test_statistics_count_the_holds_and_waits_of_other_processes(
    url: str, repls: Callable[[], Repl]
) -> None:
    first, second, third = repls(), repls(), repls()
    with LockManager(url) as mgr:
        lock, shared = mgr.lock("s"), mgr.sharable_lock("s").shared
        assert not lock.locked()
        whole = mgr.sharable_lock("s")
        first.acquire("x", "s", "lock")
        # Each view reports its own mode; the sharable lock the whole lock.
        assert lock.locked() and not shared.locked()
        stats = lock.statistics()
        assert (stats.locked, stats.holders, stats.waiting) == (True, 1, 0), stats
        assert shared.statistics().holders == 0
        stats = whole.statistics()
        assert (stats.locked, stats.holders, stats.waiting) == (True, 1, 0), stats
        first.release("x")
        assert not lock.locked()
        assert not whole.statistics().locked
        first.acquire("r", "s", "shared")
        second.acquire("r", "s", "shared")
        assert shared.locked() and not lock.locked()
        stats = shared.statistics()
        assert (stats.locked, stats.holders, stats.waiting) == (True, 2, 0), stats
        assert lock.statistics().holders == 0
        stats = whole.statistics()
        assert (stats.locked, stats.holders, stats.waiting) == (True, 2, 0), stats
        third.send("wait", "w", "s", "exclusive", 30)
        third.expect("waiting", "w")
        assert wait_until(lambda: lock.statistics().waiting == 1)
        assert shared.statistics().waiting == 1
        first.release("r")
        second.release("r")
        third.expect("held", "w")
        stats = lock.statistics()
        assert (stats.locked, stats.holders, stats.waiting) == (True, 1, 0), stats
        third.release("w")
        assert not lock.locked()
    fresh_free(url, "s")


@pytest.mark.parametrize("which", contract.VIEWS)
def test_a_cancel_ends_a_wait_on_another_process_at_once(
    which: str, url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    child.acquire("h", "c", "lock")
    with LockManager(url) as mgr:
        token = CancelToken()
        join, _ = _wait_in_thread(view(mgr, "c", which), cancel=token, deadline=PATIENCE * 2)
        assert contract.waiting(mgr.lock("c"))
        cancelled_at = time.monotonic()
        token.cancel("enough")
        ended_at, error = join()
        assert isinstance(error, Cancelled), error
        took = ended_at - cancelled_at
        assert took < 0.5, f"the cancelled acquire returned {took:.3f} s after the cancel"
        # The raised acquire holds nothing and waits no more.
        assert mgr.lock("c").statistics().waiting == 0
        assert [(i.state, owned_by(i.owner, child.pid)) for i in mgr.query("c")] == [("held", True)]
        child.release("h")
        fresh_free(url, "c")


def test_a_deadline_ends_a_wait_on_another_process_in_time(
    url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    child.acquire("h", "d", "lock")
    with LockManager(url) as mgr:
        for which in contract.VIEWS:
            start = time.monotonic()
            with pytest.raises(LockTimeout):
                view(mgr, "d", which).acquire(deadline=0.2)
            took = time.monotonic() - start
            assert 0.2 <= took < 0.7, (which, took)
            assert mgr.lock("d").statistics().waiting == 0
        child.release("h")
    fresh_free(url, "d")


@pytest.mark.asyncio
@pytest.mark.parametrize("ends_by", ["release", "deadline"])
async def test_an_async_wait_on_another_process_does_not_block_the_loop(
    ends_by: str, url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    child.acquire("h", "a", "lock")
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    with LockManager(url) as mgr:
        ticking = asyncio.create_task(ticker())
        try:
            if ends_by == "release":
                waiter = asyncio.ensure_future(mgr.lock("a").acquire_async(deadline=PATIENCE))
                assert await contract.until(lambda: mgr.lock("a").statistics().waiting == 1)
                at_queue = ticks
                await asyncio.sleep(0.3)
                assert not waiter.done()
                child.send("release", "h")
                unlock = await contract.bounded(waiter)
                assert ticks - at_queue >= 10, f"{ticks - at_queue} ticks while waiting 0.3 s"
                assert isinstance(unlock, Unlock)
                unlock()
                child.expect("released", "h")
            else:
                before = ticks
                with pytest.raises(LockTimeout):
                    await contract.bounded(mgr.lock("a").acquire_async(deadline=0.5))
                assert ticks - before >= 15, f"{ticks - before} ticks while waiting 0.5 s"
                child.release("h")
        finally:
            stop.set()
            await contract.bounded(ticking)
    fresh_free(url, "a")


@pytest.mark.asyncio
async def test_tasks_waiting_through_two_managers_of_one_loop_get_the_name_in_turn(
    url: str, managers: Managers
) -> None:
    # One loop: a task holds through manager a; a task waits through b, then another
    # through a. Neither has a deadline: on each release the next one gets the name.
    a, b = managers(2)
    held = await a.lock("t").acquire_async()
    waiter_b = asyncio.ensure_future(b.lock("t").acquire_async())
    assert await contract.until(lambda: a.lock("t").statistics().waiting == 1)
    waiter_a = asyncio.ensure_future(a.lock("t").acquire_async())
    assert await contract.until(lambda: a.lock("t").statistics().waiting == 2)
    assert not waiter_b.done() and not waiter_a.done()
    held()
    done, _ = await asyncio.wait(
        {waiter_a, waiter_b}, timeout=PATIENCE, return_when="FIRST_COMPLETED"
    )
    assert len(done) == 1, done
    (first,) = done
    (await first)()
    second = waiter_a if first is waiter_b else waiter_b
    (await contract.bounded(second))()
    fresh_free(url, "t")


_EXIT_UNCLOSED = """
import asyncio, sys, threading, ctxlock
url, how, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
a, b = ctxlock.LockManager(url), ctxlock.LockManager(url)
held = a.lock("x").acquire()
if how == "task":
    async def main():
        asyncio.get_running_loop().call_later(seconds, held)
        (await b.lock("x").acquire_async(deadline=10))()
    asyncio.run(main())
else:
    threading.Timer(seconds, held).start()
    b.lock("x").acquire(deadline=10)()
print("end", flush=True)
# The managers are left open: the interpreter's exit ends them.
"""


@pytest.mark.parametrize(
    ("how", "seconds", "runs"), [("thread", 1.2, 1), ("task", 0.1, 6), ("task", 1.2, 2)]
)
def test_a_process_may_exit_without_closing_its_managers(
    how: str, seconds: float, runs: int, url: str
) -> None:
    # Run a few times: what goes wrong at exit may depend on timing.
    statuses = []
    for _ in range(runs):
        proc = _run(_EXIT_UNCLOSED, url, how, str(seconds))
        statuses.append(proc.returncode)
        if proc.returncode != 0:
            break
    assert statuses == [0] * runs, f"exit statuses {statuses}; the last one's stderr: {proc.stderr}"
    _assert_no_crash(proc)
    assert proc.stdout.split() == ["end"], proc.stdout + proc.stderr
    fresh_free(url, "x")


def test_unlock_returns_once_another_process_can_take_the_name(
    url: str, repls: Callable[[], Repl]
) -> None:
    # Right after unlock() returns here, the other process's one try gets the name: every
    # time, both ways.
    child = repls()
    with LockManager(url) as mgr:
        for i in range(100):
            which = contract.VIEWS[i % 3]
            view(mgr, "u", which).acquire(deadline=PATIENCE)()
            child.send("try", "t", "u", "lock" if i % 2 else "exclusive")
            child.expect("held", "t")
            child.release("t")
            view(mgr, "u", which).acquire(deadline=0)()
    fresh_free(url, "u")


_OPEN_MANY = """
import os, sys, ctxlock
url, count = sys.argv[1], int(sys.argv[2])
managers = []
try:
    for _ in range(count):
        managers.append(ctxlock.LockManager(url))
except ctxlock.BackendError as exc:
    print("refused", len(managers), repr(exc.reason), flush=True)
else:
    print("opened", len(managers), flush=True)
for i, mgr in enumerate(managers):
    mgr.lock(f"m-{i}").acquire()()
if sys.argv[3] == "wait":
    sys.stdin.readline()  # killed here
for mgr in managers:
    mgr.close()
print("closed", flush=True)
"""


def test_the_places_of_a_killed_process_s_managers_are_taken_back(
    url: str, children: Callable[..., Child]
) -> None:
    # Two processes open 100 managers each and die by SIGKILL; the table's places for
    # managers (128) must come back, or this process could open none.
    for _ in range(2):
        child = children(_OPEN_MANY, url, "100", "wait")
        child.expect("opened", "100", timeout=PATIENCE * 4)
        child.kill()
    made: list[LockManager] = []
    try:
        for i in range(100):
            try:
                made.append(LockManager(url))
            except BackendError as exc:
                pytest.fail(f"manager {i} refused after the killed ones: {exc.reason}")
        for i, mgr in enumerate(made):
            mgr.lock(f"m-{i}").acquire(deadline=PATIENCE)()
    finally:
        for mgr in made:
            mgr.close()


def test_too_many_managers_on_one_directory_is_a_backend_error_not_a_crash(url: str) -> None:
    proc = _run(_OPEN_MANY, url, "200", "close")
    _assert_no_crash(proc)
    first = proc.stdout.split("\n")[0].split()
    assert first[0] in ("opened", "refused"), proc.stdout
    assert int(first[1]) >= 128, proc.stdout
    assert "closed" in proc.stdout
    # All closed: as many can be opened again.
    proc = _run(_OPEN_MANY, url, "128", "close")
    _assert_no_crash(proc)
    assert proc.stdout.split()[:2] == ["opened", "128"], proc.stdout


_POOL_COUNTER_ROUNDS = 20


def _pool_increment(args: tuple[NamedLock, str]) -> int:
    """In a pool worker: add _POOL_COUNTER_ROUNDS to the counter file under the lock."""
    lock, path = args
    for _ in range(_POOL_COUNTER_ROUNDS):
        with lock.acquire(deadline=20):
            with open(path) as f:
                value = int(f.read())
            with open(path, "w") as f:
                f.write(str(value + 1))
    return os.getpid()


def test_a_pickled_lock_excludes_across_a_spawned_pool(url: str, tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    ctx = multiprocessing.get_context("spawn")
    with LockManager(url) as mgr:
        lock = mgr.lock("pool")
        with ctx.Pool(3) as pool:
            result = pool.map_async(_pool_increment, [(lock, str(counter))] * 12)
            pids = result.get(timeout=60)
        pool.join()
    assert len(pids) == 12
    assert int(counter.read_text()) == 12 * _POOL_COUNTER_ROUNDS
    fresh_free(url, "pool")


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["task.cancel", "asyncio.wait_for"])
async def test_a_cancelled_task_waiting_on_another_process_holds_nothing(
    how: str, url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    child.acquire("h", "tc", "lock")
    with LockManager(url) as mgr:
        lock = mgr.lock("tc")
        if how == "task.cancel":
            task = asyncio.ensure_future(lock.acquire_async(deadline=PATIENCE * 2))
            assert await contract.until(lambda: lock.statistics().waiting == 1)
            cancelled_at = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await contract.bounded(task)
        else:
            cancelled_at = time.monotonic() + 0.1
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(lock.acquire_async(), 0.1)
        took = time.monotonic() - cancelled_at
        assert took < 0.5, f"the task ended {took:.3f} s after it was cancelled"
        assert await contract.until(lambda: lock.statistics().waiting == 0)
        assert [i.state for i in mgr.query("tc")] == ["held"]
        child.release("h")
        # The name is free at once: the cancelled wait left nothing behind.
        lock.acquire(deadline=0)()
    fresh_free(url, "tc")


def test_unlock_on_cancel_hands_the_name_to_another_process(
    url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    with LockManager(url) as mgr:
        unlock = mgr.lock("uc").acquire()
        token = CancelToken()
        unlock.unlock_on_cancel(token)
        child.send("wait", "w", "uc", "lock", PATIENCE * 2)
        child.expect("waiting", "w")
        assert contract.waiting(mgr.lock("uc"))
        token.cancel("time to go")
        assert unlock.released
        child.expect("held", "w", timeout=1.0)
        contract.assert_taken(mgr.lock("uc"))
        assert not unlock.lost.cancelled
        child.release("w")
    fresh_free(url, "uc")


def test_closing_a_manager_hands_its_holds_to_another_process(
    url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    mgr = LockManager(url)
    unlock = mgr.lock("cl").acquire()
    reader = mgr.sharable_lock("cr").shared.acquire()
    child.send("wait", "w", "cl", "lock", PATIENCE * 2)
    child.expect("waiting", "w")
    child.send("wait", "x", "cr", "exclusive", PATIENCE * 2)
    child.expect("waiting", "x")
    with LockManager(url) as other:
        assert contract.waiting(other.lock("cl"))
        assert contract.waiting(other.lock("cr"))
        mgr.close()
        assert unlock.lost.cancelled and reader.lost.cancelled
        got = {child.expect("held", timeout=1.0)[1], child.expect("held", timeout=1.0)[1]}
        assert got == {"w", "x"}
        contract.assert_taken(other.lock("cl"))
        contract.assert_taken(other.lock("cr"))
        unlock()  # a lost hold's unlock releases nothing of the child's
        reader()
        contract.assert_taken(other.lock("cl"))
        child.release("w")
        child.release("x")
    fresh_free(url, "cl")
    fresh_free(url, "cr")


_FAIR = r"""
import json, sys, threading, time, ctxlock
url, seconds = sys.argv[1], float(sys.argv[2])
mgr = ctxlock.LockManager(url)
counts = [0, 0]
worst = [0.0, 0.0]
errors = []
print("ready", flush=True)
sys.stdin.readline()  # go

def run(me):
    lock = mgr.lock("fair")
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            start = time.monotonic()
            with lock.acquire(deadline=10):
                waited = time.monotonic() - start
                spin = time.perf_counter() + 0.0001
                while time.perf_counter() < spin:
                    pass
            counts[me] += 1
            worst[me] = max(worst[me], waited)
    except Exception as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
mgr.close()
print(json.dumps({"holds": sum(counts), "worst": max(worst), "errors": errors}), flush=True)
"""


def test_processes_with_threads_each_get_a_fair_share(
    url: str, children: Callable[..., Child]
) -> None:
    seconds = 3.0
    procs = [children(_FAIR, url, str(seconds)) for _ in range(4)]
    for child in procs:
        child.expect("ready", timeout=PATIENCE * 2)
    for child in procs:
        child.send("go")
    reports = []
    for child in procs:
        line = child.line(timeout=seconds + 20)
        reports.append(json.loads(" ".join(line)))
        assert child.finish() == 0, child.stderr
    figures = ", ".join(
        f"pid {c.pid}: {r['holds']} holds, worst wait {r['worst'] * 1000:.1f} ms"
        for c, r in zip(procs, reports, strict=True)
    )
    assert all(not r["errors"] for r in reports), figures + str([r["errors"] for r in reports])
    total = sum(r["holds"] for r in reports)
    assert total > 0, figures
    assert all(r["holds"] >= total * 0.10 for r in reports), figures
    assert all(r["worst"] < 1.0 for r in reports), figures
    fresh_free(url, "fair")


def test_two_processes_hand_a_name_back_and_forth(url: str, repls: Callable[[], Repl]) -> None:
    # A wait in one process is woken by the release in the other, every time, both ways.
    procs = [repls(), repls()]
    fences = [procs[0].acquire("k0", "pp")]
    for i in range(100):
        holder, waiter = procs[i % 2], procs[(i + 1) % 2]
        waiter.send("wait", f"k{i + 1}", "pp", "lock", PATIENCE)
        waiter.expect("waiting", f"k{i + 1}")
        with LockManager(url) as mgr:
            assert contract.waiting(mgr.lock("pp"))
        holder.release(f"k{i}")
        fences.append(int(waiter.expect("held", f"k{i + 1}")[2]))
    assert all(a < b for a, b in itertools.pairwise(fences)), fences
    procs[0].release("k100")
    fresh_free(url, "pp")
