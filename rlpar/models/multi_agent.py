"""Policies of a multi-agent environment, as one model (importable without torch).

The rows of a multi-agent batch are agents (rlpar/envs/pettingzoo.py): row i of any block of
whole environments is agent i % A. `MultiAgentSpec` describes one actor-critic per policy
(`PolicySpec`) and which agents each reads; `PolicySet` holds their torch modules, so the learner's
state dict is every policy's under `policies.<name>.`; `MultiPolicyActing` routes each row to its
policy's acting copy. Samplers, central inference and evaluation see one policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlpar.envs.spaces import ActionInfo, action_layout
from rlpar.models.acting.numpy_acting import NumpyActing
from rlpar.models.spec import PolicySpec

POLICY_PREFIX = "policies."


@dataclass(frozen=True)
class MultiAgentSpec:
    """`policies`: (name, spec) per policy, its spec's `obs_dim` the width of its agents' rows;
    `policy_of`: per agent, its policy's index. Rows are `obs_dim` wide (the widest policy's) and
    actions `action` (the widest)."""

    agents: tuple[str, ...]
    policies: tuple[tuple[str, PolicySpec], ...]
    policy_of: tuple[int, ...]
    obs_dim: int
    action: ActionInfo

    kind = "actor_critic"
    obs_dtype = "float32"
    state_size = 0  # recurrent multi-agent policies are not offered
    recurrent = None
    torch_inference = False  # central inference acts with the numpy copies (rows go to several networks)

    @property
    def agents_per_env(self) -> int:
        return len(self.agents)

    @property
    def normalize_obs(self) -> bool:
        return any(spec.normalize_obs for _, spec in self.policies)

    @classmethod
    def from_layout(cls, layout, make_spec, **options) -> MultiAgentSpec:
        """One PolicySpec per policy of an AgentLayout (rlpar/envs/pettingzoo.py), made by
        `make_spec` (the model group) with `options`; with a global state in the rows the actor
        reads the agent's own part of its row (a centralised critic reads all of it). The row's
        Dict keys tell the policy where its agents' action mask is (rlpar.models.action_masks)."""
        policies = []
        for p, name in enumerate(layout.policies):
            agent = layout.policy_agent(p)
            actor_inputs = layout.actor_inputs[agent] if layout.state_dim else None
            policies.append(
                (
                    name,
                    make_spec(
                        obs_dim=layout.row_dims[agent],
                        action=layout.actions[agent],
                        actor_inputs=actor_inputs,
                        observation_keys=layout.row_keys(agent),
                        **options,
                    ),
                )
            )
        return cls(
            agents=layout.agents,
            policies=tuple(policies),
            policy_of=layout.policy_of,
            obs_dim=layout.row_dim,
            action=layout.column_action,
        )

    def rows_of(self, policy: int, num_rows: int) -> np.ndarray:
        """The rows of `policy` among `num_rows` rows of whole environments."""
        return np.flatnonzero(np.asarray(self.policy_of)[np.arange(num_rows) % self.agents_per_env] == policy)

    def build(self):
        from rlpar.models.modules.policy_set import PolicySet

        return PolicySet({name: spec.build() for name, spec in self.policies})

    def acting_policy(self, env_ids=None):
        return MultiPolicyActing(self)


def policy_weights(weights: dict, name: str) -> dict:
    """Policy `name`'s entries of a PolicySet state dict, under their own names."""
    prefix = f"{POLICY_PREFIX}{name}."
    return {key[len(prefix) :]: value for key, value in weights.items() if key.startswith(prefix)}


class MultiPolicyActing(NumpyActing):
    """Each row acted by its policy's copy, on the leading values of the row that policy reads."""

    def __init__(self, spec: MultiAgentSpec):
        self.spec = spec
        self.copies = [policy.acting_policy() for _, policy in spec.policies]
        self.widths = [policy.obs_dim for _, policy in spec.policies]
        self._rows: dict[int, list[np.ndarray]] = {}

    def set_weights(self, weights: dict) -> None:
        for (name, _), copy in zip(self.spec.policies, self.copies):
            copy.set_weights(policy_weights(weights, name))

    def rows(self, num_rows: int) -> list[np.ndarray]:
        if num_rows not in self._rows:
            self._rows[num_rows] = [self.spec.rows_of(p, num_rows) for p in range(len(self.copies))]
        return self._rows[num_rows]

    def normalize(self, raw_obs: np.ndarray) -> np.ndarray:
        """Each policy's rows whitened with its own statistics (padding past its width as it came)."""
        obs = np.array(raw_obs, np.float32)
        for rows, copy, width in zip(self.rows(len(raw_obs)), self.copies, self.widths):
            if len(rows):
                obs[rows, :width] = copy.normalize(raw_obs[rows, :width])
        return obs

    def value_raw(self, raw_obs: np.ndarray, state=None):
        """Normalised rows and their values, each from its policy (acting greedily: values do not
        depend on the noise)."""
        obs = self.normalize(raw_obs)
        return obs, self.act(obs, None, state)[2]

    def act(self, obs: np.ndarray, noise: np.ndarray | None, state=None):
        """Actions, log-probabilities and values of normalised rows, each from its policy."""
        n = len(obs)
        actions: np.ndarray = np.zeros(*action_layout(self.spec.action, (n,)))
        logp, values = np.zeros(n, np.float32), np.zeros(n, np.float32)
        for rows, copy, width in zip(self.rows(n), self.copies, self.widths):
            if len(rows):
                actions[rows], logp[rows], values[rows] = copy.act(
                    obs[rows, :width], None if noise is None else noise[rows]
                )
        return actions, logp, values
