"""DQN end to end: it learns CartPole, runs on every sampler, and a run SIGKILLed mid-way and
resumed with its replay checkpointed equals the run never interrupted, row for row."""

import os
import signal
import subprocess

import numpy as np
import pytest

from rlpar.config.validate import ConfigError, validate_config
from rlpar.replay.sequences import SequenceWriter
from rlpar.runtime.build import build_trainer
from tests.processes import default_sigint, wait_until
from tests.runs.test_kill_resume import (ROOT, checkpoint_iterations, cli, complete_rows, deterministic, resume, rows,
                                    run_cli, stop)

# Small and quick: a 64-wide dueling network, 3-step returns, learning from 512 transitions on.
FAST = ("algo=dqn", "model.hidden_sizes=[64,64]", "model.dueling=true", "algo.n_step=3", "algo.lr=1e-3",
        "algo.gamma=0.98", "algo.learning_starts=512", "algo.replay_ratio=0.25", "algo.target_update_every=100",
        "algo.epsilon_end=0.01", "algo.exploration_steps=6000", "algo.replay.capacity=20000")


@pytest.mark.slow
def test_dqn_learns_cartpole_within_a_small_budget(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg(*FAST, "total_steps=12288", "checkpoint.every=0", run_dir=tmp_path / "dqn"))
    try:
        history = [trainer.train() for _ in range(48)]
    finally:
        trainer.close()
    best = max(r["episode_return_mean"] or 0.0 for r in history)
    assert best >= 100, [round(r["episode_return_mean"] or 0) for r in history]  # random play: ~22
    last = history[-1]
    assert last["replay_size"] == last["replay_inserts"] <= 12288
    assert last["samples_per_insert"] == pytest.approx(0.25 * 64, rel=0.1)  # replay_ratio x batch_size
    assert last["epsilon"] == pytest.approx(0.01)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["multiprocess"])
def test_dqn_runs_on_worker_pools_with_weights_pushed_every_interval(make_cfg, tmp_path, parallel):
    trainer = build_trainer(make_cfg(*FAST, f"parallel={parallel}", "workers=2", "algo.weight_sync_interval=3",
                                     "algo.learning_starts=256", run_dir=tmp_path / parallel))
    try:
        history = [trainer.train() for _ in range(10)]
    finally:
        trainer.close()
    versions = [r["policy_version"] for r in history]
    learned = sum(1 for r in history if r["gradient_steps"] > 0)
    assert versions[-1] == learned // 3  # one push every third update
    assert history[-1]["replay_inserts"] > 0 and history[-1]["env_steps"] == 10 * 256


ITERATIONS, EVERY = 24, 5
RESUMABLE = (*FAST, "algo.replay.prioritized=true", "algo.replay.checkpoint=true",
             f"total_steps={ITERATIONS * 256}", f"checkpoint.every={EVERY}")


