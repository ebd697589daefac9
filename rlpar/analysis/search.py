"""A search run directory read back: its trials as runs, search.csv and best.yaml.

Layout (written by rlpar.search): `<dir>/trials/<trial>/` each an ordinary run directory,
`<dir>/search.csv` with a row per trial (hyper-parameters, final and best metric, iterations,
env_steps, status) and `<dir>/best.yaml`, the best configuration. Any of the three may be missing
while a search is under way; what is there is shown.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rlpar.analysis.runs import Run, load_runs

DEFAULT_METRIC = "episode_return_mean"


@dataclass
class Search:
    path: Path
    trials: dict[str, Run] = field(default_factory=dict)  # trial name -> run
    table: list[dict] = field(default_factory=list)  # search.csv, as written
    best: dict | None = None  # best.yaml

    @property
    def metric(self) -> str:
        """The metric searched on, if best.yaml names it, else the mean episode return."""
        named = (self.best or {}).get("metric")
        return named if isinstance(named, str) else DEFAULT_METRIC

    @property
    def maximise(self) -> bool:
        return str((self.best or {}).get("mode", "max")).lower() != "min"

    def best_trial(self) -> str | None:
        """The trial best.yaml names, else the one whose metric got highest (lowest with mode: min)."""
        named = next((str(self.best[k]) for k in ("trial", "trial_name", "name") if (self.best or {}).get(k)), None)
        if named in self.trials:
            return named
        scores = {name: _extreme(run, self.metric, self.maximise) for name, run in self.trials.items()}
        scores = {name: score for name, score in scores.items() if score is not None}
        if not scores:
            return None
        pick = max if self.maximise else min
        return pick(scores, key=scores.get)


def _extreme(run: Run, metric: str, maximise: bool) -> float | None:
    values = [row[metric] for row in run.metrics if row.get(metric) is not None]
    if not values:
        return None
    return max(values) if maximise else min(values)


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
            search.table = list(csv.DictReader(handle))
    if (directory / "best.yaml").is_file():
        search.best = yaml.safe_load((directory / "best.yaml").read_text()) or {}
    return search


def no_trials(directory: str | Path, search: Search) -> str | None:
    """One sentence saying why `directory` has no trials to show, or None when it has some."""
    if search.trials:
        return None
    directory = Path(directory)
    if not directory.is_dir():
        why = "does not exist"
    else:
        why = "has no trials (run directories under trials/<trial name>/)"
    return f"'{directory}' {why}, so there is nothing to show: run a search first or set SEARCH_DIR to a search run directory."
