"""rlpar's partially observed environments (rlpar/envs/memory.py) against real Gymnasium tasks."""

import pickle

import gymnasium as gym
import numpy as np
import pytest

import rlpar.envs  # noqa: F401  registers the rlpar/ ids
from rlpar.envs.factory import EnvSpec, env_seeds, make_env, make_vector_env
from rlpar.envs.memory import MemoryCue, MountainCarNoVelocity, PartialObservation, PendulumNoVelocity


def play(env, actions, seed):
    """Observations, rewards and end flags of one episode (cut at len(actions))."""
    obs, _ = env.reset(seed=seed)
    observations, rewards, ends = [obs], [], []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        observations.append(obs)
        rewards.append(reward)
        ends.append((terminated, truncated))
        if terminated or truncated:
            break
    return np.array(observations), np.array(rewards), ends


# -- MemoryCue ----------------------------------------------------------------------------------
def test_memory_cue_spaces_and_registration():
    env = gym.make("rlpar/MemoryCue-v0", num_cues=3, delay=5)
    assert env.observation_space == gym.spaces.Box(0.0, 1.0, (5,), np.float32)
    assert env.action_space == gym.spaces.Discrete(3)
    assert gym.spec("rlpar/MemoryCue-v0").reward_threshold == 0.9
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs in env.observation_space


def test_memory_cue_is_seeded_by_reset():
    def cues(seed):
        env = MemoryCue()
        first = env.reset(seed=seed)[0]
        return [int(np.argmax(first[:2]))] + [int(np.argmax(env.reset()[0][:2])) for _ in range(30)]

    assert cues(3) == cues(3)
    assert cues(3) != cues(4)
    assert set(cues(3)) == {0, 1}


def test_memory_cue_shows_the_cue_once_then_only_the_query():
    env = MemoryCue(num_cues=3, delay=4)
    for seed in range(6):
        observations, _, _ = play(env, [0] * 6, seed)
        cue = env.cue
        assert observations[0][:3].tolist() == np.eye(3)[cue].tolist()
        assert not observations[1:, :3].any()  # hidden after the first step
        assert observations[:, 3].tolist() == [0, 0, 0, 0, 0, 1, 0]  # the query, then the final observation
        assert np.allclose(observations[:, 4], [6 / 6, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0])


def test_memory_cue_observations_after_the_first_do_not_depend_on_the_cue():
    """What makes a feed-forward policy answer at chance: the query looks the same for every cue."""
    env, later = MemoryCue(delay=3), {}
    for seed in range(20):
        observations, _, _ = play(env, [0] * 5, seed)
        later.setdefault(env.cue, observations[1:])
    assert set(later) == {0, 1}
    assert np.array_equal(later[0], later[1])


@pytest.mark.parametrize("wrong_reward", [-1.0, 0.0])
def test_memory_cue_rewards_the_answer_only(wrong_reward):
    env = MemoryCue(delay=8, wrong_reward=wrong_reward)
    for seed in range(4):
        env.reset(seed=seed)
        cue = env.cue
        for answer, expected in [(cue, 1.0), (1 - cue, wrong_reward)]:
            _, rewards, ends = play(env, [1 - answer] * 9 + [answer], seed)  # every ignored action is wrong
            assert rewards.tolist() == [0.0] * 9 + [expected]
            assert ends == [(False, False)] * 9 + [(True, False)]  # 10 steps = delay + 2, ended by the answer


def test_memory_cue_rejects_a_single_cue():
    with pytest.raises(ValueError, match="num_cues"):
        MemoryCue(num_cues=1)


# -- velocity-free classic control --------------------------------------------------------------
HIDDEN_VELOCITIES = {  # rlpar id -> (full task, indices of its observation that stay visible)
    "rlpar/CartPoleNoVelocity-v1": ("CartPole-v1", [0, 2]),
    "rlpar/PendulumNoVelocity-v1": ("Pendulum-v1", [0, 1]),
    "rlpar/AcrobotNoVelocity-v1": ("Acrobot-v1", [0, 1, 2, 3]),
    "rlpar/MountainCarNoVelocity-v0": ("MountainCar-v0", [0]),
    "rlpar/MountainCarContinuousNoVelocity-v0": ("MountainCarContinuous-v0", [0]),
}


