"""LockManager("postgresql://..."): named locks shared by every client of a PostgreSQL server.

The tests run against a real server of their own: ``pg_server.shared()`` (one per test
process, started at the first test that needs it, stopped at exit), on the database
``ctxlock`` as the role ``ctxlock`` that owns it. They are skipped where no server can start
(``kinds.PG_MISSING``), unless the machine must run them (conftest.py: the session fails).

Every test takes its names under a prefix of its own (``ns``, or fixed names of the file
scope's tests, which leave nothing held). The server's own view is the oracle: ``pg_locks``
joined with ``pg_stat_activity`` through the superuser's connection (``PgServer.admin()``).
A name's advisory key is the core's hash, so the tests find the locks of ctxlock's sessions
by ``application_name`` (``ctxlock...`` unless the url sets one) and a name's key in the
``ctxlock_names`` table. After every test no advisory lock is left on the server.

The file holds five parts:

- urls: what the manager keeps and shows (never the password), what it refuses and how
  (``BackendError`` for an unreachable server, a wrong password, a schema it cannot create
  its table in, a pgbouncer in transaction mode), ``PG*`` variables;
- the contract of every scope: the tests of ``test_lock_manager.py`` that take the
  ``managers`` fixture, and the scope-agnostic tests of ``test_file_scope.py`` (other
  processes, pickling, query), run here again with urls of this server;
- what the server shows: one session-level advisory lock per hold, none once ``unlock()``
  returns, none left by a wait that was cancelled or timed out;
- waits: a cancel ends a blocked wait at once, ``deadline=0`` tries once, a wait in asyncio
  leaves the loop running, a grant racing a cancel leaves the name free;
- query: a manager's own holds and waits by thread or task, and another manager's as it
  answers (its threads and tasks too), with the time each began.

Timing assertions are loose bounds that a correct implementation meets by far.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest
import test_file_scope as file_scope
import test_lock_manager as contract
from conftest import PATIENCE, Holders, Worker, wait_until
from ctxlock import (
    BackendError,
    Cancelled,
    CancelToken,
    LockError,
    LockManager,
    LockTimeout,
    NamedLock,
    Unlock,
)
from ctxlock._bench import pg_server
from kinds import PG_MISSING

if TYPE_CHECKING:
    import psycopg

    Admin = psycopg.Connection[Any]

pytestmark = pytest.mark.skipif(
    PG_MISSING is not None, reason=f"no PostgreSQL server can start here: {PG_MISSING}"
)

Spawn = Callable[..., Worker]
Managers = Callable[[int], list[LockManager]]
Repl = file_scope.Repl
VIEWS = contract.VIEWS

#: How long the server may take to show what a client just did (a session ending, a
#: manager dropping a wait it gave up just after the raise).
SERVER_PATIENCE = 2.0


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def server() -> pg_server.PgServer:
    """This process's server (started by the first test that asks for it)."""
    return pg_server.shared()


