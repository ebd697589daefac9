"""Ray Tune searches through the real command line, on a private Ray instance on 127.0.0.1.

The trials rank on `lr` (logged every iteration, constant with anneal_lr=false) so that which
trial is weak is known in advance: the schedulers' decisions can then be asserted exactly.
"""

import csv
import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # each test starts Ray (quick tier: -m 'not slow and not ray')


ROOT = Path(__file__).resolve().parents[2]
# 8 environments x 16 steps: 128 env steps an iteration
SMALL = ("algo.rollout_length=16", "algo.minibatch_size=64", "algo.anneal_lr=false", "checkpoint.every=4",
         "search.metric=lr", "ray.num_cpus=2")


def lr_grid(*values) -> tuple[str, str]:
    return "~search.space.algo.lr", f"+search.space.algo.lr={{grid_search:[{','.join(map(str, values))}]}}"


def main_py(*overrides, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", *overrides], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def table(run_dir: Path) -> list[dict]:
    with open(run_dir / "search.csv") as handle:
        return list(csv.DictReader(handle))


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_asha_stops_the_weak_trials_at_the_first_rung_and_names_the_best(tmp_path):
    run_dir = tmp_path / "asha"
    proc = main_py("search=asha", "search.num_samples=1", *lr_grid(0.003, 0.0001, 0.0001), *SMALL,
                   "search.max_concurrent_trials=1", "total_steps=2048", "search.scheduler.grace_period=512",
                   f"run_dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = table(run_dir)
    assert [(t["algo.lr"], t["status"], t["env_steps"]) for t in trials] == [
        ("0.003", "finished", "2048"), ("0.0001", "early-stopped", "512"), ("0.0001", "early-stopped", "512")]
    for trial in trials:  # every trial is an ordinary run directory
        trial_dir = run_dir / trial["run_dir"]
        history = rows(trial_dir / "metrics.jsonl")
        assert len(history) == int(trial["iterations"]) and history[-1]["env_steps"] == int(trial["env_steps"])
        assert yaml.safe_load((trial_dir / "config.yaml").read_text())["algo"]["lr"] == float(trial["algo.lr"])
        assert {h["lr"] for h in history} == {float(trial["algo.lr"])}
    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    assert best["trial"] == trials[0]["trial"] and best["overrides"] == {"algo.lr": 0.003}
    assert "algo.lr=0.003" in best["command"] and "total_steps=2048" in best["command"]
    assert "search" not in best["command"] and best["command"] in proc.stdout


def pbt(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return main_py("search=pbt", "search.num_samples=1", *lr_grid(0.003, 0.002, 0.0001), *SMALL,
                   "search.scheduler.perturbation_interval=4", "search.scheduler.quantile_fraction=0.5",
                   "search.scheduler.resample_probability=0", "search.learner_cpus=0.5", "total_steps=10240",
                   f"run_dir={run_dir}", *extra)


def test_pbt_exploit_restores_the_donor_and_applies_the_trials_own_mutated_lr_at_once(tmp_path):
    run_dir = tmp_path / "pbt"
    proc = pbt(run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = {t["trial"]: t for t in table(run_dir)}
    assert all(t["status"] == "finished" for t in trials.values())
    weakest = next(t for t in trials.values() if rows(run_dir / t["run_dir"] / "metrics.jsonl")[0]["lr"] == 0.0001)
    history = rows(run_dir / weakest["run_dir"] / "metrics.jsonl")
    exploit = next(i for i, row in enumerate(history) if row["pbt_exploits"] == 1)
    before, after = history[exploit - 1], history[exploit]
    donor = after["pbt_donor"]
    assert donor in trials and donor != weakest["trial"]
    donor_history = rows(run_dir / trials[donor]["run_dir"] / "metrics.jsonl")
    # the mutated lr, a neighbour in the list of the donor's own lr at its checkpoint, from this
    # iteration on (which trial is the donor depends on which trials had reported at the time)
    grid = [0.003, 0.002, 0.0001]
    donor_lr = next(row["lr"] for row in donor_history if row["iteration"] == after["iteration"] - 1)
    at = grid.index(donor_lr)
    assert before["lr"] == 0.0001 and after["lr"] in {grid[max(at - 1, 0)], grid[min(at + 1, len(grid) - 1)]}
    # env steps go on from the donor's checkpoint (taken every 4 iterations), not from 0
    checkpointed = {row["env_steps"] for row in donor_history if row["iteration"] % 4 == 0}
    assert after["env_steps"] - 128 in checkpointed and after["env_steps"] > 128
    assert after["iteration"] - 1 in {row["iteration"] for row in donor_history if row["iteration"] % 4 == 0}
    assert int(weakest["pbt_exploits"]) >= 1 and history[-1]["env_steps"] >= 10240


def test_pbt_never_exploits_a_donor_without_a_checkpoint(tmp_path):
    """Trials that hand Tune no checkpoint (ray-project/ray#27170), not even at their end (a donor
    that finished first is no donor): no exploit, and no trial fails for it."""
    run_dir = tmp_path / "pbt_none"
    proc = pbt(run_dir, "search.checkpoint_every=1000")
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = table(run_dir)
    assert [t["status"] for t in trials] == ["finished"] * 3
    assert all(t["pbt_exploits"] == "0" for t in trials)
    for trial in trials:
        assert {row["lr"] for row in rows(run_dir / trial["run_dir"] / "metrics.jsonl")} == {float(trial["algo.lr"])}


def test_interrupted_search_resumes_without_touching_finished_trials(tmp_path):
    """SIGINT once the third of four trials runs (one at a time), then resume=: trials that had
    finished are not run again, the interrupted one goes on from its checkpoint, and ASHA still
    stops the weak ones at the rung (its rungs refilled from the finished trials)."""
    run_dir = tmp_path / "resume"
    command = [sys.executable, "main.py", "search=asha", "search.num_samples=1",
               *lr_grid(0.003, 0.002, 0.0001, 0.0001), *SMALL, "search.max_concurrent_trials=1", "total_steps=4096",
               "search.scheduler.grace_period=2048", f"run_dir={run_dir}"]
    search = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, third = time.monotonic() + 180, None
        while time.monotonic() < deadline and search.poll() is None:
            started = sorted((run_dir / "trials").glob("*/metrics.jsonl")) if (run_dir / "trials").exists() else []
            if len(started) >= 3 and len(rows(started[2])) >= 6:
                third = started[2]
                break
            time.sleep(0.2)
        assert third is not None, "the search never reached its third trial"
        search.send_signal(signal.SIGINT)
        output, _ = search.communicate(timeout=120)
    finally:
        if search.poll() is None:
            search.kill()
    assert search.returncode == 130, output[-3000:]
    assert f"resume={run_dir}" in output
    done = [t for t in table(run_dir) if t["status"] in ("finished", "early-stopped")]
    assert len(done) >= 2, done
    before = {t["trial"]: hashlib.sha256((run_dir / t["run_dir"] / "metrics.jsonl").read_bytes()).hexdigest()
              for t in done}
    # Rows a running trial logged after its newest checkpoint, past the rung: cut on resume, and
    # not what ASHA may judge it on (a kill can leave such rows; here they are made sure of).
    for trial in table(run_dir):
        path = run_dir / trial["run_dir"] / "metrics.jsonl"
        if trial["status"] == "unfinished" and path.exists() and rows(path):
            last = rows(path)[-1]
            later = [{**last, "iteration": last["iteration"] + k, "env_steps": last["env_steps"] + 128 * k}
                     for k in range(1, 20)]
            with open(path, "a") as handle:
                handle.writelines(json.dumps(row) + "\n" for row in later)

    proc = main_py(f"resume={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = {trial: hashlib.sha256((run_dir / "trials" / trial / "metrics.jsonl").read_bytes()).hexdigest()
             for trial in before}
    assert after == before  # byte for byte
    trials = table(run_dir)
    assert [(t["algo.lr"], t["status"], t["env_steps"]) for t in trials] == [
        ("0.003", "finished", "4096"), ("0.002", "early-stopped", "2048"),
        ("0.0001", "early-stopped", "2048"), ("0.0001", "early-stopped", "2048")]
    for trial in trials:  # no iteration twice, none missing, across the interruption
        assert [row["iteration"] for row in rows(run_dir / trial["run_dir"] / "metrics.jsonl")] == \
            list(range(1, int(trial["iterations"]) + 1))


def test_optuna_sweeper_with_the_ray_launcher_runs_the_documented_tpe_search(tmp_path):
    """README's Hydra-way search, small: TPE over a log-interval, trials as Ray tasks; the best
    value it reports is the best run's final return, read back from the runs."""
    sweep = tmp_path / "optuna"
    proc = main_py("-m", "hydra/sweeper=optuna", "hydra/launcher=rlpar_ray", "hydra.sweeper.n_trials=2",
                   "hydra.sweeper.n_jobs=2", "hydra.sweeper.direction=maximize", "hydra.sweeper.sampler.seed=0",
                   "algo.lr=tag(log,interval(0.0005,0.005))", "total_steps=2048", "progress=false",
                   f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    finals = [rows(run / "metrics.jsonl")[-1]["episode_return_mean"] for run in sorted(sweep.glob("[0-9]*"))]
    lrs = [yaml.safe_load((run / "config.yaml").read_text())["algo"]["lr"] for run in sorted(sweep.glob("[0-9]*"))]
    assert len(finals) == 2 and result["best_value"] == max(finals)
    assert result["best_params"]["algo.lr"] == lrs[finals.index(max(finals))] and 0.0005 <= min(lrs) <= max(lrs) <= 0.005


def test_a_failed_trials_error_is_kept_in_its_own_run_directory(tmp_path):
    run_dir = tmp_path / "failing"
    proc = main_py("search=asha", "search.num_samples=1", "env.id=null", "env.max_episode_steps=500",
                   "env.entry_point=tests.faulty_envs:BreaksForGoodCartPole", "+env.kwargs.break_after=1000000",
                   "~search.space.algo.lr", "+search.space.env.kwargs.break_after={grid_search:[200,1000000]}",
                   *SMALL, "search.max_concurrent_trials=1", "total_steps=1024", "search.scheduler.grace_period=1024",
                   f"run_dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed, finished = sorted(table(run_dir), key=lambda t: int(t["env.kwargs.break_after"]))
    assert (failed["status"], finished["status"]) == ("errored", "finished")
    assert failed["error_file"] == f"{failed['run_dir']}/error.txt" and finished["error_file"] == ""
    error = (run_dir / failed["error_file"]).read_text()
    assert "simulator lost after 200 steps" in error and "EnvironmentFailedError" in error
