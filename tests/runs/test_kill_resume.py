"""Real stops (SIGKILL mid-run or mid-checkpoint, Ctrl-C, two signals at once), then
`main.py resume=<run_dir>`: no iteration lost or repeated, and with parallel=local the resumed run
is the uninterrupted one, number for number. Everything through the command line."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlpar.runtime.checkpoint import CheckpointError, latest_valid_checkpoint, list_checkpoints, load_checkpoint
from tests.defaults import STEPS_PER_ITERATION
from tests.processes import default_sigint, rows_while_stopped, wait_until

pytestmark = pytest.mark.slow  # each test starts processes and waits for a signal's effect

ROOT = Path(__file__).resolve().parents[2]
TIMING = ("wall_time_s", "fps", "learner_wait_fraction", "actor_idle_fraction", "inserts_per_s", "samples_per_s")  # wall-clock fields, which differ between runs (as do time_*)


def cli(*overrides, run_dir: Path) -> list[str]:
    return [sys.executable, "main.py", *overrides, "progress=false", f"hydra.run.dir={run_dir}"]


def run_cli(*overrides, run_dir: Path) -> None:
    proc = subprocess.run(cli(*overrides, run_dir=run_dir), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def resume(run_dir: Path, tmp_path: Path) -> None:
    """What a user types after a crash; Hydra's own output goes elsewhere, metrics to run_dir."""
    run_cli(f"resume={run_dir}", run_dir=tmp_path / "hydra_of_resume")


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def deterministic(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in TIMING and not k.startswith("time_")}


def complete_rows(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def checkpoint_iterations(run_dir: Path) -> list[int]:
    return [int(p.name[len("checkpoint_"):-len(".pt")]) for p in list_checkpoints(run_dir / "checkpoints")]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=30)  # also closes its pipes


ITERATIONS, EVERY = 60, 5
CONFIG = (f"total_steps={ITERATIONS * STEPS_PER_ITERATION}", f"checkpoint.every={EVERY}")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[dict]:
    """Metrics of CONFIG run from start to end, what every interrupted-then-resumed run must equal."""
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    run_cli(*CONFIG, run_dir=run_dir)
    reference = rows(run_dir)
    assert [r["iteration"] for r in reference] == list(range(1, ITERATIONS + 1))
    return reference


def start_and_wait_between_checkpoints(run_dir: Path, config=CONFIG) -> subprocess.Popen:
    """A CONFIG run, once it has logged 10+ rows, two iterations past its newest checkpoint: the
    next one is not due for three more iterations (~75 ms unloaded), ample for a signal to land."""
    proc = subprocess.Popen(cli(*config, run_dir=run_dir), cwd=ROOT, preexec_fn=default_sigint,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    try:
        wait_until(lambda: (n := complete_rows(metrics)) >= 10 and n % EVERY == 2, proc, 120, "10 logged rows", poll_s=0.002)
    except BaseException:
        stop(proc)
        raise
    return proc


def assert_resumes_to(run_dir: Path, tmp_path: Path, uninterrupted: list[dict]) -> None:
    """`resume=` completes the run; it then holds every iteration once, each equal to the
    uninterrupted run's on everything but wall-clock times (floats compared exactly)."""
    iterations = len(uninterrupted)
    checkpointed = checkpoint_iterations(run_dir)[-1]
    logged_before = (run_dir / "metrics.jsonl").read_text().splitlines()

    resume(run_dir, tmp_path)

    resumed = rows(run_dir)
    assert [r["iteration"] for r in resumed] == list(range(1, iterations + 1))
    for got, expected in zip(resumed, uninterrupted):
        assert deterministic(got) == deterministic(expected), f"iteration {got['iteration']}"
    # Rows up to the checkpoint are the ones logged before the stop, kept as they were.
    assert (run_dir / "metrics.jsonl").read_text().splitlines()[:checkpointed] == logged_before[:checkpointed]
    path, state = latest_valid_checkpoint(run_dir)
    assert state["iteration"] == iterations and path.name == f"checkpoint_{iterations:08d}.pt"


def last_logged(run_dir: Path) -> int:
    metrics = run_dir / "metrics.jsonl"
    return json.loads(metrics.read_text().splitlines()[complete_rows(metrics) - 1])["iteration"]


def test_sigkill_between_checkpoints_then_resume_equals_an_uninterrupted_run(tmp_path, uninterrupted):
    kill_between_checkpoints_and_resume(tmp_path, uninterrupted, CONFIG)


def test_recurrent_policy_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path):
    """An LSTM policy: the workers' recurrent states travel in checkpoints with the environments."""
    config = (*CONFIG, "model.recurrent=lstm", "model.recurrent_size=16")
    reference_dir = tmp_path / "uninterrupted"
    run_cli(*config, run_dir=reference_dir)
    kill_between_checkpoints_and_resume(tmp_path, rows(reference_dir), config)


