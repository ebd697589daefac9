import numpy as np

from rlpar.envs.factory import EnvSpec, make_env
from rlpar.runtime.run import run

SPEC = EnvSpec(entry_point="tests.old_gym_envs:OldCorridor", kwargs={"limit": 8})


def test_adapter_speaks_gymnasium_and_separates_termination_from_truncation():
    env = make_env(SPEC)
    obs, info = env.reset(seed=3)
    assert obs.shape == (1,) and info == {}
    for _ in range(5):
        obs, reward, terminated, truncated, _ = env.step(1)
    assert (reward, terminated, truncated) == (1.0, True, False)
    env.reset()
    for _ in range(8):
        obs, reward, terminated, truncated, _ = env.step(0)
    assert (terminated, truncated) == (False, True)
    assert env.unwrapped.env.seeded == 3


def test_old_gym_env_trains_through_the_cli_config(make_cfg):
    cfg = make_cfg(
        "env.id=null",
        "env.entry_point=tests.old_gym_envs:OldCorridor",
        "+env.kwargs.limit=8",
        "total_steps=2048",
        "envs_per_worker=4",
        "algo.rollout_length=64",
        "algo.minibatch_size=64",
    )
    final = run(cfg)
    assert final["env_steps"] == 2048
    assert final["episodes"] > 0
    # every episode either reached the goal (return 1) or timed out (return 0)
    assert 0.0 <= final["episode_return_mean"] <= 1.0
    assert np.isfinite(final["loss_value"])
