"""The GPU path, end to end, in one script for a fresh GPU machine: each `hardware=gpu` run
briefly, then one table of what it measured (learner samples/s for the MLP and the Nature CNN,
env steps/s or frames/s, time to solve CartPole, peak GPU memory). It fails loudly: a run that exits
non-zero is shown with its output and traceback, the other runs go on (one call on a lent machine
shows every failure), and the script exits 1.

    python3 benchmarks/gpu_check.py --download-wheels     # here, with network to the registry: the wheels to carry
    python3 benchmarks/gpu_check.py                       # on the GPU machine (installs what is missing from them)
    .venv/bin/python benchmarks/gpu_check.py --cpu-dry-run   # every run's plumbing on this CPU, tiny budgets
    .venv/bin/python benchmarks/gpu_check.py --hardware cpu  # the same runs and budgets on this CPU, to compare

The GPU machine reaches no network and has its own CUDA build of torch: the script uses that
torch and installs only what is missing (Gymnasium, Hydra, ale-py, ...) from `--wheels`, Python
3.12 wheels carried with the working tree (`run` carry: benchmarks/gpu_wheels). Ray's wheel is
larger than what travels at once, so without Ray the script checks the local and multiprocess
paths and says so; with Ray importable it adds the distributed rows.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import ROOT, fmt, machine, markdown_table, read_rows

WHEELS = ROOT / "benchmarks" / "gpu_wheels"
SITE = ROOT / "benchmarks" / ".gpu_site"  # where the carried wheels are unpacked (PYTHONPATH of the runs)
WHEEL_PYTHON = "3.12"
# What rlpar needs beyond the GPU machine's own packages (torch, numpy, tensorboard, opencv):
# module to import -> the pinned distributions that provide it and its dependencies.
NEEDED = {
    "gymnasium": ["gymnasium==1.4.0", "farama-notifications==0.0.6", "cloudpickle==3.1.3", "typing-extensions==4.16.0"],
    "hydra": ["hydra-core==1.3.8", "antlr4-python3-runtime==4.9.3", "packaging==26.4"],
    "omegaconf": ["omegaconf==2.3.1"],
    "yaml": ["PyYAML==6.0.3"],
    "psutil": ["psutil==7.2.2"],
    "ale_py": ["ale-py==0.12.1"],
}
PURE_PYTHON_SDISTS = {"antlr4-python3-runtime==4.9.3"}  # no wheel on the registry: built here, any Python


@dataclass
class Check:
    """One brief run: its overrides on the GPU, and the smaller budget of its CPU dry run. The GPU
    budgets' time limits add up to about 5 minutes of training, so that the script, start-ups and
    the wheels' install included, stays within 8."""

    name: str
    overrides: list[str]
    gpu_budget: list[str]
    dry_budget: list[str]
    needs: tuple[str, ...] = ()        # modules without which the check cannot run
    learner: str | None = None         # "MLP" / "Nature CNN": report its learner samples/s
    solve_at: float | None = None      # report the time to this episode return
    rows: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)  # the run's config.yaml, as it ran
    wall_s: float = 0.0
    gpu_peak_mb: float | None = None


def checks(ray_available: bool) -> list[Check]:
    pong = ["env=atari", "env.id=ALE/Pong-v5", "algo=impala", "model=nature_cnn", "envs_per_worker=8"]
    listed = [
        Check("PPO CartPole, compiled", ["algo=ppo", "env=cartpole", "algo.compile=true"],
              ["total_steps=200000", "time_limit_s=80"], ["total_steps=4096"], learner="MLP", solve_at=475.0),
        Check("PPO Pendulum, compiled", ["algo=ppo", "env=pendulum", "algo.compile=true"],
              ["total_steps=100000", "time_limit_s=40"], ["total_steps=4096"]),
        Check("IMPALA Pong, Nature CNN", [*pong, "parallel=multiprocess", "workers=4"],
              ["time_limit_s=50", "total_steps=2000000"], ["total_steps=2048"], needs=("ale_py",), learner="Nature CNN"),
        Check("DQN CartPole", ["algo=dqn", "env=cartpole"], ["total_steps=50000", "time_limit_s=30"], ["total_steps=2048"]),
        Check("SAC Pendulum", ["algo=sac", "env=pendulum"], ["total_steps=10000", "time_limit_s=30"], ["total_steps=600"]),
        Check("PPO CartPole, central inference", ["algo=ppo", "env=cartpole", "parallel=multiprocess", "workers=4",
                                                  "envs_per_worker=16", "parallel.inference=central"],
              ["total_steps=200000", "time_limit_s=25"], ["total_steps=4096"]),
        Check("PPO CartPole, bf16", ["algo=ppo", "env=cartpole", "algo.precision=bf16"],
              ["total_steps=100000", "time_limit_s=25"], ["total_steps=4096"]),
        Check("PPO CartPole, fp16", ["algo=ppo", "env=cartpole", "algo.precision=fp16"],
              ["total_steps=100000", "time_limit_s=25"], ["total_steps=4096"]),
    ]
    if ray_available:
        listed += [
            Check("IMPALA Pong, distributed, central inference",
                  [*pong, "parallel=distributed", "workers=8", "parallel.inference=central"],
                  ["time_limit_s=40", "total_steps=2000000"], ["total_steps=2048"], needs=("ale_py", "ray")),
        ]
    return listed


