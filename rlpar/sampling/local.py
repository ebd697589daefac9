"""`parallel=local`: every environment in the learner's own process, no Ray, no subprocesses."""

from __future__ import annotations

import time

from rlpar.envs.factory import EnvSpec
from rlpar.models.spec import PolicySpec
from rlpar.sampling.base import Sampler
from rlpar.sampling.batch import Batch
from rlpar.sampling.rollout import RolloutWorker


class LocalSampler(Sampler):
    sync_modes = ("blocking",)
    in_learner_process = True

    @classmethod
    def config_problems(cls, config) -> list[str]:
        problems = super().config_problems(config)
        if config.get("parallel.sync_mode") == "non_blocking":
            problems.insert(
                0,
                "parallel.sync_mode: non_blocking needs parallel=multiprocess or parallel=distributed (local "
                "sampling runs in the learner's thread; for one environment process sampling beside the "
                "learner, parallel=multiprocess workers=1)",
            )
        return problems

    def __init__(
        self,
        *,
        name: str = "local",
        env_spec: EnvSpec,
        policy_spec: PolicySpec,
        num_workers: int,
        envs_per_worker: int,
        rollout_length: int,
        seed: int,
        sync_mode: str = "blocking",
        max_policy_lag: int | None = 0,
        worker_class=RolloutWorker,
        worker_options: dict | None = None,
        inference: str = "worker",
        inference_device: str = "cpu",
    ):
        """`name`: the parallel group's option. `sync_mode` and `max_policy_lag` are accepted for a uniform
        config: local sampling is always on-policy (validation refuses non_blocking). So are `inference` and
        `inference_device`: the learner's process acts for all environments at once, which is
        what central inference does for the other samplers. `worker_class` and `worker_options`:
        see WorkerPoolSampler."""
        self.name = name
        self.num_envs = self.worker_envs = num_workers * envs_per_worker
        self.rollout_length = rollout_length
        self.worker = worker_class(
            env_spec=env_spec,
            policy_spec=policy_spec,
            num_envs=self.num_envs,
            rollout_length=rollout_length,
            seed=seed,
            **(worker_options or {}),
        )
        self._timings: dict = {}
        self.env_restarts = 0

    def sample(self, weights: dict, version: int) -> Batch:
        start = time.perf_counter()
        self.worker.set_weights(weights, version)
        synced = time.perf_counter()
        batch = self.worker.sample()
        self.env_restarts += batch.env_restarts
        self._timings = {
            "time_weight_sync_s": synced - start,
            "time_sample_s": time.perf_counter() - synced,
            "time_transfer_s": 0.0,
        }
        return batch

    def metrics(self) -> dict:
        # Always on-policy: the batch was sampled with exactly the weights passed in.
        lag = {"policy_lag_min": 0, "policy_lag_mean": 0.0, "policy_lag_max": 0}
        health = {"live_workers": 1, "worker_restarts": 0, "env_restarts": self.env_restarts, "num_nodes": 1}
        return {**self._timings, **lag, **health}

    def state_dict(self) -> dict:
        """In-process environments can be captured, so a resumed local run continues exactly."""
        return {"worker": self.worker.get_state(), "env_restarts": self.env_restarts}

    def load_state_dict(self, state: dict, *, environments: bool = True) -> None:
        if environments and "worker" in state:
            self.worker.set_state(state["worker"])
        self.env_restarts = int(state.get("env_restarts", 0))

    def keeps_env_state(self) -> bool:
        return getattr(self.worker, "env_state_problem", True) is None

    def drop_env_state(self, reason: str) -> None:
        self.worker.env_state_problem = reason

    def close(self) -> None:
        self.stop_services()
        self.worker.close()
