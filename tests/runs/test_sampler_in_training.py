"""benchmarks/sampler_in_training.py on a tiny run: its figure is the env steps of iterations 2 on
over their summed time_sample_s, against the raw rates measured around the run; and the same in
one process, the raw env stepped between iterations."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "sampler_in_training.py"


@pytest.mark.slow
def test_the_figure_counts_iterations_two_on_against_the_raw_rates_around_the_run():
    # 64 environments x 32 steps (the CartPole preset's shortest rollout) = 2,048 steps an iteration: 4 iterations
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "total_steps=8192", "--raw-rounds", "2", "--raw-steps", "8", "--in-process"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == 1
    raw_before, raw_after, rate, steps, sample_s, of_mean, of_faster = (
        float(cell.strip().rstrip("%").replace(",", "")) for cell in rows[0][1:]
    )
    assert steps == 3 * 2048
    assert rate == pytest.approx(steps / sample_s, rel=0.01)  # time_sample_s as printed, 4 digits
    assert of_mean == pytest.approx(100 * rate / ((raw_before + raw_after) / 2), abs=0.1)
    assert of_faster == pytest.approx(100 * rate / max(raw_before, raw_after), abs=0.1)
    assert "RESULT sampling in training / raw Gymnasium: median" in done.stdout
    interleaved = re.search(r"sampling ([\d,]+) steps/s, raw ([\d,]+) steps/s: ([\d.]+)%", done.stdout)
    sampling, raw = (float(interleaved[i].replace(",", "")) for i in (1, 2))
    assert float(interleaved[3]) == pytest.approx(100 * sampling / raw, abs=0.1)
