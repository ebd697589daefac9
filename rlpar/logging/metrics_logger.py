"""Writes each iteration's metrics to metrics.jsonl, TensorBoard and (optionally) W&B."""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path

from tensorboard.compat.proto.summary_pb2 import Summary

from rlpar.errors import RunDirError
from rlpar.logging.event_file import EventFile
from rlpar.logging.run_log import record_event
from rlpar.logging.tags import tag_for

NOT_PLOTTED = {"iteration"}
log = logging.getLogger("rlpar")


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
        self._jsonl = open(self.jsonl_path, "ab")
        # Every row also goes to a file without a name, which nobody else can open, truncate or
        # replace: whatever happens to metrics.jsonl, its rows can be put back (see _keep_file).
        self._rows = tempfile.TemporaryFile(dir=self.run_dir)
        self._rows.write(self.jsonl_path.read_bytes())  # a resumed run's rows so far
        self._size = self._rows.tell()
        self._tb = EventFile(self.run_dir / "tensorboard", flush_secs=5) if tensorboard else None
        self._wandb = None
        if wandb:
            self._wandb = _start_wandb(self.run_dir, config, **wandb)

    def log(self, metrics: dict) -> None:
        row = {k: _jsonable(v) for k, v in metrics.items()}
        line = (json.dumps(row) + "\n").encode()
        try:
            self._keep_file()
            self._rows.write(line)
            self._jsonl.write(line)
            self._jsonl.flush()
            self._size += len(line)
        except OSError as err:
            raise RunDirError(f"cannot write {self.jsonl_path} ({err.strerror or err})") from err
        step = int(metrics["env_steps"])
        scalars = {
            tag_for(k): float(v)
            for k, v in row.items()
            if k not in NOT_PLOTTED and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if self._tb is not None:
            # One event holding every scalar: a tenth of the cost of one add_scalar per tag.
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()])
            try:  # reaches the file every few seconds: a failed write surfaces here
                self._tb.add_summary(summary, global_step=step)
            except OSError as err:
                raise RunDirError(
                    f"cannot write TensorBoard events in {self.run_dir / 'tensorboard'} ({err.strerror or err})"
                ) from err
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def _keep_file(self) -> None:
        """Never lose rows silently: if metrics.jsonl was deleted, replaced, or written to in place
        (truncated, overwritten, appended to) during the run, put back every row logged so far,
        resumed ones included, keep what was found in its place aside under another name, warn,
        and record the event."""
        try:
            on_disk = os.stat(self.jsonl_path)
            ours = os.fstat(self._jsonl.fileno())
            if (on_disk.st_dev, on_disk.st_ino) == (ours.st_dev, ours.st_ino) and on_disk.st_size == self._size:
                return
            what = (
                "replaced" if (on_disk.st_dev, on_disk.st_ino) != (ours.st_dev, ours.st_ino) else "written to in place"
            )
            kept_aside = self.jsonl_path.with_name(f"metrics.jsonl.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
            os.replace(self.jsonl_path, kept_aside)
        except FileNotFoundError:
            what, kept_aside = "deleted", None
        self._rows.flush()
        rows = os.pread(self._rows.fileno(), self._size, 0)
        count = rows.count(b"\n")
        tmp = self.jsonl_path.with_name("metrics.jsonl.tmp")
        tmp.write_bytes(rows)
        os.replace(tmp, self.jsonl_path)
        self._jsonl.close()
        self._jsonl = open(self.jsonl_path, "ab")
        aside = f"; the file found in its place is kept as {kept_aside.name}" if kept_aside else ""
        log.warning(
            f"{self.jsonl_path} was {what} during the run: recreated it with all {count} rows logged so far{aside}"
        )
        record_event(
            self.run_dir,
            "metrics_file_recreated",
            was=what,
            rows=count,
            kept_aside=kept_aside.name if kept_aside else None,
        )

    def log_hparams(self, hparams: dict, final_metrics: dict) -> None:
        """Record the run's hyper-parameters for TensorBoard's HParams tab, its metric columns
        being the scalars already logged (their last values). Written through the hparams plugin
        only: SummaryWriter.add_hparams would also add a one-point `hparam/*` scalar per metric."""
        if self._tb is None:
            return
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        hp = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in hparams.items()}
        columns = {
            tag_for(k): 0.0
            for k, v in final_metrics.items()
            if k not in NOT_PLOTTED and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        for summary in hparams_summaries(hp, columns):
            self._tb.add_summary(summary)

    def close(self) -> None:
        for close in (self._jsonl.close, self._rows.close, *([self._tb.close] if self._tb is not None else [])):
            try:
                close()
            except OSError:  # a full or lost run directory: the run stops on its own one-line error
                pass
        if self._wandb is not None:
            finish_wandb(self._wandb)


def _start_wandb(
    run_dir: Path, config: dict | None, project: str = "rlpar", mode: str = "offline", group=None, **kwargs
):
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    return wandb.init(
        project=project,
        mode=mode,  # type: ignore[arg-type]  # logger.wandb_mode from the config: wandb checks it
        dir=str(run_dir),
        config=config,
        group=group,
        reinit="finish_previous",
        **kwargs,
    )


def finish_wandb(run) -> None:
    """Finish a W&B run; an offline one says where it is and how to upload it (W&B is silenced)."""
    offline = getattr(run, "offline", False)
    sync_dir = getattr(run.settings, "sync_dir", None) if offline else None
    run.finish()
    if sync_dir:
        print(f"rlpar: W&B run saved offline in {sync_dir}; upload it with: wandb sync {sync_dir}", flush=True)
