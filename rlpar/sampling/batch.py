"""The unit of data between samplers and learners: a time-major rollout of many environments."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from rlpar.envs.spaces import action_layout

TIME_MAJOR_FIELDS = ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "valid")
PER_ENV_FIELDS = ("bootstrap_value", "last_obs", "env_ids")  # [N, ...]: one entry per environment
RECURRENT_FIELDS = ("states",)  # [T, N, S]: time-major, present only for a recurrent policy


def batch_layout(policy_spec, T: int, N: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shapes and dtypes of a batch's arrays for T steps of N environments."""
    obs_dtype = np.dtype(policy_spec.obs_dtype)  # uint8 images stay bytes until the learner's network
    recurrent = {"states": ((T, N, policy_spec.state_size), np.float32)} if policy_spec.state_size else {}
    return {
        **recurrent,
        "obs": ((T, N, policy_spec.obs_dim), obs_dtype),
        "actions": action_layout(policy_spec.action, (T, N)),
        "logp": ((T, N), np.float32),
        "values": ((T, N), np.float32),
        "rewards": ((T, N), np.float32),
        "terminated": ((T, N), np.bool_),
        "truncated": ((T, N), np.bool_),
        "valid": ((T, N), np.bool_),
        "bootstrap_value": ((N,), np.float32),
        "last_obs": ((N, policy_spec.obs_dim), obs_dtype),
        "env_ids": ((N,), np.int64),
    }


def allocate_batch_arrays(policy_spec, T: int, N: int) -> dict[str, np.ndarray]:
    return {name: np.empty(shape, dtype) for name, (shape, dtype) in batch_layout(policy_spec, T, N).items()}


@dataclass
class Batch:
    """Arrays are [T, N, ...]: T steps of N environments.

    `obs` are already normalised with the statistics the policy acted with. `valid` is False on
    Gymnasium's autoreset steps, which are not transitions and must not be trained on.
    `bootstrap_value` is V(observation after the last step), one per environment, as the actor saw
    it; `last_obs` is that observation (normalised like `obs`), for learners that bootstrap with
    their own value function (V-trace). `env_ids` are the environments' global indices in the run,
    the same whichever worker stepped them, so a learner can follow an environment across rollouts.
    `states` (recurrent policies only, else None) is the recurrent state entering each step, its
    reset after an autoreset step already applied (rlpar.models.modules.recurrent): a learner replays a
    sequence from the state stored at its first step.
    """

    obs: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    bootstrap_value: np.ndarray
    last_obs: np.ndarray
    env_ids: np.ndarray
    states: np.ndarray | None = None
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    # Where each episode ended: (step, environment column of this batch). Episodes are kept in
    # this order, so any split of the environments over workers lists them identically.
    episode_ends: list[tuple[int, int]] = field(default_factory=list)
    # Per-environment float64 sums of raw observations and of their squares over the T steps,
    # [N, obs_dim] each: summed in environment order they give the same statistics however the
    # environments were split over workers (merging per-worker means would round differently).
    raw_obs_sums: tuple[np.ndarray, np.ndarray] | None = None
    # One entry per worker that contributed, in order: the policy version it acted with.
    policy_versions: list[int] = field(default_factory=lambda: [0])
    # Environments that raised and were rebuilt while this batch was collected.
    env_restarts: int = 0
    # Seconds the contributing workers spent waiting for this request since their previous
    # rollout, and stepping this one (summed over workers): how long actors sit idle.
    actor_idle_s: float = 0.0
    actor_busy_s: float = 0.0
    # Multi-agent environments (rlpar/envs/pettingzoo.py): columns are agents, `agents_per_env` to an
    # environment; its episodes above are the agents', and the team's (the sum over its agents)
    # are these, ending at (step, the environment's first column), in the same canonical order.
    agents_per_env: int = 1
    team_returns: list[float] = field(default_factory=list)
    team_lengths: list[int] = field(default_factory=list)
    team_ends: list[tuple[int, int]] = field(default_factory=list)
    # Turn-based games that ended (rlpar.envs.pettingzoo.TurnBasedGame): (step, environment column,
    # opponent, outcome 1/0/-1, whether the learner moved first), in the episodes' canonical order.
    game_results: list[tuple] = field(default_factory=list)
    # What an algorithm's own worker class adds (e.g. Ape-X's prioritised transitions, when no
    # replay shard takes them directly): name -> one entry per contributing worker, in order.
    extras: dict[str, list] = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        """Environment steps taken to collect this batch (autoreset steps included; one step of
        a multi-agent environment moves all its agents)."""
        return int(self.rewards.size) // self.agents_per_env

    @property
    def policy_version(self) -> int:
        """The oldest policy version that acted in this batch."""
        return min(self.policy_versions)

    @staticmethod
    def concat(batches: list[Batch], arrays: dict[str, np.ndarray] | None = None) -> Batch:
        """Join workers' batches along the environment axis, in worker order; their episodes in
        the canonical order (finish step, environment column).

        `arrays`: the joined arrays when they already exist (workers wrote their columns of
        shared memory); otherwise they are concatenated here.
        """
        if len(batches) == 1 and arrays is None:
            return batches[0]
        if arrays is None:
            arrays = {name: np.concatenate([getattr(b, name) for b in batches], axis=1) for name in TIME_MAJOR_FIELDS}
            arrays.update({name: np.concatenate([getattr(b, name) for b in batches]) for name in PER_ENV_FIELDS})
            if batches[0].states is not None:
                arrays["states"] = np.concatenate([b.states for b in batches], axis=1)
        returns, lengths, ends = canonical_episodes(batches, "episode_returns", "episode_lengths", "episode_ends")
        team_returns, team_lengths, team_ends = canonical_episodes(batches, "team_returns", "team_lengths", "team_ends")
        return Batch(
            **arrays,
            episode_returns=returns,
            episode_lengths=lengths,
            episode_ends=ends,
            agents_per_env=batches[0].agents_per_env,
            team_returns=team_returns,
            team_lengths=team_lengths,
            team_ends=team_ends,
            game_results=canonical_games(batches),
            raw_obs_sums=concat_obs_sums([b.raw_obs_sums for b in batches]),
            policy_versions=[v for b in batches for v in b.policy_versions],
            env_restarts=sum(b.env_restarts for b in batches),
            actor_idle_s=sum(b.actor_idle_s for b in batches),
            actor_busy_s=sum(b.actor_busy_s for b in batches),
            extras={
                name: [entry for b in batches for entry in b.extras.get(name, [])]
                for name in dict.fromkeys(name for b in batches for name in b.extras)
            },
        )

    def columns(self, columns: np.ndarray, obs_width: int | None = None) -> Batch:
        """Some of its columns as a batch of their own (a policy's agents: rlpar.algos.mappo), rows
        cut to their first `obs_width` values; the agents' episodes of those columns, renumbered.
        Its steps are agent steps."""
        width = slice(0, obs_width)
        arrays = {name: getattr(self, name)[:, columns] for name in TIME_MAJOR_FIELDS}
        arrays.update({name: getattr(self, name)[columns] for name in PER_ENV_FIELDS})
        arrays["obs"], arrays["last_obs"] = arrays["obs"][..., width], arrays["last_obs"][:, width]
        position = {int(c): i for i, c in enumerate(columns)}
        episodes = [
            ((t, position[c]), r, n)
            for (t, c), r, n in zip(self.episode_ends, self.episode_returns, self.episode_lengths)
            if c in position
        ]
        sums = None if self.raw_obs_sums is None else tuple(part[columns][:, width] for part in self.raw_obs_sums)
        return Batch(
            **arrays,
            states=None if self.states is None else self.states[:, columns],
            episode_returns=[r for _, r, _ in episodes],
            episode_lengths=[n for _, _, n in episodes],
            episode_ends=[end for end, _, _ in episodes],
            raw_obs_sums=sums,
            policy_versions=list(self.policy_versions),
        )

    def details(self) -> dict:
        """Everything but the arrays: episode statistics, versions, timings, extras (small and
        picklable: what a worker sends beside the arrays it wrote into shared memory)."""
        arrays = (*TIME_MAJOR_FIELDS, *PER_ENV_FIELDS, *RECURRENT_FIELDS)
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in arrays}

    def copy(self) -> Batch:
        """A batch owning its arrays (e.g. before shared memory is overwritten by the next round)."""
        arrays: dict[str, Any] = {name: np.array(getattr(self, name)) for name in (*TIME_MAJOR_FIELDS, *PER_ENV_FIELDS)}
        arrays["states"] = None if self.states is None else self.states.copy()
        details: dict[str, Any] = {
            name: list(value) if isinstance(value, list) else value for name, value in self.details().items()
        }
        details["extras"] = {name: list(entries) for name, entries in self.extras.items()}
        return Batch(**arrays, **details)


