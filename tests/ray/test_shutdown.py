"""A run with a private Ray instance leaves no Ray or worker process behind (real processes)."""

import os
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
