"""Soak: the memory of every process of a long distributed run, once a minute.

    nice -n 10 .venv/bin/python benchmarks/soak.py                    # 30 minutes
    nice -n 10 .venv/bin/python benchmarks/soak.py --minutes 6 --out /tmp/soak_short
    nice -n 10 .venv/bin/python benchmarks/soak.py --minutes 6 -- ray.some_key=value
    .venv/bin/python benchmarks/soak.py --cluster-nodes 4 --churn-every-s 60 -- algo=impala   # under churn

With `--cluster-nodes N`, the run joins a loopback cluster of N nodes (rlpar.cluster.local_cluster)
instead of starting a private instance, and with `--churn-every-s S` a worker node is removed and
another added every S seconds; the cluster's processes are sampled too (gcs_server, raylets, ...).

Runs `python main.py parallel=distributed workers=16` (CartPole, total_steps out of reach) for
`--minutes`, records the resident memory (RSS) of the trainer and of every process of its private
Ray instance (gcs_server, raylet, agents, env runners, ...) every `--every-s` seconds, then stops
the run with SIGINT (as Ctrl-C would) and prints a table: MB per process role at each sample.
A leak shows as a column that keeps climbing; a bounded run plateaus after warm-up.

Writes `samples.csv` (one row per process and sample) and `summary.json` (MB per role per
sample) to `--out`. Arguments after `--` are extra Hydra overrides for main.py.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import random
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.ray_helpers: the loopback cluster, stopping a process
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
# The order matters: the first marker a command line contains names its role.
ROLES = (
    ("gcs_server", "gcs_server"),
    ("raylet", "raylet"),
    ("DashboardAgent", "dashboard_agent"),
    ("dashboard/agent.py", "dashboard_agent"),
    ("RuntimeEnvAgent", "runtime_env_agent"),
    ("runtime_env/agent", "runtime_env_agent"),
    ("log_monitor", "log_monitor"),
    ("dashboard/dashboard.py", "dashboard_head"),
    ("autoscaler/_private/monitor.py", "autoscaler_monitor"),
    ("ray_process_reaper", "reaper"),
    ("ray::EnvRunner", "env_runners"),
    ("ray::IDLE", "idle_workers"),
    ("default_worker.py", "idle_workers"),
)


class Churn(threading.Thread):
    """Remove a worker node, then add one, `every_s` apart, for `duration_s`; ends whole."""

    def __init__(self, cluster, *, duration_s: float, every_s: tuple[float, float], seed: int):
        super().__init__(daemon=True)
        self.cluster, self.duration_s, self.every_s = cluster, duration_s, every_s
        self.random = random.Random(seed)
        self.events: list[tuple[float, str]] = []  # (monotonic time, "removed" | "added")
        self.stop_event = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        end = time.monotonic() + self.duration_s
        command = "remove"
        try:
            while True:
                if self.stop_event.wait(self.random.uniform(*self.every_s)):
                    break
                if command == "remove" and time.monotonic() >= end:
                    break
                self.cluster.command(command)
                self.events.append((time.monotonic(), {"remove": "removed", "add": "added"}[command]))
                command = "add" if command == "remove" else "remove"
        except Exception as err:  # the run's checks report it
            self.error = f"{type(err).__name__}: {err}"


def _parent_and_rss(pid: int) -> tuple[int, float] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[21]) * PAGE_MB


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def family(root: int) -> dict[int, tuple[str, float]]:
    """The run's processes: main.py and all its descendants (Ray's node processes are its
    children, workers and agents its grandchildren) -> (role, RSS in MB)."""
    parents, rss = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _parent_and_rss(int(entry))) is not None:
            parents[int(entry)], rss[int(entry)] = info
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in rss:
            found[pid] = ("trainer" if pid == root else role(_cmdline(pid)), rss[pid])
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return found


def role(command: str) -> str:
    return next((name for marker, name in ROLES if marker in command), "other")


def start_run(run_dir: Path, overrides: list[str]) -> subprocess.Popen:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen(
        [sys.executable, "main.py", "parallel=distributed", "workers=16", "total_steps=1000000000000",
         "checkpoint.every=0", "progress=false", f"hydra.run.dir={run_dir}", *overrides],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        # Non-interactive shells start background jobs with SIGINT ignored; the child inherits that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_training(proc: subprocess.Popen, run_dir: Path, timeout_s: float = 300) -> None:
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + timeout_s
    while not (metrics.exists() and metrics.stat().st_size > 0):
        if proc.poll() is not None:
            raise SystemExit(f"the run exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"no training after {timeout_s} s")
        time.sleep(0.5)


def iterations(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def soak(*, minutes: float, every_s: float, out: Path, overrides: list[str], cluster_nodes: int = 0,
         churn_every_s: float = 0) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="run_", dir=out))
    cluster = churn = proc = None
    if cluster_nodes:
        from tests.ray_helpers import ClusterProcess

        cluster = ClusterProcess(nodes=cluster_nodes, cpus_per_node=4, timeout=60 + 30 * cluster_nodes)
        overrides = ["hardware=cluster", f"ray.address={cluster.address}", *overrides]
    samples: list[dict] = []
    try:
        proc = start_run(run_dir, overrides)
        roots = [proc.pid] + ([cluster.proc.pid] if cluster else [])
        wait_for_training(proc, run_dir)
        if cluster and churn_every_s:
            churn = Churn(cluster, duration_s=minutes * 60, every_s=(churn_every_s / 2, churn_every_s / 2), seed=0)
            churn.start()
        start = time.monotonic()
        while True:
            elapsed = time.monotonic() - start
            done = iterations(run_dir)
            for root in roots:
                for pid, (name, rss_mb) in sorted(family(root).items()):
                    samples.append({"elapsed_s": round(elapsed), "pid": pid,
                                    "role": name if pid != root or root == proc.pid else "cluster_launcher",
                                    "rss_mb": round(rss_mb, 1), "iterations": done})
            _write_csv(out / "samples.csv", samples)
            if elapsed >= minutes * 60 or proc.poll() is not None:
                break
            time.sleep(min(every_s, max(0.0, minutes * 60 - elapsed)))
    finally:
        if churn is not None:
            churn.stop_event.set()
            churn.join(120)
        code = _stop(proc) if proc is not None else None
        if cluster is not None:
            cluster.stop()
    summary = {"command": " ".join(proc.args), "machine": os.uname().nodename, "cpus": os.cpu_count(),
               "exit_code": code, "iterations": iterations(run_dir), "by_role_mb": by_role(samples),
               **({"node_events": len(churn.events), "churn_error": churn.error} if churn else {})}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _stop(proc: subprocess.Popen) -> int:
    """Ctrl-C, as a user would stop it; SIGKILL if it does not go within a minute."""
    from tests.ray_helpers import stop_process

    return stop_process(proc, signal.SIGINT)


def _write_csv(path: Path, samples: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["elapsed_s", "pid", "role", "rss_mb", "iterations"])
        writer.writeheader()
        writer.writerows(samples)


def by_role(samples: list[dict]) -> dict[str, dict[int, float]]:
    """Role -> {seconds into the soak -> RSS in MB summed over that role's processes}."""
    table: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    raylets: dict[int, int] = defaultdict(int)
    for row in samples:
        table[row["role"]][row["elapsed_s"]] += row["rss_mb"]
        table["ALL"][row["elapsed_s"]] += row["rss_mb"]
        raylets[row["elapsed_s"]] += row["role"] == "raylet"
    if any(raylets.values()):  # nodes come and go under churn: the mean raylet shows a leak, the sum the count
        table["raylet_mean"] = {second: table["raylet"][second] / count for second, count in raylets.items() if count}
    return {name: {second: round(mb, 1) for second, mb in sorted(col.items())} for name, col in table.items()}


def print_table(summary: dict) -> None:
    roles = summary["by_role_mb"]
    names = sorted(roles, key=lambda n: (n == "ALL", n))
    seconds = sorted({s for col in roles.values() for s in col})
    print(f"{summary['command']}\nexit code {summary['exit_code']}, {summary['iterations']} iterations"
          + (f", {summary['node_events']} node events ({summary['churn_error'] or 'no error'})" if "node_events" in summary else "")
          + "; RSS in MB")
    print("  min " + " ".join(f"{n[:17]:>17}" for n in names))
    for second in seconds:
        print(f"{second / 60:>5.1f} " + " ".join(f"{roles[n].get(second, 0):>17.1f}" for n in names))
    first, last = seconds[0], seconds[-1]
    print("growth " + ", ".join(f"{n} {roles[n].get(last, 0) - roles[n].get(first, 0):+.1f}" for n in names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--every-s", type=float, default=60)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rlpar_soak")
    parser.add_argument("--cluster-nodes", type=int, default=0, help="join a loopback cluster of this many nodes")
    parser.add_argument("--churn-every-s", type=float, default=0, help="with --cluster-nodes: a node removed and one added this often")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for main.py (after --)")
    args = parser.parse_args()
    summary = soak(minutes=args.minutes, every_s=args.every_s, out=args.out, overrides=args.overrides,
                   cluster_nodes=args.cluster_nodes, churn_every_s=args.churn_every_s)
    print_table(summary)


if __name__ == "__main__":
    main()
