"""A sweep directory as a list of runs: each run's resolved config and its metrics rows."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

log = logging.getLogger("rlpar")

# rlpar's own targets where Gymnasium registers no `reward_threshold` (the tuned presets aim at them).
RLPAR_THRESHOLDS = {"Pendulum-v1": -200.0}


@dataclass
class Run:
    path: Path
    config: dict
    metrics: list[dict] = field(default_factory=list)

    @property
    def env_id(self) -> str:
        """The environment trained: `env.entry_point` wins over `env.id`, as in rlpar.envs.factory.make_env."""
        env = self.config.get("env") or {}
        return str(env.get("entry_point") or env.get("id") or "unknown env")

    @property
    def registered_id(self) -> str | None:
        """The Gymnasium id trained, or None when the run built a class by its entry point."""
        env = self.config.get("env") or {}
        return None if env.get("entry_point") else env.get("id")

    @property
    def configured_threshold(self) -> float | None:
        """A return threshold the run's config carries as `env.reward_threshold` (Gymnasium's name for it).

        conf/env has no such key today (the config check refuses `+env.reward_threshold`); configs
        written by other tools, or a future env group that adds it, are read."""
        value = (self.config.get("env") or {}).get("reward_threshold")
        return None if value is None else float(value)

    @property
    def mode(self) -> str:
        """The parallel group's option (`parallel.name`)."""
        return str((self.config.get("parallel") or {}).get("name", "unknown"))

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
        return next(
            (
                r
                for r in self.metrics
                if r.get("episode_return_mean") is not None and r["episode_return_mean"] >= threshold
            ),
            None,
        )


def gymnasium_threshold(env_id: str | None) -> float | None:
    """The `reward_threshold` Gymnasium registers for `env_id`, or None (none registered, unknown id)."""
    if not env_id:
        return None
    import gymnasium as gym

    try:
        value = gym.spec(env_id).reward_threshold
    except Exception:  # unregistered, deprecated, or a namespace whose package is not installed
        return None
    return None if value is None else float(value)


def return_threshold(env: str, runs: list[Run], overrides: dict[str, float] | None = None) -> tuple[float | None, str]:
    """The return an `env` run should reach, and where that figure comes from.

    In order: an override (`--threshold ENV=VALUE`), the runs' config (`env.reward_threshold`),
    Gymnasium's `reward_threshold` for the id, rlpar's own target (RLPAR_THRESHOLDS).
    """
    if overrides and env in overrides:
        return float(overrides[env]), "override"
    configured = next((r.configured_threshold for r in runs if r.configured_threshold is not None), None)
    if configured is not None:
        return configured, "run config"
    registered = next((r.registered_id for r in runs if r.registered_id), None)
    gym_value = gymnasium_threshold(registered)
    if gym_value is not None:
        return gym_value, "Gymnasium"
    if registered in RLPAR_THRESHOLDS:
        return RLPAR_THRESHOLDS[registered], "rlpar"
    return None, "none"


def read_metrics(path: Path, notes: list[str] | None = None) -> list[dict]:
    """A run's metrics.jsonl rows ([] before the first). A line that is not a row is skipped and
    the rows after it kept, with a note naming the file and line (in `notes`, else logged); a
    last line cut short by a kill is skipped without one."""
    rows: list[dict] = []
    if not path.exists():
        return rows
    data = path.read_bytes()
    lines = data.splitlines()
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            row, why = None, f"not JSON ({err.msg}, column {err.colno})"
        except UnicodeDecodeError:
            row, why = None, "not UTF-8 text"
        else:
            why = f"not a metrics row (a JSON {type(row).__name__})"
        if isinstance(row, dict):
            rows.append(row)
        elif line.strip() and not (number == len(lines) and not data.endswith(b"\n")):
            _note(notes, f"{path}: line {number} skipped, {why}; the rows after it are kept")
    return rows


def _note(notes: list[str] | None, text: str) -> None:
    if notes is None:
        log.warning(text)
    else:
        notes.append(text)


