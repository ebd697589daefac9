"""Atari through ale-py: the preprocessing stack (env=atari), seeding, pickling for exact resume,
frames counted per agent step, and the presets every ALE/* id shares (conf/preset/<algo>/ALE.yaml).

The stepping tests use the real emulator and skip, saying why, only when ale-py cannot be
imported (it is in requirements.txt)."""

import io
import pickle
import sys

import gymnasium as gym
import numpy as np
import pytest

from rlpar.envs import atari
from rlpar.envs.factory import check_env_exists, env_seeds, make_env, make_vector_env, resolve_env_spec

STICKY = {"repeat_action_probability": 0.25, "full_action_space": False}  # Machado et al.'s protocol (ALE v5's own default)


@pytest.fixture
def ale():
    return pytest.importorskip("ale_py", reason="ale-py is not installed (pip install ale-py==0.12.1): Atari tests need the emulator")


def atari_spec(env_id="ALE/Pong-v5", kwargs=None, **options):
    return resolve_env_spec(id=env_id, kwargs=STICKY if kwargs is None else kwargs, atari=options)


def play(env, actions, seed):
    obs, _ = env.reset(seed=seed)
    frames = [obs]
    for action in actions:
        obs, _, terminated, truncated, _ = env.step(action)
        frames.append(obs)
        if terminated or truncated:
            obs, _ = env.reset()
            frames.append(obs)
    return np.stack(frames)


def test_preprocessed_observations_are_4_stacked_84x84_uint8_frames_that_shift(ale):
    env = make_env(atari_spec())
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert np.array_equal(obs[0], obs[3])  # reset pads the stack with the first frame
    previous = obs
    for step in range(40):
        obs, *_ = env.step(2 + step % 2)  # Pong: RIGHT/LEFT, so the paddle and the screen move
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        assert np.array_equal(obs[:3], previous[1:])  # oldest frame dropped, newest appended
        previous = obs
    assert obs.max() > obs.min()  # a real screen, not a blank
    assert not np.array_equal(obs[3], obs[0])  # the game moved over 4 steps


def test_ale_runs_single_frames_with_sticky_actions_and_the_minimal_action_set(ale):
    env = make_env(atari_spec())
    game = env.unwrapped
    assert game._frameskip == 1  # the preprocessing skips the frames (and max-pools the last two)
    assert game.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert env.action_space == gym.spaces.Discrete(6)  # Pong's minimal set, not the full 18
    no_sticky = make_env(atari_spec(kwargs={"repeat_action_probability": 0.0, "full_action_space": True}))
    assert no_sticky.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    assert no_sticky.action_space == gym.spaces.Discrete(18)


@pytest.mark.slow
def test_the_same_seed_gives_the_same_observations_and_another_seed_others(ale):
    actions = [step % 4 for step in range(300)]
    first = play(make_env(atari_spec("ALE/Breakout-v5")), actions, seed=5)
    again = play(make_env(atari_spec("ALE/Breakout-v5")), actions, seed=5)
    other = play(make_env(atari_spec("ALE/Breakout-v5")), actions, seed=6)
    assert np.array_equal(first, again)
    assert first.shape != other.shape or not np.array_equal(first, other)


@pytest.mark.slow
def test_a_pickled_env_carries_on_exactly_as_the_original(ale):
    """Exact resume pickles vector envs: ale-py's own pickle is a new, unreset game."""
    env = make_vector_env(atari_spec("ALE/Breakout-v5"), 2)
    env.reset(seed=env_seeds(atari_spec(), 2, 7))
    rng = np.random.default_rng(0)
    for _ in range(150):
        env.step(rng.integers(4, size=2))
    env_fns, env.env_fns = env.env_fns, None  # as RolloutWorker.get_state pickles it
    copy = pickle.loads(pickle.dumps(env))
    env.env_fns = env_fns
    for _ in range(300):
        actions = rng.integers(4, size=2)
        ours, theirs = env.step(actions), copy.step(actions)
        for mine, its in zip(ours[:4], theirs[:4]):
            assert np.array_equal(mine, its)


def test_the_vector_env_of_the_atari_spec_steps(ale):
    spec = atari_spec()
    venv = make_vector_env(spec, 2)
    assert isinstance(venv, gym.vector.SyncVectorEnv)  # not ale-py's own AtariVectorEnv
    obs, _ = venv.reset(seed=env_seeds(spec, 2, 0))
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    for _ in range(20):
        obs, rewards, terminated, truncated, _ = venv.step(np.array([2, 2]))
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert not np.array_equal(obs[0], obs[1])  # seeds 0 and 1: other no-op starts, other games
    assert rewards.shape == terminated.shape == truncated.shape == (2,)
    venv.close()


