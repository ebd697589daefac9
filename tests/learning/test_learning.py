"""PPO really learns: the default command's config solves CartPole-v1."""

import json

import pytest

from rlpar.runtime.run import run


@pytest.mark.slow
def test_default_config_solves_cartpole(make_cfg, tmp_path):
    run_dir = tmp_path / "learn"
    final = run(make_cfg("seed=0", "eval_episodes=5", run_dir=run_dir))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    reached = [r["env_steps"] for r in rows if (r["episode_return_mean"] or 0) >= 475]
    assert reached, f"best mean return {final['episode_return_best_mean']}"
    assert reached[0] <= 100_000
    assert final["eval_return_mean"] >= 400


@pytest.mark.slow
@pytest.mark.parametrize("init_log_std,warned", [(-5.0, 1), (0.0, 0)])
def test_a_collapsed_gaussian_policy_is_reported_once(make_cfg, tmp_path, caplog, init_log_std, warned):
    """std 0.0067 from the start: one warning over three iterations; a healthy std 1: none."""
    from rlpar.runtime.build import build_trainer

    trainer = build_trainer(make_cfg("env=pendulum", f"model.init_log_std={init_log_std}", "total_steps=100000",
                                     "checkpoint.every=0", run_dir=tmp_path / "collapse"))
    try:
        with caplog.at_level("WARNING", logger="rlpar"):
            for _ in range(3):
                trainer.train()
    finally:
        trainer.close()
    warnings = [r.getMessage() for r in caplog.records if "exploration collapsed" in r.getMessage()]
    assert len(warnings) == warned and all("std 0.00" in w for w in warnings)
