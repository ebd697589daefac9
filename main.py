"""rlpar command line: `python main.py [group=option ...] [key=value ...]` (Hydra)."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from rlpar.config.overrides import override_problems
from rlpar.config.validate import ConfigError, first_line, validate_config
from rlpar.runtime import run_lock
from rlpar.runtime.errors import TRAINING_STOPS
from rlpar.runtime.resume import config_for_resume


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)  # same clean stop as Ctrl-C
    hydra_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        cfg = config_for_resume(cfg)
        validate_config(cfg)  # every problem at once, before anything slow is imported or started
        run_lock.acquire(cfg.run_dir)  # before Ray boots: a second run on this directory is refused at once
        _load_rlpar_while_ray_starts(cfg)
        from rlpar.runtime.run import run

        final = run(cfg, validated=True)
    except ConfigError as err:
        _refuse(err.problems)
    except run_lock.RunDirInUseError as err:
        print(f"rlpar: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except TRAINING_STOPS as err:
        print(f"rlpar: training stopped: {err}", file=sys.stderr)
        sys.exit(3)
    except Exception as err:  # a bug, or an environment failing in a way rlpar cannot train through
        where = "".join(f"; {note}" for note in getattr(err, "__notes__", []))
        print(f"rlpar: training failed: {type(err).__name__}: {first_line(err)}{where}", file=sys.stderr)
        sys.exit(3)
    finally:
        _remove_if_empty(hydra_dir)
    return final.get("episode_return_mean")


def _refuse(problems: list[str]) -> None:
    """One problem, one line; several, one line each under a heading."""
    text = problems[0] if len(problems) == 1 else "\n  " + "\n  ".join(problems)
    print(f"rlpar: invalid config: {text}", file=sys.stderr)
    sys.exit(2)


def _remove_if_empty(hydra_dir: Path) -> None:
    """Hydra creates its output folder before rlpar runs: gone again if the run refused to start,
    or wrote elsewhere (`run_dir=...`). Its date folder and outputs/ go too, if left empty."""
    for folder in (hydra_dir, hydra_dir.parent, hydra_dir.parent.parent):
        try:
            os.rmdir(folder)
        except OSError:  # not empty (a run's files, other runs), or already gone
            return


def _load_rlpar_while_ray_starts(cfg: DictConfig) -> None:
    """For a private Ray instance: import torch and the trainer in a thread while Ray boots."""
    if not str(cfg.parallel.get("_target_", "")).endswith("DistributedSampler") or cfg.ray.address:
        return
    from rlpar.runtime.ray_runtime import start_private_instance_early

    loader = threading.Thread(target=importlib.import_module, args=("rlpar.runtime.run",), daemon=True)
    loader.start()
    start_private_instance_early(num_cpus=cfg.ray.num_cpus, object_store_mb=cfg.ray.object_store_mb)
    loader.join()


if __name__ == "__main__":
    if problems := override_problems(sys.argv[1:]):  # Hydra would answer with a traceback
        _refuse(problems)
    main()
