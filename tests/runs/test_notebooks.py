"""The notebooks run top to bottom with their defaults on a fresh clone (experiments/results/ holds the
runs), say one sentence about a directory with nothing to show, and the search notebook shows a
search's trials; the committed results are small and their reports agree with their runs."""

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from rlpar.analysis import load_runs, scaling_rows, summary_rows
from tests.runs.test_report import write_run, write_search_results

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
RESULTS = ROOT / "experiments" / "results"


def execute(name: str) -> list[dict]:
    """notebooks/<name> run as Jupyter runs it (from notebooks/); the outputs of all its code cells."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert not errors, errors
    return outputs


def printed(outputs) -> str:
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream")


def shown(outputs, kind: str) -> list[str]:
    """What display() showed as `kind` (text/markdown, text/html, image/png)."""
    return [o["data"][kind] for o in outputs if kind in o.get("data", {})]


def committed_run_dirs(preset: str) -> list[Path]:
    return sorted(p.parent for p in (RESULTS / preset / "runs").glob("*/config.yaml"))


@pytest.mark.slow
def test_learning_curves_notebook_shows_the_committed_runs_by_default(monkeypatch):
    monkeypatch.delenv("RLPAR_SWEEP_DIR", raising=False)
    outputs = execute("learning_curves.ipynb")
    assert "6 runs: {'finished': 6, 'unfinished': 0, 'crashed': 0}" in printed(outputs)
    table = shown(outputs, "text/markdown")[0]
    assert "| CartPole-v1 | local | 1 | 8 | 3 |" in table and "| Pendulum-v1 | local | 1 | 8 | 3 |" in table
    assert len(shown(outputs, "image/png")) == 2  # against env steps and against wall time
    assert "seeds reached 475" in printed(outputs)
    assert "episode_return_mean" in shown(outputs, "text/html")[0]  # one run's metrics as a pandas table


@pytest.mark.slow
def test_scaling_notebook_shows_the_committed_runs_by_default(monkeypatch):
    monkeypatch.delenv("RLPAR_SWEEP_DIR", raising=False)
    outputs = execute("scaling.ipynb")
    table = shown(outputs, "text/markdown")[0]
    assert sorted(re.findall(r"\| Pendulum-v1 \| (\w+) \| (\d+) \|", table)) == sorted(
        (mode, str(workers)) for mode in ("local", "multiprocess", "distributed") for workers in (1, 2, 4, 8, 16))
    assert len(shown(outputs, "image/png")) == 2  # env steps/s and efficiency against workers
    assert "Pendulum-v1: fastest is" in printed(outputs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["learning_curves.ipynb", "scaling.ipynb"])
@pytest.mark.parametrize("case", ["missing", "empty"])
def test_a_sweep_with_nothing_to_show_gets_one_sentence(name, case, tmp_path, monkeypatch):
    sweep_dir = tmp_path / "sweep"
    if case == "empty":
        sweep_dir.mkdir()
    monkeypatch.setenv("RLPAR_SWEEP_DIR", str(sweep_dir))
    outputs = execute(name)
    lines = printed(outputs).strip().splitlines()
    assert lines[0] == str(sweep_dir)  # the first cell names the directory
    assert len(lines) == 2 and "nothing to show" in lines[1]
    assert {"missing": "does not exist", "empty": "holds no run directories"}[case] in lines[1]
    assert not shown(outputs, "image/png") and not shown(outputs, "text/markdown")


def write_search(directory: Path) -> Path:
    """A search directory as rlpar.search lays it out: three trials of a learning-rate search, the middle one best."""
    rows = []
    for index, (lr, returns) in enumerate([(1e-4, (20.0, 30.0, 40.0)), (3e-3, (25.0, 200.0, 480.0)), (1e-3, (20.0, 90.0, 150.0))]):
        trial = f"trial_{index:05d}"
        write_run(directory / "trials" / trial, returns=returns, seconds_per_row=0.5 * (index + 1))
        rows.append({"trial": trial, "status": "finished", "algo.lr": lr, "final_episode_return_mean": returns[-1],
                     "best_episode_return_mean": max(returns), "iterations": 3, "env_steps": 3000, "run_dir": f"trials/{trial}"})
    write_search_results(directory, rows, best_trial="trial_00001", command="python main.py algo.lr=0.003")
    return directory


@pytest.mark.slow
def test_search_notebook_plots_the_committed_search_on_a_fresh_clone(monkeypatch):
    monkeypatch.delenv("RLPAR_SEARCH_DIR", raising=False)
    if list((ROOT / "outputs").rglob("search.csv")) if (ROOT / "outputs").is_dir() else []:
        pytest.skip("outputs/ holds a search of this clone's own, which the notebook opens first")
    outputs = execute("search.ipynb")
    assert "4 trials" in printed(outputs) and str(RESULTS / "search") in printed(outputs)
    assert len(shown(outputs, "image/png")) == 1  # each trial's metric against env steps and wall time


@pytest.mark.slow
def test_search_notebook_shows_every_trial_and_the_best_configuration(tmp_path, monkeypatch):
    monkeypatch.setenv("RLPAR_SEARCH_DIR", str(write_search(tmp_path / "search")))
    outputs = execute("search.ipynb")
    text = printed(outputs)
    assert "3 trials (finished); best on episode_return_mean: trial_00001" in text
    table = shown(outputs, "text/html")[0]
    assert [table.index(f"trial_0000{i}") for i in (1, 2, 0)] == sorted(table.index(f"trial_0000{i}") for i in range(3))
    assert "best_episode_return_mean" in table  # search.csv, best final return first
    assert len(shown(outputs, "image/png")) == 1  # the trials against env steps and wall time
    assert "command: python main.py algo.lr=0.003" in text  # best.yaml


def test_a_trial_restarted_from_another_trials_checkpoint_is_drawn_with_a_gap():
    from rlpar.analysis.plots import _broken_at_exploits

    rows = [{"env_steps": 100, "pbt_exploits": 0, "r": 1.0}, {"env_steps": 200, "pbt_exploits": 0, "r": 2.0},
            {"env_steps": 150, "pbt_exploits": 1, "r": 9.0}, {"env_steps": 250, "pbt_exploits": 1, "r": 9.5}]
    xs, ys = _broken_at_exploits(rows, "env_steps", "r")
    assert [str(x) for x in xs] == ["100", "200", "nan", "150", "250"] and str(ys[2]) == "nan"


@pytest.mark.slow
@pytest.mark.parametrize("case", ["missing", "no trials"])
def test_a_search_with_nothing_to_show_gets_one_sentence(case, tmp_path, monkeypatch):
    search_dir = tmp_path / "search"
    if case == "no trials":
        (search_dir / "trials").mkdir(parents=True)
        (search_dir / "search.csv").write_text("trial,status\n")
    monkeypatch.setenv("RLPAR_SEARCH_DIR", str(search_dir))
    outputs = execute("search.ipynb")
    lines = printed(outputs).strip().splitlines()
    assert len(lines) == 2 and "nothing to show" in lines[1]
    assert not shown(outputs, "image/png")


@pytest.mark.slow
def test_the_readme_pandas_example_runs_with_the_requirements():
    readme = (NOTEBOOKS / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks and "pandas" in blocks[0]
    proc = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    requirements = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^pandas==", requirements, re.M)


@pytest.mark.parametrize("preset, runs", [("learning_curves", 6), ("scaling", 15)])
def test_committed_results_are_small_run_files_that_agree_with_their_report(preset, runs):
    run_dirs = committed_run_dirs(preset)
    assert len(run_dirs) == runs
    for run_dir in run_dirs:
        assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "metrics.jsonl"]
    assert sum(p.stat().st_size for d in run_dirs for p in d.iterdir()) < 2_000_000
    loaded = load_runs(RESULTS / preset)
    assert all(r.status == "finished" for r in loaded)
    expected = scaling_rows(summary_rows(loaded))
    with open(RESULTS / preset / "results.csv") as handle:
        written = list(csv.DictReader(handle))
    assert [(r["env"], r["mode"], int(r["workers"]), float(r["fps_mean"]), float(r["final_return_mean"])) for r in written] == \
        [(r["env"], r["mode"], r["workers"], pytest.approx(r["fps_mean"]), pytest.approx(r["final_return_mean"])) for r in expected]
    assert f"from {runs} runs ({runs} finished)" in (RESULTS / preset / "report.md").read_text()
