"""`run(cfg)`: the whole job behind `python main.py`, callable from tests and sweeps."""

from __future__ import annotations

import json
import logging
import os
from functools import partial
from pathlib import Path
from typing import cast

from omegaconf import DictConfig, OmegaConf

from rlpar.config.validate import validate_config
from rlpar.errors import RunDirError
from rlpar.interrupts import HeldInterrupts
from rlpar.logging import startup
from rlpar.logging.progress import budget_line
from rlpar.logging.run_log import FILE_ONLY, RunLog, record_event
from rlpar.runtime import run_lock
from rlpar.runtime.build import build_trainer
from rlpar.runtime.checkpoint import latest_valid_checkpoint, set_aside
from rlpar.runtime.errors import TRAINING_STOPS, CheckpointWriteError
from rlpar.runtime.run_dir import write_config


def resolved_config(cfg: DictConfig) -> dict:
    return cast(dict, OmegaConf.to_container(cfg, resolve=True))


def run(cfg: DictConfig, *, validated: bool = False, env_probe=None) -> dict:
    """Validate (unless the caller has, e.g. main.py, passing its `env_probe`), lock the run
    directory (unless the caller holds it), build, train to `total_steps` (resuming if asked),
    evaluate; return final metrics."""
    if not validated:
        env_probe = validate_config(cfg)
    run_dir = Path(cfg.run_dir)
    locked_here = not run_lock.holds(run_dir)
    if locked_here:
        run_lock.acquire(run_dir, new_run=not cfg.get("resume"))
    try:
        with RunLog(run_dir) as run_log:
            try:
                return _locked_run(cfg, run_dir, env_probe)
            except KeyboardInterrupt:
                raise
            except TRAINING_STOPS as stop:  # the console's line (main.py prints it) kept in main.log too
                logging.getLogger("rlpar").error("training stopped: %s", stop, extra=FILE_ONLY)
                raise
            except Exception as err:  # a bug or an environment's own failure: one line, traceback kept
                err.add_note(run_log.traceback_note(err))
                raise
    finally:
        if locked_here:
            run_lock.release(run_dir)


def _locked_run(cfg: DictConfig, run_dir: Path, env_probe) -> dict:
    checkpoint = None
    write_config(run_dir, resolved_config(cfg))
    try:
        if cfg.get("resume"):
            checkpoint = _newest_usable_checkpoint(run_dir)
            truncate_metrics(run_dir / "metrics.jsonl", int(checkpoint["iteration"]))
    except OSError as err:
        raise RunDirError(f"cannot write to run directory {run_dir} ({err.strerror or err})") from err
    if checkpoint is not None and int(checkpoint["env_steps"]) >= int(cfg.total_steps):
        print(
            f"rlpar: {run_dir} is already finished: {int(checkpoint['env_steps']):,} of {int(cfg.total_steps):,} "
            f"env steps (iteration {int(checkpoint['iteration'])}); to train on, resume with a larger total_steps",
            flush=True,
        )
        return {}
    trainer = build_trainer(cfg, env_probe=env_probe)
    startup.mark("building the learner and starting the workers")
    trainer.check_run_dir = partial(run_lock.check_owner, run_dir)
    try:
        if checkpoint is not None:
            trainer.restore(checkpoint, environments=bool(cfg.get("resume_envs", True)))
        # Ctrl-C / SIGTERM while training: finish the iteration under way, then stop. Stopped
        # mid-iteration, a checkpoint would hold a half-updated learner, or environments stepped
        # into the next rollout, under the last finished iteration's number: a resume would not
        # continue the run exactly, and that iteration's metrics row could be missing.
        interrupts = HeldInterrupts(
            "\nstopping after this iteration (interrupt again to stop at once, without a checkpoint)",
            second_stops_at_once=True,
        )
        print(
            budget_line(
                total_steps=trainer.total_steps,
                done_steps=trainer.env_steps,
                frames_per_step=trainer.frames_per_step,
                time_limit_s=trainer.time_limit_s,
                advice=_layout_advice(cfg, trainer.env_spec),
            ),
            flush=True,
        )
        try:
            with interrupts:
                final = trainer.fit(should_stop=lambda: interrupts.requested)
            if interrupts.requested:
                raise KeyboardInterrupt
        except (KeyboardInterrupt, *TRAINING_STOPS) as stop:
            # Ctrl-C, SIGTERM, or a failure the run cannot train through: keep what was learnt
            # (non-finite updates were skipped, so the weights are sound), then let `finally`
            # stop every worker. Not after a second Ctrl-C: that stops mid-iteration, where the
            # state is half of one iteration and half of the next.
            if interrupts.forced:
                print(
                    f"\nstopped during iteration {trainer.iteration + 1}, without a checkpoint "
                    f"(continue from the newest one with resume={run_dir})",
                    flush=True,
                )
            elif (
                trainer.checkpointer is not None
                and trainer.iteration > 0
                and not isinstance(stop, (CheckpointWriteError, run_lock.RunDirLostError))
            ):
                path = trainer.save()
                why = "interrupted" if isinstance(stop, KeyboardInterrupt) else "stopped"
                print(
                    f"\n{why} at iteration {trainer.iteration}: checkpoint {path} (continue with resume={run_dir})",
                    flush=True,
                )
            raise
        if cfg.get("eval_episodes", 0):
            final = {
                **final,
                **final_evaluation(
                    trainer, run_dir, int(cfg.eval_episodes), stochastic=bool(cfg.get("eval_stochastic", False))
                ),
            }
        if trainer.logger is not None:
            trainer.logger.log_hparams(_flat_hparams(resolved_config(cfg)), final)
        if trainer.progress is not None:
            trainer.progress.summary(final, str(run_dir))
        return final
    finally:
        trainer.close()


