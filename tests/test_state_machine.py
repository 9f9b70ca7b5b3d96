"""A model-based test of the Python API: hypothesis drives random operations, one thread.

It runs once per lock family (``tests/kinds.py``). The system under test is the family's
exclusive lock (``lock``), its sharable lock (the ``shared`` and ``exclusive`` views), or
both, whichever the family makes. The model is what a single thread can observe:

- the exclusive lock: held or free;
- the sharable lock: a writer holds it, or ``readers`` shared holders do, or nobody.

With one thread nobody ever waits, so phase-fairness reduces to "shared is free unless a
writer holds; exclusive is free unless anyone holds". Every rule that could wait gives
up at once (``try_acquire``, ``blocking=False``, ``deadline=0``, an already-cancelled
token) or runs only when the model says the lock is free. Each ``Unlock`` handed out is
kept with the mode it holds; releasing it (by calling it, by its context manager, or by
the token given to ``unlock_on_cancel``) must update the real lock exactly as the model.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import pytest
from ctxlock import (
    Cancelled,
    CancelToken,
    Lock,
    LockTimeout,
    LockView,
    SharableLock,
    Unlock,
    WouldBlock,
)
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from kinds import FAMILIES, Family, over_families

# What an acquire can target: the family's exclusive lock and its sharable lock's two
# views, those of them the family makes (the machine's `targets`).
targets = st.runner().flatmap(lambda machine: st.sampled_from(machine.targets))

# How many examples `test_api_state_machine` runs per target of its family (so the
# examples per target stay as many, and the time as short, whatever the families), and
# how many steps each.
EXAMPLES_PER_TARGET = 67
STEPS = 30


@dataclass
class Held:
    """One ``Unlock`` the model believes is holding ``target``."""

    target: str
    unlock: Unlock
    # Tokens registered with `unlock_on_cancel` (not yet cancelled).
    tokens: list[CancelToken] = field(default_factory=list)


def drive(awaitable: Any) -> Any:
    """Run an awaitable that must finish without suspending (in an event loop: it needs one)."""

    async def once() -> Any:
        it = awaitable.__await__()
        try:
            next(it)
        except StopIteration as stop:
            return stop.value
        raise AssertionError("acquire_async suspended although the model says it cannot wait")

    return asyncio.run(once())


class LockMachine(RuleBasedStateMachine):
    def __init__(self, family: Family) -> None:
        super().__init__()
        self.family = family
        self.lock = family.lock() if family.lock is not None else None
        self.rw = family.sharable() if family.sharable is not None else None
        self.targets: tuple[str, ...] = ("lock",) if self.lock is not None else ()
        if self.rw is not None:
            self.targets += ("shared", "exclusive")
        self.lock_held = False
        self.readers = 0
        self.writer = False
        self.held: list[Held] = []
        # Unlocks already released, each called again later to check the no-op.
        self.released: list[Held] = []

    # --- the model ------------------------------------------------------------------------

    def obj(self, target: str) -> Lock | LockView:
        if target == "lock":
            assert self.lock is not None
            return self.lock
        assert self.rw is not None
        return self.rw.shared if target == "shared" else self.rw.exclusive

    def exclusive_views(self) -> list[Lock | LockView]:
        """What must be free for the whole system to be free."""
        return [self.obj(t) for t in self.targets if t != "shared"]

    def free(self, target: str) -> bool:
        """Whether an acquire of ``target`` succeeds at once."""
        if target == "lock":
            return not self.lock_held
        if target == "shared":
            return not self.writer
        return not self.writer and self.readers == 0

    def take(self, target: str) -> None:
        assert self.free(target)
        if target == "lock":
            self.lock_held = True
        elif target == "shared":
            self.readers += 1
        else:
            self.writer = True

    def give_back(self, target: str) -> None:
        if target == "lock":
            assert self.lock_held
            self.lock_held = False
        elif target == "shared":
            assert self.readers > 0
            self.readers -= 1
        else:
            assert self.writer
            self.writer = False

    def got(self, target: str, unlock: object) -> None:
        """An acquire the model expects to succeed returned ``unlock``."""
        assert isinstance(unlock, Unlock), unlock
        assert not unlock.released
        self.take(target)
        self.held.append(Held(target, unlock))

    def pick(self, index: int) -> Held:
        return self.held[index % len(self.held)]

    def released_by_lib(self, h: Held) -> None:
        """``h`` was released by the library (a call, ``__exit__`` or a token)."""
        assert h.unlock.released, h.unlock
        self.held.remove(h)
        self.give_back(h.target)
        self.released.append(h)

    # --- acquiring ------------------------------------------------------------------------

    @rule(which=targets)
    def try_acquire(self, which: str) -> None:
        unlock = self.obj(which).try_acquire()
        if self.free(which):
            self.got(which, unlock)
        else:
            assert unlock is None

    @rule(which=targets)
    def acquire_non_blocking(self, which: str) -> None:
        if self.free(which):
            self.got(which, self.obj(which).acquire(blocking=False))
        else:
            with pytest.raises(WouldBlock):
                self.obj(which).acquire(blocking=False)

    @rule(which=targets)
    def acquire_deadline_zero(self, which: str) -> None:
        if self.free(which):
            self.got(which, self.obj(which).acquire(deadline=0))
        else:
            with pytest.raises(LockTimeout):
                self.obj(which).acquire(deadline=0)

    @rule(which=targets, deadline=st.sampled_from([None, 5, 0.5, math.inf]))
    def acquire_when_free(self, which: str, deadline: float | None) -> None:
        # A blocking acquire is only safe single-threaded when it cannot wait.
        if not self.free(which):
            return
        token = CancelToken(deadline=60)
        self.got(which, self.obj(which).acquire(token, deadline=deadline))

    @rule(which=targets, reason=st.sampled_from([None, "stop", 42]), blocking=st.booleans())
    def acquire_cancelled_token(self, which: str, reason: object, blocking: bool) -> None:
        token = CancelToken()
        token.cancel(reason)
        # Raises at once whether or not the lock is free; nothing changes.
        with pytest.raises(Cancelled) as info:
            self.obj(which).acquire(token, blocking=blocking)
        assert info.value.reason == reason
        with pytest.raises(Cancelled):
            self.obj(which).acquire(token.child(), deadline=0)

    @rule(which=targets)
    def acquire_async_without_waiting(self, which: str) -> None:
        # Free: finishes without an event loop. Taken with deadline=0: fails the same way.
        if self.free(which):
            self.got(which, drive(self.obj(which).acquire_async(deadline=0)))
        else:
            with pytest.raises(LockTimeout):
                drive(self.obj(which).acquire_async(deadline=0))
        token = CancelToken()
        token.cancel("gone")
        with pytest.raises(Cancelled):
            drive(self.obj(which).acquire_async(token))

    @rule(which=targets)
    def with_statement_when_free(self, which: str) -> None:
        if not self.free(which):
            return
        lock = self.obj(which)
        with lock:
            self.take(which)
            self.check_locked()
        self.give_back(which)

    # --- releasing ------------------------------------------------------------------------

    @precondition(lambda self: self.held)
    @rule(index=st.integers(min_value=0), twice=st.booleans())
    def unlock(self, index: int, twice: bool) -> None:
        h = self.pick(index)
        h.unlock()
        self.released_by_lib(h)
        if twice:
            h.unlock()  # a no-op; the invariants check nothing else moved

    @precondition(lambda self: self.held)
    @rule(index=st.integers(min_value=0))
    def unlock_by_context_manager(self, index: int) -> None:
        h = self.pick(index)
        with h.unlock as same:
            assert same is h.unlock
        self.released_by_lib(h)

    @precondition(lambda self: self.released)
    @rule(index=st.integers(min_value=0))
    def unlock_again(self, index: int) -> None:
        h = self.released[index % len(self.released)]
        h.unlock()
        assert h.unlock.released
        with h.unlock:
            pass

    @precondition(lambda self: self.held)
    @rule(index=st.integers(min_value=0), child=st.booleans())
    def register_unlock_on_cancel(self, index: int, child: bool) -> None:
        h = self.pick(index)
        token = CancelToken()
        h.unlock.unlock_on_cancel(token.child() if child else token)
        h.tokens.append(token)

    @precondition(lambda self: any(h.tokens for h in self.held))
    @rule(index=st.integers(min_value=0), reason=st.sampled_from([None, "bye"]))
    def cancel_registered_token(self, index: int, reason: object) -> None:
        with_tokens = [h for h in self.held if h.tokens]
        h = with_tokens[index % len(with_tokens)]
        token = h.tokens.pop(index % len(h.tokens))
        token.cancel(reason)
        self.released_by_lib(h)
        for other in h.tokens:  # their callbacks must now do nothing
            other.cancel()
        h.tokens.clear()

    @precondition(lambda self: self.released and any(h.tokens for h in self.released))
    @rule()
    def cancel_stale_tokens(self) -> None:
        # Tokens registered on Unlocks already released: cancelling them must not release
        # anyone else's hold (the invariants compare the lock with the model).
        for h in self.released:
            for token in h.tokens:
                token.cancel("stale")
            h.tokens.clear()

    @precondition(lambda self: self.held)
    @rule(index=st.integers(min_value=0))
    def unlock_on_already_cancelled_token(self, index: int) -> None:
        h = self.pick(index)
        token = CancelToken()
        token.cancel()
        h.unlock.unlock_on_cancel(token)
        self.released_by_lib(h)

    # --- invariants -----------------------------------------------------------------------

    def check_locked(self) -> None:
        if self.lock is not None:
            assert self.lock.locked() is self.lock_held
        if self.rw is not None:
            assert self.rw.exclusive.locked() is self.writer
            assert self.rw.shared.locked() is (self.readers > 0)

    @invariant()
    def locked_matches_model(self) -> None:
        self.check_locked()

    @invariant()
    def reprs_match_model(self) -> None:
        # The reprs of ctxlock's own classes; another family's may differ.
        if type(self.lock) is Lock:
            state = "locked" if self.lock_held else "unlocked"
            fair = "fair=True" in repr(self.lock)
            assert repr(self.lock) == f"<ctxlock.Lock {state} fair={fair} waiting=0>"
        if type(self.rw) is SharableLock:
            if self.writer:
                state = "locked exclusive"
            elif self.readers:
                state = f"shared by {self.readers}"
            else:
                state = "unlocked"
            assert repr(self.rw) == f"<ctxlock.SharableLock {state} waiting=0>"
            shared = "locked" if self.readers else "unlocked"
            assert repr(self.rw.shared) == f"<ctxlock.LockView shared {shared} waiting=0>"
            exclusive = "locked" if self.writer else "unlocked"
            assert repr(self.rw.exclusive) == (
                f"<ctxlock.LockView exclusive {exclusive} waiting=0>"
            )

    @invariant()
    def unlocks_match_model(self) -> None:
        for h in self.held:
            assert not h.unlock.released
            mode = "shared" if h.target == "shared" else "exclusive"
            lock = repr(self.obj(h.target))
            assert repr(h.unlock) == f"<ctxlock.Unlock {mode} holding lock={lock}>"
        for h in self.released:
            assert h.unlock.released
            assert " released lock=" in repr(h.unlock)

    @invariant()
    def never_shared_with_exclusive(self) -> None:
        assert not (self.writer and self.readers)

    def assert_free(self) -> None:
        for view in self.exclusive_views():
            assert not view.locked(), view
            probe = view.try_acquire()
            assert probe is not None, view
            probe()
        if self.rw is not None:
            assert not self.rw.shared.locked()

    @initialize()
    def start_free(self) -> None:
        self.assert_free()

    def teardown(self) -> None:
        # Release everything still held: a holding Unlock that is garbage-collected warns.
        for h in list(self.held):
            h.unlock()
        self.held.clear()
        self.assert_free()


@over_families(FAMILIES)
def test_api_state_machine(family: Family) -> None:
    targets = (family.lock is not None) + 2 * (family.sharable is not None)
    run_state_machine_as_test(
        lambda: LockMachine(family),
        settings=settings(
            max_examples=EXAMPLES_PER_TARGET * targets // (4 if family.slow else 1),
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


# --- the contract the machine's `register_unlock_on_cancel` relies on, shown directly ------


@pytest.mark.parametrize("cancel_first", [True, False])
def test_unlock_on_cancel_every_registered_token_releases(cancel_first: bool) -> None:
    """Each ``unlock_on_cancel(token)`` releases on its own token (Go's ``UnlockOnCancel``
    registers one ``AfterFunc`` per call); a later call does not disarm an earlier one."""
    lock = Lock()
    unlock = lock.acquire()
    first, second = CancelToken(), CancelToken()
    unlock.unlock_on_cancel(first)
    unlock.unlock_on_cancel(second)
    (first if cancel_first else second).cancel()
    try:
        assert unlock.released
        assert not lock.locked()
    finally:
        unlock()
