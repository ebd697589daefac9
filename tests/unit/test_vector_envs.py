"""rlpar's numpy vector envs against Gymnasium's one-by-one environments (no mocks: the real
Pendulum-v1 and CartPole-v1), and independent of how environments are split over workers."""

import pickle

import gymnasium as gym
import numpy as np
import pytest

from rlpar.envs.factory import make_env, make_vector_env, resolve_env_spec, vector_mode
from rlpar.envs.seeded_vector import SeededCartPoleVectorEnv, SeededPendulumVectorEnv

STEPS = 1_000  # five Pendulum episodes: truncations and next-step autoresets included


def random_actions(num_envs: int, steps: int = STEPS) -> np.ndarray:
    return np.random.default_rng(0).uniform(-3.0, 3.0, (steps, num_envs, 1)).astype(np.float32)  # beyond +-2: clipped


def random_pushes(num_envs: int, steps: int = STEPS) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 2, (steps, num_envs))


VECTOR_ENVS = {  # id -> (rlpar's vector env, random actions)
    "Pendulum-v1": (SeededPendulumVectorEnv, random_actions),
    "CartPole-v1": (SeededCartPoleVectorEnv, random_pushes),
}


def test_pendulum_is_stepped_natively_by_default():
    spec = resolve_env_spec(id="Pendulum-v1")
    assert vector_mode(spec) == "native"
    assert isinstance(make_vector_env(spec, 3), SeededPendulumVectorEnv)
    assert vector_mode(resolve_env_spec(id="Pendulum-v1", kwargs={"g": 9.81})) == "sync"  # Gymnasium's own then


def test_vector_pendulum_steps_like_gymnasiums_pendulum():
    spec, seeds = resolve_env_spec(id="Pendulum-v1"), [3, 4, 5]
    native = SeededPendulumVectorEnv(3)
    one_by_one = gym.vector.SyncVectorEnv([lambda: make_env(spec) for _ in seeds])
    obs_native, _ = native.reset(seed=seeds)
    obs_gym, _ = one_by_one.reset(seed=seeds)
    np.testing.assert_array_equal(obs_native, obs_gym)  # the same per-environment seeding
    resets = 0
    for actions in random_actions(3):
        ours, theirs = native.step(actions), one_by_one.step(actions)
        np.testing.assert_allclose(ours[0], theirs[0], rtol=0, atol=1e-6)  # vectorised sin: last-bit rounding
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-9)
        for flags in (2, 3):  # terminated, truncated: exactly
            np.testing.assert_array_equal(ours[flags], theirs[flags])
        resets += int(ours[3].sum())
    assert resets == 3 * (STEPS // 201)  # 200-step episodes, then one reset step each


def test_vector_cartpole_steps_like_gymnasiums_cartpole():
    """Random pushes end an episode every ~20 steps: every environment draws more than one block
    of initial states, so the block refill is covered too."""
    spec, seeds = resolve_env_spec(id="CartPole-v1"), [3, 4, 5]
    assert isinstance(make_vector_env(spec, 3), SeededCartPoleVectorEnv)
    native = SeededCartPoleVectorEnv(3)
    one_by_one = gym.vector.SyncVectorEnv([lambda: make_env(spec) for _ in seeds])
    np.testing.assert_array_equal(native.reset(seed=seeds)[0], one_by_one.reset(seed=seeds)[0])
    episodes = np.zeros(3, int)
    for actions in random_pushes(3):
        ours, theirs = native.step(actions), one_by_one.step(actions)
        np.testing.assert_allclose(ours[0], theirs[0], rtol=0, atol=1e-6)  # vectorised cos/sin: last-bit rounding
        for field in (1, 2, 3):  # rewards, terminated, truncated: exactly
            np.testing.assert_array_equal(ours[field], theirs[field])
        episodes += ours[2] | ours[3]
    assert episodes.min() > SeededCartPoleVectorEnv.RESET_BLOCK


@pytest.mark.parametrize("env_id", VECTOR_ENVS)
def test_vector_envs_do_not_depend_on_the_split(env_id):
    env_cls, draw_actions = VECTOR_ENVS[env_id]
    whole = env_cls(7)
    whole.reset(seed=list(range(7)))
    parts = [(env_cls(n), first) for n, first in ((1, 0), (2, 1), (4, 3))]
    for env, first in parts:
        env.reset(seed=list(range(first, first + env.num_envs)))
    for actions in draw_actions(7):
        ours = whole.step(actions)
        split = [env.step(actions[first : first + env.num_envs]) for env, first in parts]
        for field in range(4):
            np.testing.assert_array_equal(ours[field], np.concatenate([s[field] for s in split]))


def stepped_and_pickled(env_id):
    """A vector env of two environments stepped 150 steps, its pickled copy, and the next 150 steps' actions."""
    env_cls, draw_actions = VECTOR_ENVS[env_id]
    env = env_cls(2)
    env.reset(seed=[0, 1])
    actions = draw_actions(2, 300)
    for a in actions[:150]:
        env.step(a)
    return env, pickle.loads(pickle.dumps(env)), actions[150:]


def assert_step_alike(env, copy, actions):
    for a in actions:
        for field, (x, y) in enumerate(zip(env.step(a)[:4], copy.step(a)[:4])):
            np.testing.assert_array_equal(x, y, err_msg=str(field))


@pytest.mark.parametrize("env_id", VECTOR_ENVS)
def test_vector_envs_pickle_mid_episode(env_id):
    """Local runs checkpoint their environments by pickling them (exact resume)."""
    assert_step_alike(*stepped_and_pickled(env_id))


def test_cartpole_pickled_before_its_cached_limits_resumes_alike():
    """A checkpoint written before `limits` existed holds no such attribute: the copy computes it."""
    env, old, actions = stepped_and_pickled("CartPole-v1")
    del old.__dict__["limits"]  # as an environment pickled by the previous step() left it
    assert_step_alike(env, old, actions)
    assert old.limits[0, 0] == env.x_threshold and old.limits[2, 0] == env.theta_threshold_radians
