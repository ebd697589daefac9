"""A batch's time-major arrays as what the losses take: flat tensors of the valid steps, the
inputs of the advantage estimators and of V-trace. Shared by every algorithm and learner."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from rlpar.sampling.batch import Batch


def valid_step_tensors(arrays: dict, valid, device) -> dict:
    """Time-major [T, N, ...] arrays as flat tensors of their valid steps only (autoreset steps
    are not transitions: never trained on)."""
    keep = valid.reshape(-1)
    return {name: torch.as_tensor(a.reshape((-1,) + a.shape[2:])[keep], device=device) for name, a in arrays.items()}


def advantage_inputs(batch: Batch, rewards: np.ndarray) -> dict:
    """The keyword arguments every advantage estimator (rlpar.learning.estimators.gae, nstep) takes from a
    batch, with the rewards the losses see (`Algorithm.learning_rewards`)."""
    return {
        "rewards": rewards,
        "values": batch.values,
        "bootstrap_value": batch.bootstrap_value,
        "terminated": batch.terminated,
        "truncated": batch.truncated,
        "valid": batch.valid,
    }


def explained_variance(predicted, target) -> float:
    var = np.var(target)
    return float("nan") if var == 0 else float(1.0 - np.var(target - predicted) / var)


def vtrace_inputs(model, batch: Batch, rewards: np.ndarray, device):
    """The learner's view of a rollout for V-trace: its log-probabilities, entropies and values of
    every step ([T*N] tensors, with gradients), and the numpy inputs of compute_vtrace, which
    bootstrap from the learner's own value of each environment's last observation. A recurrent
    model unrolls over the whole rollout from the state stored at its start (`batch.states[0]`),
    with the resets inside it, and bootstraps one step further from its final state."""
    T, N = batch.rewards.shape
    if model.recurrent:
        logp, entropy, values, bootstrap = recurrent_rollout_terms(model, batch, device)
    else:
        obs = torch.as_tensor(batch.obs.reshape(T * N, -1), device=device)
        actions = torch.as_tensor(batch.actions.reshape((T * N,) + batch.actions.shape[2:]), device=device)
        logp, entropy, values = model.evaluate_actions(obs, actions)
        with torch.no_grad():
            bootstrap = model.towers(torch.as_tensor(batch.last_obs, device=device))[1]
    inputs = {
        **advantage_inputs(batch, rewards),
        "values": values.detach().cpu().numpy().reshape(T, N),
        "bootstrap_value": bootstrap.cpu().numpy(),
        "behaviour_logp": batch.logp,
        "target_logp": logp.detach().cpu().numpy().reshape(T, N),
    }
    return inputs, logp, entropy, values


def recurrent_rollout_terms(model, batch: Batch, device):
    """A recurrent model's log-probabilities, entropies and values of every step of a rollout
    ([T*N], time-major; autoreset steps included, whose values bootstrap truncations), and its
    value of the last observation, from the state after the last step (zeroed where that step
    was an autoreset step), as the workers act."""
    T, N = batch.rewards.shape
    assert batch.states is not None  # a recurrent policy's rollout holds its states
    valid = torch.as_tensor(batch.valid, device=device)
    out, values, final_state = model.sequence_outputs(
        torch.as_tensor(batch.obs, device=device), torch.as_tensor(batch.states[0], device=device), valid
    )
    actions = torch.as_tensor(batch.actions.reshape((T * N,) + batch.actions.shape[2:]), device=device)
    logp, entropy, values = model.action_terms(out.reshape(T * N, -1), values.reshape(-1), actions, True)
    with torch.no_grad():
        _, bootstrap = model.outputs_after(
            torch.as_tensor(batch.last_obs, device=device), final_state.detach(), valid[-1]
        )
    return logp, entropy, values, bootstrap
