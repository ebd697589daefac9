"""A run with a private Ray instance leaves no Ray or worker process behind (real processes)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.defaults import STEPS_PER_ITERATION

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # each test starts Ray (quick tier: -m 'not slow and not ray')

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("raylet", "gcs_server", "ray::", "default_worker.py", "dashboard/agent.py", "runtime_env/agent")


def ray_processes(tag: str) -> set[int]:
    """Ray's processes that inherited `TAG_VARIABLE=tag` from the run: those of other Ray
    instances on the machine (other tests, other users) are not this run's leftovers."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if any(marker in cmdline for marker in MARKERS) and f"{TAG_VARIABLE}={tag}".encode() in environ.split(b"\0"):
            found.add(int(entry))
    return found


TAG_VARIABLE = "RLPAR_TEST_SHUTDOWN_TAG"


def test_distributed_run_shuts_its_private_ray_down(tmp_path):
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.run(
        [sys.executable, "main.py", "parallel=distributed", "workers=2", f"total_steps={4 * STEPS_PER_ITERATION}", "progress=false",
         f"hydra.run.dir={tmp_path}"],
        cwd=ROOT,
        env={**os.environ, TAG_VARIABLE: tag},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 4
    deadline = time.monotonic() + 20
    leftover = ray_processes(tag)
    while leftover and time.monotonic() < deadline:
        time.sleep(0.5)
        leftover = ray_processes(tag)
    assert not leftover, f"processes left behind: {leftover}"


def start_with_a_stalled_raylet(tmp_path):
    """`python main.py parallel=distributed` whose private instance's raylet is stopped (SIGSTOP)
    once it has started its agents: it never registers, and ray.init gives up after 30 s.
    Returns the run."""
    from tests.processes import default_sigint, descendants_of, stat

    proc = subprocess.Popen(
        [sys.executable, "main.py", "parallel=distributed", "workers=2", "total_steps=4000", "progress=false",
         f"hydra.run.dir={tmp_path}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        family = descendants_of(proc.pid)
        raylets = [pid for (pid, _), command in family.items() if command.split(" ")[0].endswith("/raylet")]
        if raylets and any((stat(pid) or (None,))[0] == raylets[0] for pid, _ in family):  # its agents are up
            os.kill(raylets[0], signal.SIGSTOP)
            return proc
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"no raylet with agents seen: {proc.communicate()[1][-2000:]}")


@pytest.mark.parametrize("interrupted", [False, True])
def test_a_private_instance_that_fails_to_start_leaves_nothing_running(tmp_path, adopted_orphans, interrupted):
    """(The raylet's agents, ray::DashboardAgent and ray::RuntimeEnvAgent, outlived the run, 3
    of 3 tries; a Ctrl-C meanwhile took 27 s and exited 3.)"""
    from tests.processes import descendants_of, left_running

    proc = start_with_a_stalled_raylet(tmp_path)
    try:
        family = descendants_of(proc.pid)
        assert any("ray::DashboardAgent" in command or "dashboard/agent.py" in command for command in family.values())
        if interrupted:
            time.sleep(1)
            os.kill(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = left_running(family, adopted_orphans, 20)
        for pid in left:  # (the test's own clean-up, whatever the outcome)
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
    assert stderr.strip().splitlines() == [stderr.strip()], stderr  # one line
    if interrupted:
        assert (proc.returncode, stderr.strip()) == (130, "rlpar: interrupted during Ray's start-up")
        assert took < 10
    else:
        assert proc.returncode == 3 and stderr.startswith("rlpar: training failed: "), stderr
