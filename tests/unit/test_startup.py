"""The start-up line: pieces from the start to each milestone, in order, summing to the total;
a process's first job counts from the launch, a sweep's later jobs from their own start."""

import time

import psutil
import pytest

from rlpar.logging import startup


def test_pieces_follow_the_milestones_and_add_up_to_the_total(monkeypatch):
    monkeypatch.setattr(startup, "_ORIGIN", [])
    monkeypatch.setattr(startup, "_MARKS", [])
    assert startup.start_job() is True
    launched = psutil.Process().create_time()
    assert startup._ORIGIN == [launched]
    startup.mark("imports")
    time.sleep(0.05)
    startup.mark("workers")
    startup.mark("imports")  # a milestone counts once
    names = [name for name, _ in startup.pieces()]
    assert names == ["imports", "workers"]
    assert startup.pieces()[1][1] >= 0.05
    total = sum(seconds for _, seconds in startup.pieces())
    assert total == pytest.approx(startup._MARKS[-1][1])
    assert total == pytest.approx(time.time() - launched, abs=0.05)
    line = startup.summary()
    assert line.startswith(f"start-up {total:.2f} s: imports ") and ", workers 0.0" in line

    assert startup.start_job() is False  # the next job of a sweep: its own clock, its own marks
    assert startup.pieces() == [] and startup.seconds_since_start() < 0.05
