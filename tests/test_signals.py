"""SIGINT and SIGTERM stop a run within seconds, with a final checkpoint and no worker left."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def children_of(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry))
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_with_final_checkpoint_and_no_workers_left(tmp_path, sig):
    proc = subprocess.Popen(
        [sys.executable, "main.py", "parallel=multiprocess", "workers=2", "total_steps=100000000",
         "checkpoint.every=0", "progress=false", f"hydra.run.dir={tmp_path}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        time.sleep(0.1)
    workers = children_of(proc.pid)
    assert len(workers) >= 2
    sent = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert time.monotonic() - sent < 10
    assert proc.returncode == 130
    assert "Traceback" not in proc.stderr.read()
    last = json.loads(metrics.read_text().splitlines()[-1])["iteration"]
    checkpoints = sorted((tmp_path / "checkpoints").glob("checkpoint_*.pt"))
    assert checkpoints and checkpoints[-1].name == f"checkpoint_{last:08d}.pt"
    alive = lambda: {pid: _cmdline(pid) for pid in workers if _running(pid)}
    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its exit status waits to be collected


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
