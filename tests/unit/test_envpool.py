"""`env.vectorization=envpool` (rlpar/envs/envpool_vector.py) against the Gymnasium path it stands in
for: the same spaces, bit-identical Atari frames and matching MuJoCo dynamics from the same state,
next-step autoreset, per-environment seeds `seed + i` whatever the split, and what validation
refuses. Real EnvPool, ale-py and MuJoCo; skipped, saying why, only where EnvPool is missing."""

import pickle
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.envpool_vector import ENVPOOL_PIN
from rlpar.envs.factory import check_env_exists, env_seeds, make_env, make_vector_env, resolve_env_spec

pytest.importorskip("envpool", reason="envpool is not installed (pip install envpool==1.2.5)")
pytest.importorskip("ale_py", reason="ale-py is not installed: the Atari comparisons need the emulator")

STICKY = {"repeat_action_probability": 0.25, "full_action_space": False}  # Machado et al.'s protocol (ALE v5's own default)
NO_RANDOMNESS = {"repeat_action_probability": 0.0, "full_action_space": False}
ROOT = Path(__file__).resolve().parents[2]


def atari(vectorization="envpool", env_id="ALE/Pong-v5", kwargs=None, max_episode_steps=None, **options):
    return resolve_env_spec(id=env_id, kwargs=STICKY if kwargs is None else kwargs, atari=options,
                            vectorization=vectorization, max_episode_steps=max_episode_steps)


def pool(spec, num_envs, first_seed=0):
    venv = make_vector_env(spec, num_envs)
    obs, _ = venv.reset(seed=env_seeds(spec, num_envs, first_seed))
    return venv, obs


def test_atari_pool_declares_and_returns_what_the_gymnasium_path_does():
    spec = atari()
    venv, obs = pool(spec, 2)
    single = make_env(atari("auto"))
    assert venv.single_observation_space == single.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert venv.single_action_space == single.action_space == gym.spaces.Discrete(6)
    assert venv.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    obs, rewards, terminated, truncated, info = venv.step(np.array([2, 3]))
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert rewards.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
    assert info["elapsed_step"].tolist() == [1, 1]
    assert venv.seeds == [0, 1]
    venv.close()


