"""``python -m ctxlock bench``, ``--plot`` and ``--version`` as a user runs them."""

from __future__ import annotations

import dis
import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import ctxlock
import pytest
from ctxlock import _bench, _cli
from ctxlock._bench.interpreters import interpreter_label
from ctxlock._bench.loops import ThreadingAcquireKept
from ctxlock._bench.scenarios import SCENARIOS
from ctxlock._bench.threads import ThreadingKeptAcquire, progress
from ctxlock._bench.workload import InAnotherThread

#: Every row of the report, in order; a row may be skipped but never left out.
ROWS = (
    "acquire_unlock",
    "with",
    "acquire_deadline",
    "shared_with",
    "shared_vs_rwlock",
    "contended_2",
    "contended_4",
    "contended_2_acquire",
    "contended_4_acquire",
    "drain_100",
    "async_with",
    "tasks_100",
    "mixed_2t2t",
    "memory_100k",
    "tasks_scaling",
    "churn_rss",
    "named_acquire_unlock",
    "named_vs_weakdict",
    "named_1m",
    "file_acquire_unlock",
    "file_vs_flock",
    "file_vs_ofd",
    "file_contended_4p",
    "file_contended_vs_fasteners",
    "file_handoff",
    "file_crash",
    "pg_acquire_unlock",
    "pg_contended",
    "pg_async",
    "pg_cancel",
)
#: Rows whose ratio column is a growth against a budget, which may well be 0.
BUDGET_ROWS = ("churn_rss", "named_1m")
#: The rows of the file scope (``LockManager("file:///dir")``), between processes.
FILE_ROWS = tuple(key for key in ROWS if key.startswith("file_"))
#: The rows of the PostgreSQL scope, against a throwaway server the bench starts.
PG_ROWS = tuple(key for key in ROWS if key.startswith("pg_"))


#: The rows measuring threads contending for one lock.
CONTENDED_ROWS = ("contended_2", "contended_4", "contended_2_acquire", "contended_4_acquire")


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxlock", *args],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=cwd,
        check=False,
        env=env,
    )