@pytest.mark.parametrize("env_id", sorted(HIDDEN_VELOCITIES))
def test_no_velocity_env_drops_exactly_the_velocities(env_id):
    task_id, visible = HIDDEN_VELOCITIES[env_id]
    full, partial = gym.make(task_id), gym.make(env_id)
    assert partial.observation_space.shape == (len(visible),)
    assert np.array_equal(partial.observation_space.low, full.observation_space.low[visible])
    assert np.array_equal(partial.observation_space.high, full.observation_space.high[visible])
    assert partial.action_space == full.action_space
    rng = np.random.default_rng(0)
    actions = [rng.integers(full.action_space.n) if isinstance(full.action_space, gym.spaces.Discrete)
               else rng.uniform(-1, 1, full.action_space.shape).astype(np.float32) for _ in range(40)]
    full_obs, full_rewards, full_ends = play(full, actions, seed=7)
    part_obs, part_rewards, part_ends = play(partial, actions, seed=7)
    assert np.array_equal(part_obs, full_obs[:, visible])
    assert np.array_equal(part_rewards, full_rewards) and part_ends == full_ends


@pytest.mark.parametrize("env_id", sorted(HIDDEN_VELOCITIES))
def test_no_velocity_ids_keep_the_full_tasks_limit_and_threshold(env_id):
    task_id, _ = HIDDEN_VELOCITIES[env_id]
    full, partial = gym.spec(task_id), gym.spec(env_id)
    assert partial.max_episode_steps == full.max_episode_steps
    assert partial.reward_threshold == (full.reward_threshold if full.reward_threshold is not None else -200.0)


def test_no_velocity_env_truncates_at_the_registered_limit_in_both_forms():
    push = [np.zeros(1, np.float32)] * 300
    for env in (gym.make("rlpar/PendulumNoVelocity-v1"), PendulumNoVelocity()):
        _, _, ends = play(env, push, seed=0)
        assert len(ends) == 200 and ends[-1] == (False, True)
    for limit in (30, 250):  # shorter and longer than the registered one
        _, _, ends = play(gym.make("rlpar/PendulumNoVelocity-v1", max_episode_steps=limit), push, seed=0)
        assert len(ends) == limit and ends[-1] == (False, True)
        _, _, ends = play(PendulumNoVelocity(max_episode_steps=limit), push, seed=0)
        assert len(ends) == limit and ends[-1] == (False, True)


def test_partial_observation_takes_any_task_and_indices():
    env = PartialObservation(task_id="CartPole-v1", keep=[1, 3])
    full = gym.make("CartPole-v1")
    assert np.array_equal(env.reset(seed=2)[0], full.reset(seed=2)[0][[1, 3]])
    with pytest.raises(ValueError, match="keep"):
        PartialObservation(task_id="CartPole-v1", keep=[4])
    with pytest.raises(ValueError, match="task_id"):
        PartialObservation()


def test_no_velocity_env_resumes_from_a_pickle_exactly():
    env, actions = MountainCarNoVelocity(), [0, 2, 2, 1, 0, 2] * 5
    env.reset(seed=5)
    for action in actions:
        env.step(action)
    copy = pickle.loads(pickle.dumps(env))
    assert [env.step(a)[0].tolist() for a in actions] == [copy.step(a)[0].tolist() for a in actions]


# -- through rlpar's factory ----------------------------------------------------------------------
@pytest.mark.parametrize("spec", [EnvSpec(id="rlpar/CartPoleNoVelocity-v1"),
                                  EnvSpec(entry_point="rlpar.envs.memory:CartPoleNoVelocity"),
                                  EnvSpec(id="rlpar/MemoryCue-v0", kwargs={"delay": 2})],
                         ids=["id", "entry_point", "memory_cue"])
def test_rlpar_builds_them_as_vector_envs(spec):
    venv = make_vector_env(spec, 3)
    obs, _ = venv.reset(seed=env_seeds(spec, 3, first_seed=10))
    single = make_env(spec)
    assert venv.single_observation_space == single.observation_space
    assert obs.shape == (3, *single.observation_space.shape) and obs.dtype == np.float32
    for i in range(3):  # environment i is seeded with first_seed + i, as make_env's copy would be
        assert np.array_equal(obs[i], single.reset(seed=10 + i)[0])
    ends = 0
    venv.action_space.seed(0)  # (unseeded, three random CartPoles sometimes all outlasted 30 steps)
    for _ in range(60):
        obs, rewards, terminated, truncated, _ = venv.step(venv.action_space.sample())
        assert obs in venv.observation_space
        ends += int(terminated.sum() + truncated.sum())
    assert ends > 0  # episodes end inside 60 steps (random CartPole, 4-step MemoryCue) and reset
    venv.close()