@pytest.mark.parametrize("env_id, moves", [("ALE/Pong-v5", (0, 2, 3, 4, 5)), ("ALE/Breakout-v5", (0, 2, 3))])
def test_atari_frames_are_bit_identical_to_the_gymnasium_path_without_randomness(env_id, moves):
    """No sticky actions and exactly one no-op: both paths see the same emulator, so the same
    preprocessing (max-pool, grayscale, resize, stack) gives the same bytes. Breakout never
    fires here: a fire reset (EnvPool's default, off in rlpar) would launch its ball."""
    venv, obs = pool(atari(env_id=env_id, kwargs=NO_RANDOMNESS, noop_max=1), 1)
    single = make_env(atari("auto", env_id=env_id, kwargs=NO_RANDOMNESS, noop_max=1))
    expected, _ = single.reset(seed=0)
    assert np.array_equal(obs[0], expected)
    for t in range(60):
        action = moves[(t // 5) % len(moves)]
        obs, reward, *_ = venv.step(np.array([action]))
        expected, expected_reward, *_ = single.step(action)
        assert np.array_equal(obs[0], expected), t
        assert reward[0] == expected_reward
    assert not np.array_equal(obs[0, 0], obs[0, 3])  # the screen moved: the comparison saw real frames
    venv.close()


def test_mujoco_pool_matches_gymnasiums_hopper_from_the_same_state():
    spec = resolve_env_spec(id="Hopper-v5", kwargs={"reset_noise_scale": 0.0}, vectorization="envpool")
    venv, obs = pool(spec, 1)
    single = make_env(resolve_env_spec(id="Hopper-v5", kwargs={"reset_noise_scale": 0.0}))
    assert venv.single_observation_space == single.observation_space
    assert venv.single_action_space == single.action_space  # float32, as Gymnasium declares
    expected, _ = single.reset(seed=0)
    np.testing.assert_array_equal(obs[0], expected)
    actions = np.random.default_rng(0).uniform(-1, 1, (10, 3)).astype(np.float32)
    for action in actions:
        obs, reward, *_ = venv.step(action[None])
        expected, expected_reward, *_ = single.step(action)
        np.testing.assert_allclose(obs[0], expected, atol=1e-9)
        assert reward[0] == pytest.approx(expected_reward, abs=1e-6)
    venv.close()


def test_truncation_returns_the_real_final_observation_then_a_reset_step_that_ignores_its_action():
    spec = atari(max_episode_steps=5)
    runs = []
    for reset_action in (0, 5):
        venv, _ = pool(spec, 2, first_seed=3)
        for t in range(5):
            obs, rewards, terminated, truncated, info = venv.step(np.array([2, 3]))
            assert truncated.tolist() == [t == 4] * 2 and not terminated.any()
        final = obs.copy()
        obs, rewards, terminated, truncated, info = venv.step(np.array([reset_action] * 2))
        assert not terminated.any() and not truncated.any() and rewards.tolist() == [0.0, 0.0]
        assert info["elapsed_step"].tolist() == [0, 0]
        assert all(np.array_equal(obs[i, 0], obs[i, 3]) for i in range(2))  # a fresh stack
        assert not np.array_equal(final[:, 3], obs[:, 3])  # the final observation was the episode's own
        runs.append(obs)
        venv.close()
    np.testing.assert_array_equal(runs[0], runs[1])  # the reset step's action changed nothing


def test_mujoco_termination_is_terminated_not_truncated_then_a_reset_step():
    spec = resolve_env_spec(id="Hopper-v5", vectorization="envpool")
    venv, _ = pool(spec, 1)
    for t in range(200):
        obs, reward, terminated, truncated, info = venv.step(np.ones((1, 3), np.float32))
        if terminated[0]:
            break
    assert terminated[0] and not truncated[0] and t > 0
    obs, reward, terminated, truncated, info = venv.step(np.ones((1, 3), np.float32))
    assert reward[0] == 0.0 and not terminated[0] and not truncated[0] and info["elapsed_step"][0] == 0
    venv.close()


def test_seeds_are_reproducible_and_environment_i_is_the_same_however_the_run_is_split():
    spec = atari()
    actions = np.random.default_rng(0).integers(0, 6, (30, 3))
    whole, _ = pool(spec, 3, first_seed=7)
    again, _ = pool(spec, 3, first_seed=7)
    last_worker, _ = pool(spec, 1, first_seed=7 + 2)  # a worker owning environment 2 only
    other_seed, _ = pool(spec, 1, first_seed=7 + 3)
    assert whole.seeds == [7, 8, 9] and last_worker.seeds == [9]
    for step_actions in actions:
        obs_whole, *_ = whole.step(step_actions)
        obs_again, *_ = again.step(step_actions)
        obs_last, *_ = last_worker.step(step_actions[2:])
        obs_other, *_ = other_seed.step(step_actions[2:])
        np.testing.assert_array_equal(obs_whole, obs_again)
        np.testing.assert_array_equal(obs_whole[2:], obs_last)
    assert not np.array_equal(obs_whole[2:], obs_other)  # sticky actions and no-ops follow the seed
    for venv in (whole, again, last_worker, other_seed):
        venv.close()


def test_terminal_on_life_loss_ends_at_each_life_lost_and_the_game_goes_on():
    venv, _ = pool(atari(env_id="ALE/Breakout-v5", terminal_on_life_loss=True), 1)
    for t in range(2000):
        obs, reward, terminated, truncated, info = venv.step(np.array([t % 4]))
        if terminated[0]:
            break
    assert terminated[0] and info["lives"][0] == 4  # one life of five lost, not the game
    obs, reward, terminated, truncated, info = venv.step(np.array([0]))
    assert info["lives"][0] == 4 and info["elapsed_step"][0] == t + 1  # the same game carries on
    venv.close()


def test_a_pickled_pool_restarts_its_episodes_truncated_at_their_last_observation():
    venv, _ = pool(atari(), 2)
    for _ in range(3):
        last, *_ = venv.step(np.array([2, 3]))
    restored = pickle.loads(pickle.dumps(venv))
    venv.close()
    obs, rewards, terminated, truncated, _ = restored.step(np.array([0, 0]))
    np.testing.assert_array_equal(obs, last)  # bootstrap from where the episodes were cut
    assert truncated.all() and not terminated.any() and not rewards.any()
    obs, rewards, terminated, truncated, _ = restored.step(np.array([0, 0]))
    assert not (terminated.any() or truncated.any() or rewards.any())
    assert all(np.array_equal(obs[i, 0], obs[i, 3]) for i in range(2))  # new episodes' first frames
    obs, *_ = restored.step(np.array([2, 3]))  # then steps on as usual
    assert restored.pool is not None and obs.shape == (2, 4, 84, 84)
    restored.close()


@pytest.mark.slow
def test_episodes_cut_by_a_resume_are_bootstrapped_but_not_counted_as_finished():
    """A restored pool starts fresh episodes (its state cannot be saved): the episodes it cuts end
    truncated, for bootstrapping, but their partial returns must not enter the return statistics
    (Pong's -21.0 read -14.0 after a resume). EnvPool's CartPole, in a worker's place of Gymnasium's."""
    from rlpar.envs.envpool_vector import EnvPoolVectorEnv
    from rlpar.models.spec import PolicySpec
    from rlpar.runtime.build import probe_policy_spec
    from rlpar.sampling.rollout import RolloutWorker

    spec = resolve_env_spec(id="CartPole-v1")
    policy_spec, _ = probe_policy_spec(spec, PolicySpec, normalize_obs=False)
    weights = {key: value.numpy() for key, value in policy_spec.build().state_dict().items()}

    def worker() -> RolloutWorker:
        worker = RolloutWorker(env_spec=spec, policy_spec=policy_spec, num_envs=8, rollout_length=30, seed=0)
        worker.venv.close()
        worker.venv = EnvPoolVectorEnv(task_id="CartPole-v1", options={}, num_envs=8)
        worker.raw_obs = worker.flatten(worker.venv.reset(seed=list(range(8)))[0])
        worker.set_weights(weights, 0)
        return worker

    saved, restored = worker(), worker()
    try:
        saved.sample()
        restored.set_state(saved.get_state())
        batch = restored.sample()
    finally:
        saved.close()
        restored.close()
    cut = batch.valid[0] & batch.truncated[0]
    assert cut.sum() >= 4  # the episodes under way at the checkpoint: truncated at their last observation
    assert batch.episode_returns and [t for t, _ in batch.episode_ends if t == 0] == []  # none counted as finished
    assert all(length >= 8 for length in batch.episode_lengths)  # whole CartPole episodes only


@pytest.mark.parametrize("spec, problem", [
    (dict(id="CartPole-v1"), "envpool covers ale-py ids with env.atari and Gymnasium's MuJoCo ids"),
    (dict(id="ALE/Pong-v5", atari=None), r"env.atari=null \(raw frames\) needs auto or sync"),
    (dict(id="ALE/Pong-v5", atari={"grayscale": False}), "env.atari.grayscale: false stacks RGB frames differently"),
    (dict(id="ALE/Pong-v5", atari={"noop_max": 0}), "env.atari.noop_max: EnvPool takes 1..noop_max no-ops"),
    (dict(id="ALE/Pong-v5", atari={}, kwargs={"continuous": True}), "env.kwargs.continuous: EnvPool has no equivalent"),
    (dict(id="Hopper-v5", kwargs={"healthy_z_range": [0.5, 2.0]}), "env.kwargs.healthy_z_range: EnvPool's Hopper-v5 has no healthy_z_max"),
    (dict(id="Hopper-v5", kwargs={"contact_cost_weight": 1.0}), "env.kwargs.contact_cost_weight: EnvPool's Hopper-v5 has no equivalent"),
    (dict(entry_point="tests.faulty_envs:RaisingEnv"), "envpool builds registered Atari and MuJoCo ids, not env.entry_point"),
    (dict(id="Hopper-v5", kwargs={"healthy_z_range": [0.5, float("inf")], "reset_noise_scale": 0.0}), None),
    (dict(id="ALE/Breakout-v5", atari={"frame_stack": 2, "screen_size": 64}, kwargs={"full_action_space": True}), None),
])
def test_validation_names_what_envpool_cannot_do_the_gymnasium_way(spec, problem):
    found = check_env_exists(resolve_env_spec(vectorization="envpool", **spec))
    if problem is None:
        assert found is None
    else:
        assert found is not None and "\n" not in found
        assert re.search(problem, found), found


def test_a_run_config_with_envpool_validates_and_a_refused_one_says_why(make_cfg):
    validate_config(make_cfg("env=atari", "env.vectorization=envpool", "algo=impala"))
    with pytest.raises(ConfigError, match="env.vectorization: envpool covers ale-py ids"):
        validate_config(make_cfg("env.vectorization=envpool"))


@pytest.mark.slow
def test_a_fresh_process_builds_the_pool_as_a_ray_actor_does():
    """A Ray actor has not imported ale-py: building the pool registers its ids first."""
    program = ("from rlpar.envs.factory import make_vector_env, resolve_env_spec; "
               "venv = make_vector_env(resolve_env_spec(id='ALE/Pong-v5', atari={}, vectorization='envpool'), 2); "
               "print(venv.reset(seed=[5, 6])[0].shape, venv.seeds)")
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(2, 4, 84, 84) [5, 6]"


def test_a_missing_envpool_is_named_in_one_line_with_its_pin(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # `import envpool` now raises ImportError
    problem = check_env_exists(resolve_env_spec(id="Hopper-v5", vectorization="envpool"))
    assert problem.startswith(f"env.vectorization: envpool is not installed (pip install {ENVPOOL_PIN}; ") and "\n" not in problem
    pins = {line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()}
    assert ENVPOOL_PIN in pins


@pytest.mark.slow
def test_a_short_local_hopper_run_trains_on_envpool(make_cfg):
    from rlpar.runtime.build import build_trainer

    trainer = build_trainer(make_cfg("env.id=Hopper-v5", "env.vectorization=envpool", "algo.rollout_length=64",
                                     "envs_per_worker=4", "total_steps=512", "checkpoint.every=0"))
    try:
        rows = [trainer.train() for _ in range(2)]
    finally:
        trainer.close()
    assert [row["env_steps"] for row in rows] == [256, 512]
    assert rows[-1]["episodes"] > 0 and np.isfinite(rows[-1]["episode_return_mean"])


@pytest.mark.slow
def test_a_short_local_atari_run_counts_frames_and_resumes(make_cfg, tmp_path):
    from rlpar.runtime.build import build_trainer

    overrides = ("env=atari", "env.vectorization=envpool", "algo=impala", "envs_per_worker=2", "algo.rollout_length=16",
                 "algo.batches_per_update=1", "total_steps=10000", "checkpoint.every=0")
    trainer = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "a"))
    try:
        rows = [trainer.train() for _ in range(2)]
        path = trainer.save()
    finally:
        trainer.close()
    assert rows[-1]["env_steps"] == 64 and rows[-1]["frames"] == 256
    resumed = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "b"))
    try:
        resumed.restore(path)
        assert resumed.train()["env_steps"] == 96
    finally:
        resumed.close()
