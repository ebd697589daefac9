"""A Hydra launcher that runs the trials of a sweep in parallel as Ray tasks.

    python main.py -m experiment=learning_curves hydra/launcher=rlpar_ray
    python main.py -m experiment=learning_curves hydra/launcher=rlpar_ray \
        hydra.launcher.address=HEAD:6379 hydra.launcher.cpus_per_trial=2

Without an address it starts a private Ray instance on 127.0.0.1 (dashboard off) for the sweep.
Trials share the machine, so keep the default sequential launcher for throughput figures.
"""


import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, open_dict

log = logging.getLogger(__name__)


@dataclass
class RlparRayLauncherConf:
    _target_: str = "hydra_plugins.rlpar_ray_launcher.rlpar_ray_launcher.RlparRayLauncher"
    address: Optional[str] = None  # None: a private Ray instance on 127.0.0.1
    cpus_per_trial: float = 1.0
    num_cpus: Optional[float] = None  # CPUs the private instance advertises (None: all cores)


ConfigStore.instance().store(group="hydra/launcher", name="rlpar_ray", node=RlparRayLauncherConf, provider="rlpar")


def _run_trial(hydra_context, sweep_config: DictConfig, task_function, singleton_state) -> JobReturn:
    """Body of one Ray task: the same steps Hydra's own launchers take in a fresh process."""
    setup_globals()
    Singleton.set_state(singleton_state)
    HydraConfig.instance().set_config(sweep_config)
    return run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=sweep_config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )


class RlparRayLauncher(Launcher):
    def __init__(self, address: Optional[str] = None, cpus_per_trial: float = 1.0, num_cpus: Optional[float] = None):
        self.address, self.cpus_per_trial, self.num_cpus = address, cpus_per_trial, num_cpus
        self.config = self.hydra_context = self.task_function = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rlpar.cluster.connection import RayConnection

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()  # Ray workers run elsewhere
        sweep_dir.mkdir(parents=True, exist_ok=True)
        connection = RayConnection(address=self.address, num_cpus=self.num_cpus, object_store_mb=256)
        ray = connection.ray
        trial = ray.remote(num_cpus=self.cpus_per_trial, max_retries=0)(_run_trial)
        log.info(f"Launching {len(job_overrides)} jobs on Ray")
        refs = []
        try:
            for offset, overrides in enumerate(job_overrides):
                idx = initial_job_idx + offset
                log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
                sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                with open_dict(sweep_config):
                    sweep_config.hydra.job.id = idx
                    sweep_config.hydra.job.num = idx
                    sweep_config.hydra.sweep.dir = str(sweep_dir)
                refs.append(trial.remote(self.hydra_context, sweep_config, self.task_function, Singleton.get_state()))
            return ray.get(refs)
        finally:
            connection.shutdown()
