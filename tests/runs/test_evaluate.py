"""`rlpar evaluate RUN_DIR` on a real (tiny) CartPole run: the newest checkpoint's deterministic
policy gives the numbers training's own final evaluation gave, a playable MP4 is written, and
the evaluation reaches evaluations.jsonl, TensorBoard (scalars and the video as a GIF) and an
offline W&B run. Bad run directories are refused in one line."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import imageio.v2 as imageio
import numpy as np
import pytest
import yaml
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlpar.runtime.run import run
from tests.defaults import STEPS_PER_ITERATION

ROOT = Path(__file__).resolve().parents[2]
EPISODES = 3


class CartPoleWithoutRendering(CartPoleEnv):
    """A class of a user's that takes no `render_mode` (entry_point of a copied run below)."""

    metadata = {"render_modes": [], "render_fps": 50}

    def __init__(self):
        super().__init__()


def evaluate(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_DIR",)}
    env.update(PYTHONPATH=str(ROOT), WANDB_MODE="offline", WANDB_SILENT="true")
    return subprocess.run([sys.executable, "-m", "rlpar", "evaluate", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 4-iteration CartPole run logged to TensorBoard and W&B (offline), evaluated by the
    trainer itself at the end (the reference numbers)."""
    from rlpar.config.compose import compose_config

    run_dir = tmp_path_factory.mktemp("evaluate") / "run"
    cfg = compose_config(["progress=false", "logger=wandb", f"total_steps={4 * STEPS_PER_ITERATION}",
                          f"eval_episodes={EPISODES}"], run_dir=run_dir)
    final = run(cfg)
    assert final["iteration"] == 4
    return run_dir, final


@pytest.mark.slow
def test_evaluate_writes_video_metrics_tensorboard_and_wandb(trained, tmp_path):
    run_dir, final = trained
    wandb_runs_before = set((run_dir / "wandb").glob("offline-run-*"))
    proc = evaluate(run_dir, "--episodes", EPISODES, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr

    # the returns, one line, the same as the trainer's own evaluation of the same weights and seeds
    line = next(l for l in proc.stdout.splitlines() if l.startswith("returns: "))
    returns = [float(x) for x in line.removeprefix("returns: ").split(" (")[0].split()]
    assert len(returns) == EPISODES
    assert sum(returns) / EPISODES == pytest.approx(final["eval_return_mean"])
    assert "checkpoint_00000004.pt" in line and "seed 10000" in line

    # evaluations.jsonl
    rows = [json.loads(l) for l in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    row = rows[-1]
    assert row["returns"] == returns and row["iteration"] == 4 and row["env_steps"] == 4 * STEPS_PER_ITERATION
    assert row["eval_return_mean"] == pytest.approx(final["eval_return_mean"])
    assert row["eval_return_max"] == max(returns) and row["eval_episodes"] == EPISODES

    # a playable MP4 of the first episode: an ISO media file whose frames are CartPole's
    videos = sorted((run_dir / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["checkpoint_00000004-seed10000-episode-0.mp4"]
    assert row["videos"] == ["videos/checkpoint_00000004-seed10000-episode-0.mp4"]
    assert f"video: {videos[0]}" in proc.stdout
    data = videos[0].read_bytes()
    assert len(data) > 1000 and data[4:8] == b"ftyp"
    frames = imageio.mimread(videos[0], format="FFMPEG", memtest=False)
    assert frames[0].shape == (400, 600, 3)
    assert abs(len(frames) - (row["lengths"][0] + 1)) <= 1  # the reset frame and one per step
    assert frames[0].std() > 0  # a picture, not a blank frame

    # TensorBoard: the eval scalars and the video (an animated GIF) at the checkpoint's env step
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert "eval/video" in events.Tags()["images"]
    image = events.Images("eval/video")[-1]
    assert image.step == 4 * STEPS_PER_ITERATION and image.encoded_image_string[:6] == b"GIF89a"
    scalar = events.Scalars("returns/eval_return_mean")[-1]
    assert scalar.step == 4 * STEPS_PER_ITERATION and scalar.value == pytest.approx(row["eval_return_mean"])

    # W&B (the run logged with logger=wandb): a new offline run holding the MP4
    new_runs = set((run_dir / "wandb").glob("offline-run-*")) - wandb_runs_before
    assert len(new_runs) == 1
    logged = list(new_runs.pop().rglob("files/media/videos/**/*.mp4"))
    assert len(logged) == 1 and logged[0].read_bytes() == data


@pytest.mark.slow
def test_evaluate_seed_and_no_video(trained, tmp_path):
    run_dir, _ = trained
    first = evaluate(run_dir, "--episodes", 2, "--seed", 3, "--no-video", cwd=tmp_path)
    again = evaluate(run_dir, "--episodes", 2, "--seed", 3, "--no-video", cwd=tmp_path)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert "seed 3" in first.stdout and "video:" not in first.stdout
    def results(proc):  # each evaluation's own W&B run (this run logged to W&B) is named in a line of its own
        return [line for line in proc.stdout.splitlines() if not line.startswith("rlpar: W&B run saved offline")]

    assert results(first) == results(again)  # deterministic policy, seeded environments
    assert not list((run_dir / "videos").glob("*seed3*"))
    row = json.loads((run_dir / "evaluations.jsonl").read_text().splitlines()[-1])
    assert row["seed"] == 3 and row["videos"] == []


def one_line_refusal(proc, code):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlpar"), proc.stderr
    return lines[0]


@pytest.mark.slow
def test_evaluate_refuses_what_it_cannot_evaluate(trained, tmp_path):
    run_dir, _ = trained
    (tmp_path / "empty").mkdir()
    no_checkpoint = tmp_path / "no_checkpoint"
    no_checkpoint.mkdir()
    shutil.copy(run_dir / "config.yaml", no_checkpoint)
    damaged = shutil.copytree(run_dir, tmp_path / "damaged", ignore=shutil.ignore_patterns("wandb", "videos"))
    for path in (damaged / "checkpoints").glob("*.pt"):
        path.write_bytes(path.read_bytes()[:1000])  # cut short
    cases = {
        tmp_path / "missing": "does not exist",
        run_dir / "config.yaml": "is a file",
        tmp_path / "empty": "not an rlpar run directory",
        no_checkpoint: "no checkpoint",
        damaged: "damaged or unreadable",
    }
    for target, words in cases.items():
        assert words in one_line_refusal(evaluate(target, cwd=tmp_path), 2)
    assert "--episodes" in one_line_refusal(evaluate(run_dir, "--episodes", "0", cwd=tmp_path), 2)


@pytest.mark.slow
def test_evaluate_env_that_cannot_render(trained, tmp_path):
    """An environment class that takes no render_mode: one line (exit 1) with video; without
    video it is evaluated."""
    run_dir, _ = trained
    copy = shutil.copytree(run_dir, tmp_path / "copy", ignore=shutil.ignore_patterns("wandb", "videos", "tensorboard"))
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["env"].update(id=None, entry_point="tests.runs.test_evaluate:CartPoleWithoutRendering")
    config["logger"]["wandb"] = None
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    assert "cannot render" in one_line_refusal(evaluate(copy, "--episodes", 1, "--trust", cwd=tmp_path), 1)
    proc = evaluate(copy, "--episodes", 1, "--no-video", "--trust", cwd=tmp_path)  # the environment is another class
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("returns: ")


@pytest.mark.slow
def test_gif_for_tensorboard_is_scaled_and_subsampled():
    from PIL import Image

    from rlpar.logging.video import MAX_GIF_FRAMES, MAX_GIF_WIDTH, gif_bytes

    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env.reset(seed=0)
    frames = [env.render()] * (MAX_GIF_FRAMES + 50)
    env.close()
    data, height, width = gif_bytes(frames, fps=50)
    image = Image.open(__import__("io").BytesIO(data))
    assert image.size == (width, height) == (MAX_GIF_WIDTH, 213)
    assert image.n_frames <= MAX_GIF_FRAMES


@pytest.mark.slow
def test_evaluate_plays_team_episodes_of_a_multi_agent_run_and_records_one(tmp_path):
    """MAPPO on simple_spread with a policy per agent (rows carry the global state): `rlpar
    evaluate` rebuilds every policy from its checkpoint section, plays 25-step team episodes with
    the training's own final evaluation's returns, and writes one playable MP4 of all agents."""
    from rlpar.config.compose import compose_config

    run_dir = tmp_path / "run"
    cfg = compose_config(["progress=false", "env=pettingzoo", "algo=mappo", "env.policies=agent", "total_steps=400",
                          "algo.rollout_length=25", "eval_episodes=2"], run_dir=run_dir)
    final = run(cfg)
    done = evaluate(run_dir, "--episodes", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads((run_dir / "evaluations.jsonl").read_text().splitlines()[-1])
    assert row["lengths"] == [25, 25]
    assert row["eval_return_mean"] == pytest.approx(final["eval_return_mean"])
    frames = imageio.mimread(run_dir / row["videos"][0], memtest=False)
    assert len(frames) >= 25


class MaskedChoice(gym.Env):
    """Dict observations as a game with legal moves gives them: {"observation": Box, "action_mask":
    Box}; reward 1 for a legal action. Renders a small picture for videos."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, length: int = 10, render_mode=None):
        self.length, self.render_mode = length, render_mode
        self.observation_space = gym.spaces.Dict({
            "observation": gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
            "action_mask": gym.spaces.Box(0, 1, (3,), np.int8),
        })
        self.action_space = gym.spaces.Discrete(3)

    def _observe(self):
        self.mask = np.zeros(3, np.int8)
        self.mask[self.np_random.integers(3)] = 1
        return {"observation": self.np_random.uniform(-1, 1, 4).astype(np.float32), "action_mask": self.mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(self.mask[int(action)])
        self.steps += 1
        return self._observe(), reward, False, self.steps >= self.length, {}

    def render(self):
        return np.kron(self.mask.astype(np.uint8)[None, :, None] * 255, np.ones((16, 16, 3), np.uint8))


class Endless(CartPoleEnv):
    """CartPole's spaces on an episode that never ends (no time limit), rendering small frames;
    `fail_at`: raises at that step, as an environment of a user's may."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, fail_at: int | None = None, render_mode=None):
        super().__init__(render_mode=None)
        self.render_mode, self.fail_at, self.steps = render_mode, fail_at, 0

    def step(self, action):
        self.steps += 1
        if self.fail_at is not None and self.steps >= self.fail_at:
            raise RuntimeError("the simulator lost its state")
        self.state = np.zeros(4)  # upright for ever
        obs, reward, _, _, info = super().step(action)
        return obs, reward, False, False, info

    def render(self):
        return np.full((32, 48, 3), self.steps % 256, np.uint8)


@pytest.mark.slow
def test_main_py_dict_observations_with_eval_episodes_and_then_evaluate(tmp_path):
    """The bar: a Dict-observation run with eval_episodes=20 exits 0, and so does `rlpar
    evaluate` on it, video included."""
    run_dir = tmp_path / "run"
    trained = subprocess.run([sys.executable, "main.py", "env.id=null", "env.entry_point=tests.runs.test_evaluate:MaskedChoice",
                              f"total_steps={STEPS_PER_ITERATION}", "eval_episodes=20", "progress=false",
                              f"run_dir={run_dir}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr[-2000:]
    final = json.loads((run_dir / "evaluations.jsonl").read_text().splitlines()[-1])
    assert final["source"] == "training" and final["eval_episodes"] == 20
    proc = evaluate(run_dir, "--episodes", 20, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads((run_dir / "evaluations.jsonl").read_text().splitlines()[-1])
    assert row["source"] == "evaluate" and row["eval_return_mean"] == pytest.approx(final["eval_return_mean"])
    assert row["lengths"] == [10] * 20 and len(row["videos"]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    ["env.id=rlpar/DictTarget-v0"],  # Dict of Discrete and Box
    ["env.id=rlpar/MultiDiscreteMatch-v0"],  # Tuple of Discrete observations, MultiDiscrete actions
    ["env.id=rlpar/MultiBinaryMatch-v0"],  # Tuple of MultiBinary, MultiBinary actions
    ["env.id=rlpar/PixelGridWorld-v0"],  # uint8 images through the CNN
    ["model.recurrent=lstm"],  # a recurrent policy's state carried from step to step
    ["env=pettingzoo", "algo=ippo", "algo.rollout_length=25"],  # every agent's rows, the team's return
], ids=["dict", "tuple-multidiscrete", "multibinary", "image", "recurrent", "multi-agent"])
def test_every_space_training_takes_is_evaluated_at_the_end_and_by_evaluate(tmp_path, overrides):
    """eval_episodes at the end of training and `evaluate_run` afterwards play the same greedy
    episodes on the same seeds: the same returns."""
    from rlpar.config.compose import compose_config
    from rlpar.runtime.evaluate_run import evaluate_run

    run_dir = tmp_path / "run"
    final = run(compose_config(["progress=false", f"total_steps={STEPS_PER_ITERATION}", "eval_episodes=3", *overrides],
                               run_dir=run_dir))
    result = evaluate_run(run_dir, episodes=3, video_episodes=0, tensorboard=False)
    assert len(result["returns"]) == 3
    assert result["eval_return_mean"] == pytest.approx(final["eval_return_mean"])


@pytest.mark.slow
def test_videos_of_endless_episodes_are_cut_and_a_failed_evaluation_leaves_none(trained, tmp_path, monkeypatch):
    """An environment without a time limit: its video stops at MAX_VIDEO_FRAMES frames (they are
    held in memory until encoded), the episode plays on. One that raises mid-recording leaves no
    video behind."""
    from rlpar.runtime import evaluate_run as module

    run_dir, _ = trained
    copy = shutil.copytree(run_dir, tmp_path / "copy", ignore=shutil.ignore_patterns("wandb", "videos", "tensorboard"))
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["env"].update(id=None, entry_point="tests.runs.test_evaluate:Endless", max_episode_steps=None)
    config["logger"]["wandb"] = None
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setattr(module, "MAX_VIDEO_FRAMES", 40)
    result = module.evaluate_run(copy, episodes=2, video_episodes=2, max_steps=300, tensorboard=False, trust=True)
    assert result["lengths"] == [300, 300]
    for video in result["videos"]:
        assert len(imageio.mimread(video, format="FFMPEG", memtest=False)) == 40
    assert result["notes"] == ["rlpar: evaluate: videos show an episode's first 40 frames at most"]

    config["env"]["kwargs"] = {"fail_at": 25}  # mid-way through the first video
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(RuntimeError, match="lost its state"):
        module.evaluate_run(copy, episodes=1, video_episodes=1, seed=5, tensorboard=False, trust=True)
    assert not list((copy / "videos").glob("*seed5*"))


@pytest.mark.slow
def test_evaluate_never_writes_through_a_link_in_the_run_directory(trained, tmp_path):
    """evaluations.jsonl or videos/ made links to another place: refused in one line (exit 2),
    and that place is left as it was."""
    run_dir, _ = trained
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "notes.jsonl").write_text("mine\n")
    (elsewhere / "checkpoint_00000004-seed10000-episode-0.mp4").write_text("mine")
    for name, target in [("evaluations.jsonl", elsewhere / "notes.jsonl"), ("videos", elsewhere)]:
        copy = shutil.copytree(run_dir, tmp_path / f"copy-{name}", ignore=shutil.ignore_patterns("wandb", "videos"))
        (copy / name).unlink(missing_ok=True)
        (copy / name).symlink_to(target)
        line = one_line_refusal(evaluate(copy, "--episodes", 1, cwd=tmp_path), 2)
        assert f"'{copy / name}' is a symbolic link" in line, line
        assert sorted(p.name for p in elsewhere.iterdir()) == ["checkpoint_00000004-seed10000-episode-0.mp4", "notes.jsonl"]
        assert (elsewhere / "notes.jsonl").read_text() == "mine\n"


@pytest.mark.slow
def test_values_of_a_run_directory_that_cannot_be_used_are_its_problem_exit_2(trained, tmp_path):
    run_dir, _ = trained
    for section, key, value in [("env", "kwargs", [1, 2]), (None, "seed", "first")]:
        copy = shutil.copytree(run_dir, tmp_path / key, ignore=shutil.ignore_patterns("wandb", "videos", "tensorboard"))
        config = yaml.safe_load((copy / "config.yaml").read_text())
        (config[section] if section else config)[key] = value
        (copy / "config.yaml").write_text(yaml.safe_dump(config))
        line = one_line_refusal(evaluate(copy, "--no-video", cwd=tmp_path), 2)
        assert "its config.yaml or checkpoint_00000004.pt holds what cannot be used" in line, line


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [[], ["algo=dqn"], ["env=pendulum"]], ids=["categorical", "epsilon-greedy", "gaussian"])
def test_stochastic_evaluation_samples_actions_reproducibly_and_says_so(tmp_path, overrides):
    """eval_stochastic at the end of training and `evaluate_run(stochastic=True)` sample actions
    from noise seeded by each episode's seed: the same returns twice, unlike the greedy ones, and
    the rows say which policy played."""
    from rlpar.config.compose import compose_config
    from rlpar.runtime.evaluate_run import evaluate_run

    run_dir = tmp_path / "run"
    final = run(compose_config(["progress=false", f"total_steps={STEPS_PER_ITERATION}", "eval_episodes=5",
                                "eval_stochastic=true", *overrides], run_dir=run_dir))
    sampled = evaluate_run(run_dir, episodes=5, video_episodes=0, tensorboard=False, stochastic=True)
    greedy = evaluate_run(run_dir, episodes=5, video_episodes=0, tensorboard=False)
    assert sampled["eval_return_mean"] == pytest.approx(final["eval_return_mean"])
    rows = [json.loads(line) for line in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    assert [row["policy"] for row in rows] == ["stochastic", "stochastic", "deterministic"]
    assert rows[0]["returns"] == rows[1]["returns"] != rows[2]["returns"]


@pytest.mark.slow
def test_rlpar_evaluate_stochastic_cli(trained, tmp_path):
    """The bar: `rlpar evaluate RUN_DIR --stochastic --episodes 5` exits 0 and its row says stochastic."""
    run_dir, _ = trained
    proc = evaluate(run_dir, "--stochastic", "--episodes", 5, "--no-video", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "5 stochastic episodes" in proc.stdout
    row = json.loads((run_dir / "evaluations.jsonl").read_text().splitlines()[-1])
    assert row["policy"] == "stochastic" and len(row["returns"]) == 5
