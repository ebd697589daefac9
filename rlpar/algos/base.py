"""What every algorithm offers the Trainer: one training step, weights, and its state.

The algorithm owns its iteration: what it samples, when it updates, when it pushes weights, and
its replay; its Learner (rlpar.learning.learner) owns the update itself: the model, the losses,
the optimiser and the gradient steps. The Trainer keeps what all share: the clock, episode
statistics, metrics, logging, progress, checkpoints, signals and resume.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlpar.learning.estimators.batch_tensors import explained_variance
from rlpar.learning.estimators.reward_normalizer import RewardNormalizer
from rlpar.learning.estimators.rewards import clip_rewards
from rlpar.learning.learner import Learner
from rlpar.learning.optimization.compiled import COMPILE_SWITCH_STEP
from rlpar.learning.optimization.optim import load_optimizer_state, optimizer_state
from rlpar.learning.optimization.step import GuardedStep, LearningRate
from rlpar.learning.peers import ALONE, Alone
from rlpar.sampling.batch import Batch, nonfinite_inputs, raw_obs_moments
from rlpar.sampling.errors import NonFiniteObservationError
from rlpar.sampling.rollout import RolloutWorker
from rlpar.selfplay.pool import OpponentPool
from rlpar.typed_config import choice, flag, integer, number, text


@dataclass
class StepResult:
    """What one iteration produced, for the Trainer's bookkeeping."""

    env_steps: int
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)  # losses, timings, lag...: logged as they are


@dataclass(frozen=True, kw_only=True)
class AlgorithmConfig:
    """What every algorithm takes: the rewards its losses see (`learning_rewards`). An algorithm's
    own config extends it, and the algorithm names it (`Config = PPOConfig`): the builder makes
    one from the `algo` node, and rlpar.config.validate checks each field's type and range first."""

    gamma: float = number(0.99, low=0, high=1)
    reward_scale: float = number(1.0, low=0, low_open=True)
    reward_clip: float | None = number(None, low=0, low_open=True, optional=True)
    # auto (the config files' default): the builder turns it on for Box vector observations
    normalize_rewards: bool | str = choice(False, ("auto", True, False))


@dataclass(frozen=True, kw_only=True)
class LearnerConfig(AlgorithmConfig):
    """What rlpar's algorithms share: the learning rate and its schedule, the guarded step, the
    precision and the compiled step (conf/algo/shared/learner.yaml)."""

    lr: float = number(3e-4, low=0, low_open=True)
    anneal_lr: bool = flag(False)  # decay lr linearly to min_lr_fraction * lr over total_steps
    min_lr_fraction: float = number(0.0, low=0, high=1)
    max_grad_norm: float = number(0.5, low=0, low_open=True, infinite_ok=True)  # inf: no clipping (SAC, TD3)
    max_consecutive_nonfinite: int = integer(20, low=1)
    precision: str = text("auto")  # auto, or one of the algorithm's `precisions`
    compile: bool | str = choice("auto", ("auto", True, False))
    compile_switch: int | str = integer(
        COMPILE_SWITCH_STEP, low=0, also=("ready",), words="a gradient step (an integer >= 0) or ready"
    )

    @classmethod
    def config_problems(cls, config) -> list[str]:
        """algo.precision: one the algorithm learns in (its `precisions`), or auto."""
        allowed, precision = config.algorithm.get("precisions"), config.get("algo.precision")
        if allowed and isinstance(precision, str) and precision not in (*allowed, "auto"):
            return [
                f"algo.precision: {precision!r} is not one of auto, {', '.join(allowed)} "
                f"(what {config.get('algo.name')} learns in)"
            ]
        return []


@dataclass(frozen=True, kw_only=True)
class ActorCriticConfig(LearnerConfig):
    """The weights of an actor-critic loss's value and entropy terms."""

    value_coef: float = number(0.5, low=0)
    entropy_coef: float = number(0.01, low=0)


