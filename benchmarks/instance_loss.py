"""The private Ray instance loses its GCS or raylet mid-run: how soon does the run stop, and cleanly?

    .venv/bin/python benchmarks/instance_loss.py                          # PPO, both victims, 3 moments
    .venv/bin/python benchmarks/instance_loss.py --algos ppo impala a3c apex dqn appo --after 5 17

Each run is `python main.py parallel=distributed workers=2 checkpoint.every=10` (CartPole,
total_steps out of reach, so the learner compiles as a long run's does). Once `--after` rows are
in metrics.jsonl, the instance's gcs_server or raylet gets SIGKILL. A run passes when it exits 3
within 30 s with one stderr line, its newest checkpoint is no older than the last
`checkpoint.every` multiple, and none of its processes (those seen while it ran, and any it
orphaned: this process is a child subreaper) runs 15 s later.
"""

from __future__ import annotations

import argparse
import ctypes
import json
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
EVERY = 10


def one_run(algo: str, victim: str, after_rows: int, run_dir: Path) -> dict:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(
        [sys.executable, "main.py", f"algo={algo}", "parallel=distributed", "workers=2", "total_steps=100000000",
         f"checkpoint.every={EVERY}", "progress=false", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and metrics.read_text().count("\n") >= after_rows):
        if proc.poll() is not None:
            return {"error": f"exited {proc.returncode} before the kill: {proc.stderr.read()[-500:]}"}
        time.sleep(0.05)
    family = descendants_of(proc.pid)
    [target] = [pid for (pid, _), command in family.items() if command.split(" ")[0].endswith(f"/{victim}")]
    os.kill(target, signal.SIGKILL)
    killed = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
    took = time.monotonic() - killed
    last = json.loads(metrics.read_text().splitlines()[-1])["iteration"]
    newest = max((int(p.stem.split("_")[1]) for p in (run_dir / "checkpoints").glob("checkpoint_*.pt")), default=0)
    me = os.getpid()
    deadline = time.monotonic() + 15
    while (left := {**still_running(family), **still_running(orphans(me, set()))}) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)  # processes of this benchmark's own run
        except OSError:
            pass
    lines = stderr.strip().splitlines()
    passed = (proc.returncode == 3 and took < 30 and len(lines) == 1 and lines[0].startswith("rlpar: training stopped:")
              and newest >= last // EVERY * EVERY and not left)
    return {"exit": proc.returncode, "seconds": round(took, 1), "stderr_lines": len(lines), "last_iteration": last,
            "newest_checkpoint": newest, "left": len(left), "passed": passed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["ppo"])
    parser.add_argument("--victims", nargs="+", default=["gcs_server", "raylet"])
    parser.add_argument("--after", nargs="+", type=int, default=[1, 5, 25], help="metrics rows before the kill")
    args = parser.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    for algo in args.algos:
        for after in args.after:
            for victim in args.victims:
                with tempfile.TemporaryDirectory() as run_dir:
                    result = one_run(algo, victim, after, Path(run_dir))
                print(json.dumps({"algo": algo, "victim": victim, "after_rows": after, **result}), flush=True)


if __name__ == "__main__":
    main()
