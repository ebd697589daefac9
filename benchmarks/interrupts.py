"""Interrupts at any moment: distributed runs sent SIGINT twice, checked for exit code and leftovers.

    .venv/bin/python benchmarks/interrupts.py                  # 10 runs, spacings 0.05 .. 0.5 s
    .venv/bin/python benchmarks/interrupts.py --runs 4 --signal SIGTERM

Each run is `python main.py parallel=distributed workers=2` (CartPole, total_steps out of reach).
The first signal lands at a different moment in each run: during Python's and Ray's start-up, or
while training; the second follows after a spacing between 0.05 and 0.5 s. A run passes when it
exits 130 within 10 s of the first signal, says so in a line on stderr (no traceback), and none of
its processes, Ray's included, is left 15 s later. This process is made a child subreaper, so
that processes orphaned by a run are re-parented here and stay findable.
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

from tests.processes import descendants_of, orphans, still_running  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
# When the first signal lands: seconds after the launch, or once training has begun.
MOMENTS = ("0.3s", "1.5s", "3s", "5s", "training")


def start(run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen(
        [sys.executable, "main.py", "parallel=distributed", "workers=2", "total_steps=100000000",
         "checkpoint.every=0", "progress=false", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # Non-interactive shells start background jobs with SIGINT ignored; the child inherits that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_moment(proc: subprocess.Popen, run_dir: Path, moment: str, started: float) -> dict:
    """Sleep until `moment`, collecting the run's processes meanwhile (they must all be gone later)."""
    family = {}
    metrics = run_dir / "metrics.jsonl"
    while proc.poll() is None:
        family.update(descendants_of(proc.pid))
        if moment == "training":
            if metrics.exists() and metrics.read_text().count("\n") >= 2:
                break
        elif time.monotonic() - started >= float(moment.rstrip("s")):
            break
        time.sleep(0.02)
    return family


def one_run(*, moment: str, spacing: float, sig: signal.Signals, me: int) -> dict:
    earlier = set(descendants_of(me))
    with tempfile.TemporaryDirectory(prefix="interrupts_") as tmp:
        started = time.monotonic()
        proc = start(Path(tmp))
        family = wait_for_moment(proc, Path(tmp), moment, started)
        first = time.monotonic()
        proc.send_signal(sig)
        time.sleep(spacing)
        family.update(descendants_of(proc.pid))
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        took = time.monotonic() - first
        stderr = proc.stderr.read()
        time.sleep(15)
        left = {**still_running(family), **still_running(orphans(me, earlier))}
        for pid in left:  # only this run's processes
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid, _ in orphans(me, earlier):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    lines = [line for line in stderr.splitlines() if line.strip()]
    said = bool(lines) and lines[-1].startswith("rlpar: interrupted")
    ok = proc.returncode == 130 and took < 10 and not left and "Traceback" not in stderr and said
    return {"moment": moment, "spacing_s": spacing, "exit": proc.returncode, "exit_s": round(took, 2),
            "left": sorted(command.strip()[:80] for command in left.values()),
            "last_line": lines[-1] if lines else "", "ok": ok, "stderr": stderr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--signal", default="SIGINT", choices=["SIGINT", "SIGTERM"])
    parser.add_argument("--moment", choices=MOMENTS, help="every first signal at this moment (default: vary)")
    args = parser.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    sig = signal.Signals[args.signal]
    results = []
    for index in range(args.runs):
        spacing = round(0.05 + 0.45 * index / max(1, args.runs - 1), 2)
        result = one_run(moment=args.moment or MOMENTS[index % len(MOMENTS)], spacing=spacing, sig=sig, me=os.getpid())
        results.append(result)
        print(f"{'ok  ' if result['ok'] else 'FAIL'} first at {result['moment']:>8}, second +{spacing:.2f} s: "
              f"exit {result['exit']} after {result['exit_s']} s, left {result['left'] or 'nothing'}; "
              f"last line {result['last_line'][:100]!r}", flush=True)
        if not result["ok"]:
            print("    stderr: " + result["stderr"][-3000:].replace("\n", "\n    "), flush=True)
    print(f"{sum(r['ok'] for r in results)}/{len(results)} runs passed")
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
