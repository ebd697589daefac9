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
    assert "cannot render" in one_line_refusal(evaluate(copy, "--episodes", 1, cwd=tmp_path), 1)
    proc = evaluate(copy, "--episodes", 1, "--no-video", cwd=tmp_path)
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
