"""n-step transitions for replay, written as rollouts arrive, followed per environment.

A transition starting at step s sums up to n rewards, r_s + gamma r_{s+1} + ... , and names the
observation to bootstrap from and its discount: gamma^k after k rewards, or 0 when the episode
terminated on the way. With Gymnasium's next-step autoreset the observation after a valid step t
is obs[t + 1] (last_obs after the rollout's last step), even when t ended the episode: that is the
real final observation, which a truncation bootstraps from. The step after an episode end is an
autoreset step (valid False): not a transition, skipped. An episode end emits every transition
still open in that environment; otherwise a transition is emitted once it holds n rewards.

The up to n - 1 steps still open when a rollout ends wait in a queue kept by global environment
id and continue with that environment's next rollout, whichever column or worker it comes in.
Transitions come out ordered by the step that completed them, then environment id, then start:
the same transitions in the same order however a sampler arranged the columns.
"""

from __future__ import annotations

import numpy as np

from rlpar.learning.estimators.env_rounds import rounds_of_distinct_envs


def most_transitions_per_rollout(*, num_envs: int, rollout_length: int, n: int) -> int:
    """The most one rollout can emit: each environment's steps plus up to n - 1 held over."""
    return num_envs * (rollout_length + n - 1)


class NStepWriter:
    def __init__(self, *, n: int, gamma: float):
        if n < 1:
            raise ValueError(f"n-step replay needs n >= 1, got {n}")
        self.n, self.gamma = int(n), float(gamma)
        # Open steps by environment id, right-aligned in n - 1 slots: observation, action, reward,
        # and whether the slot holds a step. Allocated on the first rollout (shapes come with it).
        self._obs: np.ndarray | None = None
        self._actions: np.ndarray | None = None
        self._rewards: np.ndarray | None = None
        self._open: np.ndarray | None = None

    def _grow(self, env_ids: np.ndarray, obs: np.ndarray, actions: np.ndarray) -> None:
        slots = self.n - 1
        if len(env_ids) and env_ids.min() < 0:
            raise ValueError("environment ids must be non-negative (they index the open steps)")
        needed = int(env_ids.max()) + 1 if len(env_ids) else 0
        if self._obs is None:
            self._obs = np.zeros((0, slots, *obs.shape[2:]), obs.dtype)
            self._actions = np.zeros((0, slots, *actions.shape[2:]), actions.dtype)
            self._rewards = np.zeros((0, slots), np.float64)
            self._open = np.zeros((0, slots), bool)
        assert self._actions is not None and self._rewards is not None and self._open is not None
        if self._obs.shape[2:] != obs.shape[2:] or self._actions.shape[2:] != actions.shape[2:]:
            raise ValueError("observation or action shape changed between rollouts")
        extra = needed - len(self._open)
        if extra > 0:
            pad = lambda a: np.concatenate([a, np.zeros((extra, *a.shape[1:]), a.dtype)])
            self._obs, self._actions = pad(self._obs), pad(self._actions)
            self._rewards, self._open = pad(self._rewards), pad(self._open)

    def add(self, *, obs, actions, rewards, terminated, truncated, valid, env_ids, last_obs) -> dict:
        """Finished transitions of one rollout ([T, N] arrays, last_obs [N, ...], env_ids [N]):
        obs, actions, rewards, next_obs, discounts, env_ids, each [M, ...]."""
        env_ids = np.asarray(env_ids, dtype=np.int64)
        self._grow(env_ids, obs, actions)
        parts = []
        for cols in rounds_of_distinct_envs(env_ids):
            parts.append(
                self._add_columns(
                    obs[:, cols],
                    actions[:, cols],
                    rewards[:, cols],
                    terminated[:, cols],
                    truncated[:, cols],
                    valid[:, cols],
                    env_ids[cols],
                    last_obs[cols],
                )
            )
        if not parts:
            return self._empty(obs, actions)
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}

    def _empty(self, obs, actions) -> dict:
        none = lambda like: np.zeros((0, *like.shape[2:]), like.dtype)
        return {
            "obs": none(obs),
            "actions": none(actions),
            "rewards": np.zeros(0, np.float32),
            "next_obs": none(obs),
            "discounts": np.zeros(0, np.float32),
            "env_ids": np.zeros(0, np.int64),
        }

    def _add_columns(self, obs, actions, rewards, terminated, truncated, valid, env_ids, last_obs) -> dict:
        n, slots = self.n, self.n - 1
        T = len(rewards)
        valid = np.asarray(valid, bool)
        ended = (np.asarray(terminated, bool) | np.asarray(truncated, bool)) & valid
        assert self._obs is not None and self._actions is not None and self._rewards is not None  # _grow's
        assert self._open is not None
        open_before = self._open[env_ids].T  # [slots, N]
        # An autoreset step only ever follows an episode end, which closed everything: anything
        # else would mean the columns were not this environment's consecutive steps.
        follows_end = np.concatenate(
            [~open_before[-1:].astype(bool) if slots else np.ones((1, len(env_ids)), bool), ended[:-1]]
        )
        if np.any(~valid & ~follows_end[:T]):
            raise ValueError(
                "an autoreset step (valid False) that does not follow an episode end: "
                "rollouts of an environment must arrive in order, each once"
            )
        # The open steps followed by this rollout: L = slots + T steps in a row per environment.
        seq_obs = np.concatenate([self._obs[env_ids].swapaxes(0, 1), obs])
        seq_actions = np.concatenate([self._actions[env_ids].swapaxes(0, 1), actions])
        seq_rewards = np.concatenate([self._rewards[env_ids].T, rewards.astype(np.float64)])
        present = np.concatenate([open_before, valid])
        seq_ended = np.concatenate([np.zeros_like(open_before), ended])
        seq_terminated = np.concatenate([np.zeros_like(open_before), np.asarray(terminated, bool) & valid])
        L = slots + T
        # Each start s collects rewards s, s+1, ... in n passes (one per offset, all starts at once).
        total = np.zeros((L, len(env_ids)), np.float64)
        count = np.zeros((L, len(env_ids)), np.int64)
        last = np.full((L, len(env_ids)), -1, np.int64)  # the sequence step that completed it
        collecting, done, cut = present.copy(), np.zeros_like(present), np.zeros_like(present)
        for k in range(n):
            reach = L - k  # starts whose step s + k lies inside the sequence
            step = np.zeros_like(present)
            step[:reach] = collecting[:reach]
            total[:reach] += np.where(step[:reach], self.gamma**k * seq_rewards[k:], 0.0)
            count += step
            closes = step.copy()
            closes[:reach] &= seq_ended[k:]
            if k == n - 1:
                closes = step
            last[closes] = np.nonzero(closes)[0] + k
            cut[:reach] |= closes[:reach] & seq_terminated[k:]
            done |= closes
            collecting = step & ~closes
        # Steps still collecting at the end of the sequence stay open for the next rollout.
        still_open = present & ~done
        self._open[env_ids] = still_open[L - slots :].T
        self._obs[env_ids] = seq_obs[L - slots :].swapaxes(0, 1)
        self._actions[env_ids] = seq_actions[L - slots :].swapaxes(0, 1)
        self._rewards[env_ids] = seq_rewards[L - slots :].T
        return self._emit(done, last, total, count, cut, seq_obs, seq_actions, obs, last_obs, env_ids, slots)

    def _emit(self, done, last, total, count, cut, seq_obs, seq_actions, obs, last_obs, env_ids, slots) -> dict:
        starts, cols = np.nonzero(done)
        ends = last[starts, cols]
        order = np.lexsort((starts, env_ids[cols], ends))
        starts, cols, ends = starts[order], cols[order], ends[order]
        # The observation after rollout step t: obs[t + 1], or last_obs after the last step.
        after = ends - slots + 1
        next_obs = np.where(
            (after < len(obs)).reshape(-1, *([1] * (obs.ndim - 2))),
            obs[np.minimum(after, len(obs) - 1), cols],
            last_obs[cols],
        )
        discounts = np.where(cut[starts, cols], 0.0, self.gamma ** count[starts, cols])
        return {
            "obs": seq_obs[starts, cols],
            "actions": seq_actions[starts, cols],
            "rewards": total[starts, cols].astype(np.float32),
            "next_obs": next_obs.astype(obs.dtype, copy=False),
            "discounts": discounts.astype(np.float32),
            "env_ids": env_ids[cols],
        }

    def state_dict(self) -> dict:
        """The open steps by environment id (copies: small, and changed by the next add)."""
        import torch  # the learner checkpoints; actors and shards need no torch

        if self._obs is None:
            return {"n": self.n, "gamma": self.gamma}
        assert self._actions is not None and self._rewards is not None and self._open is not None
        return {
            "n": self.n,
            "gamma": self.gamma,
            "obs": torch.from_numpy(self._obs.copy()),
            "actions": torch.from_numpy(self._actions.copy()),
            "rewards": torch.from_numpy(self._rewards.copy()),
            "open": torch.from_numpy(self._open.copy()),
        }

    def load_state_dict(self, state: dict) -> None:
        if int(state["n"]) != self.n or float(state["gamma"]) != self.gamma:
            raise ValueError(
                f"checkpointed n-step writer has n={state['n']}, gamma={state['gamma']}; "
                f"this one n={self.n}, gamma={self.gamma}"
            )
        if "obs" not in state:
            self._obs = self._actions = self._rewards = self._open = None
            return
        self._obs, self._actions = state["obs"].numpy().copy(), state["actions"].numpy().copy()
        self._rewards, self._open = state["rewards"].numpy().copy(), state["open"].numpy().copy()