@pytest.mark.slow
def test_sigkill_then_resume_with_replay_checkpoint_equals_an_uninterrupted_run(tmp_path):
    reference_dir = tmp_path / "uninterrupted"
    run_cli(*RESUMABLE, run_dir=reference_dir)
    reference = rows(reference_dir)
    assert reference[-1]["gradient_steps"] > 0 and reference[-1]["replay_size"] > 4000

    run_dir = tmp_path / "killed"
    victim = subprocess.Popen(cli(*RESUMABLE, run_dir=run_dir), cwd=ROOT, preexec_fn=default_sigint,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        metrics = run_dir / "metrics.jsonl"
        wait_until(lambda: (n := complete_rows(metrics)) >= 12 and n % EVERY == 2, victim, 120, "12 logged rows",
                   poll_s=0.002)
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait(30) == -signal.SIGKILL
    finally:
        stop(victim)
    assert checkpoint_iterations(run_dir)[-1] < ITERATIONS
    resume(run_dir, tmp_path)
    resumed = rows(run_dir)
    assert [r["iteration"] for r in resumed] == list(range(1, ITERATIONS + 1))
    for got, expected in zip(resumed, reference):
        assert deterministic(got) == deterministic(expected), f"iteration {got['iteration']}"


@pytest.mark.slow
def test_apex_with_worker_processes_keeps_the_replay_in_the_learner(make_cfg, tmp_path):
    """parallel=multiprocess: actors prioritise their own transitions and send them back with the
    batch; the learner's in-process shards take them. Each environment explores at its own rate."""
    trainer = build_trainer(make_cfg("algo=apex", "parallel=multiprocess", "workers=2", "envs_per_worker=2",
                                     "algo.learning_starts=256", run_dir=tmp_path / "apex"))
    try:
        history = [trainer.train() for _ in range(12)]
        algorithm = trainer.algorithm
        shard_sizes = [shard.call("stats")["size"] for shard in algorithm.shards]
        limiters = [shard.instance.limiter for shard in algorithm.shards]  # tables in this process
        ratio = algorithm.replay_ratio * algorithm.batch_size
        epsilons = algorithm.exploration.values
    finally:
        trainer.close()
    last = history[-1]
    assert last["replay_shards"] == 2 and all(size > 0 for size in shard_sizes)
    assert sum(shard_sizes) == last["replay_size"] == last["replay_inserts"]
    # Each shard's rate limiter held it within its band: samples per insert replay_ratio x batch_size.
    assert last["samples_per_insert_target"] == ratio == 0.125 * 64 and last["replay_samples"] > 0
    for limiter in limiters:
        lower, upper = limiter.bounds
        assert limiter.samples > 0 and lower <= limiter.diff <= upper
    assert last["replay_insert_wait_s"] == 0.0 and last["replay_sample_wait_s"] > 0
    # epsilon_i = 0.4 ** (1 + 7 i / 3) for the 4 environments of the run
    assert epsilons == pytest.approx([0.4 ** (1 + 7 * i / 3) for i in range(4)])


RECURRENT = ("algo=dqn", "model.recurrent=gru", "model.recurrent_size=32", "model.hidden_sizes=[32]",
             "env.entry_point=rlpar.envs.memory:CartPoleNoVelocity", "algo.learning_starts=256", "algo.batch_size=8",
             "algo.replay_ratio=0.0625", "algo.burn_in=4", "algo.sequence_length=8", "algo.replay.prioritized=true",
             "checkpoint.every=0")


def test_recurrent_dqn_replays_sequences_from_the_states_its_workers_acted_with(make_cfg, tmp_path):
    """R2D2's replay in a run: sequences of burn_in + sequence_length steps whose stored state is
    the one the worker's numpy copy entered their first step with (the batch's), zero at an
    episode's start; learned on, and their priorities written back."""
    trainer = build_trainer(make_cfg(*RECURRENT, "total_steps=2048", run_dir=tmp_path / "r2d2"))
    algo = trainer.algorithm
    try:
        batch, _ = algo.sample()
        count = algo.insert(batch)
        history = [trainer.train() for _ in range(8)]
        first = algo.storage.get(np.arange(count))
        size = algo.storage.size
        priorities = algo.replay.tree.get(np.arange(size))
    finally:
        trainer.close()
    assert algo.recurrent and isinstance(algo.writer, SequenceWriter) and count > 0
    assert first["obs"].shape[1:] == (13, 2) and first["initial_state"].shape[1:] == (32,)
    starts_episode = 0
    for obs, mask, state in zip(first["obs"], first["mask"], first["initial_state"]):
        t, column = np.argwhere((batch.obs == obs[mask.argmax()]).all(-1))[0]
        np.testing.assert_array_equal(state, batch.states[t, column])
        if not mask[0]:  # padded before an episode's first step: the state it starts from is zero
            starts_episode += 1
            assert not state.any()
    assert 0 < starts_episode < count and batch.states.any()
    assert history[-1]["gradient_steps"] > 0 and history[-1]["replay_size"] == history[-1]["replay_inserts"] > count
    assert len(np.unique(priorities)) > 1  # written back: no longer all the largest seen at insertion


def test_ape_x_refuses_a_recurrent_q_network_and_takes_no_sequence_keys(make_cfg):
    with pytest.raises(ConfigError) as refused:
        validate_config(make_cfg("algo=apex", "model.recurrent=lstm"), check_env=False)
    assert "algo=apex learns feed-forward policies only" in str(refused.value)
    validate_config(make_cfg("algo=apex"), check_env=False)
    with pytest.raises(ConfigError, match="sequence_length: 1 is too short"):
        validate_config(make_cfg("algo=dqn", "model.recurrent=gru", "algo.sequence_length=1"), check_env=False)