def test_two_policies_sigkill_then_resume_continue_every_policy(tmp_path):
    """IPPO with separate policies for two agent groups (a scout, two runners that come and go):
    every policy's optimiser, statistics and shuffles travel in its own checkpoint section, and
    each continues its iterations without a gap or a repeat."""
    config = (*CONFIG, "env=pettingzoo", "algo=ippo", "env.entry_point=tests.multi_agent_envs:relay",
              f"algo.rollout_length={STEPS_PER_ITERATION // 8}")
    reference_dir = tmp_path / "uninterrupted"
    run_cli(*config, run_dir=reference_dir)
    reference = rows(reference_dir)
    assert [(r["scout/policy_version"], r["runner/policy_version"]) for r in reference] == [
        (i, i) for i in range(1, ITERATIONS + 1)]
    kill_between_checkpoints_and_resume(tmp_path, reference, config)
    _, state = latest_valid_checkpoint(tmp_path / "killed")
    assert {name: section["version"] for name, section in state["algorithm"]["policies"].items()} == {
        "scout": ITERATIONS, "runner": ITERATIONS}


MULTI_AGENT_ITERATIONS = 20  # a rollout of 16 steps: episodes of 25 cycles span checkpoints


@pytest.mark.parametrize(("algo", "env"), [
    ("mappo", "env.id=mpe2.simple_spread_v3"),
    ("ippo", "env.id=mpe2.simple_spread_v3"),
    ("mappo", "env.entry_point=mpe2.simple_spread_v3:env"),  # its AEC API, converted to parallel
    ("ippo", "env.entry_point=mpe2.simple_spread_v3:env"),
], ids=["mappo", "ippo", "mappo-aec", "ippo-aec"])
def test_simple_spread_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path, algo, env):
    """PettingZoo's MPE environments pickle only their constructor's arguments (EzPickle): a
    checkpoint must still hold them as they were, mid-episode, for every agent."""
    steps = MULTI_AGENT_ITERATIONS * 2 * 16  # environments x rollout
    config = (f"total_steps={steps}", f"checkpoint.every={EVERY}", "env=pettingzoo", env, f"algo={algo}",
              "envs_per_worker=2", "algo.rollout_length=16", "algo.epochs=2", "algo.minibatches=2")
    reference_dir = tmp_path / "uninterrupted"
    run_cli(*config, run_dir=reference_dir)
    reference = rows(reference_dir)
    assert [r["env_steps"] for r in reference] == [32 * i for i in range(1, MULTI_AGENT_ITERATIONS + 1)]
    kill_between_checkpoints_and_resume(tmp_path, reference, config)


def kill_between_checkpoints_and_resume(tmp_path, uninterrupted, config) -> None:
    run_dir = tmp_path / "killed"
    victim = start_and_wait_between_checkpoints(run_dir, config)
    try:
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait(30) == -signal.SIGKILL
    finally:
        stop(victim)
    checkpointed = checkpoint_iterations(run_dir)[-1]
    assert checkpointed % EVERY == 0 and checkpointed < last_logged(run_dir) < len(uninterrupted)  # rows to drop
    assert_resumes_to(run_dir, tmp_path, uninterrupted)


def test_sigint_then_resume_equals_an_uninterrupted_run(tmp_path, uninterrupted):
    """Ctrl-C finishes the iteration under way, checkpoints it and stops; the resume is exact
    (a checkpoint taken mid-iteration held a half-updated learner, or environments stepped into
    the next rollout, under the previous iteration's number)."""
    run_dir = tmp_path / "interrupted"
    proc = start_and_wait_between_checkpoints(run_dir)
    try:
        logged = rows_while_stopped(proc, run_dir / "metrics.jsonl", lambda: proc.send_signal(signal.SIGINT))
        out, err = proc.communicate(timeout=300)
    finally:
        stop(proc)
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    stopped_at = last_logged(run_dir)
    assert checkpoint_iterations(run_dir)[-1] == stopped_at < ITERATIONS
    assert stopped_at <= logged + 1  # the iteration under way, then the stop
    assert f"interrupted at iteration {stopped_at}: checkpoint" in out
    assert_resumes_to(run_dir, tmp_path, uninterrupted)


