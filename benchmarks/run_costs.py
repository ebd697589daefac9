"""What a run costs this machine, part by part: the figures behind rlpar/config/resources.py,
which refuses runs that cannot fit before anything starts.

1. A worker process: unique and proportional memory (USS, PSS) of each forked multiprocess worker
   and each Ray env runner, after two iterations, and the learner's open file descriptors with
   few and many workers.
2. Environments and steps: peak RSS of a local PPO run against the number of environments and
   the rollout length, for a numpy vector env (CartPole) and Gymnasium envs stepped one by one
   (Acrobot); per environment and per step by difference.

    .venv/bin/python benchmarks/run_costs.py

Each measurement is a fresh process; run it on a quiet machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, os, sys, tempfile
from pathlib import Path
from rlpar.config.compose import compose_config
from rlpar.runtime.build import build_trainer

def memory(pid):
    try:
        fields = {l.split(":")[0]: int(l.split()[1]) for l in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]}
    except OSError:
        return None
    return {"uss_mib": (fields["Private_Clean"] + fields["Private_Dirty"]) / 1024, "pss_mib": fields["Pss"] / 1024}

trainer = build_trainer(compose_config(["progress=false", "checkpoint.every=0", "logger.tensorboard=false",
                                        *sys.argv[1:]], run_dir=tempfile.mkdtemp()))
trainer.train(); trainer.train()
pids = getattr(trainer.sampler, "worker_pids", lambda: [])()
workers = [m for m in (memory(p) for p in pids if p) if m]
print(json.dumps({"workers": workers, "learner_fds": len(os.listdir("/proc/self/fd"))}))
trainer.close()
"""


def probe(*overrides: str) -> dict:
    """The probe in a fresh process; its peak RSS from /usr/bin/time's accounting."""
    proc = subprocess.run(["/usr/bin/time", "-f", "peak_rss_kb=%M", sys.executable, "-c", PROBE, *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["peak_rss_mib"] = int(proc.stderr.rsplit("peak_rss_kb=", 1)[1].split()[0]) / 1024
    return result


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    print("| workers | worker USS MiB | worker PSS MiB | learner fds |")
    print("|---|---|---|---|")
    for parallel, count in (("multiprocess", 4), ("multiprocess", 32), ("distributed", 4), ("distributed", 16)):
        result = probe(f"parallel={parallel}", f"workers={count}", "envs_per_worker=1", "total_steps=1000000")
        workers = result["workers"]
        print(f"| {parallel} x {count} | {mean([w['uss_mib'] for w in workers]):.1f} | "
              f"{mean([w['pss_mib'] for w in workers]):.1f} | {result['learner_fds']} |", flush=True)

    print("\n| environments | envs | rollout | peak RSS MiB |")
    print("|---|---|---|---|")
    peaks = {}
    for env_id in ("CartPole-v1", "Acrobot-v1"):
        for envs, rollout in ((1000, 8), (10000, 8), (10000, 64)):
            result = probe(f"env.id={env_id}", f"envs_per_worker={envs}", f"algo.rollout_length={rollout}",
                           "algo.minibatch_size=4096", "total_steps=100000000")
            peaks[env_id, envs, rollout] = result["peak_rss_mib"]
            print(f"| {env_id} | {envs} | {rollout} | {result['peak_rss_mib']:.0f} |", flush=True)
    for env_id in ("CartPole-v1", "Acrobot-v1"):
        per_step = (peaks[env_id, 10000, 64] - peaks[env_id, 10000, 8]) * 2**20 / (10000 * 56)
        per_env = (peaks[env_id, 10000, 8] - peaks[env_id, 1000, 8]) * 2**20 / 9000 - 8 * per_step
        print(f"{env_id}: {per_step:.0f} bytes a step (PPO, 64x64 actor-critic), {per_env:.0f} bytes an environment")


if __name__ == "__main__":
    main()