def missing_modules(env: dict) -> list[str]:
    """The NEEDED modules that the runs' Python cannot import (asked in a child: PYTHONPATH counts)."""
    probe = "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"
    done = subprocess.run([sys.executable, "-c", probe, *NEEDED], env=env, capture_output=True, text=True, check=True)
    return done.stdout.split()


def install_missing(wheels: Path, env: dict) -> None:
    """Unpack the carried wheels of whatever is missing into SITE, leaving the machine's own
    torch and numpy alone (no dependency resolution: NEEDED lists each module's own)."""
    missing = missing_modules(env)
    if not missing:
        return
    if not wheels.is_dir():
        sys.exit(f"gpu_check: {', '.join(missing)} missing and no wheels at {wheels}: run --download-wheels where the "
                 "registry is reachable, and carry that folder")
    wanted = sorted({dist for module in missing for dist in NEEDED[module]})
    print(f"gpu_check: installing {', '.join(wanted)} from {wheels}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--find-links",
                    str(wheels), "--target", str(SITE), "--upgrade", *wanted], check=True)
    still = missing_modules(env)
    if still:
        sys.exit(f"gpu_check: still missing after installing the wheels: {', '.join(still)}")


def download_wheels(wheels: Path, with_ray: bool) -> None:
    """The Python 3.12 wheels to carry to the GPU machine (Ray's only with `with_ray`: it
    outweighs the 64 MiB that travel at once)."""
    wheels.mkdir(parents=True, exist_ok=True)
    dists = sorted({dist for group in NEEDED.values() for dist in group} - PURE_PYTHON_SDISTS)
    if with_ray:
        dists.append("ray==2.60.0")
    platform_args = ["--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64",
                     "--python-version", WHEEL_PYTHON, "--implementation", "cp", "--only-binary=:all:"]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheels),
                    *platform_args, *dists], check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels),
                    *sorted(PURE_PYTHON_SDISTS)], check=True)
    total = sum(path.stat().st_size for path in wheels.iterdir())
    print(f"gpu_check: {len(list(wheels.iterdir()))} wheels, {total / 2**20:.1f} MiB in {wheels}")


class GpuMemoryPeak:
    """The most GPU memory all compute processes held together, polled from nvidia-smi while a
    run goes on (the runs are separate processes: torch's own counters stay in them)."""

    def __init__(self, interval_s: float = 0.25):
        self.peak_mb: float | None = None
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _used_mb(self) -> float | None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=used_memory", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        values = [float(line) for line in out.split() if line.strip().replace(".", "", 1).isdigit()]
        return sum(values) if values else 0.0

    def _loop(self):
        while not self._stop.wait(self.interval_s):
            used = self._used_mb()
            if used is not None:
                self.peak_mb = max(self.peak_mb or 0.0, used)

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def run_check(check: Check, overrides: list[str], env: dict, timeout_s: float, scratch: Path) -> str | None:
    """Runs one check; returns why it failed (its output's end and its traceback), or None."""
    run_dir = scratch / check.name.replace(" ", "_").replace(",", "")
    command = [sys.executable, "main.py", *overrides, "seed=0", "progress=false", "checkpoint.every=0", f"run_dir={run_dir}"]
    print(f"gpu_check: {check.name}: {' '.join(command[2:-1])}", flush=True)
    start = time.time()
    with GpuMemoryPeak() as memory:
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as timeout:
            return f"(ran past {timeout_s:.0f} s)\n{(timeout.stdout or b'')[-3000:]!r}"
    check.wall_s, check.gpu_peak_mb = time.time() - start, memory.peak_mb
    if done.returncode != 0:
        log = run_dir / "main.log"
        traceback = log.read_text()[-4000:] if log.exists() else ""
        return f"(exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}\n{traceback}"
    check.rows = read_rows(run_dir / "metrics.jsonl")
    import yaml  # here: on the GPU machine it comes from the carried wheels (SITE)

    check.config = yaml.safe_load((run_dir / "config.yaml").read_text())
    if not check.rows:
        return f"(no metrics rows):\n{done.stderr[-3000:]}"
    return None


