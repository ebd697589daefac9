"""A sweep directory as a list of runs: each run's resolved config and its metrics rows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

MODE_BY_SAMPLER = {"LocalSampler": "local", "MultiprocessSampler": "multiprocess", "DistributedSampler": "distributed"}
THRESHOLDS = {"CartPole-v1": 475.0, "CartPole-v0": 195.0, "Pendulum-v1": -200.0, "Acrobot-v1": -100.0}


@dataclass
class Run:
    path: Path
    config: dict
    metrics: list[dict] = field(default_factory=list)

    @property
    def env_id(self) -> str:
        env = self.config.get("env", {})
        return env.get("id") or str(env.get("entry_point"))

    @property
    def mode(self) -> str:
        target = str(self.config.get("parallel", {}).get("_target_", ""))
        return MODE_BY_SAMPLER.get(target.rsplit(".", 1)[-1], target)

    @property
    def workers(self) -> int:
        return int(self.config.get("workers", 1))

    @property
    def num_envs(self) -> int:
        return self.workers * int(self.config.get("envs_per_worker", 1))

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    @property
    def status(self) -> str:
        """finished, unfinished (stopped or still running before total_steps) or crashed (no metrics)."""
        if not self.metrics:
            return "crashed"
        return "finished" if self.metrics[-1]["env_steps"] >= int(self.config.get("total_steps", 0)) else "unfinished"

    @property
    def final(self) -> dict:
        return self.metrics[-1] if self.metrics else {}

    @property
    def fps(self) -> float | None:
        """Env steps over the wall-clock of training (sampling, transfer, learning, weight sync)."""
        last = self.final
        return last["env_steps"] / last["wall_time_s"] if last and last.get("wall_time_s") else None

    def first_reaching(self, threshold: float | None) -> dict | None:
        if threshold is None:
            return None
        return next((r for r in self.metrics if r.get("episode_return_mean") is not None
                     and r["episode_return_mean"] >= threshold), None)


def _read_metrics(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut short by a kill ends the usable part
    return rows


def load_runs(directory: str | Path) -> list[Run]:
    """Every run directory (one holding config.yaml) below `directory`, in path order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"'{directory}' is not a directory")
    runs = []
    for config_path in sorted(directory.rglob("config.yaml")):
        if config_path.parent.name == ".hydra":
            continue
        config = yaml.safe_load(config_path.read_text()) or {}
        runs.append(Run(config_path.parent, config, _read_metrics(config_path.parent / "metrics.jsonl")))
    return runs