@pytest.fixture
def url(server: pg_server.PgServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """``postgresql://ctxlock@127.0.0.1:PORT/ctxlock``: the password is in ``PGPASSWORD``
    (for this process and the children it starts). A manager's url never shows the
    password, and the file scope's tests run here compare it with the url they gave."""
    monkeypatch.setenv("PGPASSWORD", server.password)
    return server.url.replace(f":{server.password}@", "@")


@pytest.fixture
def admin(server: pg_server.PgServer) -> Iterator[Admin]:
    """The superuser's autocommit connection: the server's own view of the locks."""
    conn = server.admin()
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def scope_url(url: str) -> str:
    """The url of this scope, for the contract tests that make a manager of their own."""
    return url


@pytest.fixture
def ns() -> str:
    """A name prefix of this test's own: the server is shared by the whole test process."""
    return f"test-{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def managers(server: pg_server.PgServer) -> Iterator[Managers]:
    """``managers(k)``: k managers of this server (the password in their url); all are
    closed at teardown.

    The contract tests of ``test_lock_manager.py`` (imported below) take their managers from
    this fixture, so here they run on the postgres scope.
    """
    made: list[LockManager] = []

    def make(k: int) -> list[LockManager]:
        new = [LockManager(server.url) for _ in range(k)]
        made.extend(new)
        return new

    yield make
    for mgr in made:
        mgr.close()


@pytest.fixture
def children() -> Iterator[Callable[..., file_scope.Child]]:
    """``children(script, *args)`` starts a child process; each is killed at teardown."""
    started: list[file_scope.Child] = []

    def start(script: str, *args: str) -> file_scope.Child:
        child = file_scope.Child(script, *args)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()


@pytest.fixture
def repls(url: str) -> Iterator[Callable[[], Repl]]:
    """``repls()`` starts a child obeying commands (test_file_scope's ``_REPL``) on this
    server; each is killed at teardown."""
    started: list[Repl] = []

    def start() -> Repl:
        child = Repl(url)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()


@pytest.fixture(autouse=True)
def _no_advisory_lock_left(server: pg_server.PgServer) -> Iterator[None]:
    """After every test the server holds no advisory lock and has none waiting: the test's
    managers and children are gone (their teardown ran first), and their sessions with them."""
    yield
    with server.admin() as conn:
        wait_until(lambda: not advisory_locks(conn), SERVER_PATIENCE + PATIENCE)
        left = advisory_locks(conn)
    assert not left, f"advisory locks left on the server after the test: {left}"


# --- the server's view --------------------------------------------------------------------------


class Row(NamedTuple):
    """One advisory lock of ``pg_locks``, held or waited for by one session."""

    pid: int
    application_name: str | None
    key: int
    mode: str
    granted: bool


_ADVISORY = """
SELECT l.pid, a.application_name,
       (l.classid::bigint << 32) | l.objid::bigint AS key, l.mode, l.granted
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' {where}
ORDER BY key, l.granted DESC, l.pid
"""


def advisory_locks(admin: Admin, where: str = "", params: tuple[Any, ...] = ()) -> list[Row]:
    """Every advisory lock on the server (``where``: more conditions, ``AND ...``)."""
    with admin.cursor() as cur:
        cur.execute(_ADVISORY.format(where=where).encode(), params)
        return [Row(*r) for r in cur.fetchall()]


def ctxlock_locks(admin: Admin, app: str = "ctxlock%") -> list[Row]:
    """The advisory locks of sessions whose application_name is like ``app``."""
    return advisory_locks(admin, "AND a.application_name LIKE %s", (app,))


def key_of(admin: Admin, name: str) -> int:
    """The advisory key of ``name``, from the table of names the managers keep."""
    with admin.cursor() as cur:
        cur.execute("SELECT DISTINCT key FROM ctxlock_names WHERE name = %s", (name,))
        rows = cur.fetchall()
    assert len(rows) == 1, f"ctxlock_names has {rows} for {name!r}"
    key: int = rows[0][0]
    return key


def no_secret_in(exc: BaseException, *secrets: str) -> None:
    """Neither ``exc`` nor what it chains (nor its ``reason``) shows any of ``secrets``."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            break
        texts = [str(seen), repr(seen), repr(getattr(seen, "reason", None))]
        for secret in secrets:
            assert all(secret not in t for t in texts), (secret, texts)
        seen = seen.__cause__ or seen.__context__


# --- urls ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query", ["", "?connect_timeout=5", "?application_name=billing&sslmode=disable"]
)
def test_the_url_is_kept_without_the_password(
    query: str, server: pg_server.PgServer, ns: str
) -> None:
    with LockManager(server.url + query) as mgr:
        assert mgr.url == f"postgresql://ctxlock@127.0.0.1:{server.port}/ctxlock{query}"
        lock, rw = mgr.lock(ns + "a"), mgr.sharable_lock(ns + "a")
        with lock as unlock:
            shown = [repr(mgr), str(mgr), repr(lock), repr(rw), repr(rw.shared), repr(unlock)]
            shown += [repr(info) for info in mgr.query(ns)]
            shown += [repr(lock.statistics())]
        for text in shown:
            assert server.password not in text, text


def test_postgres_is_the_same_scheme(server: pg_server.PgServer, ns: str) -> None:
    other_url = server.url.replace("postgresql://", "postgres://", 1)
    with LockManager(server.url) as mgr, LockManager(other_url) as other:
        assert server.password not in other.url
        assert other.url.startswith("postgres")
        with mgr.lock(ns + "a"):
            contract.assert_taken(other.lock(ns + "a"))
        with other.sharable_lock(ns + "a").shared:
            contract.assert_taken(mgr.lock(ns + "a"))


def test_an_unreachable_server_is_a_prompt_backend_error(server: pg_server.PgServer) -> None:
    port = pg_server.free_port()  # nothing listens there
    url = f"postgresql://ctxlock:{server.password}@127.0.0.1:{port}/ctxlock?connect_timeout=2"
    start = time.monotonic()
    with pytest.raises(BackendError) as caught:
        LockManager(url)
    took = time.monotonic() - start
    assert took < 10, f"refused after {took:.1f} s"
    assert isinstance(caught.value, LockError)
    assert isinstance(caught.value.reason, str) and caught.value.reason
    no_secret_in(caught.value, server.password)


@pytest.mark.parametrize("wrong", ["password", "user", "database"])
def test_a_login_the_server_refuses_is_a_backend_error_without_the_password(
    wrong: str, server: pg_server.PgServer
) -> None:
    bad = f"not-it-{uuid.uuid4().hex}"
    user, password, db = "ctxlock", server.password, "ctxlock"
    if wrong == "password":
        password = bad
    elif wrong == "user":
        user = "nobody_" + uuid.uuid4().hex[:8]
    else:
        db = "nowhere_" + uuid.uuid4().hex[:8]
    url = f"postgresql://{user}:{password}@127.0.0.1:{server.port}/{db}?connect_timeout=5"
    start = time.monotonic()
    with pytest.raises(BackendError) as caught:
        LockManager(url)
    assert time.monotonic() - start < 10
    no_secret_in(caught.value, server.password, bad)


def test_pg_variables_fill_what_the_url_leaves_out(
    server: pg_server.PgServer, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGUSER", "ctxlock")
    monkeypatch.setenv("PGPASSWORD", server.password)
    monkeypatch.setenv("PGDATABASE", "ctxlock")
    with LockManager(f"postgresql://127.0.0.1:{server.port}") as mgr:
        assert server.password not in mgr.url
        with LockManager(server.url) as other:
            with mgr.lock(ns + "a"):
                contract.assert_taken(other.lock(ns + "a"))


def test_sessions_are_named_ctxlock_unless_the_url_names_them(
    server: pg_server.PgServer, admin: Admin, ns: str
) -> None:
    with LockManager(server.url) as mgr, mgr.lock(ns + "a"):
        rows = advisory_locks(admin)
        assert len(rows) == 1, rows
        assert (rows[0].application_name or "").startswith("ctxlock"), rows
        assert rows[0].granted and rows[0].mode == "ExclusiveLock", rows
    with LockManager(server.url + "?application_name=billing") as mgr, mgr.lock(ns + "b"):
        rows = advisory_locks(admin)
        assert [r.application_name for r in rows] == ["billing"], rows


def _tcp_user_timeouts(local_ports: set[int]) -> list[int]:
    """The ``TCP_USER_TIMEOUT`` in ms (0: the kernel's default) of this process's TCP
    sockets on ``local_ports``, read through a duplicate of each one's descriptor."""
    inodes = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) in local_ports:
                inodes.add(int(fields[9]))
    found = []
    for fd in os.listdir("/proc/self/fd"):
        # A descriptor may be closed (and its number reused) by a background thread at
        # any point: the duplicate is checked to be the socket found, else skipped.
        try:
            dup = os.dup(int(fd))
        except OSError:
            continue
        try:
            if os.fstat(dup).st_ino not in inodes:
                continue
            with socket.socket(fileno=os.dup(dup)) as sock:
                found.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))
        except OSError:
            continue
        finally:
            os.close(dup)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and TCP_USER_TIMEOUT")