def learner_samples_per_s(check: Check) -> float | None:
    """Samples the learner goes through per second of learning, the median over iterations (one
    iteration's wait for a compile or a slow start does not set it): minibatch steps times the
    minibatch for PPO, the env steps it learnt from for one-pass learners (IMPALA)."""
    algo = check.config.get("algo", {})
    minibatch = algo.get("minibatch_size") if algo.get("name") == "ppo" else None
    rates = []
    for before, row in zip(check.rows, check.rows[1:]):
        samples = row.get("gradient_steps", 0) * minibatch if minibatch else row["env_steps"] - before["env_steps"]
        if row.get("time_learn_s", 0.0) > 0:
            rates.append(samples / row["time_learn_s"])
    return statistics.median(rates) if rates else None


def env_steps_per_s(check: Check) -> float:
    """Env steps per second of training, the median over iterations after the first."""
    return statistics.median(row["fps"] for row in (check.rows[1:] or check.rows))


def time_to(rows: list[dict], score: float) -> float | None:
    """Seconds of training (after start-up) until the mean return first reaches `score`."""
    return next((row["wall_time_s"] for row in rows if row.get("episode_return_mean", float("-inf")) >= score), None)


def table(results: list[Check]) -> str:
    header = ["run", "env steps/s", "frames/s", "learner samples/s", "time to 475 (s)", "peak GPU memory (MiB)", "wall (s)"]
    body = []
    for check in results:
        frames = [row["frames_per_s"] for row in check.rows[1:] if "frames_per_s" in row]
        learner = f"{check.learner}: {fmt(learner_samples_per_s(check), ',.0f')}" if check.learner else "-"
        body.append([check.name, f"{env_steps_per_s(check):,.0f}", fmt(sum(frames) / len(frames) if frames else None, ",.0f"),
                     learner, fmt(time_to(check.rows, check.solve_at) if check.solve_at else None, ".1f"),
                     fmt(check.gpu_peak_mb, ",.0f"), f"{check.wall_s:.0f}"])
    return markdown_table(header, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-dry-run", action="store_true", help="hardware=cpu and tiny budgets: the plumbing, here")
    parser.add_argument("--hardware", choices=("gpu", "cpu"), default="gpu",
                        help="cpu: the same runs and budgets on this CPU, the figures to set beside the GPU's")
    parser.add_argument("--download-wheels", action="store_true", help="fetch the wheels to carry, then stop")
    parser.add_argument("--with-ray", action="store_true", help="with --download-wheels: Ray's wheel too (large)")
    parser.add_argument("--wheels", type=Path, default=WHEELS)
    parser.add_argument("--timeout-s", type=float, default=150.0, help="the most one run may take")
    parser.add_argument("--only", nargs="*", default=None, help="run only the checks whose name contains one of these")
    parser.add_argument("extra", nargs="*", help="overrides added to every run (after `--`)")
    args = parser.parse_args()
    if args.download_wheels:
        download_wheels(args.wheels, args.with_ray)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    hardware = "cpu" if args.cpu_dry_run else args.hardware
    if hardware == "gpu":
        install_missing(args.wheels, env)
        sys.path.insert(0, str(SITE))
        import torch

        if not torch.cuda.is_available():
            sys.exit("gpu_check: torch sees no CUDA device (use --cpu-dry-run on a machine without a GPU)")
        print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    has = {module: importlib.util.find_spec(module) is not None for module in ("ray", "ale_py")}
    if not has["ray"]:
        print("gpu_check: Ray is not installed here: checking the local and multiprocess paths only")
    selected = [check for check in checks(has["ray"])
                if args.only is None or any(part.lower() in check.name.lower() for part in args.only)]
    print(f"gpu_check: {machine()}", flush=True)
    results, failures = [], {}
    with tempfile.TemporaryDirectory(prefix="rlpar_gpu_check_") as scratch:
        for check in selected:
            absent = [module for module in check.needs if not has.get(module, True)]
            if absent:
                print(f"gpu_check: {check.name}: skipped, {', '.join(absent)} not installed")
                continue
            overrides = [*check.overrides, f"hardware={hardware}",
                         *(check.dry_budget if args.cpu_dry_run else check.gpu_budget), *args.extra]
            if args.cpu_dry_run:  # a cold compile on 2 cores outlasts the whole dry run; compiling has tests of its own
                overrides = [o.replace("algo.compile=true", "algo.compile=false") for o in overrides]
            failure = run_check(check, overrides, env, args.timeout_s, Path(scratch))
            if failure is None:
                results.append(check)
            else:  # the other checks still run: one call on a lent machine shows every failure
                failures[check.name] = failure
                print(f"gpu_check: {check.name} FAILED {failure}", flush=True)
    print(table(results))
    print(f"gpu_check: {len(results)} runs passed on hardware={hardware}")
    if failures:
        sys.exit(f"gpu_check: {len(failures)} FAILED: {', '.join(failures)}")


if __name__ == "__main__":
    main()
