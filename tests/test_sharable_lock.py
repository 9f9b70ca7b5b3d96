"""SharableLock: Go's reader-group readers-writer lock, phase-fair.

The attack tests come from the Java article on readers-writer locks ("ReadAttackTest",
"WriteAttackTest"): a pair of actors that keep one mode busy all the time must not starve
the other mode. Every bound on time here is generous (seconds where the lock
needs milliseconds): the tests check who gets in and in what order, never how fast.
"""

from __future__ import annotations

import queue
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from conftest import PATIENCE, STRESS_SECONDS, wait_until
from ctxlock import (
    Cancelled,
    CancelToken,
    LockTimeout,
    LockView,
    SharableLock,
    Unlock,
    WouldBlock,
)
from kinds import SHARABLE_FAMILIES, Family, over_families

# Long enough for a thread on a busy machine to reach its acquire and queue there.
SETTLE = 0.3


def start(fn: Callable[[], object], name: str = "actor") -> threading.Thread:
    thread = threading.Thread(target=fn, name=name, daemon=True)
    thread.start()
    return thread


def join_all(*threads: threading.Thread, within: float = PATIENCE * 2) -> None:
    end = time.monotonic() + within
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
        assert not thread.is_alive(), f"{thread.name} did not finish within {within} s"


class Errors:
    """Collects exceptions raised in helper threads so the test thread can re-raise them."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def run(self, fn: Callable[[], object]) -> Callable[[], None]:
        def target() -> None:
            try:
                fn()
            except BaseException as exc:
                self.errors.append(exc)

        return target

    def check(self) -> None:
        if self.errors:
            raise self.errors[0]


@pytest.fixture
def errors() -> Iterator[Errors]:
    collected = Errors()
    yield collected
    collected.check()


def assert_free(rw: SharableLock) -> None:
    """Neither mode is held: an exclusive try succeeds, and so does a shared one."""
    assert not rw.shared.locked()
    assert not rw.exclusive.locked()
    unlock = rw.exclusive.try_acquire()
    assert unlock is not None
    unlock()
    unlock = rw.shared.try_acquire()
    assert unlock is not None
    unlock()


# --- the two views --------------------------------------------------------------------------


def test_views_are_lock_views_of_their_mode() -> None:
    rw = SharableLock()
    assert isinstance(rw.shared, LockView)
    assert isinstance(rw.exclusive, LockView)
    assert rw.shared.shared is True
    assert rw.exclusive.shared is False


def test_locked_reports_each_mode() -> None:
    rw = SharableLock()
    assert not rw.shared.locked()
    assert not rw.exclusive.locked()

    reader = rw.shared.acquire()
    assert isinstance(reader, Unlock)
    assert rw.shared.locked()
    assert not rw.exclusive.locked()
    reader()
    assert reader.released
    assert not rw.shared.locked()

    writer = rw.exclusive.acquire()
    assert rw.exclusive.locked()
    assert not rw.shared.locked()
    writer()
    assert not rw.exclusive.locked()
    assert_free(rw)


def test_with_statement_on_both_views() -> None:
    rw = SharableLock()
    with rw.shared:
        assert rw.shared.locked()
        with rw.shared:
            assert rw.shared.locked()
        assert rw.shared.locked(), "the inner reader left; the outer one still holds"
        assert rw.exclusive.try_acquire() is None
    with rw.exclusive:
        assert rw.exclusive.locked()
        assert rw.shared.try_acquire() is None
    assert_free(rw)


def test_with_statement_releases_on_exception() -> None:
    rw = SharableLock()
    for view in (rw.shared, rw.exclusive):
        with pytest.raises(ZeroDivisionError), view:
            _ = 1 / 0
        assert not view.locked()
    assert_free(rw)


def test_shared_holders_overlap(errors: Errors) -> None:
    rw = SharableLock()
    both_inside = threading.Barrier(2, timeout=PATIENCE)

    def reader() -> None:
        with rw.shared:
            # Passes only if the other reader is inside at the same time.
            both_inside.wait()
            assert rw.shared.locked()

    join_all(start(errors.run(reader)), start(errors.run(reader)))
    errors.check()

    first = rw.shared.try_acquire()
    second = rw.shared.acquire(deadline=0)
    assert first is not None
    first()
    assert rw.shared.locked(), "one reader is still inside"
    second()
    assert_free(rw)


def test_exclusive_excludes_shared_and_exclusive() -> None:
    rw = SharableLock()
    writer = rw.exclusive.acquire()
    for view in (rw.shared, rw.exclusive):
        assert view.try_acquire() is None
        with pytest.raises(WouldBlock):
            view.acquire(blocking=False)
        with pytest.raises(LockTimeout):
            view.acquire(deadline=0)
        with pytest.raises(LockTimeout):
            view.acquire(deadline=0.05)
    writer()

    reader = rw.shared.acquire()
    assert rw.exclusive.try_acquire() is None
    with pytest.raises(WouldBlock):
        rw.exclusive.acquire(blocking=False)
    with pytest.raises(LockTimeout):
        rw.exclusive.acquire(deadline=0.05)
    reader()
    assert_free(rw)


def test_a_waiting_writer_is_let_in_when_the_last_reader_leaves(errors: Errors) -> None:
    rw = SharableLock()
    first, second = rw.shared.acquire(), rw.shared.acquire()
    got_in = threading.Event()

    def writer() -> None:
        with rw.exclusive:
            got_in.set()

    thread = start(errors.run(writer))
    time.sleep(SETTLE)
    first()
    time.sleep(0.1)
    assert not got_in.is_set(), "a reader still holds"
    second()
    assert got_in.wait(PATIENCE)
    join_all(thread)
    assert_free(rw)


# --- fairness: the Java article's attacks ----------------------------------------------------


class AttackingReaders:
    """Two readers that keep the shared mode held without a gap (ReadAttackTest).

    Each reader holds for a while, then releases only once its partner is inside too, so
    there is always a reader holding. A reader gives up waiting for its partner after
    ``patience`` seconds: with a lock that makes new readers queue behind a waiting writer the
    partner can't come in, and the attack has to let go.
    """

    def __init__(
        self, rw: SharableLock, errors: Errors, hold: float = 0.05, patience: float = 0.2
    ) -> None:
        self.rw = rw
        self.errors = errors
        self.hold = hold
        self.patience = patience
        self.stop = CancelToken()
        self.meta = threading.Condition()
        self.inside: set[int] = set()
        self.overlaps = 0
        self.rounds = [0, 0]

    def reader(self, me: int) -> None:
        other = 1 - me
        while True:
            try:
                unlock = self.rw.shared.acquire(self.stop)
            except Cancelled:
                return
            with self.meta:
                self.inside.add(me)
                if other in self.inside:
                    self.overlaps += 1
                self.meta.notify_all()
            self.stop.wait(self.hold)
            with self.meta:
                self.meta.wait_for(
                    lambda: other in self.inside or self.stop.cancelled, self.patience
                )
                self.inside.discard(me)
            unlock()
            self.rounds[me] += 1

    def __enter__(self) -> AttackingReaders:
        self.threads = [
            start(self.errors.run(lambda i=i: self.reader(i)), f"reader-{i}") for i in range(2)
        ]
        with self.meta:
            assert self.meta.wait_for(lambda: len(self.inside) == 2, PATIENCE)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.cancel("attack over")
        join_all(*self.threads)


def test_read_attack_does_not_starve_a_writer(errors: Errors) -> None:
    rw = SharableLock()
    waits: list[float] = []
    with AttackingReaders(rw, errors) as attack:
        for _ in range(4):
            assert rw.shared.locked(), "the attack keeps a reader inside"
            started = time.monotonic()
            # LockTimeout here means the writer starved.
            with rw.exclusive.acquire(deadline=PATIENCE):
                waits.append(time.monotonic() - started)
                assert not rw.shared.locked()
                with attack.meta:
                    assert not attack.inside
            time.sleep(0.2)
        overlaps = attack.overlaps
    assert overlaps >= 4, "the readers really overlapped"
    assert all(rounds > 0 for rounds in attack.rounds), "the readers were not starved either"
    assert max(waits) < 2.0, waits
    assert_free(rw)


def test_write_attack_does_not_starve_a_reader(errors: Errors) -> None:
    rw = SharableLock()
    stop = CancelToken()
    writes = [0, 0]

    def writer(me: int) -> None:
        while True:
            try:
                unlock = rw.exclusive.acquire(stop)
            except Cancelled:
                return
            stop.wait(0.02)
            unlock()
            writes[me] += 1

    threads = [start(errors.run(lambda i=i: writer(i)), f"writer-{i}") for i in range(2)]
    try:
        deadline = time.monotonic() + PATIENCE
        while min(writes) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert min(writes) >= 3, "both writers are running"
        waits = []
        for _ in range(5):
            started = time.monotonic()
            with rw.shared.acquire(deadline=PATIENCE):
                waits.append(time.monotonic() - started)
                assert not rw.exclusive.locked()
            time.sleep(0.05)
        before = list(writes)
        time.sleep(0.2)
        assert writes[0] > before[0] or writes[1] > before[1], "the writers kept going"
    finally:
        stop.cancel()
        join_all(*threads)
    assert max(waits) < 2.0, waits
    assert_free(rw)


def test_phase_fair_hand_over(errors: Errors) -> None:
    """Writer W1 holds; R1, R2 wait; W2 waits; R3 arrives.

    When W1 unlocks, every reader waiting at that moment (R1, R2 and R3, though R3 came
    after W2) gets in together, before W2. While they hold and W2 waits, a new reader R4
    queues behind W2.
    """
    rw = SharableLock()
    log: list[str] = []
    log_lock = threading.Lock()
    readers_inside = threading.Barrier(3, timeout=PATIENCE)
    let_readers_go = threading.Event()

    def record(event: str) -> None:
        with log_lock:
            log.append(event)

    def reader(name: str, wait_with_others: bool) -> None:
        with rw.shared.acquire(deadline=PATIENCE * 2):
            record(f"{name} in")
            if wait_with_others:
                readers_inside.wait()
                assert let_readers_go.wait(PATIENCE)
            record(f"{name} out")

    def writer(name: str) -> None:
        with rw.exclusive.acquire(deadline=PATIENCE * 2):
            record(f"{name} in")
            assert not rw.shared.locked()
            time.sleep(0.1)
            record(f"{name} out")

    w1 = rw.exclusive.acquire()
    r1 = start(errors.run(lambda: reader("R1", True)))
    r2 = start(errors.run(lambda: reader("R2", True)))
    time.sleep(SETTLE)
    w2 = start(errors.run(lambda: writer("W2")))
    time.sleep(SETTLE)
    r3 = start(errors.run(lambda: reader("R3", True)))
    time.sleep(SETTLE)
    assert log == []

    w1()
    deadline = time.monotonic() + PATIENCE
    while len(log) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    with log_lock:
        assert sorted(log) == ["R1 in", "R2 in", "R3 in"], log
    # Readers hold and W2 waits: a new reader may not join the reader group.
    assert rw.shared.try_acquire() is None
    assert rw.exclusive.try_acquire() is None
    r4 = start(errors.run(lambda: reader("R4", False)))
    time.sleep(SETTLE)
    assert len(log) == 3, log

    let_readers_go.set()
    join_all(r1, r2, r3, w2, r4)
    errors.check()
    assert sorted(log[:6]) == sorted(["R1 in", "R2 in", "R3 in", "R1 out", "R2 out", "R3 out"])
    assert log[6:] == ["W2 in", "W2 out", "R4 in", "R4 out"], log
    assert_free(rw)


def test_new_readers_queue_behind_a_waiting_writer(errors: Errors) -> None:
    rw = SharableLock()
    log: list[str] = []
    r0 = rw.shared.acquire()

    def writer() -> None:
        with rw.exclusive.acquire(deadline=PATIENCE * 2):
            log.append("W in")
            time.sleep(0.1)
            log.append("W out")

    def reader() -> None:
        with rw.shared.acquire(deadline=PATIENCE * 2):
            log.append("R1 in")

    w = start(errors.run(writer))
    time.sleep(SETTLE)
    assert rw.shared.try_acquire() is None, "a writer waits: new readers queue"
    with pytest.raises(WouldBlock):
        rw.shared.acquire(blocking=False)
    r1 = start(errors.run(reader))
    time.sleep(SETTLE)
    assert log == []
    r0()
    join_all(w, r1)
    assert log == ["W in", "W out", "R1 in"]
    assert_free(rw)


# --- consistency -----------------------------------------------------------------------------


def test_readers_never_see_a_half_written_array(errors: Errors) -> None:
    rw = SharableLock()
    data = [0] * 64
    stop = threading.Event()
    reads = [0, 0, 0]
    writes = [0, 0]
    torn: list[list[int]] = []

    def writer(me: int) -> None:
        generation = me
        while not stop.is_set():
            generation += 2
            with rw.exclusive:
                for i in range(len(data)):
                    data[i] = generation
                    if i % 8 == 7:
                        time.sleep(0)  # let a reader run mid-write if the lock were broken
            writes[me] += 1

    def reader(me: int) -> None:
        while not stop.is_set():
            with rw.shared:
                seen = []
                for i in range(len(data)):
                    seen.append(data[i])
                    if i % 8 == 7:
                        time.sleep(0)
            if len(set(seen)) != 1:
                torn.append(seen)
            reads[me] += 1

    threads = [start(errors.run(lambda i=i: writer(i))) for i in range(2)]
    threads += [start(errors.run(lambda i=i: reader(i))) for i in range(3)]
    time.sleep(1.0)
    stop.set()
    join_all(*threads)
    assert not torn, torn[:3]
    assert min(reads) > 0 and min(writes) > 0, (reads, writes)
    assert_free(rw)


# --- a writer that gives up lets the readers it held back in --------------------------------


@contextmanager
def reader_blocked_behind_a_writer(
    rw: SharableLock, errors: Errors, writer: Callable[[], object]
) -> Iterator[tuple[threading.Event, threading.Event]]:
    """R0 holds shared; the writer waits; R1 queues behind the writer.

    Yields (writer_done, r1_in). The caller makes the writer give up while R0 still holds.
    """
    r0 = rw.shared.acquire()
    writer_done = threading.Event()
    r1_in = threading.Event()
    r1_release = threading.Event()

    def run_writer() -> None:
        try:
            writer()
        finally:
            writer_done.set()

    def r1() -> None:
        with rw.shared.acquire(deadline=PATIENCE * 2):
            r1_in.set()
            assert r1_release.wait(PATIENCE)

    w = start(errors.run(run_writer))
    time.sleep(SETTLE)
    assert not writer_done.is_set()
    t = start(errors.run(r1))
    time.sleep(SETTLE)
    assert not r1_in.is_set(), "R1 queues behind the waiting writer"
    try:
        yield writer_done, r1_in
        # R1 got in while R0 still holds.
        assert rw.shared.locked()
        assert not r0.released
    finally:
        r1_release.set()
        r0()
        join_all(w, t)
    assert_free(rw)


def test_writer_deadline_lets_blocked_readers_in(errors: Errors) -> None:
    rw = SharableLock()
    outcome: list[BaseException] = []

    def writer() -> None:
        try:
            rw.exclusive.acquire(deadline=1.0)
        except LockTimeout as exc:
            outcome.append(exc)

    with reader_blocked_behind_a_writer(rw, errors, writer) as (writer_done, r1_in):
        assert writer_done.wait(PATIENCE)
        assert r1_in.wait(PATIENCE), "R1 did not get in when the writer timed out"
    assert len(outcome) == 1


def test_writer_cancel_lets_blocked_readers_in(errors: Errors) -> None:
    rw = SharableLock()
    token = CancelToken()
    outcome: list[Cancelled] = []

    def writer() -> None:
        try:
            rw.exclusive.acquire(token)
        except Cancelled as exc:
            outcome.append(exc)

    with reader_blocked_behind_a_writer(rw, errors, writer) as (writer_done, r1_in):
        token.cancel("writer gave up")
        assert writer_done.wait(PATIENCE)
        assert r1_in.wait(PATIENCE), "R1 did not get in when the writer was cancelled"
    assert [exc.reason for exc in outcome] == ["writer gave up"]


def test_writer_token_deadline_lets_blocked_readers_in(errors: Errors) -> None:
    rw = SharableLock()
    outcome: list[BaseException] = []

    def writer() -> None:
        try:
            rw.exclusive.acquire(CancelToken(deadline=1.0))
        except LockTimeout as exc:
            outcome.append(exc)

    with reader_blocked_behind_a_writer(rw, errors, writer) as (writer_done, r1_in):
        assert writer_done.wait(PATIENCE)
        assert r1_in.wait(PATIENCE)
    assert len(outcome) == 1


def test_readers_a_writer_gave_up_on_follow_a_writer_queued_after_them(errors: Errors) -> None:
    # R0 holds; W1 waits; R1 queues behind it; W2 queues after R1. W1 gives up: a waiting
    # writer (W2) still holds new readers back, so R1 stays queued, and when R0 leaves, W2
    # goes first and R1 right after it (the documented rule, as Go's count of waiting
    # writers has it).
    rw = SharableLock()
    r0 = rw.shared.acquire()
    order: list[str] = []
    w2_release = threading.Event()

    def w1() -> None:
        with pytest.raises(LockTimeout):
            rw.exclusive.acquire(deadline=SETTLE * 5)
        order.append("w1 gave up")

    def r1() -> None:
        with rw.shared.acquire(deadline=PATIENCE * 2):
            order.append("r1")

    def w2() -> None:
        with rw.exclusive.acquire(deadline=PATIENCE * 2):
            order.append("w2")
            assert w2_release.wait(PATIENCE)

    threads = [start(errors.run(w1))]
    assert wait_until(lambda: rw.statistics().waiting == 1)
    threads.append(start(errors.run(r1)))
    assert wait_until(lambda: rw.statistics().waiting == 2)
    threads.append(start(errors.run(w2)))
    assert wait_until(lambda: rw.statistics().waiting == 3)
    assert wait_until(lambda: order == ["w1 gave up"]), order
    time.sleep(SETTLE)
    assert order == ["w1 gave up"], "R1 got in while W2 waits"
    stats = rw.statistics()
    assert (stats.holders, stats.waiting) == (1, 2), stats
    r0()
    assert wait_until(lambda: order == ["w1 gave up", "w2"]), order
    time.sleep(SETTLE)
    assert order == ["w1 gave up", "w2"], order
    w2_release.set()
    assert wait_until(lambda: order == ["w1 gave up", "w2", "r1"]), order
    join_all(*threads)
    assert_free(rw)


# --- races -----------------------------------------------------------------------------------


@pytest.mark.stress
def test_cancel_and_unlock_races_leave_the_lock_consistent(errors: Errors) -> None:
    """Threads acquire both modes with tokens, deadlines and unlocks racing each other."""
    rw = SharableLock()
    meta = threading.Lock()
    counts = {"readers": 0, "writers": 0, "acquired": 0, "gave_up": 0}
    overlaps: list[str] = []
    to_cancel: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
    seconds = STRESS_SECONDS or 0.0
    # Short by default: a few thousand acquires in all; `make stress` runs it for longer.
    per_thread = 1500 if seconds <= 0 else 1 << 62
    end = time.monotonic() + (seconds if seconds > 0 else 2.5)

    def enter(exclusive: bool) -> None:
        with meta:
            if counts["writers"] or (exclusive and counts["readers"]):
                overlaps.append(f"{counts} entering {'exclusive' if exclusive else 'shared'}")
            counts["writers" if exclusive else "readers"] += 1
            counts["acquired"] += 1

    def leave(exclusive: bool) -> None:
        with meta:
            counts["writers" if exclusive else "readers"] -= 1

    def canceller() -> None:
        while (job := to_cancel.get()) is not None:
            if random.random() < 0.3:
                time.sleep(random.random() * 0.001)
            job()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(per_thread):
            if time.monotonic() > end:
                return
            exclusive = rng.random() < 0.4
            view = rw.exclusive if exclusive else rw.shared
            token = CancelToken()
            how = rng.randrange(4)
            if how == 0:
                to_cancel.put(token.cancel)
            elif how == 1:
                token.cancel("early")
            try:
                if how == 2:
                    unlock = view.acquire(token, deadline=rng.random() * 0.002)
                elif how == 3:
                    unlock = view.acquire(CancelToken(deadline=rng.random() * 0.002))
                else:
                    unlock = view.acquire(token, deadline=PATIENCE)
            except (Cancelled, LockTimeout):
                with meta:
                    counts["gave_up"] += 1
                continue
            enter(exclusive)
            if rng.random() < 0.5:
                time.sleep(0)
            leave(exclusive)
            release = rng.randrange(3)
            if release == 0:
                unlock()
            elif release == 1:
                # Release through a token cancelled by another thread, racing a direct call.
                releaser = CancelToken()
                unlock.unlock_on_cancel(releaser)
                to_cancel.put(releaser.cancel)
                if rng.random() < 0.5:
                    unlock()
                # Wait until it is released so this worker's next acquire can't deadlock on it.
                released_by = time.monotonic() + PATIENCE
                while not unlock.released:
                    assert time.monotonic() < released_by, "the cancel never released"
                    time.sleep(0)
            else:
                to_cancel.put(unlock)
                unlock()
            assert unlock.released

    cancellers = [start(errors.run(canceller)) for _ in range(2)]
    workers = [start(errors.run(lambda s=s: worker(s))) for s in range(4)]
    # The workers run until `end` (the stress duration), then finish their last round.
    join_all(*workers, within=max(0.0, end - time.monotonic()) + PATIENCE * 2)
    for _ in cancellers:
        to_cancel.put(None)
    join_all(*cancellers)
    errors.check()
    assert not overlaps, overlaps[:5]
    assert counts["acquired"] > 100, counts
    assert counts["readers"] == counts["writers"] == 0
    unlock = rw.exclusive.try_acquire()
    assert unlock is not None, "the lock leaked"
    unlock()
    assert_free(rw)


# --- Ctrl-C ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("default_sigint")
@pytest.mark.parametrize("mode", ["shared", "exclusive"])
def test_ctrl_c_interrupts_a_blocked_acquire(errors: Errors, mode: str) -> None:
    assert threading.current_thread() is threading.main_thread()
    rw = SharableLock()
    view: LockView = getattr(rw, mode)
    writer_holds = threading.Event()
    writer_release = threading.Event()

    def writer() -> None:
        with rw.exclusive:
            writer_holds.set()
            assert writer_release.wait(PATIENCE * 3)

    def interrupt() -> None:
        time.sleep(0.3)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    w = start(errors.run(writer))
    assert writer_holds.wait(PATIENCE)
    killer = start(errors.run(interrupt))
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            view.acquire(deadline=10)
    finally:
        waited = time.monotonic() - started
        join_all(killer)
    # A signal left pending until the acquire timed out would raise too, but late.
    assert waited < 6, f"Ctrl-C took {waited:.1f} s to interrupt the acquire"

    # The interrupted waiter left the queue: a reader queued now gets in after the writer.
    got_in = threading.Event()

    def reader() -> None:
        with rw.shared.acquire(deadline=PATIENCE * 2):
            got_in.set()

    r = start(errors.run(reader))
    time.sleep(0.1)
    writer_release.set()
    assert got_in.wait(PATIENCE)
    join_all(w, r)
    assert_free(rw)


@over_families(SHARABLE_FAMILIES)
def test_statistics_of_the_whole_sharable_lock(family: Family) -> None:
    assert family.sharable is not None
    rw = family.sharable()
    assert rw.statistics() == rw.exclusive.statistics()  # free: all zero
    assert not rw.statistics().locked
    readers = [rw.shared.acquire() for _ in range(3)]
    s = rw.statistics()
    assert (s.locked, s.holders, s.waiting) == (True, 3, 0)
    for unlock in readers:
        unlock()
    with rw.exclusive:
        s = rw.statistics()
        assert (s.locked, s.holders, s.waiting) == (True, 1, 0)
    s = rw.statistics()
    assert (s.locked, s.holders, s.waiting) == (False, 0, 0)
