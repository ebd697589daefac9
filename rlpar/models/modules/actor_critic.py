"""The trainable actor-critic (learner side): two MLP towers; a categorical, a factorised
categorical (MultiDiscrete, MultiBinary) or a diagonal Gaussian policy. `ActorCriticBase` holds
what the CNN actor-critic (cnn.py) shares with it: the action distribution, written out by hand.

The actor and the critic are separate networks (no shared layers), but their weights are stored
stacked, `layer{i}.weight` of shape [2, in, out] (tower 0 actor, tower 1 critic), so each layer of
both runs as one batched matmul. With small MLPs per-op overhead dominates, and this halves the
number of ops in the forward and backward passes (about 30% faster updates here). The last
layer is padded to max(num_actions, 1) outputs; the padding is never read, gets zero gradients
and so never changes. `NumpyPolicy` reads the same state dict: keep the two in step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from rlpar.envs.spaces import factor_columns
from rlpar.models.constants import VALUE_NORM_EPSILON
from rlpar.models.modules.masks import ActionMasking
from rlpar.models.modules.normalizer import ObservationNormalizer

if TYPE_CHECKING:  # the spec builds these classes: importing it here would be a circle
    from rlpar.models.spec import PolicySpec

ACTIVATION_FUNCTIONS = {"tanh": torch.tanh, "relu": torch.relu, "elu": nn.functional.elu}
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
ACTOR, CRITIC = 0, 1
# A bounded Box action's Gaussian mean is in the range's own units, [-1, 1] (rlpar.envs.spaces
# ActionMapper clips there); past this soft bound the bounds penalty grows (rl_games' bounds loss).
MEAN_SOFT_BOUND = 1.1


class ActorCriticBase(ActionMasking):
    """The interface the algorithms use: `towers(obs) -> (actor outputs [N, A], values [N])`,
    `acting_outputs`, `evaluate_actions`, and `spec`, `discrete`, `num_outputs`, `log_std` (Box
    actions), `obs_normalizer`. Subclasses build their layers, then call `_add_log_std`. Actor
    outputs of masked actions are MASKED_LOGIT (masks.py), which every use of them reads."""

    recurrent = False  # a recurrent network reads sequences (recurrent.py)
    state_size = 0
    bounded_actions: torch.Tensor  # Box actions: 1.0 where a dimension has finite bounds (a buffer)

    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.spec = spec
        self.discrete = spec.action.discrete
        self.num_outputs = spec.action.size
        self.factored = spec.action.factored
        if self.factored:
            # equal factors: the outputs reshape to [N, F, n]; unequal ones are gathered into
            # [N, F, max n], padded with the dtype's lowest value (probability 0, and a finite
            # log-probability, so that 0 * log 0 in the entropy is 0, not NaN)
            columns = factor_columns(spec.action)
            if columns is None:
                self.factor_columns = None
            else:  # not in the state dict
                self.register_buffer("factor_columns", torch.as_tensor(columns), persistent=False)
        self._init_action_mask(spec)

    def _add_log_std(self) -> None:
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((self.spec.action.size,), float(self.spec.init_log_std)))
            size, action = self.spec.action.size, self.spec.action
            low, high = (
                torch.as_tensor(math.inf if b is None else b, dtype=torch.float64) for b in (action.low, action.high)
            )
            bounded = torch.isfinite(low.expand(size)) & torch.isfinite(high.expand(size))  # a bound may be one number
            self.register_buffer("bounded_actions", bounded.float(), persistent=False)

    def towers(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def acting_outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the acting copy's `outputs` computes, for a central inference server on a GPU."""
        return self.towers(obs)

    def factor_logits(self, out: torch.Tensor) -> torch.Tensor:
        """Actor outputs [N, sum(nvec)] of a factored action as [N, F, max n] (N read as
        `out.shape[0]`, which stays symbolic in an exported graph, where len() fixes it)."""
        if self.factor_columns is None:
            return out.reshape(out.shape[0], len(self.spec.action.nvec), -1)
        pad = out.new_full((out.shape[0], 1), torch.finfo(out.dtype).min)
        return torch.cat([out, pad], dim=1)[:, self.factor_columns]

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor, with_entropy: bool = True, with_bounds: bool = False
    ):
        """Log-probabilities, entropies (None unless asked) and values, written out by hand:
        torch.distributions does the same maths with several times the per-call overhead.
        Factored actions ([N, F] indices): the factors' log-probabilities and entropies, summed.
        `with_bounds`: a fourth output, each step's `bounds_penalty` (Box actions)."""
        out, values = self.towers(obs)
        return self.action_terms(out, values, actions, with_entropy, with_bounds)

    def bounds_penalty(self, out: torch.Tensor) -> torch.Tensor:
        """Per step, the squared distance of the Gaussian mean beyond MEAN_SOFT_BOUND, summed
        over the bounded action dimensions. Once a mean is far past its bound every draw is
        clipped to the same action, and no advantage can tell the draws apart to bring it back
        (an unclipped policy gradient, IMPALA's, has no trust region to keep it from going there)."""
        excess = torch.relu(out.abs() - MEAN_SOFT_BOUND) * self.bounded_actions
        return excess.square().sum(-1)

    def action_terms(
        self, out: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, with_entropy: bool, with_bounds=False
    ):
        """`evaluate_actions` from the network's outputs: what recurrent networks share."""
        if out.dtype in (torch.bfloat16, torch.float16):  # under autocast (algo.precision): the heads' maths in float32
            out, values = out.float(), values.float()
        entropy = None
        if self.factored:
            logp_all = torch.log_softmax(self.factor_logits(out), dim=-1)  # [N, F, n]
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1).sum(-1)
            if with_entropy:
                entropy = -(logp_all.exp() * logp_all).sum((-2, -1))
        elif self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            if with_entropy:
                entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            z = (actions - out) * torch.exp(-self.log_std)
            logp = (-0.5 * z.pow(2)).sum(-1) - (self.log_std.sum() + LOG_SQRT_2PI * self.num_outputs)
            if with_entropy:
                entropy = (0.5 + LOG_SQRT_2PI + self.log_std).sum().expand(len(out))
        if with_bounds:
            return logp, entropy, values, (out.new_zeros(len(out)) if self.discrete else self.bounds_penalty(out))
        return logp, entropy, values


