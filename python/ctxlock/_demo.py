"""``python -m ctxlock demo``: the read and write attacks on a readers-writer lock, live.

After the Java article on readers-writer locks: two readers and a writer share one array
holding a sine wave. The writer moves the wave one step by rewriting the array element by
element; the readers check that the array is one whole wave (never half of two) and count
their reads. An attack keeps one mode of the lock busy all the time:

* read attack: the two readers take turns holding the shared mode with overlap, each one
  letting go only once the other is inside, so the shared mode is never free;
* write attack: two writers take turns holding the exclusive mode, so a writer always waits.

The same actors run on ctxlock's ``SharableLock`` and on a naive readers-writer lock built
on ``threading.Condition`` that lets a reader in whenever no writer holds. Under the read
attack the naive lock never lets the writer in; ``SharableLock`` queues new readers behind a
waiting writer, and after a writer unlocks lets every waiting reader in before the next
writer, so every actor keeps making progress under both attacks.
"""

from __future__ import annotations

import argparse
import collections
import functools
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol, TextIO

from ctxlock._ctxlock import CancelToken, SharableLock
from ctxlock._errors import Cancelled

__all__ = ["add_arguments", "run_demo"]

ATTACKS = ("read", "write")
LOCKS = ("ctxlock", "naive")

# Points in the wave, and how far the writer moves it on each write (radians).
WAVE_POINTS = 64
PHASE_STEP = 0.2
# How long an attacking reader holds the shared mode before it lets go (seconds).
HOLD = 0.03
# How long an attacking reader waits for its partner to come in before it lets go anyway.
# Without a limit the attack would deadlock on a fair lock: the partner queues behind the
# waiting writer, which waits for this reader to leave.
PARTNER_PATIENCE = 0.2
# How long a writer of the write attack holds the exclusive mode.
WRITER_HOLD = 0.005

Release = Callable[[], object]


class DemoLock(Protocol):
    """What the actors need from a readers-writer lock."""

    label: str

    def acquire_shared(self) -> Release | None:
        """Hold the shared mode; None once the demo is stopping."""

    def acquire_exclusive(self) -> Release | None:
        """Hold the exclusive mode; None once the demo is stopping."""

    def stop(self) -> None:
        """Make every acquire, waiting or future, return None."""


class CtxlockRW:
    """ctxlock's SharableLock; one token stops every waiting actor."""

    label = "ctxlock.SharableLock"

    def __init__(self) -> None:
        self._rw = SharableLock()
        self._stop = CancelToken()

    def acquire_shared(self) -> Release | None:
        try:
            return self._rw.shared.acquire(self._stop)
        except Cancelled:
            return None

    def acquire_exclusive(self) -> Release | None:
        try:
            return self._rw.exclusive.acquire(self._stop)
        except Cancelled:
            return None

    def stop(self) -> None:
        self._stop.cancel("demo over")


