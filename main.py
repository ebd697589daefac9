"""rlpar command line: `python main.py [group=option ...] [key=value ...]` (Hydra)."""

from __future__ import annotations

import importlib
import signal
import sys
import threading

import hydra
from omegaconf import DictConfig

from rlpar.config.overrides import override_problems
from rlpar.config.validate import ConfigError, validate_config
from rlpar.learning.errors import NonFiniteLossError
from rlpar.runtime.resume import config_for_resume
from rlpar.sampling.errors import WorkerPoolError


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)  # same clean stop as Ctrl-C
    try:
        cfg = config_for_resume(cfg)
        validate_config(cfg)  # every problem at once, before anything slow is imported or started
        _load_rlpar_while_ray_starts(cfg)
        from rlpar.runtime.run import run

        final = run(cfg, validated=True)
    except ConfigError as err:
        _refuse(err.problems)
    except KeyboardInterrupt:
        sys.exit(130)
    except (NonFiniteLossError, WorkerPoolError) as err:
        print(f"rlpar: training stopped: {err}", file=sys.stderr)
        sys.exit(3)
    return final.get("episode_return_mean")


def _refuse(problems: list[str]) -> None:
    print("rlpar: invalid config:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(2)


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