def canonical_episodes(batches: list[Batch], returns: str, lengths: str, ends: str) -> tuple[list, list, list]:
    """Workers' episodes (the fields named) in one order, by (finish step, column of the joined batch)."""
    episodes, first_column = [], 0
    for b in batches:
        episodes += [
            ((t, first_column + column), r, n)
            for (t, column), r, n in zip(getattr(b, ends), getattr(b, returns), getattr(b, lengths))
        ]
        first_column += b.bootstrap_value.shape[0]
    episodes.sort(key=lambda episode: episode[0])
    return [r for _, r, _ in episodes], [n for _, _, n in episodes], [end for end, _, _ in episodes]


def canonical_games(batches: list[Batch]) -> list[tuple]:
    """Workers' finished games in one order, by (finish step, column of the joined batch)."""
    games, first_column = [], 0
    for b in batches:
        games += [(t, first_column + column, *rest) for t, column, *rest in b.game_results]
        first_column += b.bootstrap_value.shape[0]
    return sorted(games, key=lambda game: game[:2])


def concat_obs_sums(sums):
    if any(part is None for part in sums):
        return None
    return tuple(np.concatenate([part[i] for part in sums]) for i in range(2))


def raw_obs_moments(batch: Batch) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Mean, variance and count of the batch's raw observations (for the observation normaliser)."""
    if batch.raw_obs_sums is None:
        return None
    total, squares = (part.sum(axis=0) for part in batch.raw_obs_sums)
    count = batch.rewards.size
    mean = total / count
    return mean, np.maximum(squares / count - mean**2, 0.0), count


def nonfinite_inputs(batch: Batch) -> str | None:
    """What the environments returned that is NaN or infinite, by name, or None.

    Checked before learning: a NaN observation would otherwise surface much later as a NaN
    loss, blamed on the learning rate. Raw sums catch infinities that normalisation clips."""
    checks = [("rewards", batch.rewards, 1)]  # [T, N, ...]
    if np.issubdtype(batch.obs.dtype, np.floating):  # images are bytes: always finite
        checks.insert(0, ("observations", batch.obs, 1))
    if batch.raw_obs_sums is not None:
        checks.append(("observations", batch.raw_obs_sums[0], 0))  # [N, obs_dim]
    for name, values, env_axis in checks:
        finite = np.isfinite(values)
        if finite.all():
            continue
        bad = np.flatnonzero(~finite.all(axis=tuple(a for a in range(values.ndim) if a != env_axis)))
        shown = ", ".join(map(str, bad[:8])) + (", ..." if len(bad) > 8 else "")
        return f"the environments returned NaN or infinite {name} (environment(s) {shown} of this batch)"
    return None
