"""The start-up line: pieces from the start to each milestone, in order, summing to the total;
a process's first job counts from the interpreter's start, a sweep's later jobs from their own start."""

import subprocess
import sys
import time

import psutil
import pytest

from rlpar.logging import startup


def test_pieces_follow_the_milestones_and_add_up_to_the_total(monkeypatch):
    monkeypatch.setattr(startup, "_ORIGIN", [])
    monkeypatch.setattr(startup, "_MARKS", [])
    assert startup.start_job() is True
    launched = startup._ORIGIN[0]
    assert psutil.Process().create_time() <= launched <= time.time() - time.process_time() + 0.05
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


@pytest.mark.slow
def test_a_shell_command_before_python_does_not_count_as_start_up():
    """`bash -c 'sleep 2 && python ...'` execs python in the shell's process, created before the
    sleep: the start-up counts from the interpreter's start, not the process's creation."""
    code = "from rlpar.logging import startup; startup.start_job(); print(startup.seconds_since_start())"
    shown = subprocess.run(["bash", "-c", f"sleep 2 && {sys.executable} -c '{code}'"], capture_output=True, text=True,
                           cwd=startup.__file__.rsplit("/rlpar/", 1)[0], timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert 0 < float(shown.stdout) < 1.5
