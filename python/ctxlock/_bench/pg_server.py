"""A throwaway PostgreSQL server on 127.0.0.1, for the tests and the bench of the postgres scope.

``PgServer`` runs ``initdb`` into a fresh temporary directory and starts a server on a free
port with that directory as its data directory and socket directory; ``stop()`` stops it and
removes the directory. It holds a database ``ctxlock`` owned by a role ``ctxlock`` (password
login, scram on TCP), so ``url`` is what a ``LockManager`` is given; the superuser
``postgres`` logs in without a password on 127.0.0.1 (``superuser_url``, ``admin()``: the
tests' view of the server's locks, sessions to terminate). ``pgbouncer()`` puts a pgbouncer
in front of it. ``shared()`` is one server per process for the tests.

initdb, pg_ctl and pgbouncer refuse to run as root: as root they run as the ``postgres`` OS
user (subprocess's ``user`` and ``group``), which owns the directory. ``missing()`` says why
no server can start here (``scripts/ensure-postgres.sh`` installs the Debian packages).
Every subprocess has a timeout, and an ``atexit`` hook stops every server and pgbouncer this
process started.

Only the standard library at import; ``admin()`` imports psycopg.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = ["PgServer", "PgServerError", "missing", "shared"]

#: The role and database that ``url`` names.
ROLE = "ctxlock"
DATABASE = "ctxlock"
SUPERUSER = "postgres"
#: The ``postgres`` OS user that runs the server when this process is root.
OS_USER = "postgres"
#: Seconds for initdb (slowest: it builds the template databases) and for the others.
INITDB_TIMEOUT = 180.0
TIMEOUT = 60.0
#: Server settings: room for many sessions and holds, and no durability against a crash of
#: the machine (fsync, full-page writes), but every commit's WAL written before it returns
#: (synchronous_commit stays on): ``stop_immediate()`` then loses no committed transaction.
#: No autovacuum: the ``pg_*`` rows count a database's transactions as its clients'
#: statements, and an autovacuum worker's (analyzing ``ctxlock_names`` after enough
#: inserts) count there too; a throwaway server lives too short for bloat to matter.
SETTINGS = {
    "autovacuum": "off",
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "max_locks_per_transaction": "256",
    "shared_buffers": "32MB",
    "unix_socket_permissions": "0700",
}
_HBA = f"""\
# Written by ctxlock's pg_server.py: the superuser needs no password, the others do.
local all all                  trust
host  all {SUPERUSER} 127.0.0.1/32 trust
host  all all      127.0.0.1/32 scram-sha-256
"""


class PgServerError(RuntimeError):
    """A server or pgbouncer could not be started (the message has the tail of its log)."""


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _version(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.name)) or (0,)


def bindir() -> Path | None:
    """The directory with initdb and pg_ctl: the highest ``/usr/lib/postgresql/<v>/bin``
    (Debian's layout), else the one ``initdb`` is found in on ``PATH``."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version(p.parent))
    for candidate in reversed(versions):
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidate = Path(initdb).resolve().parent
        if (candidate / "pg_ctl").is_file():
            return candidate
    return None


def pgbouncer_path() -> str | None:
    """The pgbouncer executable (Debian puts it in /usr/sbin), or None."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def missing() -> str | None:
    """Why a server cannot be started here, or None if it can."""
    if os.name != "posix":
        return "a PostgreSQL server for the tests needs a POSIX system"
    if bindir() is None:
        return (
            "no initdb/pg_ctl in /usr/lib/postgresql/*/bin or on PATH "
            "(scripts/ensure-postgres.sh installs them)"
        )
    if _is_root():
        import pwd

        try:
            pwd.getpwnam(OS_USER)
        except KeyError:
            return f"running as root, and there is no {OS_USER!r} OS user to run the server as"
    return None


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (free when asked: retry on a clash)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env() -> dict[str, str]:
    # PG* variables (PGDATA, PGPORT, PGHOST, ...) must not steer the tools to another server.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    if _is_root():
        env.update(HOME="/", USER=OS_USER, LOGNAME=OS_USER)
    return env


def _as_owner() -> dict[str, Any]:
    """subprocess's arguments that run a tool as the directory's owner: as root, the
    ``postgres`` OS user with its own group and none of root's."""
    if not _is_root():
        return {}
    return {"user": OS_USER, "group": OS_USER, "extra_groups": []}


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class _Bouncer:
    """A pgbouncer process, a child of this one."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.log = log

    def stop(self) -> None:
        # SIGTERM: pgbouncer shuts down at once.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.process.poll() is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5.0)


class PgServer:
    """A PostgreSQL server of its own in a temporary directory; see the module docstring."""

    def __init__(self) -> None:
        self.password = secrets.token_hex(16)
        self.port = 0
        self._root: Path | None = None
        self._running = False
        self._bouncers: list[_Bouncer] = []
        self._lock = threading.Lock()
        #: The process that started it: a forked child must not stop it at its exit.
        self._pid = os.getpid()

    # --- urls ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``postgresql://ctxlock:PASSWORD@127.0.0.1:PORT/ctxlock`` (the role owns the db)."""
        return f"postgresql://{ROLE}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def superuser_url(self) -> str:
        """The superuser on the ``ctxlock`` database (no password: trusted on 127.0.0.1)."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def running(self) -> bool:
        return self._running

    @property
    def log_path(self) -> Path:
        """The server's log (its errors, each with the statement that raised it)."""
        return self._log

    def admin(self) -> psycopg.Connection[Any]:
        """A new autocommit psycopg connection as the superuser; the caller closes it.

        Where the server does not answer, the error ends with the tail of its log: a server
        that stopped on its own says why there (a full disk, a signal)."""
        import psycopg

        try:
            return psycopg.connect(self.superuser_url, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            log = _tail(self._log) if self._root is not None else "(stopped by this process)"
            raise PgServerError(
                f"the server on port {self.port} does not answer: {exc}\n{log}"
            ) from exc

    # --- life -----------------------------------------------------------------------------------

    def start(self) -> PgServer:
        """initdb, start, create the role and database; a no-op if already started."""
        with self._lock:
            if self._root is not None:
                return self
            why = missing()
            if why is not None:
                raise PgServerError(why)
            self._pid = os.getpid()
            _live.add(self)
            try:
                self._root = self._make_root()
                self._initdb()
                for attempt in range(5):
                    self.port = free_port()
                    try:
                        self._pg_ctl_start()
                        break
                    except PgServerError:
                        if attempt == 4 or "already in use" not in _tail(self._log):
                            raise
                self._running = True
                self._psql(
                    f"CREATE ROLE {ROLE} LOGIN PASSWORD '{self.password}';\n"
                    f"CREATE DATABASE {DATABASE} OWNER {ROLE};\n"
                )
            except BaseException:
                self._stop_locked()
                raise
            return self

    def stop(self) -> None:
        """Stop pgbouncers and the server, and remove the directory. Idempotent."""
        with self._lock:
            self._stop_locked()

    def stop_immediate(self) -> None:
        """Stop the server at once (``pg_ctl stop -m immediate``: no clean shutdown, like a
        crash); the directory stays for ``start_again()``."""
        with self._lock:
            self._pg_ctl("stop", "-m", "immediate")
            self._running = False

    def start_again(self) -> None:
        """Start the server again on the same directory and port (after a stop)."""
        with self._lock:
            if self._root is None:
                raise PgServerError("start_again() before start() or after stop()")
            if not self._running:
                self._pg_ctl_start()
                self._running = True

    def pgbouncer(self, pool_mode: str = "transaction") -> str:
        """Start a pgbouncer on a free port in front of this server; the url of the
        ``ctxlock`` database through it (as ``url``). ``stop()`` stops it."""
        pgbouncer = pgbouncer_path()
        if pgbouncer is None:
            raise PgServerError("no pgbouncer (scripts/ensure-postgres.sh installs it)")
        with self._lock:
            if self._root is None:
                raise PgServerError("pgbouncer() before start()")
            directory = self._root / f"pgbouncer-{len(self._bouncers)}"
            directory.mkdir()
            (directory / "userlist.txt").write_text(f'"{ROLE}" "{self.password}"\n')
            for attempt in range(3):  # the free port may be taken before pgbouncer binds it
                port = free_port()
                log = directory / f"pgbouncer-{port}.log"
                (directory / "pgbouncer.ini").write_text(
                    "[databases]\n"
                    f"{DATABASE} = host=127.0.0.1 port={self.port} dbname={DATABASE}\n"
                    "[pgbouncer]\n"
                    f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
                    f"auth_type = scram-sha-256\nauth_file = {directory}/userlist.txt\n"
                    f"pool_mode = {pool_mode}\nmax_client_conn = 500\ndefault_pool_size = 50\n"
                    "ignore_startup_parameters = extra_float_digits,options\n"
                    f"logfile = {log}\n"
                )
                self._chown(directory)
                process = subprocess.Popen(
                    [pgbouncer, "-q", str(directory / "pgbouncer.ini")],
                    cwd=directory,
                    env=_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # not in the terminal's group: Ctrl-C is the tests'
                    **_as_owner(),
                )
                bouncer = _Bouncer(process, port, log)
                self._bouncers.append(bouncer)
                end = time.monotonic() + TIMEOUT
                # Up once it says so: a port that answers may be another program's.
                while "process up" not in _tail(log):
                    exited = process.poll() is not None
                    if exited or time.monotonic() > end:
                        bouncer.stop()
                        if attempt == 2 or not exited:
                            raise PgServerError(f"pgbouncer did not start:\n{_tail(log)}")
                        break  # it could not listen there: another port
                    time.sleep(0.05)
                else:
                    return f"postgresql://{ROLE}:{self.password}@127.0.0.1:{port}/{DATABASE}"
            raise AssertionError("unreachable")

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self._running else "started" if self._root else "not started"
        return f"<PgServer 127.0.0.1:{self.port} {state}>"

    # --- the pieces ---------------------------------------------------------------------------

    @property
    def _data(self) -> Path:
        assert self._root is not None
        return self._root / "data"

    @property
    def _log(self) -> Path:
        assert self._root is not None
        return self._root / "server.log"

    def _chown(self, path: Path) -> None:
        if not _is_root():
            return
        shutil.chown(path, OS_USER, OS_USER)
        for parent, dirs, files in os.walk(path):
            for name in dirs + files:
                shutil.chown(os.path.join(parent, name), OS_USER, OS_USER)

    def _make_root(self) -> Path:
        base = tempfile.gettempdir()
        if _is_root() and not os.stat(base).st_mode & 0o001:
            base = "/tmp"  # the postgres OS user must be able to reach the directory
        root = Path(tempfile.mkdtemp(prefix="ctxlock-pg-", dir=base))
        self._chown(root)
        return root

    def _run(self, argv: list[str], timeout: float, what: str) -> None:
        assert self._root is not None
        try:
            done = subprocess.run(
                argv,
                cwd=self._root,
                env=_env(),
                stdin=subprocess.DEVNULL,
                **_as_owner(),
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise PgServerError(f"{what} took more than {timeout} s\n{_tail(self._log)}") from exc
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace").strip()
            raise PgServerError(f"{what} failed ({done.returncode}): {output}\n{_tail(self._log)}")

    def _initdb(self) -> None:
        bin_ = bindir()
        assert bin_ is not None
        argv = [str(bin_ / "initdb"), "-D", str(self._data), "-U", SUPERUSER, "-A", "trust"]
        argv += ["-E", "UTF8", "--locale=C", "--no-sync"]
        self._run(argv, INITDB_TIMEOUT, "initdb")
        (self._data / "pg_hba.conf").write_text(_HBA)
        self._chown(self._data / "pg_hba.conf")

    def _pg_ctl(self, *args: str) -> None:
        bin_ = bindir()
        assert bin_ is not None
        argv = [str(bin_ / "pg_ctl"), *args, "-D", str(self._data), "-w", "-t", str(int(TIMEOUT))]
        self._run(argv, TIMEOUT + 10, f"pg_ctl {args[0]}")

    def _pg_ctl_start(self) -> None:
        assert self._root is not None
        options = f"-p {self.port} -k {self._root}"
        options += "".join(f" -c {k}={v}" for k, v in SETTINGS.items())
        self._pg_ctl("start", "-l", str(self._log), "-o", options)

    def _psql(self, sql: str) -> None:
        bin_ = bindir()
        assert bin_ is not None and self._root is not None
        argv = [str(bin_ / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self._root)]
        argv += ["-p", str(self.port), "-U", SUPERUSER, "-d", "postgres"]
        try:
            done = subprocess.run(
                argv,
                cwd=self._root,
                env=_env(),
                input=sql.encode(),
                **_as_owner(),
                capture_output=True,
                timeout=TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise PgServerError(f"psql took more than {TIMEOUT} s") from exc
        if done.returncode != 0:
            raise PgServerError(f"psql failed: {done.stderr.decode(errors='replace').strip()}")

    def _stop_locked(self) -> None:
        for bouncer in self._bouncers:
            bouncer.stop()
        self._bouncers.clear()
        if self._root is not None:
            if self._running or (self._data / "postmaster.pid").exists():
                try:
                    self._pg_ctl("stop", "-m", "fast")
                except PgServerError:
                    with contextlib.suppress(PgServerError):
                        self._pg_ctl("stop", "-m", "immediate")
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        self._running = False
        _live.discard(self)


#: Every server this process started and has not stopped: stopped at exit.
_live: set[PgServer] = set()
_shared: PgServer | None = None
_shared_lock = threading.Lock()


def shared() -> PgServer:
    """One server for this process, started at the first call and stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            server = PgServer()
            server.start()
            _shared = server
        return _shared


@atexit.register
def _stop_all() -> None:
    for server in list(_live):
        if server._pid != os.getpid():
            continue  # a forked child's copy: its parent stops it
        try:
            server.stop()
        except Exception as exc:  # at exit: report, and stop the others still
            print(f"pg_server: could not stop {server!r}: {exc}", file=sys.stderr)
