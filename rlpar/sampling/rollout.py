"""The rollout worker: a vector env plus a CPU copy of the policy. Every sampler runs this.

Environment `i` of the whole run is seeded with `seed + i` and draws its action noise from its
own generator, so a worker owning environments [k, k + n) produces exactly the columns
[k, k + n) of the batch a single worker owning all of them would produce.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from rlpar.envs.envpool_vector import EPISODE_CUT
from rlpar.envs.factory import EnvSpec, env_restarts, env_seeds, make_vector_env
from rlpar.envs.recovering import RESEED_STRIDE
from rlpar.envs.spaces import ActionMapper, draw_noise, flatten_observation_fn, noise_layout
from rlpar.envs.state_pickle import described, dumps_env_state, state_dropped_message
from rlpar.models.spec import PolicySpec
from rlpar.sampling.batch import Batch, allocate_batch_arrays, batch_layout
from rlpar.selfplay.pool import OPPONENT_POOL_KEY, OpponentLineup

NOISE_STREAM = 1  # separates action-noise seeds from environment seeds
# Each environment's generator draws noise for several rollouts at once: a call costs about as
# much for a few hundred steps as for a few, and short rollouts of many environments otherwise
# spend much of their time in these calls.
NOISE_DRAW_STEPS = 256  # steps of noise drawn per call, at least one rollout's
NOISE_DRAW_VALUES = 1 << 18  # at most this many numbers held ahead (2 MiB), unless one rollout needs more
log = logging.getLogger("rlpar")


def noise_rollouts_per_draw(action, rollout_length: int, num_envs: int) -> int:
    """Rollouts' worth of noise each generator draws at once. A generator's stream does not
    depend on how it is cut, so the numbers are those of one draw per rollout."""
    per_rollout = int(np.prod(noise_layout(action, (rollout_length, num_envs))[0]))
    return max(1, min(NOISE_DRAW_STEPS // rollout_length, NOISE_DRAW_VALUES // per_rollout))


class RolloutWorker:
    """The default `Worker` (rlpar.sampling.base): acts with the model's acting policy."""

    batch_layout = staticmethod(batch_layout)

    def __init__(
        self,
        *,
        env_spec: EnvSpec,
        policy_spec: PolicySpec,
        num_envs: int,
        rollout_length: int,
        seed: int,
        first_env_index: int = 0,
        generation: int = 0,
        inference=None,
    ):
        """`generation` counts replacements of this worker: a replacement draws new seeds.
        `inference`: a client of the learner's inference server (`parallel.inference=central`,
        rlpar.sampling.inference), which then acts for these environments: the worker only
        steps them."""
        self.num_envs = num_envs
        self.first_env_index = first_env_index
        self.rollout_length = rollout_length
        self.policy_spec = policy_spec
        if inference is not None:
            self.policy = inference.open()
        else:
            self.policy = policy_spec.acting_policy(env_ids=np.arange(first_env_index, first_env_index + num_envs))
        self.policy_version = 0
        self.action_mapper = ActionMapper(policy_spec.action)
        self.venv = make_vector_env(env_spec, num_envs)
        self.flatten = flatten_observation_fn(self.venv.single_observation_space)
        first_seed = seed + first_env_index + RESEED_STRIDE * generation
        raw_obs, _ = self.venv.reset(seed=env_seeds(env_spec, num_envs, first_seed))
        self.raw_obs = self.flatten(raw_obs)
        replacement = [generation] if generation else []
        self.noise_rngs = [
            np.random.default_rng([seed, NOISE_STREAM, first_env_index + i, *replacement]) for i in range(num_envs)
        ]
        self.rollouts_per_draw = noise_rollouts_per_draw(policy_spec.action, rollout_length, num_envs)
        # white noise drawn for the coming rollouts ([steps, N, ...], a multiple of rollout_length rows)
        self.noise_ahead = np.empty((0,))
        # True where the previous step ended an episode, so this step is Gymnasium's autoreset.
        self.autoreset_pending = np.zeros(num_envs, dtype=bool)
        self.episode_return = np.zeros(num_envs, dtype=np.float64)
        self.episode_length = np.zeros(num_envs, dtype=np.int64)
        # A recurrent policy's state per environment (float64, as the numpy copy computes), zeroed
        # before the step after an autoreset step (rlpar.models.modules.recurrent); fresh environments start at zero.
        self.recurrent_state = np.zeros((num_envs, policy_spec.state_size)) if policy_spec.state_size else None
        self.state_reset_pending = np.zeros(num_envs, dtype=bool)
        # Box actions' noise correlated in time (an actor_q model's noise_correlation): each
        # environment's last standard normals, carried into its next rollout (None: none drawn yet)
        self.noise_correlation = float(getattr(policy_spec, "noise_correlation", 0.0))
        self.noise_carry: np.ndarray | None = None
        self.last_rollout_end: float | None = None  # for the time this worker sat idle between rollouts
        self.env_state_problem: str | None = None  # why checkpoints keep no environment state (get_state)
        self.env_name = env_spec.id or str(env_spec.entry_point)
        # Its environments take an opponent's policy (a turn-based game's): looked up once, so that
        # other environments' rollouts pay nothing for it.
        self.hands_opponent_policy = any(
            hasattr(getattr(env, "unwrapped", env), "set_opponent_policy") for env in getattr(self.venv, "envs", ())
        )
        # The opponent pool's snapshots as acting policies (env.opponent=pool), from the pool that
        # rides with the weights (rlpar.selfplay.pool); None until one arrives.
        self.opponent_lineup: OpponentLineup | None = None

    def _hand_opponent_policy(self) -> None:
        """Environments that play the learner's policy against itself (a turn-based game's `self`
        opponent, rlpar.envs.pettingzoo.TurnBasedGame) get the policy this worker acts with, so
        the opponent always plays its newest weights, and the pool's lineup where one came. Handed
        before each rollout (the weights are set by then; moves before the first rollout are
        random ones), again because a rebuilt or unpickled environment holds none (a central
        inference client acts only for rows of this worker's environments, so it is not handed:
        its games' `self` opponent plays random moves; the pool's snapshots act here)."""
        if not self.hands_opponent_policy:
            return
        own = self.policy if hasattr(self.policy, "normalize") else None
        for env in getattr(self.venv, "envs", ()):
            game = getattr(env, "unwrapped", env)
            if own is not None and hasattr(game, "set_opponent_policy"):
                game.set_opponent_policy(own)
            if self.opponent_lineup is not None and hasattr(game, "set_opponent_lineup"):
                game.set_opponent_lineup(self.opponent_lineup)

    def set_weights(self, weights: dict, version: int) -> None:
        self.take_opponent_pool(weights)
        self.policy.set_weights(weights)
        self.policy_version = version

    def take_opponent_pool(self, weights: dict) -> None:
        """The opponent pool that rides with `weights` (env.opponent=pool), where one does: its
        snapshots become this worker's lineup (rebuilt only when the pool's version changes)."""
        pool = weights.get(OPPONENT_POOL_KEY)
        if pool is not None:
            if self.opponent_lineup is None:
                self.opponent_lineup = OpponentLineup(self.policy_spec.acting_policy)
            self.opponent_lineup.update(pool)

    # -- exact resume -----------------------------------------------------------------------
    def get_state(self) -> dict:
        """Everything that decides the next rollout, as tensors and plain values.

        Environments are pickled (their internal state has no common format: rlpar.envs.state_pickle)
        and signed with this user's key; `set_state` unpickles them only after the signature
        verifies. Environments whose state cannot be pickled (`env_state_problem`, found by the
        start-up probe or by the first checkpoint that tried) are left out: the state is then
        empty, and a resume starts fresh episodes.
        """
        import torch  # only the learner's process checkpoints; workers never import torch

        from rlpar.signed_pickle import SIGNED_PICKLE, sign

        if self.env_state_problem is not None:
            return {}
        env_fns = getattr(self.venv, "env_fns", None)  # SyncVectorEnv keeps its (unpicklable) factories
        if env_fns is not None:
            self.venv.env_fns = None  # type: ignore[attr-defined]  # SyncVectorEnv's, read by getattr above
        try:
            env_bytes = dumps_env_state(self.venv)
        except Exception as err:  # an environment's own objects: any exception
            self.env_state_problem = f"pickling it failed ({described(err)})"
            log.warning("%s", state_dropped_message(self.env_name, self.env_state_problem))
            return {}
        finally:
            if env_fns is not None:
                self.venv.env_fns = env_fns  # type: ignore[attr-defined]
        return {
            "venv": {
                SIGNED_PICKLE: torch.frombuffer(bytearray(env_bytes), dtype=torch.uint8),
                "hmac_sha256": sign(env_bytes),
            },
            "raw_obs": torch.from_numpy(self.raw_obs.copy()),
            "autoreset_pending": torch.from_numpy(self.autoreset_pending.copy()),
            "episode_return": torch.from_numpy(self.episode_return.copy()),
            "episode_length": torch.from_numpy(self.episode_length.copy()),
            "noise_rngs": [g.bit_generator.state for g in self.noise_rngs],
            **({"noise_ahead": torch.from_numpy(self.noise_ahead.copy())} if len(self.noise_ahead) else {}),
            **({} if self.noise_carry is None else {"noise_carry": torch.from_numpy(self.noise_carry.copy())}),
            **(
                {}
                if self.recurrent_state is None
                else {
                    "recurrent_state": torch.from_numpy(self.recurrent_state.copy()),
                    "state_reset_pending": torch.from_numpy(self.state_reset_pending.copy()),
                }
            ),
        }

    def set_state(self, state: dict) -> None:
        """Raises UntrustedPickleError, before unpickling anything, unless this user signed it. A
        state without environments (see `get_state`) keeps the fresh ones."""
        from rlpar.signed_pickle import SIGNED_PICKLE, UntrustedPickleError, loads_signed

        if "venv" not in state:
            return
        try:
            venv: Any = loads_signed(state["venv"][SIGNED_PICKLE].numpy().tobytes(), state["venv"].get("hmac_sha256"))
        except UntrustedPickleError:
            raise
        except Exception as err:  # the environment's own code, or code that has changed since it was saved
            log.warning(
                "the checkpoint's environment state cannot be unpickled (%s); this resume starts fresh episodes",
                described(err),
            )
            return
        self.venv.close()
        self.venv = venv
        self.raw_obs = state["raw_obs"].numpy().copy()
        self.autoreset_pending = state["autoreset_pending"].numpy().copy()
        self.episode_return = state["episode_return"].numpy().copy()
        self.episode_length = state["episode_length"].numpy().copy()
        for generator, rng_state in zip(self.noise_rngs, state["noise_rngs"]):
            generator.bit_generator.state = rng_state
        self.noise_ahead = state["noise_ahead"].numpy().copy() if "noise_ahead" in state else np.empty((0,))
        self.noise_carry = state["noise_carry"].numpy().copy() if "noise_carry" in state else None
        if self.recurrent_state is not None:
            self.recurrent_state = state["recurrent_state"].numpy().copy()
            self.state_reset_pending = state["state_reset_pending"].numpy().copy()

    def _draw_noise(self) -> np.ndarray:
        """The next rollout's noise, [T, N, ...]: each environment's own generator draws
        `rollouts_per_draw` rollouts' worth at once (`noise_rollouts_per_draw`)."""
        T, action = self.rollout_length, self.policy_spec.action
        if len(self.noise_ahead) == 0:
            steps = T * self.rollouts_per_draw
            self.noise_ahead = np.stack([draw_noise(g, action, steps) for g in self.noise_rngs], axis=1)
        noise, self.noise_ahead = self.noise_ahead[:T], self.noise_ahead[T:]
        if action.discrete:  # uniforms, in the acting copy's arithmetic (a float32 copy compares float32)
            return noise.astype(getattr(self.policy, "dtype", np.float64), copy=False)
        if self.noise_correlation:
            noise = self._correlated(noise)
        return noise.astype(np.float32)

    def _correlated(self, white: np.ndarray) -> np.ndarray:
        """An AR(1) process driven by `white` ([T, N, A] standard normals): x_t = ρ x_{t-1} +
        sqrt(1 - ρ^2) w_t, standard normal at every step, correlated ρ^k k steps apart. The first
        step of the run is its white draw (stationary from the start)."""
        rho = self.noise_correlation
        drive = np.sqrt(1.0 - rho * rho)
        noise = np.empty_like(white)
        carry = white[0] if self.noise_carry is None else rho * self.noise_carry + drive * white[0]
        noise[0] = carry
        for t in range(1, len(white)):
            carry = noise[t] = rho * carry + drive * white[t]
        self.noise_carry = carry.copy()
        return noise

    def sample(self, out: dict[str, np.ndarray] | None = None) -> Batch:
        """One rollout of `rollout_length` steps; writes into `out` (e.g. shared memory) if given."""
        started = time.perf_counter()
        T, N = self.rollout_length, self.num_envs
        bufs = out if out is not None else allocate_batch_arrays(self.policy_spec, T, N)
        obs_buf, actions_buf, logp_buf, values_buf = bufs["obs"], bufs["actions"], bufs["logp"], bufs["values"]
        rewards_buf, term_buf, trunc_buf, valid_buf = (
            bufs["rewards"],
            bufs["terminated"],
            bufs["truncated"],
            bufs["valid"],
        )
        track_moments = self.policy_spec.normalize_obs  # raw statistics feed the learner's normaliser
        if track_moments:
            raw_sum = np.zeros((N, self.policy_spec.obs_dim), np.float64)
            raw_sq = np.zeros((N, self.policy_spec.obs_dim), np.float64)
        noise = self._draw_noise()
        self._hand_opponent_policy()
        env_restarts_before = env_restarts(self.venv)
        team_returns, team_lengths, team_ends = [], [], []
        game_results: list[tuple] = []  # (step, column, opponent, outcome, moved first) of games that ended
        act_raw = self.policy.act_raw
        state = self.recurrent_state
        step, to_env, flatten = self.venv.step, self.action_mapper.to_env, self.flatten
        # Per step, each environment's running return and length (this step's included) and whether
        # its episode ended; the episodes are read from them once, after the loop, in (step,
        # environment) order. Per step that is a few whole-array calls (each ~1 us at this size).
        running_return, running_length = np.empty((T, N), np.float64), np.empty((T, N), np.int64)
        ended = np.empty((T, N), np.bool_)
        for t in range(T):
            if track_moments:
                raw_sum += self.raw_obs
                raw_sq += np.square(self.raw_obs, dtype=np.float64)
            if state is not None:
                state[self.state_reset_pending] = 0.0
                bufs["states"][t] = state
            obs_buf[t], actions, logp, values = act_raw(self.raw_obs, noise[t], state)
            raw_next, rewards, terminated, truncated, info = step(to_env(actions))
            valid = np.logical_not(self.autoreset_pending, out=valid_buf[t])
            if "agent_active" in info:  # a multi-agent environment's absent agents take no step (envs/pettingzoo.py)
                valid &= info["agent_active"]
                for c in np.flatnonzero(~np.isnan(info["team_return"])):
                    team_returns.append(float(info["team_return"][c]))
                    team_lengths.append(int(info["team_length"][c]))
                    team_ends.append((t, int(c)))
            if "game_outcome" in info:  # a turn-based game's end (rlpar.envs.pettingzoo.TurnBasedGame)
                for c in np.flatnonzero(info["_game_outcome"]):
                    outcome, first, who = (info[k][c] for k in ("game_outcome", "moved_first", "opponent"))
                    game_results.append((t, int(c), str(who), int(outcome), bool(first)))
            actions_buf[t], logp_buf[t], values_buf[t] = actions, logp, values
            rewards_buf[t], term_buf[t], trunc_buf[t] = rewards, terminated, truncated
            episode_return = np.add(self.episode_return, rewards, out=running_return[t])
            episode_length = np.add(self.episode_length, valid, out=running_length[t])
            done = np.logical_or(terminated, truncated, out=ended[t])
            done &= valid
            self.episode_return = np.where(done, 0.0, episode_return)
            self.episode_length = np.where(done, 0, episode_length)
            if state is not None:
                self.state_reset_pending = ~valid
            self.autoreset_pending = done
            if EPISODE_CUT in info:  # truncated by a resume, not finished: bootstrapped, but not an episode's return
                self.autoreset_pending = done.copy()
                ended[t] &= ~info[EPISODE_CUT]
            self.raw_obs = flatten(raw_next)
        steps, envs = np.nonzero(ended)
        returns, lengths = running_return[steps, envs].tolist(), running_length[steps, envs].tolist()
        ends = list(zip(steps.tolist(), envs.tolist()))
        last_obs, bootstrap, env_ids = bufs["last_obs"], bufs["bootstrap_value"], bufs["env_ids"]
        next_state = None if state is None else np.where(self.state_reset_pending[:, None], 0.0, state)  # not kept
        value_raw = getattr(self.policy, "value_raw", None)  # a central inference client only acts
        if value_raw is not None:
            last_obs[:], bootstrap[:] = value_raw(self.raw_obs, next_state)
        else:
            last_obs[:], _, _, bootstrap[:] = act_raw(self.raw_obs, np.zeros_like(noise[0]), next_state)
        env_ids[:] = np.arange(self.first_env_index, self.first_env_index + N)
        idle_s = started - self.last_rollout_end if self.last_rollout_end is not None else 0.0
        self.last_rollout_end = time.perf_counter()
        return Batch(
            obs=obs_buf,
            actions=actions_buf,
            logp=logp_buf,
            values=values_buf,
            rewards=rewards_buf,
            terminated=term_buf,
            truncated=trunc_buf,
            valid=valid_buf,
            bootstrap_value=bootstrap,
            last_obs=last_obs,
            env_ids=env_ids,
            states=bufs.get("states"),
            episode_returns=returns,
            episode_lengths=lengths,
            episode_ends=ends,
            agents_per_env=getattr(self.venv, "agents_per_env", 1),
            team_returns=team_returns,
            team_lengths=team_lengths,
            team_ends=team_ends,
            game_results=game_results,
            raw_obs_sums=(raw_sum, raw_sq) if track_moments else None,
            policy_versions=[self.policy_version],
            env_restarts=env_restarts(self.venv) - env_restarts_before,
            actor_idle_s=idle_s,
            actor_busy_s=self.last_rollout_end - started,
        )

    def close(self) -> None:
        self.venv.close()