def minibatch_problems(config) -> list[str]:
    """algo.minibatch_size within the batch (rollout_length x workers x envs_per_worker)."""
    rollout, minibatch, workers, envs = (
        config.get(k) for k in ("algo.rollout_length", "algo.minibatch_size", "workers", "envs_per_worker")
    )
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in (rollout, minibatch, workers, envs)):
        return []  # refused by their own checks
    batch = rollout * workers * envs
    if minibatch <= batch:
        return []
    return [
        f"algo.minibatch_size: {minibatch} is larger than the batch "
        f"(algo.rollout_length {rollout} x workers {workers} x envs_per_worker {envs} = {batch})"
    ]


def as_tensors(weights: dict) -> dict:
    """`get_weights`' numpy arrays as tensors (checkpoints are read with weights_only)."""
    return {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}


def learning_rewards(batch: Batch, normalizer: RewardNormalizer, *, clip: float | None, scale: float) -> np.ndarray:
    """`batch`'s rewards as losses see them: clipped to [-clip, clip], divided by the running
    return's standard deviation (`normalizer`, advanced), times `scale`."""
    rewards = normalizer(
        clip_rewards(batch.rewards, clip),
        env_ids=batch.env_ids,
        terminated=batch.terminated,
        truncated=batch.truncated,
        valid=batch.valid,
    )
    return rewards * np.float32(scale)


def take_in_batch(model, batch: Batch, returns) -> float:
    """After an on-policy update's gradient steps: `model`'s observation statistics take in the
    batch's raw observations; the critic's explained variance (of the acting values against the
    targets `returns`)."""
    moments = raw_obs_moments(batch)
    if moments is not None:
        model.obs_normalizer.update(*moments)
    keep = batch.valid.reshape(-1)
    return explained_variance(batch.values.reshape(-1)[keep], returns.reshape(-1)[keep])