def test_life_loss_ends_an_episode_for_learning_but_not_the_game(ale):
    env = make_env(atari_spec("ALE/Breakout-v5", terminal_on_life_loss=True))
    env.reset(seed=0)
    for step in range(2000):
        _, _, terminated, truncated, _ = env.step(1 if step % 8 == 0 else 3)  # FIRE now and then
        if terminated:
            break
    assert terminated, "no life lost in 2000 steps"
    lives = env.unwrapped.ale.lives()
    assert lives == 4
    env.reset()
    assert env.unwrapped.ale.lives() == 4  # the same game goes on: not a fresh one with 5 lives


def test_frames_per_agent_step(ale):
    assert atari.frames_per_step(atari_spec()) == 4
    assert atari.frames_per_step(atari_spec(frame_skip=2)) == 2
    assert atari.frames_per_step(resolve_env_spec(id="ALE/Pong-v5")) == 4  # ALE v5's own frameskip
    assert atari.frames_per_step(resolve_env_spec(id="ALE/Pong-v5", kwargs={"frameskip": 3})) == 3
    assert atari.frames_per_step(resolve_env_spec(id="CartPole-v1")) == 1


def test_the_trainer_reports_frames_and_frames_per_second(ale):
    from rlpar.algos.base import StepResult
    from rlpar.logging.progress import ProgressLine
    from rlpar.runtime.trainer import Trainer

    class OneBatch:
        def training_step(self):
            return StepResult(env_steps=1024)

    stream = io.StringIO()
    trainer = Trainer(algorithm=OneBatch(), env_spec=atari_spec(), total_steps=2048, seed=0,
                      progress=ProgressLine(2048, stream=stream, every_s=0))
    metrics = trainer.train()
    metrics = trainer.train()
    assert metrics["frames"] == 2048 * 4
    assert metrics["frames_per_s"] == pytest.approx(metrics["fps"] * 4)
    assert "frames/s" in stream.getvalue()
    trainer.progress.summary(metrics, "run")
    assert "8,192 frames" in stream.getvalue()
    cartpole = Trainer(algorithm=OneBatch(), env_spec=resolve_env_spec(id="CartPole-v1"), total_steps=1024, seed=0)
    assert "frames" not in cartpole.train()  # a step is a frame: nothing to add


def test_problems_are_one_line_each(ale):
    def problem(**fields):
        return check_env_exists(resolve_env_spec(**{"id": "ALE/Pong-v5", "atari": {}, **fields}))

    assert problem() is None
    assert problem(atari={"frameskip": 4}) == "env.atari.frameskip: unknown key; did you mean env.atari.frame_skip?"
    assert problem(atari={"frame_stack": 0}).startswith("env.atari.frame_stack: expected a positive integer")
    assert problem(kwargs={"frameskip": 4}).startswith("env.kwargs.frameskip: 4 with env.atari")
    assert problem(id="CartPole-v1").startswith("env.atari: Atari preprocessing needs an ale-py id")
    assert problem(vectorization="native").startswith("env.vectorization: native is not offered for ale-py ids")
    assert problem(atari=None) is None


def test_a_missing_ale_py_is_named_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py now raises ImportError
    monkeypatch.setattr(atari, "_registered", False)
    line = check_env_exists(resolve_env_spec(id="ALE/Pong-v5"))
    assert line.startswith("env.id: 'ALE/Pong-v5' needs ale-py, which is not installed (pip install ale-py==0.12.1")
    assert "\n" not in line


# -- presets: one per algorithm for every ALE/* id ----------------------------------------------

