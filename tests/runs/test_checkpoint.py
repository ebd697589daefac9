"""save() / restore() / evaluate() through the Trainer API, and resume through the CLI path."""

import json
import pickle

import numpy as np
import pytest
import torch

from rlpar.runtime.build import build_trainer
from rlpar.runtime.checkpoint import CheckpointError, load_checkpoint
from rlpar.runtime.resume import config_for_resume
from rlpar.runtime.run import run
from tests.defaults import STEPS_PER_ITERATION

SMALL = (f"total_steps={12 * STEPS_PER_ITERATION}", "checkpoint.every=0")


def test_save_restore_round_trip(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg(*SMALL, run_dir=tmp_path / "a"))
    for _ in range(3):
        trainer.train()
    path = trainer.save()
    weights = trainer.algorithm.get_weights()
    opt_state = trainer.algorithm.optimizer.state_dict()
    trainer.close()

    other = build_trainer(make_cfg(*SMALL, "seed=5", run_dir=tmp_path / "b"))
    other.restore(path)
    assert other.iteration == 3 and other.env_steps == 3 * STEPS_PER_ITERATION
    restored = other.algorithm.get_weights()
    assert restored.keys() == weights.keys()
    for key in weights:
        np.testing.assert_array_equal(restored[key], weights[key])
    restored_state = other.algorithm.optimizer.state_dict()["state"]
    assert restored_state.keys() == opt_state["state"].keys()
    for index, saved in opt_state["state"].items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(restored_state[index][key], saved[key]), key
    metrics = other.train()
    assert metrics["iteration"] == 4 and metrics["env_steps"] == 4 * STEPS_PER_ITERATION
    other.close()


def test_checkpoint_refuses_arbitrary_pickles(tmp_path):
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    bad = tmp_path / "checkpoint_00000001.pt"
    bad.write_bytes(pickle.dumps({"x": Evil()}))
    with pytest.raises(CheckpointError):
        load_checkpoint(bad)


def test_evaluate_runs_the_deterministic_policy(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg(*SMALL, run_dir=tmp_path / "e"))
    trainer.train()
    first = trainer.evaluate(num_episodes=3)
    second = trainer.evaluate(num_episodes=3)
    trainer.close()
    assert first["eval_episodes"] == 3
    assert first == second  # greedy policy, same evaluation seeds: identical returns
    assert 1.0 <= first["eval_return_min"] <= first["eval_return_max"] <= 500.0


@pytest.mark.slow
def test_resume_appends_each_iteration_exactly_once(make_cfg, tmp_path):
    run_dir = tmp_path / "r"
    run(make_cfg(f"total_steps={10 * STEPS_PER_ITERATION}", "checkpoint.every=4", run_dir=run_dir))
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 10
    # pretend the run was killed after iteration 10 had been logged but only 8 checkpointed
    (run_dir / "checkpoints" / "checkpoint_00000010.pt").unlink()
    resumed = config_for_resume(make_cfg(f"resume={run_dir}", f"total_steps={16 * STEPS_PER_ITERATION}"), ["resume", "total_steps"])
    assert resumed.total_steps == 16 * STEPS_PER_ITERATION and resumed.run_dir == str(run_dir)
    final = run(resumed)
    iterations = [json.loads(l)["iteration"] for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == list(range(1, 17))
    assert final["env_steps"] == 16 * STEPS_PER_ITERATION


@pytest.mark.slow
@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_local_resume_reproduces_an_uninterrupted_run(make_cfg, tmp_path, env):
    """Checkpoint after 3 iterations, rebuild from scratch, restore: iterations 4-6 match exactly."""
    overrides = (f"env={env}", "total_steps=100000", "checkpoint.every=0", "algo.rollout_length=64")
    straight = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "straight"))
    rows = [straight.train() for _ in range(6)]
    straight.close()

    first = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "interrupted"))
    for _ in range(3):
        first.train()
    path = first.save()
    first.close()
    resumed = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "resumed"))
    resumed.restore(path)
    again = [resumed.train() for _ in range(3)]
    resumed.close()

    keys = ("iteration", "env_steps", "episodes", "episode_return_mean", "loss_policy", "loss_value", "approx_kl")
    for expected, got in zip(rows[3:], again):
        assert {k: got[k] for k in keys} == {k: expected[k] for k in keys}


