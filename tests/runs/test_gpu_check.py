"""benchmarks/gpu_check.py, the GPU machine's one script, dry-run on this CPU: every run it
makes there runs here with hardware=cpu and tiny budgets, and its table comes out whole."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def dry_run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--cpu-dry-run", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.ray
def test_the_dry_run_makes_every_run_and_fills_the_table():
    done = dry_run(timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| run ")}
    expected = {"PPO CartPole, compiled", "PPO Pendulum, compiled", "IMPALA Pong, Nature CNN", "DQN CartPole",
                "SAC Pendulum", "PPO CartPole, central inference", "PPO CartPole, bf16", "PPO CartPole, fp16",
                "IMPALA Pong, distributed, central inference"}
    assert set(rows) == expected
    for name, (steps_s, frames_s, learner, *_rest) in rows.items():
        assert float(steps_s.replace(",", "")) > 0, name
    assert re.fullmatch(r"MLP: [\d,]+", rows["PPO CartPole, compiled"][2])
    assert re.fullmatch(r"Nature CNN: [\d,]+", rows["IMPALA Pong, Nature CNN"][2])
    assert float(rows["IMPALA Pong, Nature CNN"][1].replace(",", "")) > 0  # frames/s
    assert f"{len(expected)} runs passed on hardware=cpu" in done.stdout


@pytest.mark.slow
def test_a_failing_run_is_reported_loudly_and_the_others_still_run():
    """One call on a lent GPU machine must show every failure: the script goes on past a failing
    run (here both fail their validation), prints each with its output, and exits 1 naming them."""
    done = dry_run("--only", "DQN", "SAC", "--", "algo.lr=-1", timeout=120)
    assert done.returncode == 1
    assert "DQN CartPole FAILED (exit 2)" in done.stdout and "SAC Pendulum FAILED (exit 2)" in done.stdout
    assert "algo.lr" in done.stdout  # each failing run's own message
    assert "0 runs passed on hardware=cpu" in done.stdout
    assert "2 FAILED: DQN CartPole, SAC Pendulum" in done.stderr
