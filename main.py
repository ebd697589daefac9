"""rlpar command line: `python main.py [group=option ...] [key=value ...]` (Hydra)."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from rlpar.config.validate import ConfigError
from rlpar.runtime.resume import config_for_resume


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    try:
        cfg = config_for_resume(cfg)
        from rlpar.runtime.run import run

        final = run(cfg)
    except ConfigError as err:
        print("rlpar: invalid config:\n  " + "\n  ".join(err.problems), file=sys.stderr)
        sys.exit(2)
    return final.get("episode_return_mean")


if __name__ == "__main__":
    main()
