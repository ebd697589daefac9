"""One search trial: an ordinary rlpar run in `<search dir>/trials/<trial id>`, reporting every
iteration to Ray Tune and handing it a checkpoint every `checkpoint_every` iterations (never
at the end: a finished trial is nobody's donor).

Restored from a checkpoint, a trial tells two cases apart by who wrote it:
- its own (an interrupted search resumed): the run continues exactly, its metrics.jsonl cut back
  to the checkpoint's iteration;
- another trial's (a PBT exploit): the donor's weights, optimiser state and counters, under this
  trial's own config, so the mutated hyper-parameters take effect at once (never the
  checkpoint's: ray-project/ray#62173). The exploit is counted in every later metrics row
  (`pbt_exploits`, `pbt_donor`), and env_steps go on from the donor's.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from rlpar.analysis.runs import read_metrics
from rlpar.search.space import apply_overrides

WRITER = "rlpar_trial.json"  # in a Tune checkpoint: which trial wrote it


def train_trial(
    hyperparameters: dict,
    *,
    base_config: dict,
    search_dir: str,
    checkpoint_every: int,
    metric: str,
    label_exploits: bool,
) -> None:
    """The Tune function trainable."""
    from ray import tune

    from rlpar.config.validate import validate_config
    from rlpar.runtime.build import build_trainer
    from rlpar.runtime.checkpoint import list_checkpoints, load_checkpoint
    from rlpar.runtime.run import truncate_metrics

    trial_id = tune.get_context().get_trial_id()
    run_dir = Path(search_dir) / "trials" / trial_id
    cfg = OmegaConf.create(base_config)
    with open_dict(cfg):
        cfg.search, cfg.resume, cfg.progress, cfg.run_dir = None, None, False, str(run_dir)
        cfg.checkpoint.every = checkpoint_every
    apply_overrides(cfg, hyperparameters)
    validate_config(cfg, check_env=False)  # a sampled value out of range fails this trial in one line
    run_dir.mkdir(parents=True, exist_ok=True)

    state, donor = None, None
    restored = tune.get_checkpoint()
    if restored is None:  # from the start, also when an interrupted search restarts it: no row twice
        truncate_metrics(run_dir / "metrics.jsonl", 0)
    else:
        with restored.as_directory() as folder:
            writer = json.loads((Path(folder) / WRITER).read_text())["trial_id"]
            state = load_checkpoint(list_checkpoints(Path(folder))[-1])
        if writer == trial_id:
            truncate_metrics(run_dir / "metrics.jsonl", int(state["iteration"]))
        else:
            donor = writer
    last = (read_metrics(run_dir / "metrics.jsonl") or [{}])[-1]  # this trial's own history so far
    exploits = int(last.get("pbt_exploits", 0)) + (donor is not None)
    trainer = build_trainer(cfg, progress=False)
    try:
        if state is not None:
            trainer.restore(state, environments=donor is None)  # a donor's environments are not this trial's
        if label_exploits:
            trainer.labels = {"pbt_exploits": exploits, "pbt_donor": donor or last.get("pbt_donor", "")}
        while not trainer.done:
            metrics = trainer.train()
            report = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            report.setdefault(metric, float("nan"))  # no episode finished yet
            # At the end the run directory keeps a final checkpoint; Tune gets none, so no trial is
            # ever cloned from a finished one (PBT can pick a donor just as it finishes: the
            # exploited trial then ended at once, at the donor's count, with nothing logged).
            if trainer.done and trainer.iteration % checkpoint_every:
                trainer.save()
            if trainer.done or trainer.iteration % checkpoint_every:
                tune.report(report)
                continue
            with tempfile.TemporaryDirectory() as folder:  # Tune copies it into its storage
                assert trainer.checkpointer is not None  # a trial's trainer checkpoints
                shutil.copy(list_checkpoints(trainer.checkpointer.directory)[-1], folder)
                (Path(folder) / WRITER).write_text(json.dumps({"trial_id": trial_id}))
                tune.report(report, checkpoint=tune.Checkpoint.from_directory(folder))
    finally:
        trainer.close()