def test_a_session_gives_up_unacknowledged_data_in_the_keepalives_time(
    server: pg_server.PgServer, admin: Admin, ns: str
) -> None:
    # Keepalives notice a silent server only while nothing is in flight; data the server
    # never acknowledges is bounded by TCP_USER_TIMEOUT: by default the keepalives' own
    # time (5 + 3 x 2 s), else the url's, in ms as libpq's; 0 (or less) or keepalives=0
    # leave the kernel's. Each manager's sessions are told apart by their
    # application_name, and found by their client port.
    for i, (query, expected) in enumerate(
        [
            ("", 11_000),
            ("&keepalives_idle=20&keepalives_count=5", 30_000),
            ("&tcp_user_timeout=2500", 2_500),
            ("&tcp_user_timeout=0", 0),
            ("&tcp_user_timeout=-5", 0),
            ("&keepalives=0", 0),
        ]
    ):
        app = f"{ns}{i}"
        with LockManager(f"{server.url}?application_name={app}{query}") as mgr, mgr.lock(ns):
            rows = admin.execute(
                "SELECT client_port FROM pg_stat_activity WHERE starts_with(application_name, %s)",
                (app,),
            ).fetchall()
            ports = {port for (port,) in rows}
            found = _tcp_user_timeouts(ports)
        assert found and set(found) == {expected}, (query, rows, found)


@pytest.mark.parametrize("value", ["x", "1.5", "2147483648"])
def test_a_bad_tcp_user_timeout_is_a_value_error_naming_it(value: str) -> None:
    # Refused as the url is read, before any connection (the port is never tried).
    url = f"postgresql://u:hunter2@127.0.0.1:1/db?tcp_user_timeout={value}"
    with pytest.raises(ValueError, match="tcp_user_timeout must be a whole number") as caught:
        LockManager(url)
    assert value in str(caught.value) and "hunter2" not in str(caught.value)


def test_the_manager_keeps_its_fence_sequence_and_its_names_in_the_role_s_schema(
    url: str, admin: Admin, ns: str
) -> None:
    with LockManager(url) as mgr:
        with admin.cursor() as cur:
            cur.execute(
                "SELECT c.relname, c.relkind, n.nspname, pg_get_userbyid(c.relowner)"
                " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relname IN ('ctxlock_fence', 'ctxlock_names') ORDER BY 1"
            )
            assert cur.fetchall() == [
                ("ctxlock_fence", "S", "public", "ctxlock"),
                ("ctxlock_names", "r", "public", "ctxlock"),
            ]
        with mgr.lock(ns + "a"):
            key = key_of(admin, ns + "a")
            rows = ctxlock_locks(admin)
            assert [(r.key, r.mode, r.granted) for r in rows] == [(key, "ExclusiveLock", True)]


