"""A tiny sweep end to end: Hydra multirun, the report, its plots and the notebooks; and the report
on hand-written run directories: thresholds, many environments, symlinks, entry points, wall time,
and search directories (a row per trial, not seeds of one configuration)."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import nbformat
import pytest
import yaml
from nbclient import NotebookClient

from rlpar.analysis import load_runs, summary_rows
from rlpar.analysis.plots import compact_number, grid_shape, plot_learning_curves, plural
from rlpar.analysis.summary import learning_curve
from rlpar.report import write_report

ROOT = Path(__file__).resolve().parents[2]

# 12 registered ids; gymnasium.spec reads the registry only, so none of their packages is needed.
TWELVE_ENVS = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
               "LunarLander-v3", "BipedalWalker-v3", "FrozenLake-v1", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5"]


def write_run(path: Path, env_id="CartPole-v1", *, seed=0, returns=(10.0, 100.0, 200.0, 300.0), steps_per_row=1000,
              seconds_per_row=1.0, entry_point=None, env_extra=None, workers=1, extra=None) -> Path:
    """A finished run directory as rlpar writes it (config.yaml, metrics.jsonl), with given returns;
    `extra`: more top-level config keys (or ones to replace)."""
    path.mkdir(parents=True)
    config = {"seed": seed, "total_steps": steps_per_row * len(returns), "workers": workers, "envs_per_worker": 8,
              "env": {"id": env_id, "entry_point": entry_point, **(env_extra or {})},
              "parallel": {"_target_": "rlpar.sampling.local.LocalSampler", "name": "local"}, **(extra or {})}
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"iteration": i + 1, "env_steps": steps_per_row * (i + 1), "wall_time_s": seconds_per_row * (i + 1),
             "episode_return_mean": value} for i, value in enumerate(returns)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def report_csv(sweep_dir: Path, *args: str) -> dict[str, dict]:
    """`python -m rlpar.report` run as a user runs it; results.csv by env."""
    proc = subprocess.run([sys.executable, "-m", "rlpar.report", str(sweep_dir), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(sweep_dir / "results.csv") as handle:
        return {row["env"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("sweep")
    proc = subprocess.run(
        [sys.executable, "main.py", "-m", "experiment=scaling", "total_steps=2048",
         "parallel=local,multiprocess", "workers=1,2", f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep_dir


@pytest.mark.slow
def test_report_has_one_row_per_mode_and_workers_and_the_plots(sweep):
    report = write_report(sweep)
    text = report.read_text()
    table = [l for l in text.splitlines() if l.startswith("| Pendulum-v1")]
    assert [tuple(c.strip() for c in l.split("|")[2:4]) for l in table] == [
        ("local", "1"), ("local", "2"), ("multiprocess", "1"), ("multiprocess", "2")]
    with open(sweep / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4
    assert all(float(r["fps_mean"]) > 0 for r in rows)
    assert [float(r["speedup"]) for r in rows if r["workers"] == "1"] == [1.0, 1.0]
    # same seed and total envs split differently: local and multiprocess learn identically
    by_key = {(r["mode"], r["workers"]): r for r in rows}
    assert by_key[("local", "2")]["final_return_mean"] == by_key[("multiprocess", "2")]["final_return_mean"]
    for name in ("fps_vs_workers.png", "efficiency_vs_workers.png", "learning_curves_steps.png", "learning_curves_time.png"):
        png = sweep / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000, name


@pytest.mark.slow
def test_report_lists_unfinished_runs_instead_of_hiding_them(sweep, tmp_path):
    import shutil

    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    metrics = copy / "0" / "metrics.jsonl"  # local, 1 worker: two iterations of 1,024 steps
    metrics.write_text(metrics.read_text().splitlines()[0] + "\n")  # as if killed after one iteration
    text = write_report(copy).read_text()
    assert "## Runs not included" in text and "| 0 | unfinished | 1 |" in text
    assert text.count("| Pendulum-v1 |") == 3


@pytest.mark.slow
def test_a_bad_run_is_skipped_in_one_line_and_a_corrupt_metrics_line_keeps_the_rows_after_it(tmp_path):
    """`rlpar report` on a sweep with a config.yaml that is not UTF-8, one that is not YAML, one
    that is YAML but not a run's config, and a metrics.jsonl with a corrupt middle line."""
    sweep_dir = tmp_path / "sweep"
    for name in ("good", "latin1", "not_yaml", "not_a_run", "corrupt_line"):
        write_run(sweep_dir / name, seed=len(name), returns=(10.0, 100.0, 200.0, 300.0))
    (sweep_dir / "latin1" / "config.yaml").write_bytes("env: {id: Caf\xe9-v1}\n".encode("latin-1"))
    (sweep_dir / "not_yaml" / "config.yaml").write_text("seed: [1, 2\nworkers: 1\n")
    (sweep_dir / "not_a_run" / "config.yaml").write_text("workers: many\nenv: CartPole-v1\n")
    metrics = sweep_dir / "corrupt_line" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join([lines[0], '{"iteration": 2, "env_st', *lines[2:]]) + "\n")
    proc = subprocess.run([sys.executable, "-m", "rlpar.report", str(sweep_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == [
        f"rlpar.report: skipped run {sweep_dir / 'latin1'}: its config.yaml is not UTF-8 text (byte 13)",
        f"rlpar.report: skipped run {sweep_dir / 'not_a_run'}: its config.yaml is not a run's config (workers is not "
        f"a number, env is not a mapping)",
        f"rlpar.report: skipped run {sweep_dir / 'not_yaml'}: its config.yaml is not YAML (expected ',' or ']', but got "
        f"':' at line 2)",
        f"rlpar.report: {metrics}: line 2 skipped, not JSON (Unterminated string starting at, column 18); the rows "
        f"after it are kept",
    ]
    runs = {run.path.name: run for run in load_runs(sweep_dir, notes=[])}
    assert sorted(runs) == ["corrupt_line", "good"]
    assert [row["iteration"] for row in runs["corrupt_line"].metrics] == [1, 3, 4]
    assert runs["corrupt_line"].status == "finished"
    assert report_csv(sweep_dir)["CartPole-v1"]["seeds"] == "2"


def test_a_metrics_line_cut_short_by_a_kill_at_the_end_is_skipped_without_a_note(tmp_path):
    run = write_run(tmp_path / "run", returns=(1.0, 2.0))
    with open(run / "metrics.jsonl", "a") as handle:
        handle.write('{"iteration": 3, "env_st')
    notes = []
    assert [row["iteration"] for row in load_runs(tmp_path, notes)[0].metrics] == [1, 2] and notes == []


@pytest.mark.parametrize("case", ["empty", "missing", "crashed only"])
def test_report_says_in_one_sentence_that_a_sweep_has_nothing_to_show(tmp_path, case):
    sweep_dir = tmp_path / "sweep"
    if case != "missing":
        sweep_dir.mkdir()
    if case == "crashed only":
        write_run(sweep_dir / "0")
        (sweep_dir / "0" / "metrics.jsonl").write_text("")
    proc = subprocess.run([sys.executable, "-m", "rlpar.report", str(sweep_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    message = proc.stderr.strip()
    assert message.count("\n") == 0 and message.endswith(".")
    expected = {"empty": "holds no run directories", "missing": "does not exist", "crashed only": "holds 1 runs but none has finished"}
    assert expected[case] in message and "nothing to show" in message


@pytest.mark.slow
def test_thresholds_come_from_gymnasium_then_the_run_config_then_the_override(tmp_path):
    write_run(tmp_path / "acrobot", "Acrobot-v1", returns=(-500.0, -150.0, -90.0, -80.0))
    write_run(tmp_path / "mountaincar", "MountainCar-v0", returns=(-200.0, -120.0))
    write_run(tmp_path / "cartpole", "CartPole-v1", returns=(100.0, 460.0, 470.0))
    write_run(tmp_path / "configured", "Pendulum-v1", returns=(-500.0, -160.0), env_extra={"reward_threshold": -170.0})

    rows = report_csv(tmp_path)
    assert (rows["Acrobot-v1"]["threshold"], rows["Acrobot-v1"]["threshold_source"]) == ("-100.0", "Gymnasium")
    assert rows["Acrobot-v1"]["reached"] == "1" and rows["Acrobot-v1"]["steps_to_threshold_mean"] == "3000.0"
    assert (rows["MountainCar-v0"]["threshold"], rows["MountainCar-v0"]["reached"]) == ("-110.0", "0")
    assert (rows["CartPole-v1"]["threshold"], rows["CartPole-v1"]["reached"]) == ("475.0", "0")
    assert (rows["Pendulum-v1"]["threshold"], rows["Pendulum-v1"]["threshold_source"]) == ("-170.0", "run config")
    assert rows["Pendulum-v1"]["reached"] == "1"
    text = (tmp_path / "report.md").read_text()
    assert "| 0/1 (>= -110) |" in text and "MountainCar-v0: -110 (Gymnasium's reward_threshold)" in text

    rows = report_csv(tmp_path, "--threshold", "CartPole-v1=450", "--threshold", "MountainCar-v0=-130")
    assert (rows["CartPole-v1"]["threshold"], rows["CartPole-v1"]["threshold_source"]) == ("450.0", "override")
    assert rows["CartPole-v1"]["reached"] == "1" and rows["CartPole-v1"]["steps_to_threshold_mean"] == "2000.0"
    assert (rows["MountainCar-v0"]["threshold"], rows["MountainCar-v0"]["reached"]) == ("-130.0", "1")

    misspelt = subprocess.run([sys.executable, "-m", "rlpar.report", str(tmp_path), "--threshold", "Cartpole-v1=450"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert misspelt.returncode == 0 and "--threshold Cartpole-v1: no finished run trained 'Cartpole-v1'" in misspelt.stderr
    bad = subprocess.run([sys.executable, "-m", "rlpar.report", str(tmp_path), "--threshold", "CartPole-v1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "expected ENV=NUMBER" in bad.stderr


@pytest.mark.slow
def test_an_env_without_any_threshold_says_so_instead_of_zero_reached(tmp_path):
    write_run(tmp_path / "cliff", "CliffWalking-v1", returns=(-100.0, -13.0))  # Gymnasium registers no threshold
    rows = report_csv(tmp_path)
    assert (rows["CliffWalking-v1"]["threshold"], rows["CliffWalking-v1"]["threshold_source"]) == ("", "none")
    text = (tmp_path / "report.md").read_text()
    assert "| - (no threshold) |" in text and "--threshold CliffWalking-v1=VALUE" in text


@pytest.mark.slow
def test_a_run_with_an_id_and_an_entry_point_is_reported_under_the_entry_point_it_trained(tmp_path):
    # rlpar.envs.factory.make_env builds env.entry_point when both are set
    write_run(tmp_path / "custom", "CartPole-v1", entry_point="my_pkg.envs:MyEnv", returns=(1.0, 500.0))
    write_run(tmp_path / "plain", "CartPole-v1", returns=(1.0, 2.0))
    rows = report_csv(tmp_path, "--threshold", "my_pkg.envs:MyEnv=400")
    assert sorted(rows) == ["CartPole-v1", "my_pkg.envs:MyEnv"]
    assert (rows["my_pkg.envs:MyEnv"]["threshold"], rows["my_pkg.envs:MyEnv"]["reached"]) == ("400.0", "1")
    assert rows["CartPole-v1"]["final_return_mean"] == "2.0"
    # not CartPole's Gymnasium threshold: the class it trained is not CartPole
    assert summary_rows([r for r in load_runs(tmp_path) if r.path.name == "custom"])[0]["threshold"] is None


@pytest.mark.slow
def test_symlinked_run_directories_are_followed_once(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    write_run(elsewhere / "seed1", seed=1, returns=(1.0, 3.0))
    sweep_dir = tmp_path / "sweep"
    write_run(sweep_dir / "seed0", seed=0, returns=(1.0, 5.0))
    (sweep_dir / "seed1").symlink_to(elsewhere / "seed1", target_is_directory=True)
    (sweep_dir / "again").symlink_to(sweep_dir / "seed0", target_is_directory=True)  # the same run twice
    (sweep_dir / "seed0" / "loop").symlink_to(sweep_dir, target_is_directory=True)  # a cycle
    runs = load_runs(sweep_dir)
    assert sorted(r.seed for r in runs) == [0, 1]
    rows = report_csv(sweep_dir)
    assert (rows["CartPole-v1"]["seeds"], rows["CartPole-v1"]["final_return_mean"]) == ("2", "4.0")


def test_the_wall_time_curve_goes_on_to_the_slowest_seeds_end(tmp_path):
    fast = write_run(tmp_path / "fast", seed=0, returns=(0.0, 100.0, 200.0, 300.0), seconds_per_row=1.0)
    slow = write_run(tmp_path / "slow", seed=1, returns=(0.0, 100.0, 200.0, 400.0), seconds_per_row=2.0)
    grid, mean, std = learning_curve(load_runs(tmp_path), x="wall_time_s", points=8)
    assert (grid[0], grid[-1]) == (1.0, 8.0)
    assert mean[-1] == 400.0 and std[-1] == 0.0  # only the slow seed runs past 4 s
    assert mean[0] == 0.0 and std[0] == 0.0
    grid, mean, _ = learning_curve(load_runs(tmp_path), x="env_steps", points=4)
    assert list(grid) == [1000.0, 2000.0, 3000.0, 4000.0] and mean[-1] == 350.0
    assert fast.is_dir() and slow.is_dir()


@pytest.mark.parametrize("envs, shape", [(1, (1, 1)), (2, (1, 2)), (3, (1, 3)), (4, (2, 2)), (6, (2, 3)), (9, (3, 3)), (12, (3, 4))])
def test_the_panels_make_a_grid_that_stays_readable(envs, shape):
    assert grid_shape(envs) == shape


@pytest.mark.slow
def test_twelve_environments_plot_as_a_grid_not_one_long_row(tmp_path):
    sweep_dir = tmp_path / "sweep"
    for env_id in TWELVE_ENVS:
        for seed in (0, 1):
            write_run(sweep_dir / f"{env_id}_s{seed}", env_id, seed=seed, steps_per_row=100_000)
    paths = plot_learning_curves(load_runs(sweep_dir), tmp_path)
    for path in paths:
        height, width, _ = matplotlib.image.imread(path).shape
        assert 1000 < height < 1600 and width < 2800, (path.name, width, height)  # was 13,200 x 480 in one row
    one_env = tmp_path / "one"
    one_env.mkdir()
    height, width, _ = matplotlib.image.imread(plot_learning_curves(load_runs(sweep_dir / "CartPole-v1_s0"), one_env)[0]).shape
    assert height < 500 and width < 1000


def test_labels_read_well():
    assert [plural(1, "worker"), plural(16, "worker"), plural(1, "seed"), plural(3, "seed")] == \
        ["1 worker", "16 workers", "1 seed", "3 seeds"]
    assert [compact_number(v) for v in (0, 500, 2500, 100_000, 150_000, 1_200_000, -200)] == \
        ["0", "500", "2.5k", "100k", "150k", "1.2M", "-200"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scaling.ipynb", "learning_curves.ipynb"])
def test_notebooks_run_top_to_bottom_on_the_sweep(sweep, name, monkeypatch):
    monkeypatch.setenv("RLPAR_SWEEP_DIR", str(sweep))
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) >= 2


@pytest.mark.slow
@pytest.mark.ray
def test_ray_launcher_runs_the_trials_of_a_sweep(tmp_path):
    proc = subprocess.run(
        [sys.executable, "main.py", "-m", "experiment=learning_curves", "hydra/launcher=rlpar_ray",
         "env=cartpole", "seed=0,1", "total_steps=1024", f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Launching 2 jobs on Ray" in proc.stdout + proc.stderr
    text = write_report(tmp_path).read_text()
    assert "| CartPole-v1 | local | 1 | 8 | 2 |" in text


# -- search directories (rlpar.search) ------------------------------------------------------------
# (trial, status, algo.lr, returns, total_steps): one lr per trial; 00003 errored before its first row.
SEARCH_TRIALS = [("12345_00000", "finished", 1e-4, (20.0, 30.0, 60.0, 90.0), 4000),
                 ("12345_00001", "finished", 3e-3, (25.0, 200.0, 400.0, 480.0), 4000),
                 ("12345_00002", "early-stopped", 1e-3, (20.0, 150.0), 4000),
                 ("12345_00003", "errored", 5e-2, (), 4000)]


def write_search_results(directory, rows: list[dict], *, best_trial: str, command: str) -> None:
    """search.csv and best.yaml as rlpar.search writes them (the best: lr 3e-3, final 480)."""
    with open(directory / "search.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    best = {"trial": best_trial, "metric": "episode_return_mean", "final": 480.0, "best": 480.0, "status": "finished",
            "overrides": {"algo.lr": 3e-3}, "command": command}
    (directory / "best.yaml").write_text(yaml.safe_dump(best, sort_keys=False))


def write_search(directory: Path, *, mode="max", pbt=False) -> Path:
    """A search directory as rlpar.search lays it out, by hand: the search's own config.yaml, a run
    directory per trial under trials/, search.csv, best.yaml, and in tune/ a decoy run (Tune's state)."""
    scheduler = "ray.tune.schedulers.pbt.PopulationBasedTraining" if pbt else "ray.tune.schedulers.AsyncHyperBandScheduler"
    search = {"metric": "episode_return_mean", "mode": mode, "space": {"algo": {"lr": {"loguniform": [1e-5, 1e-1]}}},
              "scheduler": {"_target_": scheduler}}
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(yaml.safe_dump({"total_steps": 4000, "env": {"id": "CartPole-v1"}, "search": search}))
    rows = []
    for trial, status, lr, returns, total_steps in SEARCH_TRIALS:
        run = write_run(directory / "trials" / trial, returns=returns or (0.0,), seconds_per_row=0.5,
                        extra={"total_steps": total_steps, "algo": {"lr": lr}, "search": None})
        if not returns:
            (run / "metrics.jsonl").write_text("")
        if pbt and trial == "12345_00000":  # went on from 00001's checkpoint after its 2nd row: steps go back
            metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            for index, row in enumerate(metrics[2:], 2):
                row.update(env_steps=index * 1000, pbt_exploits=1, pbt_donor="12345_00001")
            (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in metrics))
        rows.append({"trial": trial, "status": status, "algo.lr": lr, "final_episode_return_mean": returns[-1] if returns else "",
                     "best_episode_return_mean": (max if mode == "max" else min)(returns) if returns else "",
                     "iterations": len(returns), "env_steps": 1000 * len(returns),
                     "pbt_exploits": int(pbt and trial == "12345_00000"), "run_dir": f"trials/{trial}"})
    write_search_results(directory, rows, best_trial="12345_00001", command="python main.py total_steps=4000 algo.lr=0.003")
    # Tune's own copy of a trial: a run directory to every look, which must never be reported
    write_run(directory / "tune" / "12345_00009", returns=(9999.0,), extra={"algo": {"lr": 0.5}})
    return directory


def report_of(directory: Path) -> tuple[str, list[dict]]:
    """`python -m rlpar.report` on `directory`, as a user runs it: report.md and results.csv."""
    proc = subprocess.run([sys.executable, "-m", "rlpar.report", str(directory)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(directory / "results.csv") as handle:
        return (directory / "report.md").read_text(), list(csv.DictReader(handle))


@pytest.mark.slow
def test_a_search_is_reported_trial_by_trial_best_first(tmp_path):
    text, rows = report_of(write_search(tmp_path / "search"))
    # the search's own config.yaml is not a run, Tune's state is not looked into
    assert "crashed" not in text and "Runs not included" not in text and "| . |" not in text
    assert "12345_00009" not in text and "9999" not in text and "12345_00009" not in {r["trial"] for r in rows}
    # a row per trial, best final return first, each with its own learning rate: no seeds averaged
    table = [line.split(" | ") for line in text.splitlines() if line.startswith("| 12345_")]
    assert [(cells[0], cells[1], cells[2]) for cells in table] == [
        ("| 12345_00001", "finished", "0.003"), ("| 12345_00002", "early-stopped", "0.001"),
        ("| 12345_00000", "finished", "0.0001"), ("| 12345_00003", "errored", "0.05")]
    assert [(r["trial"], float(r["algo.lr"]), r["status"]) for r in rows] == [
        ("12345_00001", 3e-3, "finished"), ("12345_00002", 1e-3, "early-stopped"), ("12345_00000", 1e-4, "finished"),
        ("12345_00003", 5e-2, "errored")]
    assert rows[0]["final_episode_return_mean"] == "480.0" and rows[0]["env"] == "CartPole-v1"
    assert "Trials by status: 2 finished, 1 early-stopped, 1 errored." in text
    assert "`12345_00001` (finished; algo.lr=0.003)" in text
    assert "python main.py total_steps=4000 algo.lr=0.003" in text
    assert "PBT exploits" not in text
    png = tmp_path / "search" / "search_trials.png"
    assert "![search_trials](search_trials.png)" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert not (tmp_path / "search" / "learning_curves_steps.png").exists()  # a curve averaged over trials


def test_a_searchs_trials_are_its_runs_and_nothing_else(tmp_path):
    directory = write_search(tmp_path / "outputs" / "search")
    write_run(tmp_path / "outputs" / "plain_run")
    assert sorted(r.path.name for r in load_runs(tmp_path / "outputs")) == [
        "12345_00000", "12345_00001", "12345_00002", "12345_00003", "plain_run"]
    (directory / "search.csv").unlink()  # under way: only the search's config says it is one
    assert len(load_runs(directory)) == 4


@pytest.mark.slow
def test_a_search_under_way_and_mode_min_rank_from_the_trials_own_configs(tmp_path):
    directory = write_search(tmp_path / "search", mode="min")
    (directory / "search.csv").unlink()
    (directory / "best.yaml").unlink()
    text, rows = report_of(directory)
    assert [(r["trial"], float(r["algo.lr"]), r["status"]) for r in rows] == [
        ("12345_00000", 1e-4, "finished"), ("12345_00002", 1e-3, "unfinished"), ("12345_00001", 3e-3, "finished"),
        ("12345_00003", 5e-2, "crashed")]  # lowest final return first; statuses as the runs tell
    assert "No best.yaml yet" in text and "so far: `12345_00000`" in text
    assert "Trials by status: 2 finished, 1 unfinished, 1 crashed." in text
    assert (directory / "search_trials.png").is_file()


@pytest.mark.slow
def test_a_population_based_search_shows_the_exploits(tmp_path):
    directory = write_search(tmp_path / "search", pbt=True)
    text, rows = report_of(directory)
    assert "| PBT exploits |" in text and "Population-based training" in text
    assert {r["trial"]: r["pbt_exploits"] for r in rows}["12345_00000"] == "1"
    assert (directory / "search_trials.png").is_file()


def test_a_search_with_no_trials_says_so_in_one_sentence(tmp_path):
    directory = tmp_path / "search"
    directory.mkdir()
    (directory / "config.yaml").write_text(yaml.safe_dump({"search": {"metric": "episode_return_mean"}}))
    proc = subprocess.run([sys.executable, "-m", "rlpar.report", str(directory)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "has no trials" in proc.stderr and "nothing to show" in proc.stderr