class Algorithm(ABC):
    """Base of every algorithm: a sampler, its learner (`self.learner`, whose model is
    `self.model`), a policy version, the steps seen and the rewards its losses see
    (`learning_rewards`). An algorithm that learns itself (no learner: a user's simple one, or
    IPPO, whose learners are one per policy) sets `self.optimizer`; either is saved and restored
    by state_dict / load_state_dict."""

    # What `parallel.sync_mode=auto` and `parallel.max_policy_lag=auto` become for this algorithm.
    sync_mode = "blocking"
    max_policy_lag: int | None = 1
    # What every sampler's workers run (sampling.base.Worker): environments acting with the
    # model's acting policy. An algorithm whose workers do more (compute gradients, keep replay)
    # names its own.
    worker_class: type = RolloutWorker
    # What it needs and supports, as plain class attributes that validation reads from the class
    # (rlpar.typed_config.capabilities); its keys are its `Config`'s:
    model_kind: str | None = None  # the model kind it must learn (a model spec class's `kind`); None: not checked
    # the Gymnasium action spaces it learns
    action_spaces: tuple[str, ...] = ("Discrete", "MultiDiscrete", "MultiBinary", "Box")
    central_inference = True  # its workers only act and step, so a server may act for them all
    worker_duties = "act and step environments"  # said when central inference is refused
    replay_in_checkpoints = True  # a replay it keeps may be saved with checkpoints (algo.replay.checkpoint)
    data_parallel = False  # its update splits into learning_inputs and learn: learners > 1 can share it
    # why learners > 1 is refused where data_parallel is False (validation says "learners: <algo> <this>")
    not_data_parallel_because = "does not split its update into learning_inputs (once) and learn (every learner)"
    # an algorithm that learns itself: how `learn`'s inputs may be cut between learners (a
    # Learner declares its own: rlpar.learning.learner.Learner.input_layout)
    input_layout = "columns"
    # the learners its learner learns with (rlpar.learning.peers): ALONE, or the learner group
    # when the build gives it one (learners=N, docs/learners.md)
    peers: Alone = ALONE
    # the algo.precision values it learns in (rlpar.learning.optimization.precision)
    precisions: tuple[str, ...] = ("fp32", "bf16", "fp16")
    recurrent_policies = False  # it learns a recurrent model (model.recurrent) from sequences
    needs_ray = False  # its actors or services are Ray actors: a sampler without Ray (uses_ray) refuses it

    if TYPE_CHECKING:  # what an algorithm that learns itself sets or defines, used by the steps below
        lr: LearningRate  # the learning rate and its schedule

        def learning_inputs(self, batch: Batch) -> dict: ...

        def learn(self, inputs: dict) -> dict: ...

    # what owns its update: a Learner class (rlpar.learning.learner) that `__init__` builds with
    # `(config, *, policy_spec, total_steps, seed, device, **learner_options(...))` (the base
    # Learner takes no config, hence not `type[Learner]`); None: it learns itself, or holds
    # learners of its own (IPPO: one per policy)
    learner_class: Callable[..., Learner] | None = None
    # builds a replica of its learner (a learner group's other ranks); None: it learns itself
    make_learner: Callable[[], Learner] | None = None
    without_ray: str | None = None  # the algo option that sampler is told to use instead (apex_sac: sac)

    @classmethod
    def worker_options(cls, algo_config: dict) -> dict:
        """Extra arguments for `worker_class`, from the algo group (none for RolloutWorker)."""
        return {}

    def learner_options(self, config, sampler) -> dict:
        """What `learner_class` takes besides the config, policy spec, budget, seed and device: a
        learner reads nothing of a sampler, so what it needs of one (PPO: `batch_steps`, the size
        of a batch) is told here. Called before any attribute of the base is set."""
        return {}

    def __init__(
        self,
        config: AlgorithmConfig,
        *,
        sampler,
        policy_spec,
        total_steps: int,
        seed: int,
        device: str = "cpu",
        model=None,
        learner: Learner | None = None,
    ):
        """`config`: the algorithm's typed config (its `Config`, built from the `algo` node); the
        other arguments are the builder's. `learner`: what owns its update (rlpar.learning.learner),
        which built and seeded the model; None: one of `learner_class` is built, and
        `make_learner` kept to build replicas of it; with no `learner_class` (or a `model` given)
        the algorithm learns itself, a torch model of `policy_spec` (or `model`, a multi-agent
        algorithm's set of its learners' policies)."""
        if learner is None and model is None and self.learner_class is not None:
            self.make_learner = partial(
                self.learner_class,
                config,
                policy_spec=policy_spec,
                total_steps=total_steps,
                seed=seed,
                device=device,
                **self.learner_options(config, sampler),
            )
            learner = self.make_learner()
        self.config = config
        self.sampler = sampler
        self.policy_spec = policy_spec
        self.total_steps = total_steps
        if learner is None:
            torch.manual_seed(seed)
            self.device = torch.device(device)
            self.model = (policy_spec.build() if model is None else model).to(self.device)
            self.parameters = list(self.model.parameters())
        else:
            self.device = learner.device
            self.model = learner.model  # the same module: what acting, evaluation and the Trainer read
        self.learner: Any = self if learner is None else learner
        self.version = 0  # updates so far: the policy version that acting data carries
        self.steps_seen = 0
        self.reward_scale = config.reward_scale
        self.reward_clip = config.reward_clip
        self.reward_normalizer = RewardNormalizer(gamma=config.gamma, enabled=config.normalize_rewards is True)
        # a turn-based game's opponent pool (env.opponent=pool, rlpar.selfplay.pool), set by the
        # build: it rides to the workers with the weights, and takes in the games that come back
        self.opponent_pool: OpponentPool | None = None
        # the weights of the next batch, kept by `begin_sampling` until `sample` takes them (the
        # model's, which checkpoints keep, and with the opponent pool, what the sampler was given)
        self.begun_weights: dict | None = None
        self.begun_round: dict | None = None

    def __getattr__(self, name: str):
        """What the algorithm's learner holds (its optimiser, gradient steps, `learn`), read
        through the algorithm as before the split (the Trainer, tests and tools read them)."""
        learner = self.__dict__.get("learner")
        if learner is None or learner is self:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(learner, name)

    @abstractmethod
    def training_step(self) -> StepResult: ...

    def get_weights(self) -> dict:
        """CPU numpy copies: cheap to send to any process and safe to hold across updates."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def policy_weights(self) -> dict:
        """The newest weights, as numpy, for evaluating the policy away from the workers (what
        get_weights sends them may be a handle to where the weights live instead)."""
        return self.get_weights()

    def sampling_weights(self, model_weights: dict | None = None) -> dict:
        """What the workers act with: the model's weights (`get_weights`, or `model_weights`), and
        the opponent pool where one rides along."""
        weights = self.get_weights() if model_weights is None else model_weights
        if self.opponent_pool is not None:
            weights = self.opponent_pool.riding_with(weights, self.version, self.policy_weights)
        return weights

    def begin_sampling(self) -> None:
        """The next batch is acted with the weights as they are now, whatever the update still
        does to them: the sampler may start its workers at once (Sampler.begin), so that they
        step environments while the learner finishes. The next `sample` takes that batch, on
        every sampler the same."""
        self.begun_weights = self.get_weights()
        self.begun_round = self.sampling_weights(self.begun_weights)
        self.sampler.begin(self.begun_round, self.sampler_version())

    def sample(self, *, min_rollouts: int = 1) -> tuple[Batch, dict]:
        """A batch acted with the current weights (blocking samplers) or recent ones (non-blocking:
        rounds are taken until `min_rollouts` worker rollouts have arrived), refused if the
        environments returned NaN or infinities, and its timings. After `begin_sampling`: acted
        with the weights it kept."""
        start = time.perf_counter()
        weights = self.begun_round or self.sampling_weights(self.begun_weights)  # (resumed: the kept weights)
        self.begun_weights = self.begun_round = None
        fetched = time.perf_counter()
        batches: list[Batch] = []
        metrics: dict = {}
        while sum(len(b.policy_versions) for b in batches) < min_rollouts:
            batches.append(self.sampler.sample(weights, self.sampler_version()))
            round_metrics = self.sampler.metrics()
            metrics = {k: metrics.get(k, 0.0) + v if k.startswith("time_") else v for k, v in round_metrics.items()}
        batch = Batch.concat(batches)
        problem = nonfinite_inputs(batch)
        if problem:
            raise NonFiniteObservationError(f"{problem}; check the environment")
        metrics["time_weight_sync_s"] = metrics.get("time_weight_sync_s", 0.0) + fetched - start
        if self.opponent_pool is not None:
            metrics.update(self.opponent_pool.take_in(batch.game_results))
        # Share of the contributing workers' time spent waiting for a request, not stepping.
        active = batch.actor_idle_s + batch.actor_busy_s
        metrics["actor_idle_fraction"] = batch.actor_idle_s / active if active > 0 else 0.0
        if len(batches) > 1:
            lags = [self.sampler_version() - v for v in batch.policy_versions]
            metrics.update(
                policy_lag_min=min(lags),
                policy_lag_mean=sum(lags) / len(lags),
                policy_lag_max=max(lags),
                batches_this_iter=len(lags),
            )
        return batch, metrics

    def sampler_version(self) -> int:
        """The version the sampler is told the weights have: workers get weights when it changes."""
        return self.version

    def learning_rewards(self, batch: Batch) -> np.ndarray:
        """The rewards the losses see: clipped to [-reward_clip, reward_clip], divided by the
        running return's standard deviation (`normalize_rewards`), times `reward_scale`. Call once
        per arriving batch: it advances the running statistics. Logged returns stay raw."""
        return learning_rewards(batch, self.reward_normalizer, clip=self.reward_clip, scale=self.reward_scale)

    def set_optimizer(
        self, optimizer, *, max_grad_norm: float, max_consecutive_nonfinite: int, precision: str = "fp32"
    ) -> None:
        """The optimiser of the model's parameters, and the guarded step that applies it (in
        `precision`: rlpar.learning.optimization.precision)."""
        self.optimizer = optimizer
        self.step = GuardedStep(
            parameters=self.parameters,
            optimizer=optimizer,
            max_grad_norm=max_grad_norm,
            max_consecutive_nonfinite=max_consecutive_nonfinite,
            precision=precision,
            device_type=self.device.type,
        )

    def sample_and_update(self, *, min_rollouts: int = 1) -> StepResult:
        """The usual iteration: a batch (see `sample`), then `self.update(batch)`, timed as
        learning; the update's diagnostics join the sampler's metrics."""
        batch, metrics = self.sample(min_rollouts=min_rollouts)
        start = time.perf_counter()
        metrics.update(self.update(batch))
        metrics["time_learn_s"] = time.perf_counter() - start
        return StepResult(batch.num_steps, batch.episode_returns, batch.episode_lengths, metrics)

    def update(self, batch: Batch) -> dict:
        """An on-policy update (PPO, A2C, IMPALA, APPO): `learning_inputs` reads the whole batch
        once, `learn` takes the gradient steps (by every learner, `self.peers`), `finish_update`
        ends it; the update's diagnostics."""
        inputs = self.learning_inputs(batch)
        stats = self.peers.learn(self.learner, inputs)
        return {**stats, "lr": inputs["lr"], **self.finish_update(batch, inputs["returns"])}

    def finish_update(self, batch: Batch, returns) -> dict:
        """What ends every on-policy update, after its gradient steps: the observation statistics
        take in the batch's raw observations, the policy version advances, and the critic's
        explained variance (of the acting values against the targets) is measured."""
        explained = take_in_batch(self.model, batch, returns)
        self.version += 1
        return {"explained_variance": explained, "policy_version": self.version}

    def on_joining_peers(self) -> None:
        """What else learning with peers needs, once they have made this algorithm's steps eager
        and its weights theirs (the learner group's join): nothing here."""

    def count_steps(self, batch: Batch) -> float:
        """The batch's steps counted as seen; the learning rate they bring (`self.lr`), set."""
        self.steps_seen += batch.num_steps
        return self.learner.set_learning_rate(self.steps_seen)

    def set_learning_rate(self, steps_seen: int) -> float:
        """An algorithm that learns itself: its rate after `steps_seen` env steps, set."""
        return self.lr.apply(self.optimizer, steps_seen=steps_seen, total_steps=self.total_steps)

    def state_dict(self) -> dict:
        """Weights, optimiser state (its learner's) and counters; an algorithm with more state extends both."""
        learner = (
            {"model": self.model.state_dict(), "optimizer": optimizer_state(self.optimizer)}
            if self.learner is self
            else self.learner.state_dict()
        )
        return {
            **learner,
            "version": self.version,
            "steps_seen": self.steps_seen,
            "reward_normalizer": self.reward_normalizer.state_dict(),
            **self.peers.state_dict(),  # what the learners keep (a group: the other learners' random states)
            # the next batch's weights, where the update handed them out before its end: a resumed
            # run acts with them, as the run that stopped would have
            **({} if self.begun_weights is None else {"begun_weights": as_tensors(self.begun_weights)}),
        }

    def load_state_dict(self, state: dict) -> None:
        if self.learner is self:
            self.model.load_state_dict(state["model"])
            load_optimizer_state(self.optimizer, state["optimizer"])
        else:
            self.learner.load_state_dict(state)
        self.version = int(state["version"])
        self.steps_seen = int(state["steps_seen"])
        if "reward_normalizer" in state:  # absent from checkpoints written before it existed
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])
        self.peers.load_state_dict(state)
        begun = state.get("begun_weights")
        self.begun_weights = None if begun is None else {k: v.numpy().copy() for k, v in begun.items()}
        self.begun_round = None

    def close(self) -> None:
        self.peers.close()  # before the sampler, which may end the Ray instance its peers run on
        self.sampler.close()
