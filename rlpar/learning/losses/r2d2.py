"""Recurrent replay's learning pieces (R2D2, Kapturowski et al. 2019), each testable on its own.

Tensors are time-major over one sequence per column: [L, B] for its steps, [L + 1, B, ...] for
values over its observations (the last: the observation after its last step). `mask` marks the
steps the loss counts: real steps after the burn-in. Within a sequence the real steps are one
stretch of one episode, so a step's n-step window only ever reaches later real steps of it.
"""

from __future__ import annotations

import torch

from rlpar.learning.losses.q_targets import weighted_huber

RESCALE_EPS = 1e-3


def rescale(x: torch.Tensor, eps: float = RESCALE_EPS) -> torch.Tensor:
    """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x: squashes large returns (Pohlen et al. 2018),
    so one network fits rewards of very different scales; invertible (`unrescale`)."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + eps * x


def unrescale(x: torch.Tensor, eps: float = RESCALE_EPS) -> torch.Tensor:
    """h^-1(x) = sign(x)(((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)."""
    root = (torch.sqrt(1 + 4 * eps * (x.abs() + 1 + eps)) - 1) / (2 * eps)
    return torch.sign(x) * (root.square() - 1)


def sequence_targets(*, q_target, rewards, discounts, real, n: int, q_online=None, value_rescaling: bool = False):
    """n-step double-Q targets at every step t of each sequence:

        y_t = h( sum_{k<m} D_{t,k} r_{t+k} + D_{t,m} h^-1( Q_target(x_{t+m}, a*) ) ),
        D_{t,k} = prod_{j<k} d_{t+j},  a* = argmax_a Q_online(x_{t+m}, a)

    with m = min(n, real steps left from t), d the per-step discounts (gamma, 0 on a termination)
    and h the identity unless `value_rescaling`. Cut off by the sequence's end or the episode's,
    the window bootstraps from the observation after its last real step (zero weight after a
    termination). `real` [L, B]: the sequence's real steps (padding False); q's [L + 1, B, A];
    without `q_online`, a* comes from the target network (classic DQN). Values at steps that are
    not real are meaningless; the loss masks them."""
    L = rewards.shape[0]
    chooser = q_target if q_online is None else q_online
    bootstrap = q_target.gather(-1, chooser.argmax(-1, keepdim=True)).squeeze(-1)  # [L + 1, B]
    if value_rescaling:
        bootstrap = unrescale(bootstrap)
    real = real.to(rewards.dtype)
    total = torch.zeros_like(rewards)
    weight = torch.ones_like(rewards)  # D_{t,k} while step t + k is real
    reach = torch.zeros_like(rewards, dtype=torch.long)  # m: the window's real steps

    def pad(x, k, fill=0.0):  # x from step k on, its last k steps `fill`
        return torch.cat([x[k:], x.new_full((k, *x.shape[1:]), fill)])

    for k in range(n):
        present = pad(real, k)
        total = total + weight * present * pad(rewards, k)
        reach = reach + present.long()
        weight = torch.where(present.bool(), weight * pad(discounts, k, 1.0), weight)
    # The observation after the window: x_{t+m} (m >= 1 on a real step).
    after = (torch.arange(L, device=rewards.device).unsqueeze(1) + reach.clamp(min=1)).clamp(max=L)
    targets = total + weight * bootstrap.gather(0, after)
    return rescale(targets) if value_rescaling else targets


def sequence_priorities(td_abs: torch.Tensor, mask: torch.Tensor, eta: float = 0.9) -> torch.Tensor:
    """p = eta max_t |delta_t| + (1 - eta) mean_t |delta_t| over each sequence's trained steps
    ([L, B] -> [B]): the max keeps a sequence with one bad step likely, the mean keeps the
    priorities of long sequences from all collapsing onto their worst step."""
    mask = mask.to(td_abs.dtype)
    largest = (td_abs * mask).amax(0)
    mean = (td_abs * mask).sum(0) / mask.sum(0).clamp(min=1)
    return eta * largest + (1 - eta) * mean


def masked_weighted_huber(td_errors: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over sequences of importance weight ([B]) x the mean Huber(td) of its trained steps:
    a mean over rows, so learners sharing a minibatch's rows learn what one learner would."""
    mask = mask.to(td_errors.dtype)
    per_step = weights.unsqueeze(0) * mask / mask.sum(0, keepdim=True).clamp(min=1)
    return weighted_huber(td_errors, per_step) * mask.shape[0]


def sequence_q_loss(
    *,
    model,
    target_model,
    obs,
    actions,
    rewards,
    terminated,
    mask,
    initial_state,
    weights,
    burn_in: int,
    n: int,
    gamma: float,
    double_q: bool = True,
    value_rescaling: bool = False,
):
    """R2D2's loss on a minibatch of stored sequences (row-major [B, L (+ 1), ...], as replay
    keeps them): both networks unroll the burn-in from the stored state without gradient, then
    the trained part (the online one with gradient); n-step double-Q targets over the trained
    part, a masked Huber loss. Returns (loss, sequence priorities [B], Q of the trained steps).

    The networks' reset rule (state zeroed after an invalid step) is given one invalid step: the
    padding just before an episode's first step, so the state entering it is zero; across the cut
    after the burn-in that reset is applied here. Other padding stays "valid": what the networks
    compute there is never used, and fewer resets let them run longer stretches at once."""
    obs, actions, rewards, terminated, mask = (x.transpose(0, 1) for x in (obs, actions, rewards, terminated, mask))
    before_start = torch.zeros_like(mask)
    before_start[:-1] = ~mask[:-1] & mask[1:]
    valid = torch.cat([~before_start, torch.ones_like(mask[:1])])  # [L + 1, B], with the observation after

    def unroll(network, with_grad: bool):
        with torch.set_grad_enabled(with_grad and torch.is_grad_enabled()):
            state = initial_state
            if burn_in:
                with torch.no_grad():
                    _, state = network.q_sequence(obs[:burn_in], state, valid[:burn_in])
                state = torch.where(valid[burn_in - 1].unsqueeze(-1), state, torch.zeros_like(state))
            return network.q_sequence(obs[burn_in:], state, valid[burn_in:])[0]

    q = unroll(model, with_grad=True)  # [length + 1, B, A]
    q_target = unroll(target_model, with_grad=False)
    trained = mask[burn_in:]
    discounts = gamma * (~terminated[burn_in:]).to(q.dtype)
    with torch.no_grad():
        targets = sequence_targets(
            q_target=q_target,
            q_online=q.detach() if double_q else None,
            rewards=rewards[burn_in:],
            discounts=discounts,
            real=trained,
            n=n,
            value_rescaling=value_rescaling,
        )
    q_taken = q[:-1].gather(-1, actions[burn_in:].unsqueeze(-1)).squeeze(-1)
    td_errors = torch.where(trained, targets - q_taken, torch.zeros_like(q_taken))
    loss = masked_weighted_huber(td_errors, weights, trained)
    return loss, sequence_priorities(td_errors.detach().abs(), trained), q_taken.detach()[trained]
