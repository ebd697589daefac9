"""Real failures in one machine's workers: environments that raise, processes killed or stopped."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlpar.runtime.build import build_trainer
from rlpar.sampling.errors import WorkerPoolError
from tests.processes import running

ROOT = Path(__file__).resolve().parents[2]
FLAKY = ("env.entry_point=tests.faulty_envs:FlakyCartPole", "+env.kwargs.fail_every=30", "env.max_episode_steps=500")
MULTIPROCESS = ("parallel=multiprocess", "workers=4", "envs_per_worker=2", "algo.rollout_length=32")


def train(trainer, iterations):
    return [trainer.train() for _ in range(iterations)]


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [("algo.rollout_length=32",), MULTIPROCESS], ids=["local", "multiprocess"])
def test_environment_exception_rebuilds_that_environment_and_is_counted(make_cfg, tmp_path, parallel):
    trainer = build_trainer(make_cfg(*FLAKY, *parallel, run_dir=tmp_path / "flaky"))
    try:
        rows = train(trainer, 6)
    finally:
        trainer.close()
    # 8 environments x 32 steps per iteration, one failure per 30 steps of each: 8 per iteration.
    assert rows[-1]["env_restarts"] >= 6 * 8 - 8
    assert rows[-1]["worker_restarts"] == 0 and rows[-1]["live_workers"] == (4 if parallel == MULTIPROCESS else 1)
    assert rows[-1]["env_steps"] == 6 * 256
    assert all(np.isfinite(r["loss_value"]) for r in rows)
    assert rows[-1]["episodes"] > 0


def test_failing_step_is_a_truncation_at_the_last_good_observation(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg(*FLAKY, "workers=1", "envs_per_worker=1", "algo.rollout_length=64",
                                     "algo.minibatch_size=64", run_dir=tmp_path / "one"))
    try:
        batch = trainer.algorithm.sampler.sample(trainer.algorithm.get_weights(), 0)
    finally:
        trainer.close()
    # The 30th step raises; autoreset steps after episode ends push it past index 29.
    t = int(np.flatnonzero(batch.truncated[:, 0])[0])
    assert 29 <= t < 60
    assert batch.rewards[t, 0] == 0.0 and not batch.terminated[t, 0]
    np.testing.assert_array_equal(batch.obs[t + 1, 0], batch.obs[t, 0])  # bootstrap from the last good state
    assert not batch.valid[t + 1, 0]  # the autoreset step that starts the rebuilt environment
    assert batch.env_restarts >= 1


def multiprocess_trainer(make_cfg, tmp_path, *extra):
    return build_trainer(make_cfg(*MULTIPROCESS, *extra, run_dir=tmp_path / "mp"))


@pytest.mark.parametrize("sync_mode", ["blocking", "non_blocking"])
def test_killed_worker_process_is_replaced_and_training_goes_on(make_cfg, tmp_path, sync_mode):
    trainer = multiprocess_trainer(make_cfg, tmp_path, f"parallel.sync_mode={sync_mode}")
    try:
        train(trainer, 2)
        victim = trainer.sampler.worker_pids()[2]
        os.kill(victim, signal.SIGKILL)
        rows = train(trainer, 8)
        assert not running(victim)
        assert victim not in trainer.sampler.worker_pids()
    finally:
        trainer.close()
    assert rows[-1]["worker_restarts"] == 1
    assert rows[-1]["live_workers"] == 4
    if sync_mode == "blocking":
        # The round the worker died in trained on the other three workers' rollouts only.
        assert rows[0]["batches_this_iter"] == 3
        assert rows[0]["env_steps"] - 2 * 256 == 3 * 64
    assert all(np.isfinite(r["loss_value"]) for r in rows)


@pytest.mark.slow
def test_stopped_worker_is_timed_out_killed_and_replaced(make_cfg, tmp_path):
    trainer = multiprocess_trainer(make_cfg, tmp_path, "parallel.sample_timeout_s=2")
    try:
        train(trainer, 1)
        victim = trainer.sampler.worker_pids()[1]
        os.kill(victim, signal.SIGSTOP)
        stalled = trainer.train()
        rows = [stalled, *train(trainer, 3)]
    finally:
        trainer.close()
    assert not running(victim)
    assert rows[0]["worker_restarts"] == 1 and rows[0]["batches_this_iter"] == 3
    assert rows[-1]["live_workers"] == 4


def test_workers_dying_again_and_again_stop_the_run_with_a_clear_error(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg(
        "env.entry_point=tests.faulty_envs:SuicidalCartPole", "+env.kwargs.die_after=40",
        *MULTIPROCESS, "parallel.max_worker_restarts=3", run_dir=tmp_path / "dying",
    ))
    try:
        with pytest.raises(WorkerPoolError, match=r"max_worker_restarts=3.*exit code 17"):
            train(trainer, 20)
    finally:
        trainer.close()


def test_workers_that_can_never_start_stop_the_run_within_seconds_not_after_max_restarts(make_cfg, tmp_path, caplog):
    trainer = build_trainer(make_cfg(
        "env.entry_point=tests.faulty_envs:UnbuildableCartPole", f"+env.kwargs.only_in={os.getpid()}",
        *MULTIPROCESS, run_dir=tmp_path / "never",
    ))
    try:
        with pytest.raises(WorkerPoolError, match=r"no worker could start \(3 starts failed, none came up\); last: "
                                                  r"worker \d: raised RuntimeError: this environment cannot be built"):
            trainer.train()
        assert trainer.sampler.worker_restarts <= 2
    finally:
        trainer.close()
    assert len([r for r in caplog.records if "replacing it" in r.getMessage()]) <= 2


def test_a_worker_whose_replacements_cannot_start_stops_the_run_after_three_tries(make_cfg, tmp_path):
    marker = tmp_path / "unbuildable"
    trainer = build_trainer(make_cfg(
        "env.entry_point=tests.faulty_envs:UnbuildableCartPole", f"+env.kwargs.unless={marker}", *MULTIPROCESS,
        run_dir=tmp_path / "again",
    ))
    try:
        train(trainer, 1)
        marker.touch()  # from now on no worker can build its environments
        os.kill(trainer.sampler.worker_pids()[2], signal.SIGKILL)
        with pytest.raises(WorkerPoolError, match=r"worker 2 failed to start 3 times in a row; last: raised "
                                                  r"RuntimeError: this environment cannot be built while"):
            train(trainer, 10)
        assert trainer.sampler.worker_restarts == 3  # died once, then failed to start twice
    finally:
        trainer.close()


@pytest.mark.slow
def test_too_few_live_workers_stop_the_run_after_the_start_timeout(make_cfg, tmp_path):
    marker = tmp_path / "hang"
    trainer = build_trainer(make_cfg(
        "env.entry_point=tests.faulty_envs:HangsOnStartCartPole", f"+env.kwargs.marker={marker}",
        "env.max_episode_steps=500", "parallel=multiprocess", "workers=2", "envs_per_worker=2",
        "parallel.min_live_workers=2", "parallel.start_timeout_s=2", run_dir=tmp_path / "few",
    ))
    try:
        train(trainer, 1)
        marker.touch()  # replacements now hang while building their environments
        os.kill(trainer.sampler.worker_pids()[0], signal.SIGKILL)
        with pytest.raises(WorkerPoolError, match=r"only 1 of 2 workers are up .*min_live_workers=2"):
            train(trainer, 3)
    finally:
        trainer.close()
        marker.unlink(missing_ok=True)


@pytest.mark.slow
def test_cli_stops_with_exit_3_one_line_and_a_checkpoint_when_workers_keep_dying(tmp_path):
    proc = subprocess.run(
        [sys.executable, "main.py", "env.entry_point=tests.faulty_envs:SuicidalCartPole", "+env.kwargs.die_after=40",
         *MULTIPROCESS, "parallel.max_worker_restarts=2", "progress=false", f"hydra.run.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    stopped = [line for line in proc.stderr.splitlines() if line.startswith("rlpar: training stopped:")]
    assert len(stopped) == 1 and "parallel.max_worker_restarts=2" in stopped[0]
    assert [p.name for p in (tmp_path / "checkpoints").glob("*.pt")] == ["checkpoint_00000001.pt"]
