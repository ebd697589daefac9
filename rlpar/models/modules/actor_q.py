"""The trainable actor and Q critics of SAC and TD3 (learner side).

The actor is an MLP with a mean head and, for SAC, a log-standard-deviation head: actions are
tanh of a Gaussian draw (a squashed Gaussian, Haarnoja et al. 2018), or tanh of the mean (TD3's
deterministic actor). The critics are `spec.critics` MLPs Q(s, a) whose weights are stacked
([critics, in, out]): one batched matrix product per layer computes all of them, and
`detached=True` evaluates them without passing gradients to their weights (an actor loss must
move the actor only). NumpyActor reads `actor.*` of the same state dict: keep the two in step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from rlpar.models.constants import LOG_STD_BOUNDS

if TYPE_CHECKING:  # the spec builds this class: importing it here would be a circle
    from rlpar.models.actor_q_spec import ActorQSpec

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"tanh": torch.tanh, "relu": F.relu, "elu": F.elu}
LOG_2 = math.log(2.0)


def tanh_log_jacobian(pre_tanh: torch.Tensor) -> torch.Tensor:
    """log(1 - tanh(u)^2) summed over action dimensions, in a form that stays finite for large |u|."""
    return (2.0 * (LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))).sum(-1)


class Actor(nn.Module):
    def __init__(self, spec: ActorQSpec):
        super().__init__()
        sizes = [spec.obs_dim, *spec.hidden_sizes]
        self.trunk = nn.ModuleList(nn.Linear(i, o) for i, o in zip(sizes, sizes[1:]))
        self.mean = nn.Linear(sizes[-1], spec.action.size)
        self.log_std = nn.Linear(sizes[-1], spec.action.size) if spec.gaussian else None
        self.activation = ACTIVATIONS[spec.activation]

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The Gaussian's mean and clamped log-standard deviation (None: deterministic)."""
        x = obs
        for layer in self.trunk:
            x = self.activation(layer(x))
        log_std = None if self.log_std is None else self.log_std(x).clamp(*LOG_STD_BOUNDS)
        return self.mean(x), log_std

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Squashed-Gaussian actions (reparameterised: gradients reach the actor) and their
        log-probabilities, the tanh's change of density included."""
        mean, log_std = self(obs)
        pre_tanh = mean + log_std.exp() * torch.randn_like(mean)
        normal_logp = (
            -0.5 * ((pre_tanh - mean) / log_std.exp()).square() - log_std - 0.5 * math.log(2.0 * math.pi)
        ).sum(-1)
        return torch.tanh(pre_tanh), normal_logp - tanh_log_jacobian(pre_tanh)

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0])


class QEnsemble(nn.Module):
    """`count` MLPs Q(s, a) with stacked weights, initialised as torch's nn.Linear."""

    def __init__(self, *, in_dim: int, hidden_sizes: tuple[int, ...], count: int, activation: str):
        super().__init__()
        sizes = [in_dim, *hidden_sizes, 1]
        self.weights = nn.ParameterList(nn.Parameter(torch.empty(count, i, o)) for i, o in zip(sizes, sizes[1:]))
        self.biases = nn.ParameterList(nn.Parameter(torch.empty(count, 1, o)) for o in sizes[1:])
        for weight, bias in zip(self.weights, self.biases):
            bound = 1.0 / math.sqrt(weight.shape[1])
            nn.init.uniform_(weight, -bound, bound)
            nn.init.uniform_(bias, -bound, bound)
        self.count = count
        self.activation = ACTIVATIONS[activation]

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *, detached: bool = False) -> torch.Tensor:
        """Q-values [count, N]."""
        x = torch.cat([obs, actions], dim=-1).unsqueeze(0).expand(self.count, -1, -1)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if detached:
                weight, bias = weight.detach(), bias.detach()
            x = torch.baddbmm(bias, x, weight)
            if i < last:
                x = self.activation(x)
        return x.squeeze(-1)


class Temperature(nn.Module):
    """SAC's entropy coefficient α, learned as log α."""

    def __init__(self, initial: float = 1.0):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial)))

    def forward(self) -> torch.Tensor:
        return self.log_alpha.exp()


class ActorQ(nn.Module):
    recurrent = False
    discrete = False
    state_size = 0

    def __init__(self, spec: ActorQSpec):
        super().__init__()
        self.spec = spec
        self.actor = Actor(spec)
        self.critic = QEnsemble(
            in_dim=spec.obs_dim + spec.action.size,
            hidden_sizes=spec.hidden_sizes,
            count=spec.critics,
            activation=spec.activation,
        )
        self.temperature = Temperature() if spec.gaussian else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action (what evaluation takes)."""
        return self.actor.deterministic(obs)
