"""`search=asha` / `search=pbt`: a Ray Tune search over the composed config, instead of one run.

    python main.py search=asha search.num_samples=8 total_steps=60000
    python main.py resume=<run_dir>            # an interrupted search continues

Every trial is an ordinary run (rlpar.search.trial) under `<run_dir>/trials/<trial id>`; Tune's
own state lives in `<run_dir>/tune/`. At the end `<run_dir>/search.csv` has one row per trial and
`<run_dir>/best.yaml` the best trial's hyper-parameters, with the command that reruns it.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import yaml
from hydra.utils import get_class, instantiate

from rlpar.analysis.runs import read_metrics
from rlpar.config.search_space import flatten_space
from rlpar.config.validate import resume_dir_problem
from rlpar.search.space import space_problems, tune_space
from rlpar.search.trial import train_trial

TUNE_DIR = "tune"  # <run_dir>/tune: Tune's experiment state, restored on resume
COMMAND_FILE = "search_command.json"  # the overrides the search was started with


class TuneSearch:
    @classmethod
    def config_problems(cls, config) -> list[str]:
        """The search's settings, every key of its space, and its scheduler (Ray checks its own
        settings); `config`: a rlpar.config.validate.ConfigView."""
        config.number("search.num_samples", integer=True, low=1)
        config.choice("search.mode", ("max", "min"))
        problems = []
        if not isinstance(config.get("search.metric"), str):
            problems.append(f"search.metric: expected a metric name, got {config.get('search.metric')!r}")
        config.number("search.max_concurrent_trials", integer=True, low=1, optional=True)
        config.number("search.learner_cpus", low=0, low_open=True)
        config.number("search.checkpoint_every", integer=True, low=1, optional=True)
        space_refused = space_problems(config.get("search.space"), config.cfg)
        problems += space_refused
        scheduler = config.get("search.scheduler")
        if not space_refused and isinstance(scheduler, dict) and "search.scheduler" not in config.unresolved:
            if problem := scheduler_problem(scheduler, config.get("search.space")):
                problems.append(f"search.scheduler: {problem}")
        resume = config.get("resume")
        if resume is not None and not resume_dir_problem(resume) and not (Path(str(resume)) / TUNE_DIR).is_dir():
            problems.append(f"resume: '{resume}' holds no search state ({TUNE_DIR}/ is missing)")
        return problems

    def __init__(
        self,
        *,
        space: dict,
        scheduler: dict,
        num_samples: int = 8,
        metric: str = "episode_return_mean",
        mode: str = "max",
        max_concurrent_trials: int | None = None,
        learner_cpus: float = 1.0,
        checkpoint_every: int | None = None,
    ):
        """`space`: see rlpar.search.space; `scheduler`: a Ray Tune scheduler (`_target_` and its
        arguments; a PopulationBasedTraining gets the space as its mutations). `learner_cpus`: what
        a trial's learner reserves; its workers add `ray.cpus_per_worker` each, in one placement
        group per trial. `checkpoint_every` (iterations; None: PBT's perturbation interval, else
        the run's checkpoint.every) is how often a trial hands Tune a checkpoint."""
        self.space, self.scheduler_config = space, scheduler
        self.num_samples, self.metric, self.mode = num_samples, metric, mode
        self.max_concurrent_trials, self.learner_cpus = max_concurrent_trials, learner_cpus
        self.checkpoint_every = checkpoint_every
        self.population_based = _is_population_based(scheduler)

    def run(self, base_config: dict, *, run_dir: Path, overrides: list[str], resume: bool) -> dict:
        """Search (or continue the search in `run_dir`); returns the best trial's summary."""
        from ray import tune

        from rlpar.cluster.connection import RayConnection

        os.environ.setdefault(
            "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0"
        )  # a warning a line per checkpoint

        ray_settings = base_config["ray"]
        connection = RayConnection(
            address=ray_settings["address"],
            num_cpus=ray_settings["num_cpus"],
            object_store_mb=ray_settings["object_store_mb"],
        )
        try:
            if not resume:
                (run_dir / COMMAND_FILE).write_text(json.dumps({"overrides": overrides}))
            trainable = tune.with_resources(
                tune.with_parameters(
                    train_trial,
                    base_config=base_config,
                    search_dir=str(run_dir),
                    checkpoint_every=self._checkpoint_every(base_config),
                    metric=self.metric,
                    label_exploits=self.population_based,
                ),
                tune.PlacementGroupFactory(self._bundles(base_config)),
            )
            tune_dir = str((run_dir / TUNE_DIR).resolve())
            if resume and tune.Tuner.can_restore(tune_dir):
                tuner = tune.Tuner.restore(tune_dir, trainable=trainable, resume_unfinished=True, resume_errored=True)
            else:
                tuner = tune.Tuner(
                    trainable,
                    param_space=tune_space(self.space),
                    tune_config=self._tune_config(run_dir),
                    run_config=self._run_config(run_dir),
                )
            tuner.fit()  # Ctrl-C: Tune stops the trials, saves its state and returns
            trials = tune.ExperimentAnalysis(tune_dir).trials
            rows = self.write_table(trials, run_dir=run_dir, total_steps=base_config["total_steps"])
            if any(row["status"] == "unfinished" for row in rows):
                print(
                    f"rlpar: search interrupted; search.csv lists the trials so far (continue with "
                    f"python main.py resume={run_dir})",
                    flush=True,
                )
                raise KeyboardInterrupt
            return self.write_best(rows, run_dir=run_dir)
        finally:
            connection.shutdown()

    # -- Tune's settings ----------------------------------------------------------------------
    def _checkpoint_every(self, base_config: dict) -> int:
        if self.checkpoint_every:
            return self.checkpoint_every
        if self.population_based:  # every exploit finds a checkpoint as fresh as the perturbation
            return int(self.scheduler_config.get("perturbation_interval", 1))
        return int(base_config["checkpoint"]["every"]) or 20

    def _bundles(self, base_config: dict) -> list[dict]:
        """One placement group per trial: its learner, then one bundle per worker, so that a
        distributed trial's env runners cannot take another trial's CPUs."""
        learner = [{"CPU": self.learner_cpus}]
        sampler_cls: Any = get_class(base_config["parallel"]["_target_"])  # a Sampler subclass
        if sampler_cls.in_learner_process:
            return learner
        return learner + [{"CPU": base_config["ray"]["cpus_per_worker"]}] * int(base_config["workers"])

    def _tune_config(self, run_dir: Path):
        from ray import tune

        return tune.TuneConfig(
            metric=self.metric,
            mode=self.mode,
            num_samples=self.num_samples,
            scheduler=build_scheduler(self.scheduler_config, self.space, run_dir.resolve()),
            max_concurrent_trials=self.max_concurrent_trials,
            trial_name_creator=_trial_name,
            trial_dirname_creator=_trial_name,
        )

    def _run_config(self, run_dir: Path):
        from ray import tune

        # PBT keeps every checkpoint: a donor races on while its exploiter restarts, and a
        # pruned donor checkpoint failed the exploit ("does not exist on storage anymore").
        keep = None if self.population_based else 2
        # A trial that fails (its node lost, its process killed) is retried from its newest
        # checkpoint, twice at most, before it counts as errored.
        return tune.RunConfig(
            storage_path=str(run_dir.resolve()),
            name=TUNE_DIR,
            verbose=1,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=keep),
            failure_config=tune.FailureConfig(max_failures=2),
        )

    # -- what a search leaves behind -------------------------------------------------------------
    def write_table(self, trials, *, run_dir: Path, total_steps: int) -> list[dict]:
        """search.csv: one row per trial Tune has made (its hyper-parameters and status), with
        figures read back from the trial's own metrics.jsonl."""
        keys = list(flatten_space(self.space))
        rows = []
        for trial in trials:
            history = read_metrics(run_dir / "trials" / trial.trial_id / "metrics.jsonl")
            values = [r[self.metric] for r in history if _finite(r.get(self.metric))]
            env_steps = history[-1]["env_steps"] if history else 0
            status = {"ERROR": "errored", "TERMINATED": "finished" if env_steps >= total_steps else "early-stopped"}
            rows.append(
                {
                    "trial": trial.trial_id,
                    "status": status.get(trial.status, "unfinished"),
                    **{key: trial.config.get(key) for key in keys},
                    f"final_{self.metric}": values[-1] if values else None,
                    f"best_{self.metric}": (max(values) if self.mode == "max" else min(values)) if values else None,
                    "iterations": history[-1]["iteration"] if history else 0,
                    "env_steps": env_steps,
                    "pbt_exploits": history[-1].get("pbt_exploits", 0) if history else 0,
                    "run_dir": f"trials/{trial.trial_id}",
                    "error_file": _keep_error_file(trial, run_dir / "trials" / trial.trial_id) or "",
                }
            )
        rows.sort(key=lambda row: row["trial"])
        with open(run_dir / "search.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["trial"])
            writer.writeheader()
            writer.writerows(rows)
        return rows

    def write_best(self, rows: list[dict], *, run_dir: Path) -> dict:
        """best.yaml, and the command that reruns the best trial, printed: of the trials that
        trained longest (the finished ones, unless none did), the one whose final metric is best;
        an early value of a trial stopped early is not compared with finished trials' last ones."""
        final = f"final_{self.metric}"
        longest = max((row["env_steps"] for row in rows), default=0)
        ranked = [row for row in rows if _finite(row[final]) and row["env_steps"] == longest]
        if not ranked:
            print("rlpar: no trial reported the metric; nothing to rank (see search.csv)", flush=True)
            return {}
        best = (max if self.mode == "max" else min)(ranked, key=lambda row: row[final])
        hyperparameters = {key: best[key] for key in flatten_space(self.space)}
        started_with = json.loads((run_dir / COMMAND_FILE).read_text())["overrides"]
        kept = [o for o in started_with if not o.lstrip("+~").startswith(("search", "run_dir", "hydra"))]
        command = "python main.py " + " ".join(
            shlex.quote(o) for o in [*kept, *(f"{k}={_override_value(v)}" for k, v in hyperparameters.items())]
        )
        best_summary = {
            "trial": best["trial"],
            "metric": self.metric,
            "final": best[final],
            "best": best[f"best_{self.metric}"],
            "status": best["status"],
            "overrides": hyperparameters,
            "command": command,
        }
        with open(run_dir / "best.yaml", "w") as handle:
            yaml.safe_dump(best_summary, handle, sort_keys=False)
        print(
            f"rlpar: best trial {best['trial']}: {self.metric} {best[final]:.4g} (best {best_summary['best']:.4g}); "
            f"rerun it with:\n  {command}",
            flush=True,
        )
        return best_summary


def build_scheduler(scheduler: dict, space: dict, search_dir: Path | None = None):
    """The Tune scheduler of `scheduler` (`_target_` and arguments); population-based training
    gets the search space as its mutations, ResumableASHA the search's directory."""
    from rlpar.search.schedulers import ResumableASHA

    options: dict[str, Any] = {}
    if _is_population_based(scheduler):
        options["hyperparam_mutations"] = tune_space(space, for_mutation=True)
    elif issubclass(get_class(scheduler["_target_"]), ResumableASHA):
        options["search_dir"] = str(search_dir) if search_dir else None
    return instantiate(scheduler, **options, _convert_="all")


def _is_population_based(scheduler: dict) -> bool:
    from ray.tune.schedulers.pbt import PopulationBasedTraining

    return issubclass(get_class(scheduler["_target_"]), PopulationBasedTraining)


def scheduler_problem(scheduler: dict, space: dict) -> str | None:
    """Why the scheduler cannot be built (Ray checks its own settings), or None."""
    try:
        build_scheduler(scheduler, space)
    except Exception as err:  # Hydra wraps Ray's own ValueError: name the cause
        cause = err.__cause__ or err
        return " ".join(str(cause).split())[:300] or type(cause).__name__
    return None


def _keep_error_file(trial, trial_dir: Path) -> str | None:
    """A failed trial's error, copied into its own run directory as error.txt (Tune writes it in
    Ray's session folder under /tmp, gone with the machine); its path relative to the search's."""
    for folder in (trial.local_path, trial.path):
        source = Path(folder or "", "error.txt")
        if folder and source.is_file():
            trial_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, trial_dir / "error.txt")
            return f"trials/{trial.trial_id}/error.txt"
    return None


def _trial_name(trial) -> str:
    return trial.trial_id


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _override_value(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def run_search(cfg, *, overrides: list[str]) -> dict:
    """The whole job behind `python main.py search=...` (and `resume=` of one): the search's own
    config.yaml in its run directory, then the search; returns the best trial's summary."""
    from rlpar.runtime.run import resolved_config
    from rlpar.runtime.run_dir import write_config

    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config = resolved_config(cfg)
    write_config(run_dir, config)
    search = instantiate(cfg.search, _recursive_=False, _convert_="all")
    return search.run(config, run_dir=run_dir, overrides=overrides, resume=bool(cfg.get("resume")))
