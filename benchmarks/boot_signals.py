"""A signal while many env runners boot: how soon does the run exit, and is anything left?

    .venv/bin/python benchmarks/boot_signals.py --workers 64 --after 25
    .venv/bin/python benchmarks/boot_signals.py --workers 200 --after 30 -- ray.cpus_per_worker=0.005
    .venv/bin/python benchmarks/boot_signals.py --workers 48 --runners 4 --signal SIGTERM -- ray.cpus_per_worker=0.04

Runs `python main.py parallel=distributed workers=N envs_per_worker=1` (CartPole, total_steps out
of reach) and sends the signal `--after` seconds after the launch, or once `--runners` env runners
are up. Prints how many runners were up, the exit code and seconds, the last stderr line, and the
run's processes still running 15 s later (this process is a child subreaper, so orphans count).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.processes import default_sigint, descendants_of, orphans, still_running  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--after", type=float, default=None, help="seconds after the launch")
    parser.add_argument("--runners", type=int, default=None, help="or: once this many runners are up")
    parser.add_argument("--signal", default="SIGINT", choices=("SIGINT", "SIGTERM"))
    parser.add_argument("overrides", nargs="*", help="more overrides for main.py (after --)")
    args = parser.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    with tempfile.TemporaryDirectory() as run_dir:
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "main.py", "parallel=distributed", f"workers={args.workers}", "envs_per_worker=1",
             "total_steps=100000000", "progress=false", f"hydra.run.dir={run_dir}", *args.overrides],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
        )
        family: dict = {}
        while proc.poll() is None:
            family.update(descendants_of(proc.pid))
            runners = sum(command.startswith("ray::EnvRunner") for command in family.values())
            if (args.runners is not None and runners >= args.runners) or (
                    args.after is not None and time.monotonic() - started >= args.after):
                break
            time.sleep(0.1)
        sent = time.monotonic()
        proc.send_signal(getattr(signal, args.signal))
        try:
            _, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
            stderr += "\n(not exited after 120 s: killed)"
        took = time.monotonic() - sent
    deadline = time.monotonic() + 15
    while (left := {**still_running(family), **still_running(orphans(os.getpid(), set()))}) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)  # this benchmark's own run's
        except OSError:
            pass
    print(f"{runners} runners up at the signal ({sent - started:.1f} s after launch); exit {proc.returncode} "
          f"after {took:.1f} s; last stderr line: {stderr.strip().splitlines()[-1:]}; left after 15 s: {len(left)}")


if __name__ == "__main__":
    main()