def test_namespaced_ids_fall_back_to_their_namespace_preset(tmp_path, monkeypatch):
    from rlpar.config import presets

    assert presets.preset_path("ppo", "ALE/Pong-v5") == presets.PRESET_DIR / "ppo" / "ALE.yaml"
    assert presets.preset_path("impala", "ALE/Breakout-v5") == presets.PRESET_DIR / "impala" / "ALE.yaml"
    assert presets.preset_path("dqn", "ALE/Pong-v5") is None  # no Atari preset for DQN: the baseline
    assert presets.preset_path("ppo", "CartPole-v1") == presets.PRESET_DIR / "ppo" / "CartPole-v1.yaml"
    assert presets.preset_path("ppo", "Acrobot-v1") is None
    (tmp_path / "ppo" / "ALE").mkdir(parents=True)
    for name in ("ALE.yaml", "ALE/Pong-v5.yaml"):
        (tmp_path / "ppo" / name).write_text("algo: {lr: 1.0e-3}\n")
    monkeypatch.setattr(presets, "PRESET_DIR", tmp_path)
    assert presets.preset_path("ppo", "ALE/Pong-v5") == tmp_path / "ppo" / "ALE" / "Pong-v5.yaml"  # its own wins
    assert presets.preset_path("ppo", "ALE/Breakout-v5") == tmp_path / "ppo" / "ALE.yaml"


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ALE/Breakout-v5"])
def test_ppo_atari_preset_is_cleanrls(make_cfg, env_id):
    cfg = make_cfg("env=atari", f"env.id={env_id}")
    algo = cfg.algo
    assert (cfg.workers * cfg.envs_per_worker, algo.rollout_length) == (8, 128)
    assert (algo.lr, algo.anneal_lr, algo.clip, algo.value_clip) == (2.5e-4, True, 0.1, 0.1)
    assert (algo.epochs, algo.minibatch_size, algo.entropy_coef, algo.value_coef) == (4, 256, 0.01, 0.5)
    assert (algo.gamma, algo.gae_lambda, algo.max_grad_norm) == (0.99, 0.95, 0.5)
    wide = make_cfg("env=atari", "workers=16")
    assert (wide.envs_per_worker, wide.algo.rollout_length) == (1, 64)  # still 1,024 steps an iteration


def test_impala_atari_preset_takes_32_trajectories_of_20_steps(make_cfg):
    cfg = make_cfg("env=atari", "algo=impala", "parallel=distributed", "workers=4")
    algo = cfg.algo
    assert (algo.rollout_length, algo.lr, algo.anneal_lr, algo.max_grad_norm) == (20, 6e-4, True, 40.0)
    assert (algo.entropy_coef, algo.value_coef, algo.gamma) == (0.01, 0.5, 0.99)
    assert algo.batches_per_update * cfg.envs_per_worker == 32
    assert make_cfg("env=atari", "algo=impala", "envs_per_worker=16").algo.batches_per_update == 2
    assert make_cfg("env=atari", "algo=impala", "algo.lr=1e-3").algo.lr == 1e-3  # the user's keys win
    assert (algo.minibatch_size, algo.normalize_advantages, algo.vtrace_lambda) == (None, False, 1.0)  # the paper's step


@pytest.mark.parametrize("workers", [1, 4, 16])
def test_appo_atari_preset_learns_cleanrls_batch_in_cleanrls_passes(make_cfg, workers):
    """PPO's Atari batch (8 environments x 128 steps) an update, whatever the workers, trained on
    in 4 passes of minibatches of 256, at a constant rate, on 64x64 frames."""
    cfg = make_cfg("env=atari", "algo=appo", "parallel=distributed", f"workers={workers}")
    algo = cfg.algo
    assert algo.batches_per_update * cfg.envs_per_worker * algo.rollout_length == 1024
    assert (algo.rollout_length, algo.minibatch_size, algo.reuse_per_batch, algo.clip) == (128, 256, 4, 0.1)
    assert (algo.lr, algo.anneal_lr, algo.reward_clip, algo.normalize_rewards) == (2.5e-4, False, 1.0, False)
    assert (cfg.env.atari.screen_size, cfg.env.kwargs.repeat_action_probability) == (64, 0.0)


def test_the_run_names_the_namespace_preset(make_cfg):
    from rlpar.config.presets import preset_line, wanted_preset

    cfg = make_cfg("env.id=ALE/Pong-v5")
    assert wanted_preset(cfg) == "ppo/ALE"
    assert preset_line(cfg, wanted_preset(cfg)) == "rlpar: ppo preset for ALE/Pong-v5 (conf/preset/ppo/ALE.yaml)"


def test_the_time_limit_counts_agent_steps_and_restarts_the_game(ale):
    spec = resolve_env_spec(id="ALE/Breakout-v5", kwargs=STICKY, atari={"terminal_on_life_loss": True}, max_episode_steps=50)
    env = make_env(spec)
    env.reset(seed=0)
    frames_before = env.unwrapped.ale.getEpisodeFrameNumber()
    for step in range(1, 51):
        _, _, terminated, truncated, _ = env.step(0)  # NOOP: Breakout's ball never launches, no life lost
        assert not terminated and truncated == (step == 50)
    assert env.unwrapped.ale.getEpisodeFrameNumber() - frames_before == 50 * 4
    env.reset()
    assert env.unwrapped.ale.getEpisodeFrameNumber() <= 30 * 4  # a new game (no-ops only), not a soft reset
