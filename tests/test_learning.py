"""PPO really learns: the default command's config solves CartPole-v1."""

import json

from rlpar.runtime.run import run


def test_default_config_solves_cartpole(make_cfg, tmp_path):
    run_dir = tmp_path / "learn"
    final = run(make_cfg("seed=0", "eval_episodes=5", run_dir=run_dir))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    reached = [r["env_steps"] for r in rows if (r["episode_return_mean"] or 0) >= 475]
    assert reached, f"best mean return {final['episode_return_best_mean']}"
    assert reached[0] <= 100_000
    assert final["eval_return_mean"] >= 400
