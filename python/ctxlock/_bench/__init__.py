"""The workloads and rows of ``python -m ctxlock bench`` (and of ``benches/bench_locks.py``).

Both the command line and the pytest-benchmark suite import the workloads from here, so the
two can never measure different things.

A *workload* (``workload.py``) performs ``n`` operations of one scenario with one lock
implementation and returns a ``Sample``: ``loops.py`` (one thread or task, uncontended),
``threads.py`` and ``tasks.py`` (contended). ``peers.py`` makes the locks compared
(``ctxlock``, ``threading``, ``asyncio``, ``aiologic``, ``readerwriterlock``);
``scenarios.py`` maps each scenario to its peers' workloads.

A *row* (``row.py``) compares ctxlock with an anchor and checks the ratio against a target;
``rows.py`` lists them and says what each measures. ``pairs.py`` measures the ratio rows with
``sampling.py``; ``memory.py``, ``scaling.py`` and ``churn.py`` three others; ``named.py``
has the named-lock workloads (``LockManager`` against a dict and a ``WeakValueDictionary``
of ``threading.Lock``) and measures ``named_1m``. ``file.py`` has the rows of the file scope
(``LockManager("file:///dir")``, the processes of one machine) against ``filelock``,
``fasteners`` and ``fcntl.flock``, most of them run in child interpreters that ``procs.py``
starts and talks to. ``pg.py`` has the rows of the PostgreSQL scope
(``LockManager("postgresql://...")``) against advisory locks taken with psycopg and asyncpg,
on a throwaway server that ``pg_server.py`` starts. ``report.py`` prints the results as a
table or JSON, ``plot.py`` draws them. ``interpreters.py`` runs the interpreter rows in other
interpreters for ``--pythons`` (``rows.py`` says which).
"""

from ctxlock._bench.config import Config
from ctxlock._bench.peers import PEER_LABELS, PeerMissing
from ctxlock._bench.result import RowResult, format_value
from ctxlock._bench.row import Row
from ctxlock._bench.rows import INTERPRETER_ROWS, ROW_KEYS, ROWS, run_row
from ctxlock._bench.scenarios import SCENARIOS
from ctxlock._bench.workload import Sample, Workload

__all__ = [
    "INTERPRETER_ROWS",
    "PEER_LABELS",
    "ROWS",
    "ROW_KEYS",
    "SCENARIOS",
    "Config",
    "PeerMissing",
    "Row",
    "RowResult",
    "Sample",
    "Workload",
    "format_value",
    "run_row",
]
