"""The first hour, as a new user lives it: a run says its budget and an honest ETA, optional extras
degrade to a note, and logs carry only what a user reads."""

import io
import subprocess
import sys
from pathlib import Path

import pytest

from rlpar.config.compose import compose_config
from rlpar.logging.progress import ProgressLine, budget_line

ROOT = Path(__file__).resolve().parents[2]


def row(iteration: int, steps: int, wall: float) -> dict:
    return {"iteration": iteration, "env_steps": steps, "wall_time_s": wall, "fps": 0.0, "episode_return_mean": None}


def test_the_eta_comes_from_the_iterations_after_the_first():
    """The first iteration holds start-up and compilation (30 s here); later ones take 0.1 s for
    512 steps: 97 iterations are left after the third, 9.7 s."""
    progress = ProgressLine(100 * 512, stream=io.StringIO(), every_s=0)
    assert progress.eta_s(row(1, 512, 30.0)) is None  # nothing measured yet
    assert progress.eta_s(row(2, 1024, 30.1)) == pytest.approx(98 * 0.1)
    assert progress.eta_s(row(3, 1536, 30.2)) == pytest.approx(97 * 0.1)


def test_the_progress_line_shows_no_eta_before_one_is_measured():
    stream = io.StringIO()
    progress = ProgressLine(10 * 512, stream=stream, every_s=0)
    progress.update(row(1, 512, 30.0))
    progress.update(row(2, 1024, 30.5))
    first, second = stream.getvalue().splitlines()
    assert first.endswith("eta --:--") and second.endswith("eta 0:04")  # 8 iterations of 0.5 s


def test_the_atari_example_says_its_50m_steps_before_it_starts():
    cfg = compose_config(["env=atari", "env.id=ALE/Breakout-v5", "algo=impala", "parallel=distributed", "workers=4"])
    line = budget_line(total_steps=cfg.total_steps, frames_per_step=cfg.env.atari.frame_skip)
    assert line.startswith("rlpar: training to 50,000,000 env steps (200,000,000 frames) (total_steps=N to change)")
    assert budget_line(total_steps=1000, done_steps=512) == (
        "rlpar: training to 1,000 env steps, 512 of them done (total_steps=N to change); "
        "the ETA follows once the first iterations are measured")


def test_hparams_go_to_the_hparams_plugin_not_to_one_point_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlpar.logging.metrics_logger import MetricsLogger

    logger = MetricsLogger(run_dir=str(tmp_path))
    for iteration in (1, 2):
        logger.log({"iteration": iteration, "env_steps": 512 * iteration, "episode_return_mean": 10.0 * iteration})
    logger.log_hparams({"algo.lr": 0.003, "model.hidden_sizes": [64, 64]},
                       {"iteration": 2, "env_steps": 1024, "episode_return_mean": 20.0})
    logger.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert "returns/episode_return_mean" in scalars
    assert not [tag for tag in scalars if tag.startswith("hparam")]
    assert events.PluginTagToContent("hparams")  # the HParams tab's experiment and session


@pytest.mark.slow
def test_an_offline_wandb_run_says_where_it_is_and_how_to_sync_it(tmp_path, capsys, monkeypatch):
    from rlpar.logging.metrics_logger import MetricsLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    logger = MetricsLogger(run_dir=str(tmp_path), tensorboard=False, wandb={"mode": "offline"})
    logger.log({"iteration": 1, "env_steps": 512, "episode_return_mean": 10.0})
    logger.close()
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "W&B" in line]
    sync_dir = line.rsplit("wandb sync ", 1)[1]
    assert Path(sync_dir).parent == tmp_path / "wandb" and Path(sync_dir).is_dir()


def test_rays_messages_go_to_main_log_only_less_the_worker_pool_warning(capsys, tmp_path):
    """(During faults a run survived, Ray's messages filled the console with tracebacks and raylet
    state dumps beside rlpar's own line.)"""
    import ray

    from rlpar.cluster.ray_messages import quiet_expected_warnings
    from rlpar.logging.run_log import RunLog

    quiet_expected_warnings(ray)
    quiet_expected_warnings(ray)  # once only
    warning = ("WARNING: 16 PYTHON worker processes have been started on node: abc with address: 127.0.0.1, "
               "which is 8x the maximum expected startup concurrency (2).")
    with RunLog(tmp_path):
        ray._private.worker.print_to_stdstream({"lines": [warning], "pid": "raylet", "is_err": False},
                                               ignore_prefix=False)
        ray._private.worker.print_to_stdstream({"lines": ["a worker died"], "pid": "raylet", "is_err": False},
                                               ignore_prefix=False)
    out = capsys.readouterr()
    assert out.out + out.err == ""
    log = (tmp_path / "main.log").read_text()
    assert "(raylet) a worker died" in log and "worker processes have been started" not in log


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    from rlpar import build_trainer

    run_dir = tmp_path_factory.mktemp("evaluate") / "run"
    trainer = build_trainer(compose_config(["progress=false"], run_dir=run_dir))
    try:
        trainer.train()
        trainer.save()
    finally:
        trainer.close()
    return run_dir


@pytest.mark.slow
def test_evaluate_without_moviepy_writes_no_video_says_so_and_succeeds(trained_run):
    program = ("import sys; sys.modules['moviepy'] = None; from rlpar.cli import main; "
               f"sys.exit(main(['evaluate', {str(trained_run)!r}, '--episodes', '3']))")
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("rlpar: evaluate: no video (MoviePy is not installed: pip install 'rlpar[video]'; "
                        "--no-video skips videos without this note)")
    assert not (trained_run / "videos").exists()
    returns = lines[1].split("returns: ", 1)[1].split(" (mean", 1)[0].split()
    assert len(returns) == 3 and all(len(r.split(".")[1]) == 2 for r in returns)  # one precision for all
