"""A tiny sweep end to end: Hydra multirun, the report, its plots and the notebooks."""

import csv
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from rlpar.report import write_report

ROOT = Path(__file__).resolve().parents[1]


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


def test_report_lists_unfinished_runs_instead_of_hiding_them(sweep, tmp_path):
    import shutil

    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    metrics = copy / "0" / "metrics.jsonl"  # local, 1 worker: two iterations of 1,024 steps
    metrics.write_text(metrics.read_text().splitlines()[0] + "\n")  # as if killed after one iteration
    text = write_report(copy).read_text()
    assert "## Runs not included" in text and "| 0 | unfinished | 1 |" in text
    assert text.count("| Pendulum-v1 |") == 3


def test_report_refuses_an_empty_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rlpar.report", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "no run directories" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", ["scaling.ipynb", "learning_curves.ipynb"])
def test_notebooks_run_top_to_bottom_on_the_sweep(sweep, name, monkeypatch):
    monkeypatch.setenv("RLPAR_SWEEP_DIR", str(sweep))
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) >= 2


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
