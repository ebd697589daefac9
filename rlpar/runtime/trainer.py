"""The training loop: the algorithm's training steps, with the bookkeeping they all share.

Usable from Python as well as from `main.py`:

    trainer = build_trainer(cfg)
    metrics = trainer.train()      # one iteration
    path = trainer.save()
    trainer.restore(path)
    trainer.evaluate()
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

from rlpar.envs.atari import frames_per_step
from rlpar.learning.optimization.compiled import stop_background_compiles
from rlpar.logging import startup
from rlpar.runtime.checkpoint import Checkpointer, load_checkpoint
from rlpar.runtime.episode_stats import EpisodeStats
from rlpar.runtime.evaluation import EVAL_SEED_OFFSET, evaluate_policy

COLLAPSED_STD = 0.02
log = logging.getLogger("rlpar")


class Trainer:
    def __init__(
        self,
        *,
        algorithm,
        env_spec,
        total_steps: int,
        seed: int,
        logger=None,
        checkpointer: Checkpointer | None = None,
        progress=None,
        return_window: int = 20,
        run_config: dict | None = None,
        time_limit_s: float | None = None,
    ):
        """`run_config`: the resolved config, kept in every checkpoint so that a resume or an
        evaluation can name what a hand-edited config.yaml changed. `time_limit_s`: the run is
        also done after this much training time (its wall time, resumes included), at the last
        iteration boundary before it (see `out_of_time`)."""
        self.algorithm = algorithm
        self.env_spec = env_spec
        self.total_steps = total_steps
        self.time_limit_s = time_limit_s
        self.seed = seed
        self.logger = logger
        self.checkpointer = checkpointer
        self.progress = progress
        self.episodes = EpisodeStats(return_window)
        self.iteration = 0
        self.env_steps = 0
        self.wall_time_offset = 0.0  # training time before a restore
        self._clock_start: float | None = None
        self._iterations_here = 0  # iterations this process has run (the first holds warm-up)
        self._last_iteration_wall_s = 0.0  # the last iteration's wall time, bookkeeping included
        self.last_metrics: dict = {}
        self.labels: dict = {}  # added to every metrics row (e.g. a search trial's PBT exploits)
        self._collapse_warned = False
        self.frames_per_step = frames_per_step(env_spec)  # Atari: emulator frames per agent step
        self.run_config = run_config
        self.check_run_dir: Callable[[], None] | None = (
            None  # called before each iteration's writes: is the run directory still ours?
        )
        self.release_run_dir: Callable[[], None] | None = (
            None  # called by close(): the lock build_trainer took (not run()'s own)
        )

    @property
    def opponent_pool(self):
        """A turn-based game's opponent pool (env.opponent=pool), or None."""
        return getattr(self.algorithm, "opponent_pool", None)

    @property
    def sampler(self):
        """The algorithm's sampler (its workers, for health checks and tests)."""
        return self.algorithm.sampler

    @property
    def done(self) -> bool:
        return self.env_steps >= self.total_steps or self.out_of_time()

    def out_of_time(self) -> bool:
        """The time limit is reached, or the next iteration, taking as long as the last one, would
        end past it: a run stops within one iteration before its limit, not up to one past it.
        The first iteration of a process (warm-up, compilation) is no measure of the next."""
        if self.time_limit_s is None:
            return False
        expected_s = self._last_iteration_wall_s if self._iterations_here > 1 else 0.0
        return self.wall_time() + expected_s >= self.time_limit_s

    def wall_time(self) -> float:
        if self._clock_start is None:
            return self.wall_time_offset
        return self.wall_time_offset + time.perf_counter() - self._clock_start

    def train(self) -> dict:
        """Run one iteration and return its metrics (also logged and checkpointed if due)."""
        if self._clock_start is None:
            self._clock_start = time.perf_counter()
        start = time.perf_counter()
        step = self.algorithm.training_step()
        iteration_s = time.perf_counter() - start

        self.iteration += 1
        self.env_steps += step.env_steps
        self.episodes.add(step.episode_returns, step.episode_lengths)
        metrics = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_time_s": round(self.wall_time(), 4),
            "fps": step.env_steps / iteration_s,
            **(
                {
                    "frames": self.env_steps * self.frames_per_step,
                    "frames_per_s": step.env_steps * self.frames_per_step / iteration_s,
                }
                if self.frames_per_step != 1
                else {}
            ),
            "episodes": self.episodes.episodes,
            "episode_return_mean": self.episodes.mean_return,
            "episode_length_mean": self.episodes.mean_length,
            "episode_return_best_mean": self.episodes.best_mean,
            "episodes_this_iter": len(step.episode_returns),
            "time_iteration_s": iteration_s,
            **step.metrics,
            **self.labels,
        }
        if self.iteration == 1 and self.env_steps == step.env_steps:  # a new run's first iteration
            startup.mark("the first iteration")
            metrics["time_startup_s"] = round(startup.seconds_since_start(), 3)
            log.info("rlpar: %s", startup.summary())
        if "time_sample_s" in metrics:  # the share of the iteration the learner spent waiting for data
            waited = metrics["time_sample_s"] + metrics.get("time_transfer_s", 0.0)
            metrics["learner_wait_fraction"] = min(waited / iteration_s, 1.0)
        self.last_metrics = metrics
        self._warn_if_exploration_collapsed(metrics)
        if self.check_run_dir is not None:
            self.check_run_dir()
        if self.logger is not None:
            self.logger.log(metrics)
        if self.progress is not None:
            self.progress.update(metrics)
        if self.checkpointer is not None and self.checkpointer.due(self.iteration):
            self.save()
        self._iterations_here += 1
        self._last_iteration_wall_s = time.perf_counter() - start
        return metrics

    def _warn_if_exploration_collapsed(self, metrics: dict) -> None:
        """Once: a Gaussian policy whose std collapsed in the first half of training has stopped
        exploring (MountainCarContinuous: std 0.004, and the agent learns to stand still)."""
        std = metrics.get("policy_std")
        if self._collapse_warned or std is None or std >= COLLAPSED_STD or self.env_steps > self.total_steps / 2:
            return
        self._collapse_warned = True
        log.warning(
            "the policy's exploration collapsed early: Gaussian std %.4f (actions scaled to [-1, 1]) after "
            "%d of %d env steps; it may have stopped exploring. Raise algo.entropy_coef or "
            "model.init_log_std, or normalise rewards (algo.reward_scale)",
            std,
            self.env_steps,
            self.total_steps,
        )

    def fit(self, should_stop=lambda: False) -> dict:
        """Train until `total_steps`, then checkpoint; returns the last iteration's metrics.
        `should_stop()` is asked between iterations (e.g. after Ctrl-C): then stop unsaved."""
        while not self.done and not should_stop():
            self.train()
        if self.done and self.checkpointer is not None and not self.checkpointer.due(self.iteration):
            self.save()
        return self.last_metrics

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_time_s": self.wall_time(),
            "episodes": self.episodes.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "sampler": self.algorithm.sampler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            **({"config": self.run_config} if self.run_config is not None else {}),
            **({"opponent_pool": pool.state_dict()} if (pool := self.opponent_pool) is not None else {}),
        }

    def save(self) -> Path:
        if self.checkpointer is None:
            raise RuntimeError("this trainer has no checkpointer")
        return self.checkpointer.save(self.state_dict(), self.iteration)

    def restore(self, path_or_state, *, environments: bool = True) -> None:
        """`environments=False`: weights, optimiser, statistics and counters, with the freshly
        built environments (for environment state this user's key did not sign)."""
        state = path_or_state if isinstance(path_or_state, dict) else load_checkpoint(path_or_state)
        self.algorithm.load_state_dict(state["algorithm"])
        self.algorithm.sampler.load_state_dict(state["sampler"], environments=environments)
        self.episodes.load_state_dict(state["episodes"])
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        self.wall_time_offset = float(state["wall_time_s"])
        self._clock_start = None
        torch.set_rng_state(state["torch_rng"])
        if self.opponent_pool is not None and "opponent_pool" in state:
            self.opponent_pool.load_state_dict(state["opponent_pool"])

    # -- evaluation -------------------------------------------------------------------------
    def evaluate(self, num_episodes: int = 10, *, episodes: list | None = None, stochastic: bool = False) -> dict:
        """The deterministic (or `stochastic`) policy on `num_episodes` fresh episodes, episode i
        seeded `seed + EVAL_SEED_OFFSET + i`; `episodes`, when given, receives each one's (return, length)."""
        return evaluate_policy(
            self.algorithm.policy_weights(),
            policy_spec=self.algorithm.policy_spec,
            env_spec=self.env_spec,
            num_episodes=num_episodes,
            seed=self.seed + EVAL_SEED_OFFSET,
            episodes=episodes,
            stochastic=stochastic,
        )

    def close(self) -> None:
        try:
            stop_background_compiles()  # before the workers: a forked child holds copies of their pipes
            self.algorithm.close()
            if self.logger is not None:
                self.logger.close()
        finally:
            if self.release_run_dir is not None:
                self.release_run_dir()
                self.release_run_dir = None