def _layout_advice(cfg: DictConfig, env_spec) -> str | None:
    """A sampler layout the cost model says is likely slower than a simpler one, in one line
    (rlpar.sampling.cost); None when it is not, or cannot be, judged."""
    from rlpar.envs.factory import make_env
    from rlpar.sampling.cost import oversubscribed_ray_advice, step_cpu_seconds

    def measure_step() -> float:
        env = make_env(env_spec)
        try:
            return step_cpu_seconds(env)
        finally:
            env.close()

    ray = cfg.get("ray") or {}
    try:
        return oversubscribed_ray_advice(
            sampler=cfg.parallel.get("name"),
            workers=int(cfg.workers),
            env_name=env_spec.id or env_spec.entry_point,
            cores=None if ray.get("address") else int(ray.get("num_cpus") or os.cpu_count() or 0),
            step_cpu_s=measure_step,
        )
    except Exception:  # noqa: BLE001 - advice only: an environment that fails here is reported by training
        return None


def final_evaluation(trainer, run_dir: Path, episodes: int, *, stochastic: bool = False) -> dict:
    """`eval_episodes` of the trained policy, deterministic (or sampling: `eval_stochastic`), on
    fresh environments seeded `seed + 10000 + i` (as `rlpar evaluate`'s default); the returns and lengths
    are appended to `evaluations.jsonl` as a row with `source: training`, which `rlpar report` reads for a
    benchmark's figures. A row that cannot be written is said in one line; the run has finished."""
    import time

    from rlpar.runtime.evaluate_run import EVALUATIONS_FILE
    from rlpar.runtime.evaluation import EVAL_SEED_OFFSET, policy_kind

    per_episode: list = []
    metrics = trainer.evaluate(episodes, episodes=per_episode, stochastic=stochastic)
    row = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "source": "training",
        "iteration": trainer.iteration,
        "env_steps": trainer.env_steps,
        "seed": trainer.seed + EVAL_SEED_OFFSET,
        "policy": policy_kind(stochastic),
        **metrics,
        "returns": [float(r) for r, _ in per_episode],
        "lengths": [int(n) for _, n in per_episode],
    }
    try:
        with open(run_dir / EVALUATIONS_FILE, "a") as handle:
            handle.write(json.dumps(row) + "\n")
    except OSError as err:
        print(
            f"rlpar: the final evaluation was not written to {run_dir / EVALUATIONS_FILE} ({err.strerror or err})",
            flush=True,
        )
    return metrics


def _newest_usable_checkpoint(run_dir: Path) -> dict:
    """The newest checkpoint that verifies; damaged newer ones are named, set aside and recorded."""
    skipped: list = []
    found = latest_valid_checkpoint(run_dir, skipped)
    assert found is not None  # validation made sure there is one
    path, state = found
    for damaged, reason in skipped:
        kept_as = set_aside(damaged)
        print(
            f"rlpar: skipped checkpoint {damaged.name} ({reason}); resuming from {path.name} "
            f"(the damaged file is kept as {kept_as.name})",
            flush=True,
        )
        record_event(
            run_dir,
            "checkpoint_skipped",
            checkpoint=damaged.name,
            reason=str(reason),
            resumed_from=path.name,
            kept_as=kept_as.name,
        )
    return state


def truncate_metrics(path: Path, iteration: int) -> None:
    """Drop rows logged after the checkpoint we resume from, so no iteration appears twice."""
    if not path.exists():
        return

    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        if row.get("iteration", 0) <= iteration:
            kept.append(line)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    tmp.replace(path)


def _flat_hparams(config: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat_hparams(value, name + "."))
        elif key not in ("_target_",) and not name.startswith(("hydra", "logger")):
            flat[name] = value
    return flat