def env_without_pythons(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CTXLOCK_BENCH_PYTHONS"}
    return {**env, **extra}


def test_quick_bench_json(tmp_path: Path) -> None:
    proc = run_cli("bench", "--quick", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ctxlock"] == ctxlock.__version__
    assert report["mode"] == "quick"
    assert [row["key"] for row in report["rows"]] == list(ROWS)
    for row in report["rows"]:
        assert row["status"] in ("ok", "miss", "skip"), (row["key"], row["note"])
        assert row["op"] in ("<=", ">=")
        assert row["target"] > 0
        if row["status"] == "skip":
            assert row["note"], row["key"]
            assert row["ratio"] is None
            assert row["ok"] is None
            continue
        ratio = row["ratio"]
        assert isinstance(ratio, (int, float)) and math.isfinite(ratio), row
        assert ratio >= 0 if row["key"] in BUDGET_ROWS else ratio > 0, row
        assert isinstance(row["ok"], bool)
        if row["anchor_ns"] is not None:
            assert row["ours_ns"] > 0 and row["anchor_ns"] > 0, row
    named = next(row for row in report["rows"] if row["key"] == "named_acquire_unlock")
    floor = named["extra"]
    assert floor["floor_ns"] > 0, named
    assert floor["floor_ratio"] == pytest.approx(floor["floor_ns"] / named["anchor_ns"])
    assert "without the name's table" in named["note"], named
    plain = next(row for row in report["rows"] if row["key"] == "acquire_unlock")
    far = plain["extra"]
    assert far["ours_elsewhere_ns"] > 0 and far["anchor_elsewhere_ns"] > 0, plain
    assert far["elsewhere_ratio"] == pytest.approx(
        far["ours_elsewhere_ns"] / far["anchor_elsewhere_ns"]
    )
    assert plain["note"].startswith("in a thread that did not make the lock: ctxlock "), plain
    # There, against threading.Lock taking a reference to its lock on each hold.
    assert far["ours_elsewhere_vs_kept_ns"] > 0 and far["anchor_kept_elsewhere_ns"] > 0, plain
    assert far["kept_elsewhere_ratio"] == pytest.approx(
        far["ours_elsewhere_vs_kept_ns"] / far["anchor_kept_elsewhere_ns"]
    )
    assert "keeping a reference to its lock per hold" in plain["note"], plain


class _Where(_bench.Workload):
    """Notes which thread made it and which ran it; raises on its second run."""

    def __init__(self) -> None:
        self.made_by = threading.get_ident()
        self.ran_by: list[threading.Thread] = []
        self.closed = False

    def run(self, n: int) -> _bench.Sample:
        self.ran_by.append(threading.current_thread())
        if len(self.ran_by) == 2:
            raise ZeroDivisionError("the second run")
        return _bench.Sample(n, 1)

    def close(self) -> None:
        self.closed = True


def _loads_kept(code: object) -> list[str]:
    """The instructions that load what the local ``_kept`` is set from, in ``code``'s
    bytecode (as this interpreter compiles it: a store may be fused with the next load)."""
    loads = []
    for before, store in itertools.pairwise(dis.get_instructions(code)):  # type: ignore[arg-type]
        names = store.argval if isinstance(store.argval, tuple) else (store.argval,)
        if store.opname.startswith("STORE_FAST") and names[0] == "_kept":
            loads.append(f"{before.opname} {before.argval}")
    return loads


@pytest.mark.parametrize(
    "code", [ThreadingAcquireKept.run, ThreadingKeptAcquire._loop], ids=["elsewhere", "alone"]
)
def test_the_kept_controls_take_a_reference_to_the_lock_on_each_hold(code: object) -> None:
    # A plain load of the lock stored in a local: the reference an Unlock keeps. (A
    # borrowed load, which a later interpreter might make of it, would count nothing.)
    assert _loads_kept(code) == ["LOAD_FAST lock"], dis.Bytecode(code).dis()  # type: ignore[arg-type]


def test_the_kept_controls_run_on_a_lock_the_main_thread_made() -> None:
    # On the free-threaded build the reference is an atomic count only in a thread that
    # did not make the lock: the note's loop runs in another thread, and the contended
    # rows' loops run in their own threads.
    with SCENARIOS["acquire_unlock_elsewhere"]["threading_kept"]() as far:
        assert isinstance(far, InAnotherThread)
        assert far.run(100).ops == 100
    with SCENARIOS["contended_1_acquire"]["threading_kept"]() as alone:
        assert isinstance(alone, ThreadingKeptAcquire)
        assert alone.run(100).ops == 100
    # Contended, in as many threads as the row's own loops.
    for threads in (2, 4):
        with SCENARIOS[f"contended_{threads}_acquire"]["threading_kept"]() as contended:
            assert isinstance(contended, ThreadingKeptAcquire)
            assert contended.run(100).ops == 100 * threads


def test_in_another_thread_runs_its_workload_in_a_new_thread_and_hands_back_errors() -> None:
    inner = _Where()
    with InAnotherThread(inner) as far:
        assert far.run(7) == _bench.Sample(7, 1)
        with pytest.raises(ZeroDivisionError, match="the second run"):
            far.run(7)
    assert inner.closed
    assert inner.made_by == threading.get_ident()
    # Each run in a new thread of its own, ended by the time the run returned (an ended
    # thread's ident may be reused, so the thread objects are compared).
    first, second = inner.ran_by
    assert first is not second
    assert threading.main_thread() not in inner.ran_by
    for thread in inner.ran_by:
        assert thread.name == "ctxlock-bench-elsewhere" and thread.daemon, thread
        assert not thread.is_alive(), thread


def file_scope_available(directory: Path) -> bool:
    directory.mkdir()
    try:
        ctxlock.LockManager(f"file://{directory}").close()
    except ctxlock.BackendError:
        return False
    return True


def test_quick_file_rows_run_or_are_not_available(tmp_path: Path) -> None:
    proc = run_cli("bench", "--quick", "--json", "--rows", ",".join(FILE_ROWS), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {row["key"]: row for row in json.loads(proc.stdout)["rows"]}
    assert list(rows) == list(FILE_ROWS)
    if not file_scope_available(tmp_path / "probe"):
        for row in rows.values():
            assert row["status"] == "skip", row
            assert row["note"].startswith("not available: "), row
        return
    for key, row in rows.items():
        if row["status"] == "skip":  # a peer library that is not installed, or no fcntl
            assert "not installed" in row["note"] or "fcntl" in row["note"], row
            continue
        assert row["status"] in ("ok", "miss"), (key, row["note"])
        assert row["ratio"] > 0 and row["ours_ns"] > 0, row
    for key in ("file_contended_4p", "file_contended_vs_fasteners"):
        if rows[key]["status"] != "skip":
            assert "shares of the holds by process" in rows[key]["note"]
            assert rows[key]["extra"]["ours_holds_per_s"] > 0
    handoff = rows["file_handoff"]["extra"]
    assert 0 < handoff["p50_ns"] <= handoff["p99_ns"] <= handoff["max_ns"]
    crash = rows["file_crash"]["extra"]
    assert 0 < crash["median_ns"] <= crash["max_ns"]


def test_the_process_rows_machinery_with_the_peers(tmp_path: Path) -> None:
    """The children, their protocol and the checks, with locks that exist today (the
    file scope's own runs are in the test above)."""
    pytest.importorskip("fcntl")
    from ctxlock._bench import file

    for kind in ("filelock", "fasteners"):
        pytest.importorskip(kind)
        run = file._contend_run(kind, tmp_path, 0.1)
        assert len(run.holds) == file.PROCESSES and sum(run.holds) > 0
        assert run.ns_per_hold > 0 and run.longest_ns >= 0
    latencies = file._handoff_run("flock", tmp_path, 20)
    assert len(latencies) == 20 - 4 and all(t > 0 for t in latencies)
    waited = file._crash_round("flock", tmp_path)
    assert waited is not None and 0 < waited < 5_000_000_000


def test_quick_pg_rows_run_or_are_not_available(tmp_path: Path) -> None:
    proc = run_cli("bench", "--quick", "--json", "--rows", ",".join(PG_ROWS), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {row["key"]: row for row in json.loads(proc.stdout)["rows"]}
    assert list(rows) == list(PG_ROWS)
    for key, row in rows.items():
        if row["status"] == "skip":  # no server here, no scope in this build, or no peer
            assert row["note"].startswith("not available: ") or "not installed" in row["note"]
            continue
        assert row["status"] in ("ok", "miss"), (key, row["note"])
        assert row["ratio"] > 0 and row["ours_ns"] > 0, row
    for key in ("pg_contended", "pg_async"):
        if rows[key]["status"] != "skip":
            assert "shares of the holds by process" in rows[key]["note"]
            assert rows[key]["extra"]["anchor_statements_per_hold"] == pytest.approx(2.0)
    if rows["pg_acquire_unlock"]["status"] != "skip":
        assert rows["pg_acquire_unlock"]["extra"]["anchor_statements_per_pair"] == 2.0
    if rows["pg_cancel"]["status"] != "skip":
        cancel = rows["pg_cancel"]["extra"]
        assert 0 < cancel["median_ns"] <= cancel["max_ns"]
    if all(row["status"] == "skip" for row in rows.values()):
        # Only the skip notes were checked: say so in the summary.
        pytest.skip("no pg row could run here: " + rows[PG_ROWS[0]]["note"])


def test_the_pg_rows_machinery_with_psycopg_and_asyncpg(tmp_path: Path) -> None:
    """The anchors of the ``pg_*`` rows, their children and the statement count against a
    real server, whether or not this build has the PostgreSQL scope."""
    pytest.importorskip("psycopg")
    from ctxlock._bench import pg, pg_server

    reason = pg_server.missing()
    if reason is not None:
        pytest.skip(reason)
    server = pg_server.shared()
    stats = pg._Stats(server)
    try:
        with pg.PsycopgAdvisoryPair(server.url) as pairs:
            assert pairs.run(20).per_op_ns > 0

        def make() -> _bench.Workload:
            return pg.PsycopgAdvisoryPair(server.url)

        one = pg._session_statements(stats, make, 1)
        assert pg._session_statements(stats, make, 11) - one == 20
        kinds = [("contend", "psycopg")]
        if importlib.util.find_spec("asyncpg") is not None:
            kinds.append(("async", "asyncpg"))
        for role, kind in kinds:
            each = pg._overhead(stats, role, kind, server.url)
            run = pg._contend_run(role, kind, server.url, tmp_path, 0.1, stats, each)
            assert len(run.holds) == pg.PROCESSES and sum(run.holds) > 0
            # Two statements a hold; a hold a process was taking when its window closed
            # (counted by the server, not by the process) may add two each.
            assert 0 <= run.statements - 2 * sum(run.holds) <= 2 * pg.PROCESSES, run
        cancelled = pg._cancel_round_psycopg(stats, server.url)
        assert cancelled.seen and 0 < cancelled.raised_ns < 5_000_000_000
    finally:
        stats.close()


class MisspelledCall(_bench.Workload):
    """A workload with a bug: it calls a method that ``Lock`` does not have."""

    def run(self, n: int) -> _bench.Sample:
        ctxlock.Lock().aquire()  # type: ignore[attr-defined]
        raise AssertionError("unreachable")


def test_a_workload_that_raises_is_an_error_row_with_its_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(_bench.SCENARIOS["with"], "ctxlock", MisspelledCall)
    code = _cli.main(["bench", "--quick", "--json", "--rows", "with,acquire_unlock"])
    assert code == 1
    rows = {row["key"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    broken = rows["with"]
    assert broken["status"] == "error"
    assert broken["ratio"] is None
    assert broken["note"].startswith("error: AttributeError:")
    assert broken["traceback"].startswith("Traceback (most recent call last):")
    assert "ctxlock.Lock().aquire()" in broken["traceback"]
    # The run goes on: the next row is measured as usual.
    assert rows["acquire_unlock"]["status"] in ("ok", "miss")
    assert rows["acquire_unlock"]["traceback"] is None


def test_an_error_row_prints_its_traceback_to_stderr_in_table_mode(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(_bench.SCENARIOS["with"], "ctxlock", MisspelledCall)
    code = _cli.main(["bench", "--quick", "--rows", "with"])
    assert code == 1
    out, err = capsys.readouterr()
    (line,) = [line for line in out.splitlines() if line.startswith("with ")]
    assert line.split()[:7] == ["with", "-", "-", "-", "<=", "0.7", "error"]
    assert "Traceback (most recent call last):" in err
    assert "ctxlock.Lock().aquire()" in err
    assert "AttributeError" in err


def test_a_missing_peer_is_still_a_skip(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "aiologic", None)  # import aiologic raises ImportError
    code = _cli.main(["bench", "--quick", "--json", "--rows", "mixed_2t2t"])
    assert code == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["status"] == "skip"
    assert "aiologic is not installed" in row["note"]
    assert row["traceback"] is None


def test_quick_bench_table_and_progress(tmp_path: Path) -> None:
    proc = run_cli("bench", "--quick", "--rows", "with,acquire_unlock", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("with ") for line in lines)
    assert any(line.startswith("acquire_unlock ") for line in lines)
    assert "[1/2] with" in proc.stderr


def test_unknown_row_is_an_error(tmp_path: Path) -> None:
    proc = run_cli("bench", "--quick", "--rows", "no_such_row", cwd=tmp_path)
    assert proc.returncode != 0
    assert "no_such_row" in proc.stderr


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "ratios.png"
    proc = run_cli(
        "bench", "--quick", "--rows", "acquire_unlock,with", "--plot", str(out), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_version(tmp_path: Path) -> None:
    proc = run_cli("--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ctxlock {ctxlock.__version__}"


def test_bench_help_lists_every_row_with_its_target(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _cli.main(["bench", "--help"])
    assert exit_.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert [row.key for row in _bench.ROWS] == list(ROWS)
    for row in _bench.ROWS:
        (line,) = [line for line in lines if line.split()[:1] == [row.key]]
        assert row.description in line
        assert line.endswith(f"[target {row.op} {row.target:g}{row.ratio_unit}]")


BAD_OPTIONS = [
    ("bench", "--repeat", "0"),
    ("bench", "--repeat", "-3"),
    ("bench", "--repeat", "x"),
    ("bench", "--repeat", "1.5"),
    ("bench", "--rows", "no_such_row"),
    ("bench", "--rows", ","),
    ("bench", "--rows", ""),
    ("bench", "--plot", "no/such/directory/ratios.png"),
    ("bench", "--plot", ""),
    ("demo", "--seconds", "0"),
    ("demo", "--seconds", "-1"),
    ("demo", "--seconds", "x"),
    ("demo", "--seconds", "nan"),
    ("demo", "--seconds", "inf"),
    ("demo", "--attack", "sideways"),
    ("demo", "--lock", "mutex"),
]


@pytest.mark.parametrize(("command", "option", "value"), BAD_OPTIONS, ids=repr)
def test_bad_option_value_is_a_usage_error(
    command: str,
    option: str,
    value: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # the relative --plot path must not exist
    with pytest.raises(SystemExit) as exit_:
        _cli.main([command, option, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"python -m ctxlock {command}: error: argument {option}:" in err
    assert "Traceback" not in err


def test_demo_seconds_zero_as_a_user_runs_it(tmp_path: Path) -> None:
    proc = run_cli("demo", "--seconds", "0", cwd=tmp_path)
    assert proc.returncode == 2
    assert "argument --seconds" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_quick_contended_and_drain_rows(tmp_path: Path) -> None:
    keys = (*CONTENDED_ROWS, "drain_100")
    proc = run_cli("bench", "--quick", "--json", "--rows", ",".join(keys), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {row["key"]: row for row in json.loads(proc.stdout)["rows"]}
    assert list(rows) == list(keys)
    for key in CONTENDED_ROWS:
        row, extra = rows[key], rows[key]["extra"]
        assert row["status"] in ("ok", "miss"), (key, row["note"])
        assert row["ratio"] > 0 and row["ours_ns"] > 0 and row["anchor_ns"] > 0, row
        assert extra["ours_longest_wait_ns"] > 0 and extra["anchor_longest_wait_ns"] > 0
        for who in ("ours", "anchor", "no_lock"):
            assert extra[f"{who}_starved_threads"] in range(4), row
            share = extra.get(f"{who}_smallest_share")
            assert share is None or 0 <= share <= 1, row
        assert "threads starved" in row["note"] and "share of the ops" in row["note"]
        # The same loop in one thread, both locks: the part of the ratio that is not the
        # contention's.
        assert extra["ours_alone_ns"] > 0 and extra["anchor_alone_ns"] > 0, row
        assert extra["alone_ratio"] == pytest.approx(
            extra["ours_alone_ns"] / extra["anchor_alone_ns"]
        )
        assert "one thread alone" in row["note"], row["note"]
        if key.endswith("_acquire"):
            # And the anchor's loop in ctxlock's shape (its release called through a
            # local), against ctxlock again: the interpreter's part of the comparison.
            # And with a reference to the lock taken on each hold, as an Unlock takes
            # one: what that count costs.
            for control in ("shaped", "kept"):
                ours, theirs = (
                    extra[f"ours_alone_vs_{control}_ns"],
                    extra[f"anchor_{control}_alone_ns"],
                )
                assert ours > 0 and theirs > 0, (control, extra)
                assert extra[f"{control}_alone_ratio"] == pytest.approx(ours / theirs)
            assert "in ctxlock's loop shape" in row["note"], row["note"]
            assert "keeping a reference to its lock per hold" in row["note"], row["note"]
            # The reference control run contended too, in the row's threads: its own
            # time, longest wait and thread switches beside ctxlock's in the same rounds.
            ours, theirs = extra["ours_contended_vs_kept_ns"], extra["anchor_kept_contended_ns"]
            assert ours > 0 and theirs > 0, extra
            assert extra["kept_contended_ratio"] == pytest.approx(ours / theirs)
            assert extra["ours_vs_kept_longest_wait_ns"] > 0, extra
            assert extra["anchor_kept_longest_wait_ns"] > 0, extra
            for who in ("ours_vs_kept", "anchor_kept"):
                assert extra[f"{who}_switches_per_1000_ops"] >= 0, extra
            assert "per hold (acquire(); kept = lock; ...; release()), contended:" in row["note"]
        else:
            assert "shaped_alone_ratio" not in extra and "kept_alone_ratio" not in extra, extra
            assert not any("contended_vs" in key for key in extra), extra
        if extra["ours_starved_threads"] > 0:
            assert row["status"] == "miss", row
    drain, extra = rows["drain_100"], rows["drain_100"]["extra"]
    assert drain["status"] in ("ok", "miss"), drain["note"]
    for who in ("ours", "anchor"):
        assert 0 < extra[f"{who}_waiter_median_ns"] <= extra[f"{who}_waiter_p90_ns"], extra
        assert extra[f"{who}_waiter_mean_ns"] > 0
    assert "p90" in drain["note"] and "median" in drain["note"]
    if extra["ours_waiter_p90_ns"] > extra["anchor_waiter_p90_ns"]:
        assert drain["status"] == "miss"


def test_progress_counts_a_thread_that_waited_and_never_got_the_lock() -> None:
    # Thread 0 takes the lock at 10..50 and finishes at 60; thread 1 starts waiting at 15
    # and gets it only at 70, once alone: starved. Their window (15..60) is all thread 0's.
    starved = progress([[5, 20, 30, 40, 45], [15, 65]], [[10, 25, 35, 42, 50], [70, 75]], [60, 80])
    assert starved.starved == 1
    assert starved.shares == (1.0, 0.0)
    # Turns taken alternately: nobody starved, even shares.
    fair = progress([[0, 20], [5, 20]], [[10, 30], [15, 29]], [31, 36])
    assert fair.starved == 0 and fair.shares == (0.5, 0.5)
    # Under a GIL the second thread may first run once the first has finished: no window,
    # and not starved (it never waited while the other one held the lock).
    serial = progress([[0, 2], [10, 12]], [[1, 3], [11, 13]], [4, 14])
    assert serial.starved == 0 and serial.shares == ()


def test_pythons_runs_the_interpreter_rows_in_another_interpreter(tmp_path: Path) -> None:
    """This interpreter given as "another": the rows run again in a child process."""
    keys = ("with", "contended_2", "memory_100k")  # memory_100k is no interpreter row
    args = ("bench", "--quick", "--rows", ",".join(keys), "--pythons", sys.executable)
    label = interpreter_label()
    proc = run_cli(*args, "--json", cwd=tmp_path, env=env_without_pythons())
    assert proc.returncode == 0, proc.stderr
    assert f"[{label}] [1/2] with ..." in proc.stderr
    report = json.loads(proc.stdout)
    assert [row["key"] for row in report["rows"]] == list(keys)
    this, other = report["interpreters"]
    assert this["this"] and not other["this"]
    assert this["label"] == other["label"] == label == report["label"]
    assert other["python"] == sys.executable and other["error"] is None
    assert [row["key"] for row in this["rows"]] == ["with", "contended_2"]
    assert [row["key"] for row in other["rows"]] == ["with", "contended_2"]
    for row in other["rows"]:
        assert row["status"] in ("ok", "miss"), row
        assert row["ratio"] > 0 and row["ours_ns"] > 0 and row["anchor_ns"] > 0, row

    proc = run_cli(*args, cwd=tmp_path, env=env_without_pythons())
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("Across interpreters", 1)[1].splitlines()
    assert f"  {label}: {sys.executable}" in table
    (header,) = [line for line in table if line.startswith("row ")]
    assert header.split() == ["row", label, label]
    for key in ("with", "contended_2"):
        (line,) = [line for line in table if line.split()[:1] == [key]]
        cells = line.split()
        assert len(cells) == 1 + 2 * 6, line  # value and unit, twice; ratio; result
        assert cells[6] in ("ok", "miss") and cells[12] in ("ok", "miss"), line
    assert not any(line.startswith("memory_100k") for line in table)


def test_a_python_that_cannot_run_the_rows_is_an_error_line(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-python")
    # Through the environment variable; this interpreter there too: it must not start
    # children of its own.
    env = env_without_pythons(CTXLOCK_BENCH_PYTHONS=f"{missing},{sys.executable}")
    proc = run_cli("bench", "--quick", "--rows", "with", cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr  # an interpreter that failed is an error
    assert "Traceback" not in proc.stderr
    assert f"  {missing}: error: cannot run it: " in proc.stdout
    assert proc.stderr.count(f"[{interpreter_label()}] [1/1] with ...") == 1
    proc = run_cli(
        "bench", "--quick", "--json", "--rows", "with", "--pythons", missing, cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stderr
    _, broken = json.loads(proc.stdout)["interpreters"]
    assert broken["python"] == missing and broken["rows"] == []
    assert broken["error"].startswith("cannot run it: ")
