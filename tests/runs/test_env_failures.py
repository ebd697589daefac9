"""No failure trains on nothing (issue 24): an environment that fails for good, or breaks its
contract later than validation looks, stops the run the same way on every sampler: exit 3, one
line naming the environment and what it did, and a checkpoint of the iterations before."""

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlpar.envs.contract import observation_problem, reward_problem
from rlpar.envs.recovering import FAILURES_IN_A_ROW, RecoveringEnv
from rlpar.errors import EnvironmentFailedError
from rlpar.runtime.build import build_trainer
from rlpar.runtime.checkpoint import list_checkpoints
from tests.faulty_envs import FlakyCartPole

ROOT = Path(__file__).resolve().parents[2]
SAMPLERS = {
    "local": ["parallel=local"],
    "multiprocess": ["parallel=multiprocess", "workers=2", "envs_per_worker=4"],
    "distributed": ["parallel=distributed", "workers=2", "envs_per_worker=4", "ray.num_cpus=2"],
}
BREAKS_AFTER = 3000  # steps of each worker process: a few iterations, checkpointed, before the environment breaks


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["local", "multiprocess", pytest.param("distributed", marks=pytest.mark.ray)])
def test_an_environment_that_breaks_for_good_stops_the_run_on_every_sampler(tmp_path, sampler):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "main.py", "env.id=null", "env.entry_point=tests.faulty_envs:BreaksForGoodCartPole",
         f"+env.kwargs.break_after={BREAKS_AFTER}", "env.max_episode_steps=500", "algo.rollout_length=64",
         "total_steps=1000000", "algo.compile=false", "checkpoint.every=1", *SAMPLERS[sampler], f"run_dir={run_dir}", "progress=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("rlpar:")]
    assert line.startswith("rlpar: training stopped: environment tests.faulty_envs:BreaksForGoodCartPole raised"), line
    assert f"RuntimeError: simulator lost after {BREAKS_AFTER} steps" in line, line
    rows = [json.loads(text) for text in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows and [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    assert newest.name == f"checkpoint_{len(rows):08d}.pt"  # the last finished iteration's
    assert rows[-1]["env_steps"] < 2 * BREAKS_AFTER * (1 if sampler == "local" else 2)  # nothing trained past it


@pytest.mark.slow
def test_a_multi_agent_environment_that_raises_is_rebuilt_on_the_local_sampler_then_stops_with_a_checkpoint(tmp_path):
    """simple_spread raising on every 150th step of an instance: the local sampler rebuilds it and
    trains on (as the other samplers do); once it raises on every step, the run stops in one line
    with a checkpoint of its last iteration."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "main.py", "env=pettingzoo", "env.id=null", "env.entry_point=tests.faulty_envs:flaky_simple_spread",
         "+env.kwargs.fail_every=150", "+env.kwargs.break_after=2500", "algo=mappo", "parallel=local",
         "total_steps=100000", "checkpoint.every=1", f"run_dir={run_dir}", "progress=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("rlpar:")]
    assert line == ("rlpar: training stopped: environment tests.faulty_envs:flaky_simple_spread raised on 10 steps in a "
                    "row, rebuilt each time, without one good step; last: RuntimeError: simulator lost after 2500 steps")
    rows = [json.loads(text) for text in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1)) and rows[-1]["env_steps"] <= 2500
    assert rows[-1]["env_restarts"] >= 8  # eight environments, each rebuilt at its 150th step
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    assert newest.name == f"checkpoint_{len(rows):08d}.pt"


@pytest.mark.parametrize("what, parallel, expected", [
    ("shape", "local", "returned an observation of shape (3,), but its observation_space declares (4,)"),
    ("array_reward", "multiprocess", "returned a reward of type ndarray (array([1., 1.]))"),
    ("string_reward", "multiprocess", "returned a reward of type str ('1.0')"),
])
@pytest.mark.slow
def test_a_contract_broken_mid_run_is_named_the_same_on_every_sampler(make_cfg, tmp_path, what, parallel, expected):
    trainer = build_trainer(make_cfg(
        "env.id=null", "env.entry_point=tests.faulty_envs:BadOutputAfterCartPole", f"+env.kwargs.what={what}",
        "+env.kwargs.after=100", f"parallel={parallel}", "workers=2", "envs_per_worker=2", "algo.rollout_length=32",
        run_dir=tmp_path / "run"))
    try:
        with pytest.raises(EnvironmentFailedError) as raised:
            for _ in range(20):
                trainer.train()
    finally:
        trainer.close()
    assert "environment tests.faulty_envs:BadOutputAfterCartPole" in str(raised.value)
    assert expected in str(raised.value) and "(at step 100)" in str(raised.value)
    assert trainer.iteration >= 1  # the iterations before it trained


def _recovering(fail_every: int, **limits) -> RecoveringEnv:
    make = lambda: FlakyCartPole(fail_every=fail_every)  # noqa: E731
    env = RecoveringEnv(make(), make, name="Flaky", **limits)
    env.reset(seed=0)
    return env


def _step_until_stopped(env: RecoveringEnv, steps: int) -> None:
    """As a vector env steps it: a failed step is a truncation, and the next one a reset."""
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()


def test_rebuilds_beyond_the_window_stop_but_a_flaky_simulator_goes_on():
    flaky = _recovering(fail_every=30, max_restarts=5, restart_window_s=60)
    with pytest.raises(EnvironmentFailedError, match=r"raised 6 times within 60 s, more than env.max_restarts=5"):
        _step_until_stopped(flaky, 1000)
    assert flaky.restarts == 6
    tolerated = _recovering(fail_every=30, max_restarts=5, restart_window_s=1e-9)  # each rebuild leaves the window
    _step_until_stopped(tolerated, 1000)
    assert tolerated.restarts >= 30


def test_failures_in_a_row_without_one_good_step_stop_a_slow_simulator():
    broken = _recovering(fail_every=1, max_restarts=10**6, restart_window_s=60)
    with pytest.raises(EnvironmentFailedError, match=f"raised on {FAILURES_IN_A_ROW} steps in a row"):
        _step_until_stopped(broken, 100)


def test_an_environment_whose_reset_keeps_raising_stops_the_run_as_one_that_fails_for_good():
    class Unstartable(FlakyCartPole):
        def reset(self, **kwargs):
            raise RuntimeError("simulator cannot start an episode")

    env = RecoveringEnv(Unstartable(), Unstartable, name="Unstartable")
    with pytest.raises(EnvironmentFailedError, match="environment Unstartable raised on 3 resets in a row, rebuilt each "
                                                     "time; last: RuntimeError: simulator cannot start an episode"):
        env.reset(seed=0)
    assert env.restarts == 2


def test_reward_and_observation_contracts():
    box = gym.spaces.Box(-1, 1, (4,))
    for good in (1.0, 1, np.float32(0.5), np.int64(3), np.array(2.0), True):
        assert reward_problem(good) is None, good
    for bad in ("1.0", np.array([1.0]), None, 1j, [1.0]):
        assert "a reward must be one real number" in reward_problem(bad), bad
    assert observation_problem(np.zeros(4), box) is None
    assert "shape (3,)" in observation_problem(np.zeros(3), box)
    nested = gym.spaces.Dict({"pos": box, "goal": gym.spaces.Discrete(3)})
    assert observation_problem({"pos": np.zeros(4), "goal": 1}, nested) is None
    assert "keys ['pos']" in observation_problem({"pos": np.zeros(4)}, nested)
    assert "(key 'goal')" in observation_problem({"pos": np.zeros(4), "goal": np.zeros(2)}, nested)
