"""Recurrent networks (learner side, `model.recurrent=lstm|gru`): an encoder (the MLP trunk, or a
CNN for images), an LSTM or GRU core, then linear heads: the actor-critic's policy and value, or
the Q-network's Q-values.

A state is one row per environment, [N, state_size]: the LSTM's h then c side by side, or the
GRU's h. It is zero at an episode's start. Workers and learners reset it by one rule: the state
entering step t is zeroed when step t-1 was Gymnasium's autoreset step (valid[t-1] False), so the
autoreset step itself still sees the episode's memory (its value bootstraps a truncation). A batch
stores the state entering each of its steps with that reset applied (`Batch.states`), so a
sequence may start at any step from its stored state.

The core keeps torch's LSTMCell / GRUCell weights (their state dict and gate order) and runs them
with torch's own sequence loop between resets. acting/numpy_recurrent.py runs the same maths in float64
for the workers.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rlpar.models.modules.actor_critic import ActorCriticBase
from rlpar.models.modules.encoders import build_encoder, image_batch
from rlpar.models.modules.normalizer import ObservationNormalizer
from rlpar.models.modules.q_network import QNetwork

if TYPE_CHECKING:  # the specs build these classes: importing them here would be a circle
    from rlpar.models.spec import PolicySpec

CELLS = {"lstm": nn.LSTMCell, "gru": nn.GRUCell}
TRUNK_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def sequence_starts(valid: torch.Tensor) -> torch.Tensor:
    """[T, E] True where the state entering step t is zeroed: after an autoreset step. Step 0's
    reset is already applied to the stored state a sequence starts from."""
    starts = torch.zeros_like(valid, dtype=torch.bool)
    starts[1:] = ~valid[:-1]
    return starts


class RecurrentCore(nn.Module):
    def __init__(self, kind: str, input_size: int, hidden_size: int):
        super().__init__()
        self.kind, self.hidden_size = kind, hidden_size
        self.state_size = hidden_size * (2 if kind == "lstm" else 1)  # h then c, or h
        self.cell = CELLS[kind](input_size, hidden_size)
        for name, param in self.cell.named_parameters():  # CleanRL's LSTM init: orthogonal, zero biases
            nn.init.orthogonal_(param, 1.0) if name.startswith("weight") else nn.init.zeros_(param)

    def run(self, features: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs [T, E, H] and the final state of features [T, E, F] without resets: torch's own
        LSTM / GRU loop over the cell's weights (several times faster than stepping in Python)."""
        cell, size = self.cell, self.hidden_size
        weights = (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
        if self.kind == "lstm":
            out, h, c = torch.lstm(
                features,
                (state[None, :, :size].contiguous(), state[None, :, size:].contiguous()),
                weights,
                True,
                1,
                0.0,
                self.training,
                False,
                False,
            )
            return out, torch.cat((h[0], c[0]), dim=1)
        out, h = torch.gru(features, state[None].contiguous(), weights, True, 1, 0.0, self.training, False, False)
        return out, h[0]

    def unroll(self, features: torch.Tensor, initial_state: torch.Tensor, valid: torch.Tensor | None):
        """Outputs [T, E, H] and the final state [E, S] of features [T, E, F] from
        `initial_state`, zeroing the state after autoreset steps (`valid` [T, E]; None: no resets):
        one `run` per stretch of steps between resets."""
        state = initial_state.to(features.dtype)
        if valid is None:
            return self.run(features, state)
        starts = sequence_starts(valid)
        keep = (~starts).unsqueeze(-1).to(features.dtype)
        bounds = [0, *torch.nonzero(starts.any(dim=1)).flatten().tolist(), len(features)]
        outputs = []
        for first, end in zip(bounds, bounds[1:]):
            if first > 0:
                state = state * keep[first]
            out, state = self.run(features[first:end], state)
            outputs.append(out)
        return torch.cat(outputs), state


def encoder_for(spec) -> tuple[nn.Module, int]:
    """The encoder under the core and its output width: the CNN for images, else an MLP trunk of
    `hidden_sizes` (none: the observation itself)."""
    if spec.chosen_encoder != "mlp":
        encoder = build_encoder(spec.chosen_encoder, spec.image_shape, spec.hidden_sizes)
        return encoder, encoder.features
    layers, sizes = [], [spec.obs_dim, *spec.hidden_sizes]
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        linear = nn.Linear(fan_in, fan_out)
        nn.init.orthogonal_(linear.weight, math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, TRUNK_ACTIVATIONS[spec.activation]()]
    return nn.Sequential(*layers), sizes[-1]


class RecurrentEncoding(nn.Module):
    """What both recurrent networks share: the encoder, the core, and features of raw rows."""

    recurrent = True
    spec: Any  # the network's spec, set by the class this is mixed into

    def _build_recurrent(self, spec) -> int:
        self.image = spec.chosen_encoder != "mlp"
        self.pixels = spec.obs_dtype == "uint8"
        self.encoder, features = encoder_for(spec)
        self.core = RecurrentCore(spec.recurrent, features, spec.recurrent_size)
        self.state_size = self.core.state_size
        return spec.recurrent_size

    def initial_state(self, n: int) -> torch.Tensor:
        return torch.zeros(n, self.state_size, device=self.core.cell.weight_ih.device)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Encoder features [M, F] of observation rows [M, obs_dim]."""
        if self.image:
            return self.encoder(image_batch(obs, self.spec.image_shape, self.spec.channels_last))
        if self.pixels:  # image bytes fed to the MLP, scaled as the numpy copy does
            obs = obs.to(self.core.cell.weight_ih.dtype) / 255.0
        return self.encoder(self.network_inputs(obs))  # type: ignore[operator]  # ActionMasking's, mixed in

    def outputs_after(self, last_obs: torch.Tensor, final_state: torch.Tensor, last_valid: torch.Tensor) -> tuple:
        """The acting outputs for the observation after a sequence: one more step from its final
        state, zeroed where its last step was an autoreset step (the reset rule, as workers act)."""
        # acting_outputs: the network's this is mixed into (mypy sees nn.Module's __getattr__)
        return self.acting_outputs(last_obs, final_state * last_valid.unsqueeze(-1).to(final_state.dtype))[0]  # type: ignore[operator]

    def core_outputs(self, obs: torch.Tensor, initial_state: torch.Tensor, valid: torch.Tensor | None):
        """The core's outputs [T, E, H] and final state over observations [T, E, obs_dim]."""
        T, E = obs.shape[:2]
        features = self.features(obs.reshape(T * E, -1)).reshape(T, E, -1)
        return self.core.unroll(features, initial_state, valid)


class RecurrentActorCritic(RecurrentEncoding, ActorCriticBase):
    """Encoder, core, then a linear policy head and a linear value head (shared layers, as in
    CleanRL's ppo_atari_lstm and Sample Factory)."""

    def __init__(self, spec: PolicySpec):
        ActorCriticBase.__init__(self, spec)
        width = self._build_recurrent(spec)
        self.obs_normalizer = ObservationNormalizer(
            spec.obs_dim, spec.normalize_obs and not self.image, kept=spec.mask_columns
        )
        self.actor = nn.Linear(width, spec.action.size)
        self.critic = nn.Linear(width, 1)
        for head, gain in ((self.actor, 0.01), (self.critic, 1.0)):
            nn.init.orthogonal_(head.weight, gain)
            nn.init.zeros_(head.bias)
        self._add_log_std()

    def sequence_outputs(self, obs: torch.Tensor, initial_state: torch.Tensor, valid: torch.Tensor | None):
        """Actor outputs [T, E, A], values [T, E] and the final state, over observations [T, E, ...]."""
        h, final = self.core_outputs(obs, initial_state, valid)
        return self.masked(self.actor(h), obs), self.critic(h)[..., 0], final

    # A recurrent network acts and evaluates from a state: its signatures extend the feed-forward ones.
    def acting_outputs(self, obs: torch.Tensor, state: torch.Tensor):  # type: ignore[override]
        """One step for N environments: ((actor outputs, values), the next state)."""
        out, values, state = self.sequence_outputs(obs[None], state, None)
        return (out[0], values[0]), state

    def towers(self, obs: torch.Tensor):
        raise TypeError(
            "a recurrent actor-critic reads sequences: use sequence_outputs or evaluate_actions with "
            "initial_state and valid"
        )

    def evaluate_actions(  # type: ignore[override]
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        with_entropy: bool = True,
        with_bounds: bool = False,
        *,
        initial_state: torch.Tensor,
        valid: torch.Tensor,
    ):
        """Log-probabilities, entropies and values of the valid steps of sequences ([T, E, ...]
        observations and actions from `initial_state` [E, S]), flat and time-major, the order of
        rlpar.learning.estimators.batch_tensors.valid_step_tensors."""
        out, values, _ = self.sequence_outputs(obs, initial_state, valid)
        keep = valid.reshape(-1)
        T, E = valid.shape
        return self.action_terms(
            out.reshape(T * E, -1)[keep],
            values.reshape(-1)[keep],
            actions.reshape((T * E,) + actions.shape[2:])[keep],
            with_entropy,
            with_bounds,
        )


class RecurrentQNetwork(RecurrentEncoding, QNetwork):
    """Encoder, core, then the Q-network's linear or dueling head (R2D2's network shape)."""

    def __init__(self, spec):
        nn.Module.__init__(self)
        self.spec = spec
        self.obs_normalizer = ObservationNormalizer(spec.obs_dim, False)  # replay keeps raw observations
        self._build_heads(self._build_recurrent(spec))
        self._init_action_mask(spec)

    def q_sequence(self, obs: torch.Tensor, initial_state: torch.Tensor, valid: torch.Tensor | None):
        """Q-values [T, B, A] and the final state over observations [T, B, ...] from `initial_state`."""
        h, final = self.core_outputs(obs, initial_state, valid)
        return self.masked(self.heads(h), obs), final

    def acting_outputs(self, obs: torch.Tensor, state: torch.Tensor):  # type: ignore[override]  # acts from a state
        """One step for N environments: ((Q-values,), the next state)."""
        q, state = self.q_sequence(obs[None], state, None)
        return (q[0],), state

    def forward(self, obs: torch.Tensor):
        raise TypeError("a recurrent Q-network reads sequences: use q_sequence")
