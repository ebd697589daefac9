"""The run-directory contract that later tools read: config, metrics, checkpoints, events."""

import json

import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlpar.runtime.run import run
from tests.defaults import STEPS_PER_ITERATION

REQUIRED = ("iteration", "env_steps", "wall_time_s", "fps", "episodes", "episode_return_mean")


def test_run_directory_contract(make_cfg, tmp_path):
    run_dir = tmp_path / "run"
    cfg = make_cfg(f"total_steps={16 * STEPS_PER_ITERATION}", "checkpoint.every=4", "checkpoint.keep=2", run_dir=run_dir)
    final = run(cfg)

    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["env"]["id"] == "CartPole-v1" and saved["total_steps"] == 16 * STEPS_PER_ITERATION
    assert saved["run_dir"] == str(run_dir)

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    assert len(rows) == 16
    for row in rows:
        for key in REQUIRED:
            assert key in row, key
        assert row["fps"] > 0
    assert [r["env_steps"] for r in rows] == [STEPS_PER_ITERATION * i for i in range(1, 17)]
    assert rows[0]["episode_return_mean"] is None or rows[0]["episodes"] > 0
    assert all(b["wall_time_s"] >= a["wall_time_s"] for a, b in zip(rows, rows[1:]))
    assert rows[-1]["episodes"] > 0 and rows[-1]["episode_return_mean"] > 0
    assert final["iteration"] == 16

    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["checkpoint_00000012.pt", "checkpoint_00000016.pt"]

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "returns/episode_return_mean" in tags and "throughput/fps" in tags and "losses/loss_policy" in tags
    fps = events.Scalars("throughput/fps")
    assert len(fps) == 16 and fps[-1].step == 16 * STEPS_PER_ITERATION
    assert abs(fps[-1].value - rows[-1]["fps"]) < 1e-3 * rows[-1]["fps"]
