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


def ray_processes() -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(marker in cmdline for marker in MARKERS):
            found.add(int(entry))
    return found


def test_distributed_run_shuts_its_private_ray_down(tmp_path):
    before = ray_processes()
    proc = subprocess.run(
        [sys.executable, "main.py", "parallel=distributed", "workers=2", f"total_steps={4 * STEPS_PER_ITERATION}", "progress=false",
         f"hydra.run.dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 4
    deadline = time.monotonic() + 20
    leftover = ray_processes() - before
    while leftover and time.monotonic() < deadline:
        time.sleep(0.5)
        leftover = ray_processes() - before
    assert not leftover, f"processes left behind: {leftover}"
