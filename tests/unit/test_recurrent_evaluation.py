"""Greedy evaluation of a recurrent policy (rlpar.runtime.evaluation): a state per episode, zeros
at its reset, carried from step to step."""

import gymnasium as gym
import numpy as np
import torch

from rlpar.envs.factory import EnvSpec
from rlpar.envs.spaces import ActionInfo
from rlpar.models.q_spec import QNetworkSpec
from rlpar.models.spec import PolicySpec
from rlpar.runtime.evaluation import evaluate_policy


class Recorder(gym.Wrapper):
    """The observations the policy saw and the actions it took, episode by episode."""

    def __init__(self, env, episodes: list):
        super().__init__(env)
        self.episodes = episodes

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.episodes.append(([obs], []))
        return obs, info

    def step(self, action):
        obs, *rest = self.env.step(action)
        self.episodes[-1][0].append(obs)
        self.episodes[-1][1].append(int(action))
        return (obs, *rest)


def greedy_actions(module, observations: list) -> list[int]:
    """The torch module's greedy actions over one episode, unrolled from a zero state."""
    obs = torch.as_tensor(np.stack(observations)[:, None])
    with torch.no_grad():
        if hasattr(module, "q_sequence"):
            q, _ = module.q_sequence(obs, module.initial_state(1), None)
            return q[:, 0].argmax(dim=1).tolist()
        out, _, _ = module.sequence_outputs(obs, module.initial_state(1), None)
        return out[:, 0].argmax(dim=1).tolist()


def test_recurrent_evaluation_carries_a_state_per_episode():
    """Each episode's actions are the module's over that episode alone, from a zero state; a
    reset state at every step (or one carried over from the last episode) acts otherwise."""
    action = ActionInfo(discrete=True, size=3)
    for spec in (PolicySpec(obs_dim=5, action=action, hidden_sizes=(16,), recurrent="lstm", recurrent_size=16),
                 QNetworkSpec(obs_dim=5, action=action, hidden_sizes=(16,), recurrent="gru", recurrent_size=16)):
        torch.manual_seed(1)
        module = spec.build()
        for param in module.parameters():  # away from the initial heads' near-uniform choice
            torch.nn.init.normal_(param) if param.dim() > 1 else torch.nn.init.zeros_(param)
        weights = {k: v.numpy().copy() for k, v in module.state_dict().items()}
        episodes: list = []
        evaluate_policy(weights, policy_spec=spec, num_episodes=6, seed=3,
                        env_spec=EnvSpec(id="rlpar/MemoryCue-v0", kwargs={"num_cues": 3, "delay": 6}),
                        wrap_env=lambda env: Recorder(env, episodes))
        assert len(episodes) == 6
        for observations, actions in episodes:
            assert actions == greedy_actions(module, observations[:-1])
        # the check can tell: acting from a zero state at every step differs somewhere
        memoryless = [greedy_actions(module, [o])[0] for observations, _ in episodes for o in observations[:-1]]
        assert memoryless != [a for _, actions in episodes for a in actions]