def test_a_role_that_may_not_create_the_table_gets_a_backend_error_naming_the_privilege(
    server: pg_server.PgServer, admin: Admin
) -> None:
    # A database of its own where the table does not exist yet, and a role that may connect
    # but not CREATE in schema public (PostgreSQL 15's default for roles not owning it).
    suffix = uuid.uuid4().hex[:8]
    db, role, password = f"ctxlock_noprivs_{suffix}", f"reader_{suffix}", uuid.uuid4().hex
    admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'".encode())
    admin.execute(f"CREATE DATABASE {db}".encode())
    try:
        import psycopg

        # Before PostgreSQL 15 every role could CREATE in public: take that away here.
        superuser = f"postgresql://postgres@127.0.0.1:{server.port}/{db}"
        with psycopg.connect(superuser, autocommit=True) as conn:
            conn.execute(b"REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        url = f"postgresql://{role}:{password}@127.0.0.1:{server.port}/{db}"
        with pytest.raises(BackendError) as caught:
            LockManager(url)
        text = f"{caught.value} {caught.value.reason}".lower()
        assert "create" in text or "privilege" in text, text
        no_secret_in(caught.value, password)
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)".encode())
        admin.execute(f"DROP ROLE IF EXISTS {role}".encode())


def test_a_pgbouncer_in_transaction_mode_is_a_backend_error_about_pooling(
    server: pg_server.PgServer,
) -> None:
    if pg_server.pgbouncer_path() is None:
        pytest.skip("no pgbouncer here (scripts/ensure-postgres.sh installs it)")
    url = server.pgbouncer("transaction")
    with pytest.raises(BackendError) as caught:
        LockManager(url + "?connect_timeout=5")
    text = f"{caught.value} {caught.value.reason}".lower()
    assert "pool" in text, text
    no_secret_in(caught.value, server.password)