def test_second_signal_stops_at_once_without_a_checkpoint_then_resume_is_exact(tmp_path, uninterrupted):
    """Two signals in one iteration: the second stops mid-iteration, so nothing is saved, and the
    resume starts from the newest regular checkpoint. (Delivered together on SIGCONT: SIGINT,
    then SIGTERM, which main.py turns into the same interrupt.)"""
    run_dir = tmp_path / "forced"
    proc = start_and_wait_between_checkpoints(run_dir)
    try:
        proc.send_signal(signal.SIGSTOP)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert "without a checkpoint" in out
    checkpointed = checkpoint_iterations(run_dir)[-1]
    assert checkpointed % EVERY == 0 and checkpointed < last_logged(run_dir)
    assert_resumes_to(run_dir, tmp_path, uninterrupted)


SAVE_A_BIG_CHECKPOINT = """
import sys
import torch
from rlpar.runtime.checkpoint import Checkpointer

run_dir, iteration, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
state = {"iteration": iteration, "blob": torch.ones(size, dtype=torch.uint8)}
Checkpointer(run_dir=run_dir, every=3, keep=3).save(state, iteration)
"""


def test_sigkill_inside_checkpointer_save_and_a_truncated_checkpoint_are_skipped(tmp_path):
    run_dir = tmp_path / "run"
    iterations = 16
    run_cli(f"total_steps={iterations * STEPS_PER_ITERATION}", "checkpoint.every=3", "checkpoint.keep=3", run_dir=run_dir)
    assert checkpoint_iterations(run_dir) == [12, 15, 16]
    original = rows(run_dir)

    # A checkpoint big enough (256 MB) that its write takes a while; killed while the file grows.
    partial = run_dir / "checkpoints" / "checkpoint_00000017.pt.tmp"
    size = 256 * 2**20
    saver = subprocess.Popen([sys.executable, "-c", SAVE_A_BIG_CHECKPOINT, str(run_dir), "17", str(size)], cwd=ROOT)
    try:
        sizes = []

        def growing() -> bool:
            try:
                sizes.append(partial.stat().st_size)
            except FileNotFoundError:
                return False
            return len(sizes) >= 2 and 4 * 2**20 <= sizes[-2] < sizes[-1] < size

        wait_until(growing, saver, 120, "a growing checkpoint_00000017.pt.tmp", poll_s=0.002)
        os.kill(saver.pid, signal.SIGKILL)
        assert saver.wait(30) == -signal.SIGKILL
    finally:
        stop(saver)
    try:
        assert 0 < partial.stat().st_size < size
        assert not (run_dir / "checkpoints" / "checkpoint_00000017.pt").exists()
        assert checkpoint_iterations(run_dir) == [12, 15, 16]  # the partial file is no checkpoint
        path, state = latest_valid_checkpoint(run_dir)
        assert path.name == "checkpoint_00000016.pt" and state["iteration"] == 16

        # A final-named file cut short (e.g. a disk that lost its tail): the previous one is used.
        newest = run_dir / "checkpoints" / "checkpoint_00000016.pt"
        os.truncate(newest, newest.stat().st_size // 2)
        with pytest.raises(CheckpointError):
            load_checkpoint(newest)
        path, state = latest_valid_checkpoint(run_dir)
        assert path.name == "checkpoint_00000015.pt" and state["iteration"] == 15

        resume(run_dir, tmp_path)
    finally:
        partial.unlink(missing_ok=True)

    resumed = rows(run_dir)
    assert [r["iteration"] for r in resumed] == list(range(1, iterations + 1))
    for got, expected in zip(resumed, original):
        assert deterministic(got) == deterministic(expected), f"iteration {got['iteration']}"
    path, state = latest_valid_checkpoint(run_dir)
    assert path.name == "checkpoint_00000016.pt" and state["iteration"] == 16
    assert checkpoint_iterations(run_dir) == [12, 15, 16]
