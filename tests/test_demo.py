"""``python -m ctxlock demo``: the attacks starve the naive lock's victim, never ctxlock's."""

from __future__ import annotations

import argparse
import io

import pytest
from ctxlock import _demo

SECONDS = 1.0


def test_read_attack_on_ctxlock_lets_every_actor_progress() -> None:
    out = io.StringIO()
    counts = _demo.run_demo("read", "ctxlock", SECONDS, out)
    assert counts["torn"] == 0
    assert counts["writer"] > 0, counts
    assert counts["reader-1"] > 0 and counts["reader-2"] > 0, counts
    assert "every actor made progress" in out.getvalue()


def test_read_attack_on_the_naive_lock_starves_the_writer() -> None:
    out = io.StringIO()
    counts = _demo.run_demo("read", "naive", SECONDS, out)
    assert counts["torn"] == 0
    # The attack is running before the writer starts, so the writer never gets in.
    assert counts["writer"] <= 1, counts
    assert counts["reader-1"] > 0 and counts["reader-2"] > 0, counts
    if counts["writer"] == 0:
        assert "starved: writer" in out.getvalue()


def test_write_attack_on_ctxlock_lets_every_actor_progress() -> None:
    counts = _demo.run_demo("write", "ctxlock", SECONDS, io.StringIO())
    assert counts["torn"] == 0
    assert counts["reader"] > 0, counts
    assert counts["writer-1"] > 0 and counts["writer-2"] > 0, counts


def test_write_attack_on_the_naive_lock() -> None:
    counts = _demo.run_demo("write", "naive", SECONDS, io.StringIO())
    assert counts["torn"] == 0
    # The naive lock lets a writer barge back in, so only the writers as a pair must progress.
    assert counts["writer-1"] + counts["writer-2"] > 0, counts


def test_both_locks_one_after_the_other() -> None:
    out = io.StringIO()
    counts = _demo.run_demo("read", "both", 0.5, out)
    assert set(counts) == {
        f"{lock}/{key}"
        for lock in ("ctxlock", "naive")
        for key in ("reader-1", "reader-2", "writer", "torn")
    }
    assert counts["ctxlock/writer"] > 0
    assert counts["naive/writer"] <= 1
    text = out.getvalue()
    assert text.index("ctxlock.SharableLock") < text.index("naive")


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_display_redraws_in_place_on_a_terminal() -> None:
    out = FakeTerminal()
    _demo.run_demo("write", "ctxlock", 0.5, out)
    text = out.getvalue()
    assert "\x1b[" in text and "\x1b[2K" in text
    assert "writer-1" in text


def test_plain_output_has_no_escape_codes() -> None:
    out = io.StringIO()
    _demo.run_demo("read", "ctxlock", 0.5, out)
    assert "\x1b" not in out.getvalue()


def test_command_line_options() -> None:
    parser = argparse.ArgumentParser()
    _demo.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.attack, args.lock, args.seconds) == ("read", "both", 3.0)
    args = parser.parse_args(["--attack", "write", "--lock", "naive", "--seconds", "0.5"])
    assert (args.attack, args.lock, args.seconds) == ("write", "naive", 0.5)
    with pytest.raises(SystemExit):
        parser.parse_args(["--attack", "sideways"])


@pytest.mark.parametrize(
    ("attack", "lock", "seconds"),
    [("up", "ctxlock", 1.0), ("read", "mutex", 1.0), ("read", "naive", 0)],
)
def test_bad_arguments(attack: str, lock: str, seconds: float) -> None:
    with pytest.raises(ValueError):
        _demo.run_demo(attack, lock, seconds, io.StringIO())