@pytest.mark.slow
def test_resume_skips_a_corrupt_newest_checkpoint_and_a_half_written_one(make_cfg, tmp_path):
    run_dir = tmp_path / "c"
    run(make_cfg(f"total_steps={10 * STEPS_PER_ITERATION}", "checkpoint.every=4", "checkpoint.keep=3", run_dir=run_dir))
    checkpoints = run_dir / "checkpoints"
    (checkpoints / "checkpoint_00000010.pt").write_bytes(b"truncated by a crash")
    (checkpoints / "checkpoint_00000011.pt.tmp").write_bytes(b"half written")
    from rlpar.runtime.checkpoint import latest_valid_checkpoint

    path, state = latest_valid_checkpoint(run_dir)
    assert path.name == "checkpoint_00000008.pt" and state["iteration"] == 8
    final = run(config_for_resume(make_cfg(f"resume={run_dir}"), ["resume"]))
    assert final["iteration"] == 10
    iterations = [json.loads(l)["iteration"] for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == list(range(1, 11))


@pytest.mark.slow
def test_a_time_limit_ends_the_run_finished_before_its_steps(make_cfg, tmp_path):
    run_dir = tmp_path / "timed"
    final = run(make_cfg("total_steps=100000000", "time_limit_s=1.5", "algo.compile=false", run_dir=run_dir))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # stopped where the next iteration, as long as the last, would end past the limit (judged a moment
    # after the row's clock, hence the margin): within the limit, or past it by less than that last
    # iteration where it took longer than the one before (a loaded machine's iterations vary)
    before, last = rows[-2], rows[-1]
    assert before["wall_time_s"] + before["time_iteration_s"] < 1.5 + 0.2 and last == final
    assert last["wall_time_s"] < 1.5 + max(0.0, last["time_iteration_s"] - before["time_iteration_s"])
    assert last["wall_time_s"] + last["time_iteration_s"] > 1.5 - 0.2
    assert final["env_steps"] < 100000000 and [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))[-1] == f"checkpoint_{len(rows):08d}.pt"


def checkpoint_iterations(run_dir) -> list[int]:
    return [load_checkpoint(path)["iteration"] for path in sorted((run_dir / "checkpoints").glob("*.pt"))]


def warnings_about(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and text in r.getMessage()]


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["local", "multiprocess"])
def test_an_environment_class_defined_in_a_function_checkpoints_and_resumes(make_cfg, tmp_path, caplog, parallel):
    """Its environments cannot be pickled. The start-up probe finds that, the run says so once
    (the cause and the fix) and checkpoints without environment state, and a resume starts fresh
    episodes; it never fails at its first checkpoint."""
    run_dir = tmp_path / parallel
    env = ("env.id=null", "env.entry_point=tests.unpicklable_envs:local_cartpole", f"parallel={parallel}",
           "checkpoint.every=5", "algo.rollout_length=64")
    with caplog.at_level("INFO", logger="rlpar"):
        final = run(make_cfg(*env, f"total_steps={12 * STEPS_PER_ITERATION}", run_dir=run_dir))
    assert final["iteration"] == 12 and checkpoint_iterations(run_dir) == [5, 10, 12]
    warned = warnings_about(caplog, "cannot be saved in checkpoints")
    if parallel == "local":
        assert len(warned) == 1 and "Can't pickle local object 'local_cartpole.<locals>.LocalCartPole'" in warned[0]
        assert "define the environment class at module level" in warned[0]
        said = [r.getMessage() for r in caplog.records]
        assert said.index(warned[0]) < next(i for i, m in enumerate(said) if "start-up" in m)  # before training
    else:
        assert warned == []  # its checkpoints never hold the workers' environments
    final = run(config_for_resume(make_cfg(f"resume={run_dir}", f"total_steps={16 * STEPS_PER_ITERATION}"),
                                  ["resume", "total_steps"]))
    assert final["iteration"] == 16
    iterations = [json.loads(l)["iteration"] for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == list(range(1, 17))


@pytest.mark.slow
def test_environments_that_stop_pickling_while_training_checkpoint_without_their_state(make_cfg, tmp_path, caplog):
    """The probe pickled them at start-up; at the first checkpoint they no longer pickle. The
    run says so once and goes on checkpointing everything else."""
    run_dir = tmp_path / "late"
    with caplog.at_level("WARNING", logger="rlpar"):
        final = run(make_cfg("env.id=null", "env.entry_point=tests.unpicklable_envs:LateUnpicklableCartPole",
                             "checkpoint.every=2", "algo.rollout_length=64", f"total_steps={8 * STEPS_PER_ITERATION}",
                             run_dir=run_dir))
    assert final["iteration"] == 8 and checkpoint_iterations(run_dir)[-3:] == [4, 6, 8]
    warned = warnings_about(caplog, "cannot be saved in checkpoints")
    assert len(warned) == 1 and "pickling it failed (TypeError: cannot pickle '_thread.lock' object)" in warned[0]
    assert load_checkpoint(run_dir / "checkpoints" / "checkpoint_00000008.pt")["sampler"]["worker"] == {}


def test_an_ezpickle_environment_keeps_its_state_through_a_checkpoint_pickle():
    """EzPickle alone would unpickle a new, unreset environment. Its attributes travel instead,
    cycles included; one that cannot be pickled (a lock) comes from its constructor anew."""
    from rlpar.envs.state_pickle import dumps_env_state, state_pickle_problem
    from tests.unpicklable_envs import Odometer

    env = Odometer(start=5)
    env.reset(seed=3)
    for _ in range(4):
        env.step(1)
    copy = pickle.loads(dumps_env_state(env))
    assert copy.dial.count == 9 and copy.dial.owner is copy and copy.lock is not env.lock
    np.testing.assert_array_equal(copy.state, env.state)
    np.testing.assert_equal(copy.step(0)[:2], env.step(0)[:2])
    assert state_pickle_problem(env, lambda e: e.step(1)[:2]) is None
