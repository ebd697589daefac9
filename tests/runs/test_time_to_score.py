"""benchmarks/time_to_score.py on two tiny CartPole sides: a run is stopped at its first row at
the score, and one that never gets there is reported as not reaching it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "time_to_score.py"


@pytest.mark.slow
def test_runs_stop_at_the_score_and_a_run_that_never_reaches_it_says_so():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--score", "60", "--seeds", "0", "--max-load", "100",
         "--side", "total_steps=60000", "--side", "total_steps=3072 algo.lr=1e-12"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {cells[0]: cells for cells in
            ([c.strip() for c in line.split("|")[1:-1]] for line in done.stdout.splitlines() if line.startswith("| `"))}
    reached = rows["`total_steps=60000`"]
    steps, seconds, startup = int(reached[2].replace(",", "")), float(reached[3]), float(reached[4])
    last_steps = int(reached[5].split(", ")[0].replace(",", ""))
    assert 0 < steps < 60000 and 0 < startup < seconds
    assert steps <= last_steps < 60000, "not stopped at the score"  # SIGTERM: an iteration or two after it
    never = rows["`total_steps=3072 algo.lr=1e-12`"]  # a policy that never learns: about 22 steps an episode
    assert never[2] == "-" and never[3] == "not reached" and never[5].startswith("3,072, ")
    assert re.search(r"RESULT seed 0: side 0 first", done.stdout)
