"""Fixed-length sequences for recurrent replay (R2D2, Kapturowski et al. 2019), written as
rollouts arrive, followed per environment.

A sequence is `burn_in + length` steps of one episode with the recurrent state that entered its
first step: the learner unrolls the burn-in from that stored state without training on it, then
trains on the `length` steps after. Sequences overlap: the trained parts start every `period`
steps of an episode (R2D2: length // 2), at episode steps 0, period, 2 period, ... The burn-in
of the first ones lies before the episode's start: padding (mask False), which resets the state
to the zeros an episode starts from, so an episode's first steps are trained like any other.

Sequences never mix two episodes: an episode end emits every sequence whose trained part has
begun, padded after the end. `obs` has one more row than the steps: the observation after the
last real step, which a truncation or a sequence cut mid-episode bootstraps from (with
Gymnasium's next-step autoreset, obs[t + 1] after a valid step t, last_obs after the rollout).
Autoreset steps (valid False) are not transitions: skipped.

The steps of a sequence not yet complete wait in a track kept by global environment id and
continue with that environment's next rollout, whichever column or worker it comes in. An
environment the writer has no track of and no episode end for (a run's first rollout, or a
resume without the writer's state) may be mid-episode: its grid starts there with a real
burn-in from the stored state. Sequences come out per round of distinct environments (see
rlpar.learning.estimators.env_rounds) ordered by the rollout step that completed them, then environment
id, then start: the same sequences in the same order however a sampler arranged the columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlpar.learning.estimators.env_rounds import rounds_of_distinct_envs


def sequence_fields(*, obs_dim: int, obs_dtype: str = "float32", state_size: int, burn_in: int, length: int) -> dict:
    """What a replayed sequence holds (RingStorage fields: one row per sequence)."""
    steps = burn_in + length
    return {
        "obs": ((steps + 1, obs_dim), np.dtype(obs_dtype)),
        "actions": ((steps,), np.int64),
        "rewards": ((steps,), np.float32),
        "terminated": ((steps,), np.bool_),
        "mask": ((steps,), np.bool_),
        "initial_state": ((state_size,), np.float32),
    }


@dataclass
class _Track:
    """One environment's open episode: the steps that sequences not yet emitted still need."""

    begin: int  # grid position of the episode's first step (0; -burn_in when first seen mid-way)
    first: int  # grid position of the first step held
    next_k: int  # the next sequence to emit: trained part from grid position next_k * period
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    states: np.ndarray

    @property
    def last(self) -> int:
        return self.first + len(self.rewards) - 1