class NaiveRW:
    """A readers-preferring lock: a reader gets in whenever no writer holds.

    Readers in a row can keep the count above zero forever, and then a writer never does.
    """

    label = "naive readers-writer lock (threading.Condition)"

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._stopping = False

    def acquire_shared(self) -> Release | None:
        with self._cond:
            self._cond.wait_for(lambda: not self._writer or self._stopping)
            if self._stopping:
                return None
            self._readers += 1
        return self._release_shared

    def _release_shared(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def acquire_exclusive(self) -> Release | None:
        with self._cond:
            self._cond.wait_for(lambda: not (self._writer or self._readers) or self._stopping)
            if self._stopping:
                return None
            self._writer = True
        return self._release_exclusive

    def _release_exclusive(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()


def make_lock(name: str) -> DemoLock:
    if name == "ctxlock":
        return CtxlockRW()
    if name == "naive":
        return NaiveRW()
    raise ValueError(f"lock must be one of {', '.join(LOCKS)}, not {name!r}")


class Actor:
    """One thread's progress: a count and when it last moved."""

    def __init__(self, name: str, unit: str) -> None:
        self.name = name
        self.unit = unit
        self.count = 0
        self.last_progress = time.monotonic()

    def progressed(self) -> None:
        self.count += 1
        self.last_progress = time.monotonic()


class Wave:
    """The shared array: a sine wave that the writers move and the readers check."""

    def __init__(self) -> None:
        self.points = [math.sin(2 * math.pi * i / WAVE_POINTS) for i in range(WAVE_POINTS)]
        self.phase = 0.0
        self.torn = 0
        self.snapshot = list(self.points)
        # A sampled sine satisfies p[i-1] + p[i+1] == 2 cos(step) p[i] at every point, whatever
        # its phase; where two phases meet (a torn array) the relation breaks.
        self._twice_cos = 2 * math.cos(2 * math.pi / WAVE_POINTS)

    def write_next(self) -> None:
        """Move the wave one step, element by element, yielding now and then to other threads."""
        self.phase += PHASE_STEP
        for i in range(WAVE_POINTS):
            self.points[i] = math.sin(2 * math.pi * i / WAVE_POINTS + self.phase)
            if i % 8 == 7:
                time.sleep(0)  # a reader that got in now would see half of each wave

    def read(self) -> bool:
        """Read the array element by element; True if it is one whole wave."""
        seen: list[float] = []
        for i in range(WAVE_POINTS):
            seen.append(self.points[i])
            if i % 16 == 15:
                time.sleep(0)
        whole = all(
            abs(seen[i - 1] + seen[i + 1] - self._twice_cos * seen[i]) < 1e-9
            for i in range(1, WAVE_POINTS - 1)
        )
        if whole:
            self.snapshot = seen
        else:
            self.torn += 1
        return whole


class Demo:
    """One run: the actors of one attack on one lock."""

    def __init__(self, attack: str, lock: DemoLock) -> None:
        if attack not in ATTACKS:
            raise ValueError(f"attack must be one of {', '.join(ATTACKS)}, not {attack!r}")
        self.attack = attack
        self.lock = lock
        self.wave = Wave()
        self.stopping = threading.Event()
        self.failures: list[BaseException] = []
        # Which attacking readers hold the shared mode now; guarded by `partners`.
        self.partners = threading.Condition()
        self.inside: set[int] = set()
        if attack == "read":
            self.actors = [
                Actor("reader-1", "reads"),
                Actor("reader-2", "reads"),
                Actor("writer", "writes"),
            ]
        else:
            self.actors = [
                Actor("writer-1", "writes"),
                Actor("writer-2", "writes"),
                Actor("reader", "reads"),
            ]
        self.threads: list[threading.Thread] = []

    # -- the actors --

    def attacking_reader(self, me: int) -> None:
        actor, partner = self.actors[me], 1 - me
        while not self.stopping.is_set():
            release = self.lock.acquire_shared()
            if release is None:
                return
            with self.partners:
                self.inside.add(me)
                self.partners.notify_all()
            self.read_for(actor, HOLD)
            with self.partners:
                # Let go only once the partner is inside: the shared mode is never free.
                self.partners.wait_for(
                    lambda: partner in self.inside or self.stopping.is_set(), PARTNER_PATIENCE
                )
                self.inside.discard(me)
            release()

    def read_for(self, actor: Actor, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            self.wave.read()
            actor.progressed()
            if time.monotonic() >= end or self.stopping.is_set():
                return

    def reader(self, actor: Actor) -> None:
        while not self.stopping.is_set():
            release = self.lock.acquire_shared()
            if release is None:
                return
            self.wave.read()
            release()
            actor.progressed()
            time.sleep(0.001)

    def writer(self, actor: Actor, hold: float) -> None:
        while not self.stopping.is_set():
            release = self.lock.acquire_exclusive()
            if release is None:
                return
            if self.stopping.is_set():  # let in only as the attack ended: not progress
                release()
                return
            self.wave.write_next()
            if hold:
                time.sleep(hold)
            release()
            actor.progressed()
            time.sleep(0)  # give the other threads a turn at the GIL, as a real writer would

    # -- running --

    def spawn(self, name: str, body: Callable[[], None]) -> None:
        def run() -> None:
            try:
                body()
            except BaseException as exc:
                self.failures.append(exc)
                self.stopping.set()
                self.lock.stop()

        thread = threading.Thread(target=run, name=f"ctxlock-demo-{name}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def start(self) -> None:
        """Start the attack first, then its victim, so the victim meets a running attack."""
        if self.attack == "read":
            for me in (0, 1):
                self.spawn(self.actors[me].name, functools.partial(self.attacking_reader, me))
            with self.partners:
                self.partners.wait_for(lambda: len(self.inside) == 2, 5.0)
            self.spawn("writer", lambda: self.writer(self.actors[2], 0.0))
        else:
            for me in (0, 1):
                actor = self.actors[me]
                self.spawn(actor.name, functools.partial(self.writer, actor, WRITER_HOLD))
            # Both writers are running once two writes are done (on a lock that lets one
            # writer barge ahead of the other, both may be the same writer's).
            started = time.monotonic()
            while self.actors[0].count + self.actors[1].count < 2 and not self.stopping.is_set():
                if time.monotonic() - started > 5.0:
                    break
                time.sleep(0.001)
            self.spawn("reader", lambda: self.reader(self.actors[2]))

    def stop(self) -> None:
        self.stopping.set()
        self.lock.stop()
        with self.partners:
            self.partners.notify_all()
        for thread in self.threads:
            thread.join(5.0)
        if self.failures:
            raise self.failures[0]

    def counts(self) -> dict[str, int]:
        result = {actor.name: actor.count for actor in self.actors}
        result["torn"] = self.wave.torn
        return result


class Screen:
    """Shows each actor's progress: redrawn in place on a terminal, periodic lines otherwise.

    Each actor's strip has one cell per tick, newest on the right: ``#`` if the actor made
    progress during that tick, ``.`` if it did not. A starved actor's strip runs empty.
    """

    TICK = 0.1
    STRIP = 40
    PLAIN_EVERY = 10  # ticks between two lines when the output is not a terminal
    LEVELS = " .:-=+*#%@"

    def __init__(self, out: TextIO, demo: Demo, seconds: float) -> None:
        self.out = out
        self.demo = demo
        self.seconds = seconds
        self.live = _isatty(out)
        self.drawn = 0
        self.ticks = 0
        self.started = time.monotonic()
        self.seen = {actor.name: 0 for actor in demo.actors}
        self.strips: dict[str, collections.deque[str]] = {
            actor.name: collections.deque(maxlen=self.STRIP) for actor in demo.actors
        }

    def title(self) -> None:
        self.out.write(f"{self.demo.attack} attack on {self.demo.lock.label}, {self.seconds:g} s\n")
        self.out.flush()

    def tick(self) -> None:
        """Record one tick of progress, and show it."""
        self.ticks += 1
        for actor in self.demo.actors:
            count = actor.count
            self.strips[actor.name].append("#" if count > self.seen[actor.name] else ".")
            self.seen[actor.name] = count
        if self.live:
            self.redraw()
        elif self.ticks % self.PLAIN_EVERY == 0:
            elapsed = time.monotonic() - self.started
            counts = "  ".join(f"{a.name}={a.count}" for a in self.demo.actors)
            self.out.write(f"  t={elapsed:4.1f}s  {counts}\n")
            self.out.flush()

    def lines(self) -> list[str]:
        now = time.monotonic()
        rows = []
        for actor in self.demo.actors:
            strip = "".join(self.strips[actor.name]).rjust(self.STRIP)
            idle = now - actor.last_progress
            note = f"waiting {idle:4.1f} s" if idle >= 0.5 else ""
            rows.append(f"  {actor.name:<9} [{strip}] {actor.count:>8} {actor.unit:<6} {note}")
        rows.append(f"  {'wave':<9}  {self.wave_line()}   torn reads: {self.demo.wave.torn}")
        return rows

    def wave_line(self) -> str:
        """The wave as a reader last saw it whole, in ASCII shades."""
        top = len(self.LEVELS) - 1
        points = self.demo.wave.snapshot
        step = max(1, -(-len(points) // self.STRIP))
        return "".join(self.LEVELS[round((value + 1) / 2 * top)] for value in points[::step])

    def redraw(self) -> None:
        rows = self.lines()
        if self.drawn:
            self.out.write(f"\x1b[{self.drawn}F")  # back to the first line drawn
        self.out.write("".join(f"\x1b[2K{row}\n" for row in rows))
        self.drawn = len(rows)
        self.out.flush()

    def summary(self, counts: dict[str, int]) -> None:
        if not self.live:
            for row in self.lines()[:-1]:
                self.out.write(row.rstrip() + "\n")
        starved = [a.name for a in self.demo.actors if counts[a.name] == 0]
        if starved:
            verdict = f"starved: {', '.join(starved)} made no progress in {self.seconds:g} s"
        else:
            verdict = "every actor made progress"
        self.out.write(f"  -> {verdict}; torn reads: {counts['torn']}\n\n")
        self.out.flush()


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def run_one(attack: str, lock: str, seconds: float, out: TextIO) -> dict[str, int]:
    """One attack on one lock; the counts taken just before the attack ends."""
    demo = Demo(attack, make_lock(lock))
    screen = Screen(out, demo, seconds)
    screen.title()
    demo.start()
    end = time.monotonic() + seconds
    try:
        next_tick = time.monotonic() + screen.TICK
        while (now := time.monotonic()) < end and not demo.stopping.is_set():
            if now >= next_tick:
                screen.tick()
                next_tick += screen.TICK
            time.sleep(max(0.0, min(next_tick, end) - now))
    finally:
        counts = demo.counts()  # before the attack ends, which lets the victim in
        demo.stop()
    if screen.live:
        screen.redraw()
    screen.summary(counts)
    return counts


def run_demo(attack: str, lock: str, seconds: float, out: TextIO) -> dict[str, int]:
    """Run ``attack`` ("read" or "write") on ``lock`` for ``seconds`` and show it on ``out``.

    ``lock`` is "ctxlock", "naive" or "both" (one after the other). Returns how often each
    actor made progress, by actor name ("reader-1", "reader-2", "writer" for the read attack;
    "writer-1", "writer-2", "reader" for the write attack), plus "torn": reads that found
    half of one wave and half of another. With "both" each key is prefixed by the lock's
    name and a slash, e.g. "naive/writer".
    """
    if seconds <= 0 or math.isnan(seconds):
        raise ValueError(f"seconds must be positive, not {seconds!r}")
    if attack not in ATTACKS:
        raise ValueError(f"attack must be one of {', '.join(ATTACKS)}, not {attack!r}")
    if lock != "both":
        return run_one(attack, lock, seconds, out)
    counts: dict[str, int] = {}
    for name in LOCKS:
        for key, value in run_one(attack, name, seconds, out).items():
            counts[f"{name}/{key}"] = value
    return counts


def positive_seconds(text: str) -> float:
    """A finite number of seconds greater than 0 (``demo --seconds``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, not {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m ctxlock demo``."""
    parser.add_argument(
        "--attack",
        choices=ATTACKS,
        default="read",
        help="read: two readers keep the shared mode busy; write: two writers take turns "
        "(default: read)",
    )
    parser.add_argument(
        "--lock",
        choices=(*LOCKS, "both"),
        default="both",
        help="ctxlock's SharableLock, a naive readers-preferring lock, or both one after "
        "the other (default: both)",
    )
    parser.add_argument(
        "--seconds",
        type=positive_seconds,
        default=3.0,
        help="how long to run on each lock (default: 3)",
    )
