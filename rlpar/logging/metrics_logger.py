"""Writes each iteration's metrics to metrics.jsonl, TensorBoard and (optionally) W&B."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from tensorboard.compat.proto.summary_pb2 import Summary

from rlpar.logging.tags import tag_for

NOT_PLOTTED = {"iteration"}


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return value


class MetricsLogger:
    def __init__(
        self,
        *,
        run_dir: str,
        tensorboard: bool = True,
        wandb: dict | None = None,
        config: dict | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.run_dir / "metrics.jsonl"
        self._jsonl = open(self.jsonl_path, "a", buffering=1)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"), flush_secs=5)
        self._wandb = None
        if wandb:
            self._wandb = _start_wandb(self.run_dir, config, **wandb)

    def log(self, metrics: dict) -> None:
        row = {k: _jsonable(v) for k, v in metrics.items()}
        self._jsonl.write(json.dumps(row) + "\n")
        step = int(metrics["env_steps"])
        scalars = {
            tag_for(k): float(v)
            for k, v in row.items()
            if k not in NOT_PLOTTED and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if self._tb is not None:
            # One event holding every scalar: a tenth of the cost of one add_scalar per tag.
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()])
            self._tb._get_file_writer().add_summary(summary, global_step=step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def log_hparams(self, hparams: dict, final_metrics: dict) -> None:
        """Record the run's hyper-parameters next to its final numbers (TensorBoard HParams tab)."""
        if self._tb is None:
            return
        hp = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in hparams.items()}
        final = {f"hparam/{k}": float(v) for k, v in final_metrics.items() if isinstance(v, (int, float)) and v is not None}
        self._tb.add_hparams(hp, final, run_name=".")

    def close(self) -> None:
        self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _start_wandb(run_dir: Path, config: dict | None, project: str = "rlpar", mode: str = "offline", group=None, **kwargs):
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    return wandb.init(
        project=project,
        mode=mode,
        dir=str(run_dir),
        config=config,
        group=group,
        reinit="finish_previous",
        **kwargs,
    )
