"""Tune schedulers that survive an interrupted search."""

from __future__ import annotations

import math
from pathlib import Path

from ray.tune.schedulers.async_hyperband import AsyncHyperBandScheduler

from rlpar.analysis.runs import read_metrics


class ResumableASHA(AsyncHyperBandScheduler):
    """ASHA (Li et al. 2020) whose rungs outlive an interruption.

    Tune restores a search with its scheduler as it was first built: the rungs are empty, and
    the trials still to run would be compared with nobody, so none would be stopped early. On the
    first trial event after a restore this one refills the rungs from the trials' own
    metrics.jsonl under `search_dir`: each trial's metric at the first row that reached each rung,
    as ASHA recorded it (a single bracket; with several, a trial's bracket is not known, so
    nothing is refilled). A trial that will run on is taken out again: its rows past its
    checkpoint are about to be cut, and it must meet its rungs again."""

    def __init__(self, *, search_dir: str | None = None, **asha_options):
        super().__init__(**asha_options)
        self.search_dir = search_dir
        self.refilled = False

    def on_trial_add(self, tune_controller, trial):
        self._refill_rungs()
        if trial.status != trial.TERMINATED:  # it runs on from its checkpoint and reaches its rungs anew
            for _, recorded in self._brackets[0]._rungs if len(self._brackets) == 1 else []:
                recorded.pop(trial.trial_id, None)
        super().on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result):
        self._refill_rungs()
        return super().on_trial_result(tune_controller, trial, result)

    def _refill_rungs(self) -> None:
        if self.refilled or not self.search_dir or len(self._brackets) != 1:
            return
        self.refilled = True
        rungs = self._brackets[0]._rungs  # [(milestone, {trial id: metric x mode sign})], largest first
        for history_file in sorted(Path(self.search_dir, "trials").glob("*/metrics.jsonl")):
            history = read_metrics(history_file)
            for milestone, recorded in rungs:
                reached = next((row for row in history if row.get(self._time_attr, 0) >= milestone), None)
                value = reached.get(self._metric) if reached else None
                if isinstance(value, (int, float)) and math.isfinite(value):
                    assert self._metric_op is not None  # Tune set the metric and its mode
                    recorded[history_file.parent.name] = self._metric_op * value