class SequenceWriter:
    def __init__(self, *, burn_in: int, length: int, period: int | None = None):
        period = length // 2 if period is None else period
        if burn_in < 0 or length < 1 or not 1 <= period <= length:
            raise ValueError(
                f"sequence replay needs burn_in >= 0, length >= 1 and 1 <= period <= length (every "
                f"step trained), got burn_in={burn_in}, length={length}, period={period}"
            )
        self.burn_in, self.length, self.period = int(burn_in), int(length), int(period)
        self.steps = self.burn_in + self.length
        self._tracks: dict[int, _Track] = {}
        self._ended: set[int] = set()  # environments whose next valid step starts an episode

    def add(self, *, obs, actions, rewards, terminated, truncated, valid, env_ids, last_obs, states) -> dict:
        """Finished sequences of one rollout ([T, N] arrays, states [T, N, S] entering each step,
        last_obs [N, ...], env_ids [N]): obs [M, L + 1, ...], actions, rewards, terminated, mask
        [M, L], initial_state [M, S], env_ids [M], L = burn_in + length."""
        env_ids = np.asarray(env_ids, dtype=np.int64)
        valid = np.asarray(valid, bool)
        terminated = np.asarray(terminated, bool) & valid
        ended = terminated | (np.asarray(truncated, bool) & valid)
        parts = []
        for cols in rounds_of_distinct_envs(env_ids):
            emitted = []
            for c in cols:
                emitted += self._add_column(
                    int(env_ids[c]),
                    obs[:, c],
                    actions[:, c],
                    rewards[:, c],
                    terminated[:, c],
                    ended[:, c],
                    valid[:, c],
                    last_obs[c],
                    states[:, c],
                )
            emitted.sort(key=lambda item: item[0])
            parts += [sequence for _, sequence in emitted]
        if not parts:
            return self._empty(obs, actions, states)
        return {key: np.stack([p[key] for p in parts]) for key in parts[0]}

    def _empty(self, obs, actions, states) -> dict:
        none = lambda shape, dtype: np.zeros((0, *shape), dtype)
        return {
            "obs": none((self.steps + 1, *obs.shape[2:]), obs.dtype),
            "actions": none((self.steps, *actions.shape[2:]), actions.dtype),
            "rewards": none((self.steps,), np.float32),
            "terminated": none((self.steps,), bool),
            "mask": none((self.steps,), bool),
            "initial_state": none(states.shape[2:], np.float32),
            "env_ids": np.zeros(0, np.int64),
        }

    def _add_column(self, env_id, obs, actions, rewards, terminated, ended, valid, last_obs, states) -> list:
        """One environment's rollout, episode segment by segment: [((step, env, k), sequence)]."""
        T = len(valid)
        # A segment stops at an episode end, before an autoreset step, or at the rollout's end.
        stops = ended | np.r_[~valid[1:], True]
        emitted, t = [], 0
        while t < T:
            if not valid[t]:
                if env_id in self._tracks:
                    raise ValueError(
                        "an autoreset step (valid False) that does not follow an episode end: "
                        "rollouts of an environment must arrive in order, each once"
                    )
                self._ended.add(env_id)
                t += 1
                continue
            b = t + int(np.argmax(stops[t:]))
            track = self._tracks.pop(env_id, None)
            if track is None:
                begin = 0 if env_id in self._ended else -self.burn_in
                track = _Track(
                    begin,
                    begin,
                    0,
                    obs[t : b + 1],
                    actions[t : b + 1],
                    rewards[t : b + 1].astype(np.float32),
                    states[t : b + 1].astype(np.float32),
                )
            else:
                track.obs = np.concatenate([track.obs, obs[t : b + 1]])
                track.actions = np.concatenate([track.actions, actions[t : b + 1]])
                track.rewards = np.concatenate([track.rewards, rewards[t : b + 1].astype(np.float32)])
                track.states = np.concatenate([track.states, states[t : b + 1].astype(np.float32)])
            self._ended.discard(env_id)
            after = obs[b + 1] if b + 1 < T else last_obs
            for k, last_step, sequence in self._emit(track, after, bool(ended[b]), bool(terminated[b]), env_id):
                # Keyed by the rollout step that completed it: its last real step.
                emitted.append(((b - (track.last - last_step), env_id, k), sequence))
            if ended[b]:
                self._ended.add(env_id)
            else:
                self._trim(track)
                self._tracks[env_id] = track
            t = b + 1
        return emitted

    def _emit(self, track: _Track, after, ended: bool, terminated: bool, env_id: int) -> list:
        """The track's sequences complete now (all whose trained part began, at an episode end),
        as (k, grid position of the last real step, sequence)."""
        out = []
        while (
            track.next_k * self.period + self.length - 1 <= track.last
            or ended
            and track.next_k * self.period <= track.last
        ):
            k = track.next_k
            window = k * self.period - self.burn_in  # grid position of the sequence's row 0
            real_from, real_to = max(window, track.begin), min(window + self.steps - 1, track.last)
            out.append(
                (
                    k,
                    real_to,
                    self._sequence(
                        track, window, real_from, real_to, after, terminated and real_to == track.last, env_id
                    ),
                )
            )
            track.next_k += 1
        return out

    def _trim(self, track: _Track) -> None:
        """Drops the steps before the next sequence's first (its window is never past the
        track's end: the previous one ended at most `length - period` steps before it)."""
        keep_from = max(track.begin, track.next_k * self.period - self.burn_in) - track.first
        if keep_from > 0:
            track.first += keep_from
            track.obs, track.actions = track.obs[keep_from:], track.actions[keep_from:]
            track.rewards, track.states = track.rewards[keep_from:], track.states[keep_from:]

    def _sequence(self, track, window, real_from, real_to, after, terminated, env_id) -> dict:
        rows = slice(real_from - window, real_to - window + 1)
        held = slice(real_from - track.first, real_to - track.first + 1)
        obs = np.zeros((self.steps + 1, *track.obs.shape[1:]), track.obs.dtype)
        obs[rows] = track.obs[held]
        # The observation after the last real step: the next one held, or the one after the track.
        obs[rows.stop] = track.obs[held.stop] if held.stop < len(track.obs) else after
        actions = np.zeros((self.steps, *track.actions.shape[1:]), track.actions.dtype)
        actions[rows] = track.actions[held]
        rewards = np.zeros(self.steps, np.float32)
        rewards[rows] = track.rewards[held]
        mask = np.zeros(self.steps, bool)
        mask[rows] = True
        ends = np.zeros(self.steps, bool)
        ends[rows.stop - 1] = terminated
        return {
            "obs": obs,
            "actions": actions,
            "rewards": rewards,
            "terminated": ends,
            "mask": mask,
            "initial_state": track.states[held.start].copy(),
            "env_ids": np.int64(env_id),
        }

    def state_dict(self) -> dict:
        """The open tracks and the environments between episodes (tensors and plain values)."""
        import torch  # the learner checkpoints; actors and shards need no torch

        tracks = [
            {
                "env_id": env_id,
                "begin": t.begin,
                "first": t.first,
                "next_k": t.next_k,
                **{name: torch.from_numpy(getattr(t, name).copy()) for name in ("obs", "actions", "rewards", "states")},
            }
            for env_id, t in sorted(self._tracks.items())
        ]
        return {
            "burn_in": self.burn_in,
            "length": self.length,
            "period": self.period,
            "tracks": tracks,
            "ended": sorted(self._ended),
        }

    def load_state_dict(self, state: dict) -> None:
        saved = (int(state["burn_in"]), int(state["length"]), int(state["period"]))
        if saved != (self.burn_in, self.length, self.period):
            raise ValueError(
                f"checkpointed sequence writer has (burn_in, length, period)={saved}; "
                f"this one {(self.burn_in, self.length, self.period)}"
            )
        self._tracks = {
            int(t["env_id"]): _Track(
                int(t["begin"]),
                int(t["first"]),
                int(t["next_k"]),
                *(t[name].numpy().copy() for name in ("obs", "actions", "rewards", "states")),
            )
            for t in state["tracks"]
        }
        self._ended = {int(e) for e in state["ended"]}
