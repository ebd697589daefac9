"""`rlpar report` on an `experiment=benchmark` sweep: a real, tiny sweep (two rows, two seeds,
2,000 env steps, evaluations of 2 episodes) reported as RL Baselines3 Zoo's table; each run's
final evaluation in evaluations.jsonl; unfinished runs and runs without an evaluation listed, not
averaged; an `rlpar evaluate` of the final env steps standing in for a missing evaluation."""

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlpar.analysis import rl_zoo

ROOT = Path(__file__).resolve().parents[2]
ROWS = ("ppo-CartPole-v1", "dqn-CartPole-v1")
STEPS, EPISODES = 2000, 2


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("benchmark")
    proc = subprocess.run(
        [sys.executable, "main.py", "-m", "experiment=benchmark", f"+benchmark_row={','.join(ROWS)}", "seed=0,1",
         f"total_steps={STEPS}", f"eval_episodes={EPISODES}", f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep_dir


def report(sweep_dir: Path, *args: str) -> tuple[dict, str]:
    """`python -m rlpar.report` as a user runs it: results.csv by (algo, env, mode), report.md's text."""
    proc = subprocess.run([sys.executable, "-m", "rlpar.report", str(sweep_dir), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(sweep_dir / "results.csv") as handle:
        rows = {(r["algo"], r["env"], r["mode"]): r for r in csv.DictReader(handle)}
    return rows, (sweep_dir / "report.md").read_text()


def runs_of(sweep_dir: Path) -> dict[str, list[Path]]:
    """Run directories by algorithm."""
    found: dict[str, list[Path]] = {}
    for config in sorted(sweep_dir.glob("*/config.yaml")):
        found.setdefault(yaml.safe_load(config.read_text())["algo"]["name"], []).append(config.parent)
    return found


def evaluation(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    return rows[-1]


@pytest.mark.slow
def test_each_run_writes_its_final_evaluation(sweep):
    runs = runs_of(sweep)
    assert sorted(runs) == ["dqn", "ppo"] and all(len(dirs) == 2 for dirs in runs.values())
    for run_dir in runs["ppo"] + runs["dqn"]:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert (config["experiment_name"], config["eval_episodes"]) == ("benchmark", EPISODES)
        row = evaluation(run_dir)
        last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
        assert (row["source"], row["eval_episodes"], len(row["returns"]), len(row["lengths"])) == (
            "training", EPISODES, EPISODES, EPISODES)
        assert (row["env_steps"], row["iteration"], row["seed"]) == (
            last["env_steps"], last["iteration"], config["seed"] + 10_000)
        assert row["eval_return_mean"] == pytest.approx(np.mean(row["returns"]))
        assert row["returns"] == [float(n) for n in row["lengths"]]  # CartPole: +1 a step


@pytest.mark.slow
def test_the_report_is_rl_zoos_table_with_rlpars_evaluations_over_seeds(sweep):
    rows, text = report(sweep)
    assert sorted(rows) == [("dqn", "CartPole-v1", "local"), ("ppo", "CartPole-v1", "local")]
    for algo, run_dirs in runs_of(sweep).items():
        row = rows[(algo, "CartPole-v1", "local")]
        per_seed = [evaluation(run_dir)["eval_return_mean"] for run_dir in run_dirs]
        zoo = rl_zoo.reference(algo, "CartPole-v1")
        assert (int(row["seeds"]), row["eval_episodes"]) == (2, str(EPISODES))
        assert float(row["eval_return_mean"]) == pytest.approx(np.mean(per_seed))
        assert float(row["eval_return_std"]) == pytest.approx(np.std(per_seed))
        assert (row["rl_zoo_algo"], row["rl_zoo_env"], float(row["rl_zoo_mean"]), int(row["rl_zoo_budget"])) == (
            algo, "CartPole-v1", 500.0, zoo.n_timesteps)
        assert float(row["ratio"]) == pytest.approx(np.mean(per_seed) / 500.0)
        assert row["reached_rl_zoo_minus_std"] == ("yes" if np.mean(per_seed) >= 500.0 else "no")
        finals = [json.loads((d / "metrics.jsonl").read_text().splitlines()[-1]) for d in run_dirs]
        assert float(row["env_steps_mean"]) == pytest.approx(np.mean([f["env_steps"] for f in finals]))
        assert float(row["wall_time_s_mean"]) == pytest.approx(np.mean([f["wall_time_s"] for f in finals]))
        png = sweep / row["curve"]
        assert png.name == f"{algo}-CartPole-v1.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"| {algo} | CartPole-v1 | local | 2 | {np.mean(per_seed):.1f} +- {np.std(per_seed):.1f} | " \
               f"{algo} CartPole-v1 | 500.0 +- 0.0 | {zoo.n_timesteps:,} |" in text
    assert "| algorithm | environment | mode | seeds | rlpar: final evaluation (mean +- std over seeds) | RL-Zoo row |" in text
    assert "reached RL-Zoo - 1 std" in text and rl_zoo.SOURCE in text and "LunarLander-v2" in text
    assert "## Runs not included" not in text


@pytest.mark.slow
def test_unfinished_and_unevaluated_runs_are_listed_not_averaged(sweep, tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    ppo, dqn = (runs_of(copy)[algo] for algo in ("ppo", "dqn"))
    metrics = ppo[0] / "metrics.jsonl"
    metrics.write_text(metrics.read_text().splitlines()[0] + "\n")  # as if killed after one iteration
    (dqn[1] / "evaluations.jsonl").unlink()  # as if trained with eval_episodes=0
    rows, text = report(copy)
    assert rows[("ppo", "CartPole-v1", "local")]["seeds"] == "1" and rows[("dqn", "CartPole-v1", "local")]["seeds"] == "1"
    assert float(rows[("ppo", "CartPole-v1", "local")]["eval_return_mean"]) == evaluation(ppo[1])["eval_return_mean"]
    assert "## Runs not included" in text
    assert f"| {ppo[0].name} | unfinished | 1 |" in text
    assert f"| {dqn[1].name} | no final evaluation (eval_episodes=0; rlpar evaluate RUN_DIR --episodes 20 adds one) |" in text

    # `rlpar evaluate` of the run's final env steps stands in for the evaluation it lacks
    proc = subprocess.run([sys.executable, "-m", "rlpar", "evaluate", str(dqn[1]), "--episodes", "3", "--no-video"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows, text = report(copy)
    dqn_row = rows[("dqn", "CartPole-v1", "local")]
    assert (dqn_row["seeds"], dqn_row["eval_episodes"]) == ("2", "2/3")
    assert evaluation(dqn[1])["source"] == "evaluate"
    assert f"| {dqn[1].name} |" not in text


@pytest.mark.slow
def test_a_sweep_of_another_experiment_keeps_the_standard_report_unless_asked(sweep, tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    for config_path in copy.glob("*/config.yaml"):
        config = yaml.safe_load(config_path.read_text())
        config["experiment_name"] = None
        config_path.write_text(yaml.safe_dump(config))
    proc = subprocess.run([sys.executable, "-m", "rlpar.report", str(copy)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "# Report:" in (copy / "report.md").read_text()
    _, text = report(copy, "--benchmark")
    assert text.startswith("# Benchmark report:")


# -- the time to the bar, from hand-made run directories -------------------------------------------
def write_run(sweep_dir: Path, name: str, algo: str, env: str, seed: int, curve: list[tuple[float, float | None]],
              mode: str = "local", workers: int = 1) -> None:
    """A finished run of a benchmark row: config.yaml, metrics.jsonl (one row per (wall_time_s,
    episode_return_mean), 100 env steps apart) and its final evaluation in evaluations.jsonl."""
    run_dir = sweep_dir / name
    run_dir.mkdir(parents=True)
    config = {"experiment_name": "benchmark", "algo": {"name": algo}, "env": {"id": env}, "parallel": {"name": mode},
              "workers": workers, "seed": seed, "total_steps": 100 * len(curve), "eval_episodes": 2}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"iteration": i, "env_steps": 100 * i, "wall_time_s": wall, "episode_return_mean": value}
            for i, (wall, value) in enumerate(curve, start=1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    evaluation = {"source": "training", "eval_return_mean": 1.0, "eval_episodes": 2, "env_steps": 100 * len(curve)}
    (run_dir / "evaluations.jsonl").write_text(json.dumps(evaluation) + "\n")


@pytest.fixture
def timed_sweep(tmp_path) -> Path:
    """Bars: CartPole 500 (PPO's and DQN's), Acrobot -91.707 (PPO's; IMPALA's too) and -100.566 (A2C's),
    MountainCar -110.774 (DQN's), Pong 20.16 (CleanRL's PPO; APPO's too); FrozenLake none."""
    write_run(tmp_path, "ppo_cartpole_0", "ppo", "CartPole-v1", 0, [(5.0, 100.0), (10.0, 499.9), (12.5, 500.0),
                                                                      (15.0, 480.0)])
    write_run(tmp_path, "ppo_cartpole_1", "ppo", "CartPole-v1", 1, [(4.0, None), (20.0, 500.0), (30.0, 500.0)])
    write_run(tmp_path, "dqn_cartpole_0", "dqn", "CartPole-v1", 0, [(3.0, 500.0), (6.0, 20.0)])
    write_run(tmp_path, "dqn_cartpole_1", "dqn", "CartPole-v1", 1, [(3.0, 20.0), (6.0, 499.0)])
    write_run(tmp_path, "ppo_acrobot_0", "ppo", "Acrobot-v1", 0, [(1.0, -95.0), (2.0, -91.0), (3.0, -80.0)])
    write_run(tmp_path, "a2c_acrobot_0", "a2c", "Acrobot-v1", 0, [(2.0, -300.0), (6.0, -100.0)])
    write_run(tmp_path, "impala_acrobot_0", "impala", "Acrobot-v1", 0, [(7.0, -90.0)], "distributed", 4)
    write_run(tmp_path, "dqn_mountaincar_0", "dqn", "MountainCar-v0", 0, [(8.0, -110.0)])
    write_run(tmp_path, "ppo_frozenlake_0", "ppo", "FrozenLake-v1", 0, [(1.0, 1.0)])
    write_run(tmp_path, "ppo_pong_0", "ppo", "ALE/Pong-v5", 0, [(5.0, 20.0), (9.0, 20.5)])
    write_run(tmp_path, "appo_pong_0", "appo", "ALE/Pong-v5", 0, [(4.0, 21.0)], "distributed", 4)
    return tmp_path


def test_each_row_has_its_time_to_the_bar_over_seeds_and_ppos_time_to_the_same_bar(timed_sweep):
    from rlpar.analysis.benchmark import benchmark_rows
    from rlpar.analysis.runs import load_runs

    rows = {(r["algo"], r["env"]): r for r in benchmark_rows(load_runs(timed_sweep))}
    times = {key: (r["time_to_bar_s_mean"], r["time_to_bar_seeds"], r["ppo_time_to_bar_s_mean"],
                   r["ppo_time_to_bar_seeds"], r["reference_source"]) for key, r in rows.items()}
    assert times == {
        ("ppo", "CartPole-v1"): (16.25, "2/2", 16.25, "2/2", "RL-Zoo"),  # 12.5 s and 20.0 s; 499.9 is short
        ("dqn", "CartPole-v1"): (3.0, "1/2", 16.25, "2/2", "RL-Zoo"),
        ("ppo", "Acrobot-v1"): (2.0, "1/1", 2.0, "1/1", "RL-Zoo"),
        ("a2c", "Acrobot-v1"): (6.0, "1/1", 1.0, "1/1", "RL-Zoo"),  # PPO to A2C's lower bar: its first row
        ("impala", "Acrobot-v1"): (7.0, "1/1", 2.0, "1/1", "RL-Zoo"),
        ("dqn", "MountainCar-v0"): (8.0, "1/1", None, None, "RL-Zoo"),  # no PPO row of MountainCar here
        ("ppo", "FrozenLake-v1"): (None, None, None, None, None),  # no reference, no bar
        ("ppo", "ALE/Pong-v5"): (9.0, "1/1", 9.0, "1/1", "CleanRL"),  # 20.0 is short of 20.16
        ("appo", "ALE/Pong-v5"): (4.0, "1/1", 9.0, "1/1", "CleanRL"),
    }


def test_the_report_shows_the_times_beside_ppos_and_names_each_references_source(timed_sweep):
    from rlpar.analysis.benchmark import benchmark_rows
    from rlpar.analysis.runs import load_runs
    from rlpar.report import benchmark_table

    table = benchmark_table(benchmark_rows(load_runs(timed_sweep)))
    assert "| training wall time | time to RL-Zoo - 1 std (seeds) | PPO's | curve |" in table
    assert "| dqn | CartPole-v1 | local | 2 |" in table
    assert "| 3.0 s (1/2) | 16.2 s (2/2) | [png](curves/dqn-CartPole-v1.png) |" in table
    assert "| 8.0 s (1/1) | - | [png](curves/dqn-MountainCar-v0.png) |" in table
    assert "| - | - | [png](curves/ppo-FrozenLake-v1.png) |" in table
    assert "| appo | ALE/Pong-v5 | distributed, 4 workers | 1 | 1.0 +- 0.0 | CleanRL: ppo PongNoFrameskip-v4 " \
           "(PPO's row) | 20.4 +- 0.2 | 10,000,000 |" in table
    assert "| 4.0 s (1/1) | 9.0 s (1/1) | [png](curves/appo-ALE_Pong-v5-distributed-4w.png) |" in table


@pytest.mark.slow
def test_the_report_files_hold_the_times_and_the_cleanrl_note(timed_sweep):
    rows, text = report(timed_sweep)
    dqn = rows[("dqn", "CartPole-v1", "local")]
    assert (dqn["time_to_bar_s_mean"], dqn["time_to_bar_seeds"], dqn["ppo_time_to_bar_s_mean"],
            dqn["ppo_time_to_bar_seeds"], dqn["reference_source"]) == ("3.0", "1/2", "16.25", "2/2", "RL-Zoo")
    assert rows[("dqn", "MountainCar-v0", "local")]["ppo_time_to_bar_s_mean"] == ""
    assert rows[("appo", "ALE/Pong-v5", "distributed")]["reference_source"] == "CleanRL"
    assert f"- **RL-Zoo**: {rl_zoo.SOURCE}:" in text
    assert "- **CleanRL**: the reference of ALE/Pong-v5 (every other row's is RL-Zoo's)" in text
    assert rl_zoo.CLEANRL_SOURCE in text and "4x the Atari rows' budget" in text and "without sticky actions" in text
    assert "- **time to RL-Zoo - 1 std (seeds)**: the training wall time" in text
