"""A search run directory read back: its trials as runs, search.csv and best.yaml.

Layout (written by rlpar.search): `<dir>/config.yaml` the search's own config (not a run),
`<dir>/trials/<trial>/` each an ordinary run directory, `<dir>/search.csv` with a row per trial
(hyper-parameters, final and best metric, iterations, env_steps, status), `<dir>/best.yaml`, the
best configuration, and `<dir>/tune/`, Ray Tune's own state (never read). search.csv and best.yaml
are written at the end: while a search is under way, what is there is shown.

Each trial is a configuration of its own: trials differ by hyper-parameters, not by seed, so they
are listed and named one by one, never averaged like the seeds of a sweep.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlpar.analysis.runs import Run, load_runs
from rlpar.config.search_space import flatten_space

DEFAULT_METRIC = "episode_return_mean"
# search.csv's columns that are not hyper-parameters (besides final_<metric> and best_<metric>)
TRIAL_COLUMNS = ("trial", "status", "iterations", "env_steps", "pbt_exploits", "run_dir")
STATUSES = ("finished", "early-stopped", "errored", "unfinished", "crashed")  # in the order they are counted


@dataclass
class Search:
    path: Path
    trials: dict[str, Run] = field(default_factory=dict)  # trial name -> run
    table: list[dict] = field(default_factory=list)  # search.csv, numbers read as numbers
    best: dict | None = None  # best.yaml
    config: dict = field(default_factory=dict)  # the search's own config.yaml

    @property
    def settings(self) -> dict:
        """The config's `search` group (metric, mode, space, scheduler)."""
        return self.config.get("search") or {}

    @property
    def metric(self) -> str:
        """The metric searched on: best.yaml's, else the search config's, else the mean episode return."""
        for named in ((self.best or {}).get("metric"), self.settings.get("metric")):
            if isinstance(named, str):
                return named
        return DEFAULT_METRIC

    @property
    def maximise(self) -> bool:
        """The search's `mode` (best.yaml does not repeat it); max unless it says min."""
        mode = self.settings.get("mode") or (self.best or {}).get("mode") or "max"
        return str(mode).lower() != "min"

    @property
    def hyperparameters(self) -> list[str]:
        """The searched keys (dotted): search.csv's own columns, else the space in the search's config."""
        if self.table:
            return [
                key for key in self.table[0] if key not in TRIAL_COLUMNS and not key.startswith(("final_", "best_"))
            ]
        return list(flatten_space(self.settings.get("space")))

    def rows(self) -> list[dict]:
        """A row per trial, best final metric first (ties: best.yaml's pick, then the longer-trained):
        search.csv's rows, or, before the search has written it, rows made from each trial's config
        and metrics."""
        rows = self.table or [self._row_of(name, run) for name, run in sorted(self.trials.items())]
        final = f"final_{self.metric}"
        named = str((self.best or {}).get("trial"))

        def rank(row):
            value = row.get(final)
            known = _finite(value)
            score = (-value if self.maximise else value) if known else 0.0
            return not known, score, str(row["trial"]) != named, -(row.get("env_steps") or 0), str(row["trial"])

        return sorted(rows, key=rank)

    def status_counts(self) -> dict[str, int]:
        """How many trials ended how: finished, early-stopped (by the scheduler), errored, unfinished."""
        counts = Counter(row["status"] for row in self.rows())
        return {
            status: counts[status] for status in [*STATUSES, *sorted(set(counts) - set(STATUSES))] if counts[status]
        }

    def label(self, name: str) -> str:
        """A trial named with its hyper-parameters, e.g. `a1b2c_00003 (algo.lr=0.0021)`."""
        row = next((r for r in self.rows() if str(r["trial"]) == name), {})
        values = ", ".join(f"{key}={_short(row.get(key))}" for key in self.hyperparameters if key in row)
        return f"{name} ({values})" if values else name

    def best_trial(self) -> str | None:
        """The trial best.yaml names, else the one whose metric got highest (lowest with mode: min)."""
        best = self.best or {}
        named = next((str(best[k]) for k in ("trial", "trial_name", "name") if best.get(k)), None)
        if named in self.trials:
            return named
        extremes = {name: _extreme(run, self.metric, self.maximise) for name, run in self.trials.items()}
        scores = {name: score for name, score in extremes.items() if score is not None}
        if not scores:
            return None
        pick = max if self.maximise else min
        return pick(scores, key=lambda name: scores[name])

    def _row_of(self, name: str, run: Run) -> dict:
        """The row search.csv will have for a trial, from its run directory (status as Run.status)."""
        values = [row[self.metric] for row in run.metrics if _finite(row.get(self.metric))]
        return {
            "trial": name,
            "status": run.status,
            **{key: _dotted(run.config, key) for key in self.hyperparameters},
            f"final_{self.metric}": values[-1] if values else None,
            f"best_{self.metric}": _extreme(run, self.metric, self.maximise),
            "iterations": run.final.get("iteration", 0),
            "env_steps": run.final.get("env_steps", 0),
            "pbt_exploits": run.final.get("pbt_exploits", 0),
            "run_dir": f"trials/{name}",
        }


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _extreme(run: Run, metric: str, maximise: bool) -> float | None:
    values = [row[metric] for row in run.metrics if _finite(row.get(metric))]
    if not values:
        return None
    return max(values) if maximise else min(values)


def _dotted(config: Any, key: str):
    for part in key.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _typed(column: str, value: str):
    """A search.csv cell as the number it was written from ('' -> None); names stay text
    (int() would read a trial id such as 12345_00001 as a number)."""
    if value == "" or value is None:
        return None
    if column in ("trial", "status", "run_dir") or "_" in value:
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def load_search(directory: str | Path) -> Search:
    """What a search directory holds; an empty Search when it does not exist."""
    directory = Path(directory)
    search = Search(directory)
    trials_dir = directory / "trials"
    if trials_dir.is_dir():
        for run in load_runs(trials_dir):
            search.trials[run.path.relative_to(trials_dir).parts[0]] = run
    if (directory / "search.csv").is_file():
        with open(directory / "search.csv", newline="") as handle:
            search.table = [{key: _typed(key, value) for key, value in row.items()} for row in csv.DictReader(handle)]
    if (directory / "best.yaml").is_file():
        search.best = yaml.safe_load((directory / "best.yaml").read_text()) or {}
    if (directory / "config.yaml").is_file():
        search.config = yaml.safe_load((directory / "config.yaml").read_text()) or {}
    return search


def no_trials(
    directory: str | Path, search: Search, instead: str = "set SEARCH_DIR to a search run directory"
) -> str | None:
    """One sentence saying why `directory` has no trials to show, or None when it has some."""
    if search.trials:
        return None
    directory = Path(directory)
    if not directory.is_dir():
        why = "does not exist"
    else:
        why = "has no trials (run directories under trials/<trial name>/)"
    return f"'{directory}' {why}, so there is nothing to show: run a search first or {instead}."