class ActorCritic(ActorCriticBase):
    """The MLP actor-critic (`encoder=mlp`). Image bytes (uint8 rows) fed to it are scaled to
    [0, 1] first, as the numpy copy does."""

    def __init__(self, spec: PolicySpec):
        super().__init__(spec)
        self.pixels = spec.obs_dtype == "uint8"
        self.activation = ACTIVATION_FUNCTIONS[spec.activation]
        self.obs_normalizer = ObservationNormalizer(spec.obs_dim, spec.normalize_obs, kept=spec.mask_columns)
        sizes = [spec.obs_dim, *spec.hidden_sizes, max(spec.action.size, 1)]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for i in range(len(sizes) - 1):
            last = i == len(sizes) - 2
            weight = torch.empty(2, sizes[i], sizes[i + 1])
            gains = (0.01, 1.0) if last else (math.sqrt(2), math.sqrt(2))
            for tower, gain in enumerate(gains):
                nn.init.orthogonal_(weight[tower], gain)
            if last:
                weight[CRITIC, :, 1:] = 0.0  # padding columns of the value head
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(torch.zeros(2, 1, sizes[i + 1])))
        self._add_log_std()  # after the towers: the parameters' order (optimiser state) is unchanged
        mask = None
        if spec.actor_inputs is not None or spec.input_keep is not None:
            mask = torch.ones(2, spec.obs_dim, 1)
            if spec.actor_inputs is not None:  # the actor's first layer reads only the leading inputs
                mask[ACTOR, spec.actor_inputs :] = 0.0
            if spec.input_keep is not None:  # neither tower reads an action mask's columns
                mask *= torch.as_tensor(spec.input_keep)[:, None]
        self.register_buffer("first_layer_mask", mask, persistent=False)
        # value_norm: the returns' running mean and variance (absent otherwise: state dicts unchanged)
        self.value_normalizer = ObservationNormalizer(1, True) if spec.value_norm else None

    def towers(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor outputs [N, A] and values [N] of already-normalised observations."""
        if self.pixels:
            obs = obs.to(self.weights[0].dtype) / 255.0
        x = obs.unsqueeze(0).expand(2, *obs.shape)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            if i == 0 and self.first_layer_mask is not None:
                w = w * self.first_layer_mask
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = self.activation(x)
        values = x[CRITIC, :, 0]
        actor = self.masked(x[ACTOR, :, : self.num_outputs], obs)
        return actor, values if self.value_normalizer is None else self.denormalised(values)

    def value_scale(self, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The returns' running mean and standard deviation (value_norm)."""
        normalizer = self.value_normalizer
        assert normalizer is not None  # value_norm on
        return normalizer.mean.to(dtype), (normalizer.var + VALUE_NORM_EPSILON).sqrt().to(dtype)

    def denormalised(self, values: torch.Tensor) -> torch.Tensor:
        mean, std = self.value_scale(values.dtype)
        return values * std + mean

    def normalised(self, returns: torch.Tensor) -> torch.Tensor:
        """Returns (or values) on the scale the critic learns (identity without `value_norm`)."""
        if self.value_normalizer is None:
            return returns
        mean, std = self.value_scale(returns.dtype)
        return (returns - mean) / std