# --- the contract of every scope, on this one ---------------------------------------------------
# The tests of test_lock_manager.py that take their managers from the ``managers`` fixture run
# here with the fixture above: managers of this server.

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
test_query_names_the_task_still_inside_async_with = (
    contract.test_query_names_the_task_still_inside_async_with
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
test_query_lists_each_shared_holder = contract.test_query_lists_each_shared_holder
test_query_lists_the_holds_and_waits_of_another_process = (
    file_scope.test_query_lists_the_holds_and_waits_of_another_process
)
test_query_from_another_process_tells_the_thread_apart = (
    file_scope.test_query_from_another_process_tells_the_thread_apart
)
test_query_forgets_a_lost_hold = contract.test_query_forgets_a_lost_hold
test_query_forgets_a_waiter_that_gave_up = contract.test_query_forgets_a_waiter_that_gave_up
test_unlock_twice_and_close_twice_are_harmless = (
    contract.test_unlock_twice_and_close_twice_are_harmless
)
test_an_unlock_called_from_another_thread_after_close_is_harmless = (
    contract.test_an_unlock_called_from_another_thread_after_close_is_harmless
)

# The tests of test_file_scope.py that hold for any scope shared by processes: they take the
# ``url``, ``managers``, ``repls`` and ``children`` fixtures above, so here they run on this
# server (their fixed names are free again when each ends).

test_with_returns_the_manager_and_closes_it = file_scope.test_with_returns_the_manager_and_closes_it
test_a_named_lock_keeps_its_manager_alive = file_scope.test_a_named_lock_keeps_its_manager_alive
test_fences_keep_growing_after_the_name_was_freed = (
    file_scope.test_fences_keep_growing_after_the_name_was_freed
)
test_misuse_never_crashes = file_scope.test_misuse_never_crashes
test_named_locks_of_this_scope_pickle = file_scope.test_named_locks_of_a_file_scope_pickle
test_a_copy_of_a_lock_is_another_client_of_it = (
    file_scope.test_a_copy_of_a_file_scope_lock_is_another_client_of_it
)
test_a_lock_of_a_closed_manager_still_pickles_and_names_the_lock = (
    file_scope.test_a_lock_of_a_closed_manager_still_pickles_and_names_the_lock
)
test_a_lock_pickled_into_a_spawned_child_is_the_same_lock = (
    file_scope.test_a_lock_pickled_into_a_spawned_child_is_the_same_lock
)
test_a_pickled_lock_excludes_across_a_spawned_pool = (
    file_scope.test_a_pickled_lock_excludes_across_a_spawned_pool
)
test_processes_exclude_each_other_on_a_shared_counter = (
    file_scope.test_processes_exclude_each_other_on_a_shared_counter
)
test_shared_holds_of_processes_overlap_and_keep_a_writer_out = (
    file_scope.test_shared_holds_of_processes_overlap_and_keep_a_writer_out
)
test_killing_a_holder_frees_the_name_for_a_waiter_within_a_second = (
    file_scope.test_killing_a_holder_frees_the_name_for_a_waiter_within_a_second
)
test_a_waiting_writer_of_another_process_holds_readers_back_until_it_gives_up = (
    file_scope.test_a_waiting_writer_of_another_process_holds_readers_back_until_it_gives_up
)
test_a_writer_deadline_is_what_lets_the_readers_in = (
    file_scope.test_a_writer_deadline_is_what_lets_the_readers_in
)
test_fences_keep_their_order_across_processes = (
    file_scope.test_fences_keep_their_order_across_processes
)
test_statistics_count_the_holds_and_waits_of_other_processes = (
    file_scope.test_statistics_count_the_holds_and_waits_of_other_processes
)
test_a_cancel_ends_a_wait_on_another_process_at_once = (
    file_scope.test_a_cancel_ends_a_wait_on_another_process_at_once
)
test_a_deadline_ends_a_wait_on_another_process_in_time = (
    file_scope.test_a_deadline_ends_a_wait_on_another_process_in_time
)
test_an_async_wait_on_another_process_does_not_block_the_loop = (
    file_scope.test_an_async_wait_on_another_process_does_not_block_the_loop
)
test_tasks_waiting_through_two_managers_of_one_loop_get_the_name_in_turn = (
    file_scope.test_tasks_waiting_through_two_managers_of_one_loop_get_the_name_in_turn
)
test_unlock_returns_once_another_process_can_take_the_name = (
    file_scope.test_unlock_returns_once_another_process_can_take_the_name
)
test_a_cancelled_task_waiting_on_another_process_holds_nothing = (
    file_scope.test_a_cancelled_task_waiting_on_another_process_holds_nothing
)
test_unlock_on_cancel_hands_the_name_to_another_process = (
    file_scope.test_unlock_on_cancel_hands_the_name_to_another_process
)
test_closing_a_manager_hands_its_holds_to_another_process = (
    file_scope.test_closing_a_manager_hands_its_holds_to_another_process
)
test_two_processes_hand_a_name_back_and_forth = (
    file_scope.test_two_processes_hand_a_name_back_and_forth
)


# --- what the server shows ----------------------------------------------------------------------


@pytest.mark.parametrize("which", VIEWS)
def test_each_hold_is_one_advisory_lock_of_the_name_s_key_until_unlock_returns(
    which: str, ns: str, managers: Managers, admin: Admin
) -> None:
    (mgr,) = managers(1)
    name = ns + "h"
    mode = "ShareLock" if which == "shared" else "ExclusiveLock"
    unlock = contract.view(mgr, name, which).acquire(deadline=PATIENCE)
    key = key_of(admin, name)
    rows = ctxlock_locks(admin)
    assert [(r.key, r.mode, r.granted) for r in rows] == [(key, mode, True)], rows
    unlock()
    # unlock() returned once the server had released it: no wait here.
    assert advisory_locks(admin) == []


def test_two_names_are_two_keys_and_two_shared_holders_are_two_sessions(
    ns: str, managers: Managers, admin: Admin
) -> None:
    a, b = managers(2)
    with a.lock(ns + "x"), a.lock(ns + "y"):
        keys = {key_of(admin, ns + "x"), key_of(admin, ns + "y")}
        assert len(keys) == 2
        assert {r.key for r in ctxlock_locks(admin)} == keys
    with a.sharable_lock(ns + "s").shared, b.sharable_lock(ns + "s").shared:
        rows = ctxlock_locks(admin)
        assert [(r.mode, r.granted) for r in rows] == [("ShareLock", True)] * 2, rows
        assert len({r.pid for r in rows}) == 2, rows


@pytest.mark.parametrize("which", VIEWS)
@pytest.mark.parametrize("ends_by", ["cancel", "deadline"])
def test_a_wait_given_up_leaves_nothing_on_the_server(
    which: str, ends_by: str, ns: str, managers: Managers, admin: Admin, spawn: Spawn
) -> None:
    a, b = managers(2)
    name = ns + "w"
    held = a.lock(name).acquire()
    before = ctxlock_locks(admin)
    key = key_of(admin, name)
    assert [(r.key, r.granted) for r in before] == [(key, True)], before
    token = CancelToken()
    ended: list[float] = []

    def wait() -> None:
        try:
            contract.view(b, name, which).acquire(
                token, deadline=PATIENCE * 2 if ends_by == "cancel" else 0.5
            )
        finally:
            ended.append(time.monotonic())

    waiter = spawn(wait)
    assert contract.waiting(a.lock(name))
    if ends_by == "cancel":
        cancelled_at = time.monotonic()
        token.cancel("enough")
        assert isinstance(waiter.exception(PATIENCE), Cancelled)
        took = ended[0] - cancelled_at
        assert took < 0.5, f"the wait ended {took:.3f} s after the cancel (target: 0.1 s)"
    else:
        assert isinstance(waiter.exception(PATIENCE), LockTimeout)
    # The manager drops its request just after the raise: the holder's lock alone remains.
    assert wait_until(lambda: ctxlock_locks(admin) == before, SERVER_PATIENCE), (
        ctxlock_locks(admin),
        before,
    )
    assert a.lock(name).statistics().waiting == 0
    held()
    # The name is free for the manager that gave up, at once.
    b.lock(name).acquire(deadline=0)()


@pytest.mark.asyncio
async def test_a_task_cancelled_while_waiting_leaves_nothing_on_the_server(
    ns: str, managers: Managers, admin: Admin
) -> None:
    a, b = managers(2)
    name = ns + "t"
    held = a.lock(name).acquire()
    before = ctxlock_locks(admin)
    task = asyncio.ensure_future(b.lock(name).acquire_async(deadline=PATIENCE * 2))
    assert await contract.until(lambda: a.lock(name).statistics().waiting == 1)
    cancelled_at = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await contract.bounded(task)
    took = time.monotonic() - cancelled_at
    assert took < 0.5, f"the task ended {took:.3f} s after it was cancelled"
    assert await contract.until(lambda: ctxlock_locks(admin) == before, SERVER_PATIENCE)
    held()
    b.lock(name).acquire(deadline=0)()


@pytest.mark.parametrize("which", VIEWS)
def test_unlock_of_a_hold_granted_after_a_wait_returns_once_the_server_released_it(
    which: str, ns: str, managers: Managers, admin: Admin, spawn: Spawn
) -> None:
    # A hold that had to wait is granted on a waiting session of its own (README): its
    # unlock() too returns only once the server let go, so another client's one try gets in.
    a, b = managers(2)
    name = ns + "g"
    for _ in range(20):
        held = a.lock(name).acquire()
        waiter = spawn(contract.view(b, name, which).acquire, deadline=PATIENCE)
        assert contract.waiting(a.lock(name))
        held()
        waiter.result(PATIENCE)()
        assert advisory_locks(admin) == []
        a.lock(name).acquire(deadline=0)()


# --- waits --------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", VIEWS)
def test_deadline_zero_tries_once(which: str, ns: str, managers: Managers, admin: Admin) -> None:
    a, b = managers(2)
    name = ns + "z"
    # Free: taken at once.
    contract.view(b, name, which).acquire(deadline=0)()
    held = a.lock(name).acquire()
    before = ctxlock_locks(admin)
    start = time.monotonic()
    for _ in range(20):
        with pytest.raises(LockTimeout):
            contract.view(b, name, which).acquire(deadline=0)
        assert contract.view(b, name, which).try_acquire() is None
    took = (time.monotonic() - start) / 40
    assert took < 0.1, f"one try took {took * 1000:.1f} ms"
    assert b.lock(name).statistics().waiting == 0
    assert wait_until(lambda: ctxlock_locks(admin) == before, SERVER_PATIENCE)
    held()
    contract.view(b, name, which).acquire(deadline=0)()


@pytest.mark.parametrize("deadline", [0.05, 0.3])
def test_a_wait_times_out_at_its_deadline(deadline: float, ns: str, managers: Managers) -> None:
    a, b = managers(2)
    name = ns + "d"
    with a.lock(name):
        start = time.monotonic()
        with pytest.raises(LockTimeout):
            b.lock(name).acquire(deadline=deadline)
        took = time.monotonic() - start
        assert deadline <= took < deadline + 0.5, took


@pytest.mark.asyncio
@pytest.mark.parametrize("ends_by", ["release", "deadline"])
async def test_acquire_async_leaves_the_loop_running_while_it_waits(
    ends_by: str, ns: str, managers: Managers
) -> None:
    a, b = managers(2)
    name = ns + "a"
    held = a.lock(name).acquire()
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    releaser: threading.Timer | None = None
    try:
        before = ticks
        if ends_by == "release":
            releaser = threading.Timer(0.5, held)
            releaser.start()
            unlock = await contract.bounded(b.lock(name).acquire_async(deadline=PATIENCE))
            assert isinstance(unlock, Unlock)
            unlock()
        else:
            with pytest.raises(LockTimeout):
                await contract.bounded(b.lock(name).acquire_async(deadline=0.5))
        # 50 at most; a loop blocked by the wait would get none.
        assert ticks - before >= 5, f"{ticks - before} ticks while waiting 0.5 s"
    finally:
        stop.set()
        await contract.bounded(ticking)
        if releaser is not None:
            releaser.join(PATIENCE)
        held()


@pytest.mark.parametrize("tried_by", ["the waiter's manager", "another manager"])
@pytest.mark.parametrize("held_by", ["the waiter's manager", "another manager"])
def test_a_grant_that_races_a_cancel_leaves_the_name_free_once_both_returned(
    held_by: str, tried_by: str, ns: str, managers: Managers, admin: Admin, spawn: Spawn
) -> None:
    # The holder releases and the waiter's token is cancelled at once: the waiter gets the
    # name (and unlocks) or raises Cancelled; either way, once it returned nothing holds the
    # name, and one try gets it at once (through either manager).
    other, b = managers(2)
    a = b if held_by == "the waiter's manager" else other
    trier = b if tried_by == "the waiter's manager" else other
    name = ns + "r"
    outcomes: dict[str, int] = {}
    taken_after: list[tuple[int, str, list[Row]]] = []

    def wait(token: CancelToken) -> str:
        try:
            unlock = b.lock(name).acquire(token, deadline=PATIENCE)
        except Cancelled:
            return "Cancelled"
        unlock()
        return "Unlock"

    for i in range(100):
        held = a.lock(name).acquire()
        token = CancelToken()
        waiter = spawn(wait, token)
        assert contract.waiting(a.lock(name))
        held()
        token.cancel("race")
        outcome = waiter.result(PATIENCE)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        again = trier.lock(name).try_acquire()
        if again is None:
            taken_after.append((i, outcome, advisory_locks(admin)))
            again = trier.lock(name).acquire(deadline=PATIENCE)
        again()
    assert not taken_after, (outcomes, taken_after[:5])


def test_a_cancel_only_ever_ends_a_wait(
    server: pg_server.PgServer, ns: str, managers: Managers, spawn: Spawn
) -> None:
    # Waiters give up (deadlines of a few milliseconds, tokens cancelled by another thread)
    # while three managers pass two names around in both modes, so that waits end as their
    # cancels are sent: a cancel goes only to a session whose wait runs, and no other
    # statement of any session is ever cancelled (the server logs each cancelled statement).
    # Meanwhile holds never overlap where exclusion forbids (a wait for one mode that ends
    # after tickets of the other mode came never grants them).
    log = server.log_path
    start = log.stat().st_size
    names = [ns + "a", ns + "b"]
    holders = {name: Holders() for name in names}
    stop = time.monotonic() + 1.5
    counts = {"held": 0, "gave up": 0}
    count_lock = threading.Lock()

    def work(mgr: LockManager, seed: int) -> None:
        rnd = random.Random(seed)
        while time.monotonic() < stop:
            name = rnd.choice(names)
            lock = mgr.sharable_lock(name)
            exclusive = rnd.random() < 0.5
            view = lock.exclusive if exclusive else lock.shared
            token = CancelToken()
            if rnd.random() < 0.5:
                timer = threading.Timer(rnd.uniform(0, 0.004), token.cancel, ("gave up",))
                timer.start()
            else:
                timer = None
            try:
                unlock = view.acquire(token, deadline=rnd.uniform(0.0005, 0.005))
            except (Cancelled, LockTimeout):
                outcome = "gave up"
            else:
                holders[name].enter(exclusive)
                time.sleep(rnd.uniform(0, 0.001))
                holders[name].leave(exclusive)
                unlock()
                outcome = "held"
            if timer is not None:
                timer.cancel()
            with count_lock:
                counts[outcome] += 1

    workers = [spawn(work, mgr, i * 10 + j) for i, mgr in enumerate(managers(3)) for j in range(3)]
    for worker in workers:
        worker.result(PATIENCE + 2)
    text = log.read_bytes()[start:].decode(errors="replace").splitlines()
    cancelled = [
        text[i + 1].split("STATEMENT:", 1)[-1].strip()
        for i, line in enumerate(text[:-1])
        if "canceling statement due to user request" in line
    ]
    assert counts["held"] > 0 and counts["gave up"] > 0, counts
    for name in names:
        assert not holders[name].overlaps, holders[name].overlaps[:5]
    assert cancelled, ("no wait was cancelled: the race did not run", counts)
    others = [s for s in cancelled if not s.startswith("SELECT pg_advisory_lock")]
    assert not others, (len(cancelled), others[:5], counts)


# --- pickling -----------------------------------------------------------------------------------


def test_a_lock_pickles_as_a_lock_of_this_server(server: pg_server.PgServer, ns: str) -> None:
    with LockManager(server.url) as mgr:
        lock = mgr.lock(ns + "p")
        again = pickle.loads(pickle.dumps(lock))
        assert isinstance(again, NamedLock)
        assert (again.name, again.mode) == (ns + "p", "exclusive")
        assert again.manager.url == mgr.url
        with lock:
            contract.assert_taken(again)
        with again:
            contract.assert_taken(lock)


def test_a_lock_of_a_url_with_its_password_reaches_a_spawned_child(
    server: pg_server.PgServer, monkeypatch: pytest.MonkeyPatch, ns: str
) -> None:
    # The password is in the url alone (no PGPASSWORD): the child still logs in, and the lock
    # it unpickles is the parent's (it sees the parent's holds; its own are seen here).
    monkeypatch.delenv("PGPASSWORD", raising=False)
    ctx = multiprocessing.get_context("spawn")
    with LockManager(server.url) as mgr:
        lock, rw = mgr.lock(ns + "a"), mgr.sharable_lock(ns + "b")
        held, held_rw = lock.acquire(), rw.exclusive.acquire()
        mine, theirs = ctx.Pipe()
        child = ctx.Process(target=file_scope._spawned_child, args=(lock, rw, theirs), daemon=True)
        child.start()
        try:
            theirs.close()
            assert mine.poll(30), "the spawned child said nothing"
            report = mine.recv()
            assert report["url"] == mgr.url
            assert (report["lock_free"], report["lock_locked"], report["shared_free"]) == (
                False,
                True,
                False,
            ), report
            fence = held.fence
            held()
            held_rw()
            mine.send("go")
            assert mine.poll(PATIENCE * 2), "the child did not get the locks"
            assert mine.recv()["fence"] > fence
            assert lock.locked()
            assert rw.shared.statistics().holders == 1
            mine.send("done")
            child.join(PATIENCE * 2)
            assert child.exitcode == 0
        finally:
            if child.is_alive():
                child.kill()
                child.join(PATIENCE)
            mine.close()
            child.close()
        contract.assert_free(mgr, ns + "a")
        contract.assert_free(mgr, ns + "b")


# --- query: its own holds and waits in detail, another client's as its process ------------------

OWNER = f"{socket.gethostname()}:{os.getpid()}"


@pytest.mark.asyncio
async def test_query_names_its_own_thread_or_task_and_another_manager_s_process(
    ns: str, managers: Managers
) -> None:
    first, second = managers(2)
    tag = uuid.uuid4().hex[:8]
    holder = contract.HoldingThread(f"holder-{tag}", first.lock(ns + "a"))
    waiter = asyncio.create_task(
        second.lock(ns + "a").acquire_async(deadline=PATIENCE * 2), name=f"task-waits-{tag}"
    )
    try:
        assert await contract.until(lambda: first.lock(ns + "a").statistics().waiting == 1)
        expected = [(ns + "a", "exclusive", "held"), (ns + "a", "exclusive", "waiting")]
        for mgr, mine, who in (
            (first, "held", f"holder-{tag}"),
            (second, "waiting", f"task-waits-{tag}"),
        ):
            infos = mgr.query(ns)
            assert sorted((i.name, i.mode, i.state) for i in infos) == expected, infos
            owners = {i.state: i.owner for i in infos}
            assert all(o.startswith(OWNER) for o in owners.values()), owners
            assert who in owners[mine], owners
        assert second.query(ns + "b") == []
    finally:
        holder.release()
        (await contract.bounded(waiter))()
    assert first.query(ns) == [] and second.query(ns) == []


def test_query_lists_the_holds_and_waits_of_another_process_as_that_process(
    url: str, repls: Callable[[], Repl]
) -> None:
    child = repls()
    with LockManager(url) as mgr:
        parent_hold = mgr.lock("q:b").acquire()
        before = time.time()
        child.acquire("a", "q:a", "lock")
        held_after = time.time()
        child.send("wait", "b", "q:b", "shared", 30)
        child.expect("waiting", "b")
        assert contract.waiting(mgr.lock("q:b"))
        waiting_after = time.time()
        try:
            infos = mgr.query("q:")
            got = [(i.name, i.mode, i.state) for i in infos]
            assert got == [
                ("q:a", "exclusive", "held"),
                ("q:b", "exclusive", "held"),
                ("q:b", "shared", "waiting"),
            ], infos
            a_held, b_held, b_waiting = infos
            assert file_scope.owned_by(a_held.owner, child.pid), a_held
            assert file_scope.owned_by(b_waiting.owner, child.pid), b_waiting
            assert threading.current_thread().name in b_held.owner, b_held
            # The server's times (another clock reading than this process's): loosely.
            assert before - 0.05 <= a_held.since <= held_after + 0.05, (a_held, before)
            assert held_after - 0.05 <= b_waiting.since <= waiting_after + 0.05, b_waiting
        finally:
            parent_hold()
        child.expect("held", "b")
        child.release("a")
        child.release("b")
        assert mgr.query("q:") == []


def test_another_manager_sees_when_a_hold_began_however_long_it_lasts(
    ns: str, managers: Managers
) -> None:
    # Held past the watchdog's pings (every second) of the holding session.
    first, second = managers(2)
    before = time.time()
    with first.lock(ns + "a"):
        after = time.time()
        time.sleep(1.6)
        (info,) = second.query(ns)
        assert before - 0.05 <= info.since <= after + 0.05, (info, before, after)


def test_threads_of_one_manager_taking_one_name_in_a_loop_never_stall(
    ns: str, managers: Managers
) -> None:
    # Eight threads of one manager take one name, do a few microseconds of work and let it
    # go, over and over: the server hold is passed among them and, at batch ends, given
    # back and taken again. A ticket left at a gate kept for local demand once waited for
    # a release that never came, and every thread then timed out.
    (mgr,) = managers(1)
    lock = mgr.lock(ns + "loop")
    until = time.monotonic() + 1.5
    errors: list[BaseException] = []
    counts = [0] * 8

    def loop(i: int) -> None:
        while time.monotonic() < until:
            try:
                unlock = lock.acquire(deadline=PATIENCE)
            except BaseException as exc:
                errors.append(exc)
                return
            counts[i] += 1
            unlock()

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE * 2)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    assert not errors, errors[:3]
    assert all(counts), counts
    contract.assert_free(mgr, ns + "loop")