SEARCH_STATE = "tune"  # <search dir>/tune: Ray Tune's own state (rlpar.search.tune_search.TUNE_DIR), never a run


def is_search_config(config: dict | None) -> bool:
    """A search's own config.yaml (`search` set): it describes the search, not a run, and has no metrics."""
    return bool((config or {}).get("search"))


def is_search_dir(directory: str | Path) -> bool:
    """A search run directory (rlpar.search): search.csv, or a config.yaml with `search` set."""
    directory = Path(directory)
    if (directory / "search.csv").is_file():
        return True
    try:
        return is_search_config(_read_config(directory / "config.yaml"))
    except UnreadableConfig:
        return False


class UnreadableConfig(ValueError):
    """A run's config.yaml that is not a run's config: the run is skipped, with this reason."""


# Keys the report reads as numbers, and as mappings
NUMBER_KEYS = ("workers", "envs_per_worker", "seed", "total_steps")
MAPPING_KEYS = ("env", "parallel", "algo")


def _read_config(path: Path) -> dict | None:
    """The config.yaml at `path` as a dict; None where there is none; UnreadableConfig, naming
    why, where it is not a run's config."""
    if not path.is_file():
        return None
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UnreadableConfig(f"its config.yaml is not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UnreadableConfig(
            f"its config.yaml is not YAML ({getattr(err, 'problem', None) or 'unreadable'}{where})"
        ) from None
    except OSError as err:
        raise UnreadableConfig(f"its config.yaml cannot be read ({err.strerror or err})") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise UnreadableConfig(f"its config.yaml is not a mapping of keys (it holds a {type(config).__name__})")
    wrong = [
        f"{key} is not a number"
        for key in NUMBER_KEYS
        if key in config and (isinstance(config[key], bool) or not isinstance(config[key], int))
    ]
    wrong += [
        f"{key} is not a mapping"
        for key in MAPPING_KEYS
        if config.get(key) is not None and not isinstance(config[key], dict)
    ]
    if wrong:
        raise UnreadableConfig(f"its config.yaml is not a run's config ({', '.join(wrong)})")
    return config


def _run_configs(directory: Path, notes: list[str] | None = None) -> list[tuple[Path, dict]]:
    """(run directory, its config) below `directory`, symlinked directories followed, each run once.

    A search directory is not a run itself and its `tune/` is skipped: Ray Tune keeps its own copies
    of the trials there, and the trials are the run directories under `trials/`."""
    found, seen = [], set()
    for root, dirs, files in os.walk(directory, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:  # a link cycle, or a run reachable by two paths
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d != ".hydra")
        try:
            config = _read_config(Path(root) / "config.yaml") if "config.yaml" in files else None
        except UnreadableConfig as why:
            _note(notes, f"skipped run {root}: {why}")
            continue
        if "search.csv" in files or is_search_config(config):
            dirs[:] = [d for d in dirs if d != SEARCH_STATE]
        elif config is not None:
            found.append((Path(root), config))
    return sorted(found, key=lambda item: item[0])


def load_runs(directory: str | Path, notes: list[str] | None = None) -> list[Run]:
    """Every run directory (one holding config.yaml) below `directory`, in path order. A run whose
    config.yaml cannot be read is skipped, and a metrics line that is not a row, each with a note
    (in `notes`, else logged)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"'{directory}' is not a directory")
    return [
        Run(path, config, read_metrics(path / "metrics.jsonl", notes))
        for path, config in _run_configs(directory, notes)
    ]


def no_finished_runs(
    directory: str | Path, runs: list[Run], command: str = "python main.py -m experiment=<preset>"
) -> str | None:
    """One sentence saying why `directory` has nothing to show, or None when it has a finished run."""
    if any(r.status == "finished" for r in runs):
        return None
    if not Path(directory).is_dir():
        why = "does not exist"
    elif not runs:
        why = "holds no run directories (a run directory has config.yaml and metrics.jsonl)"
    else:
        why = f"holds {len(runs)} runs but none has finished"
    return (
        f"'{directory}' {why}, so there is nothing to show: run a sweep first ({command}) or point to another "
        "directory."
    )
