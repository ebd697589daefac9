"""A3C and async n-step Q with recurrent networks: each worker's gradient over its own rollout in
sequence, from the state stored at the rollout's start, with the resets at episode ends."""

import numpy as np
import pytest
import torch

from rlpar.envs.factory import resolve_env_spec
from rlpar.envs.spaces import ActionInfo
from rlpar.learning.losses.actor_critic import ActorCriticLoss
from rlpar.learning.estimators.nstep import compute_nstep_returns
from rlpar.learning.losses.nstep_q import NStepQLoss
from rlpar.learning.losses.ppo_loss import policy_gradient_loss, value_loss
from rlpar.learning.losses.q_targets import weighted_huber
from rlpar.models.q_spec import QNetworkSpec
from rlpar.models.spec import PolicySpec
from rlpar.runtime.evaluate_run import evaluate_run
from rlpar.runtime.run import run
from rlpar.sampling.gradient_worker import GradientWorker

MEMORY_CUE = resolve_env_spec(id="rlpar/MemoryCue-v0", kwargs={"delay": 2})  # 4-step episodes
OBS, ACTIONS = 4, 2


def second_rollout(spec, objective, weights: dict):
    """A gradient worker's second rollout and its gradient: steps 8 to 15 of 4-step episodes
    (each followed by its autoreset step), so it starts inside an episode (its stored state is
    not zero), resets the state inside, and ends inside one (its bootstrap value counts)."""
    worker = GradientWorker(env_spec=MEMORY_CUE, policy_spec=spec, num_envs=3, rollout_length=8, seed=0,
                            objective=objective)
    try:
        worker.acting = {"epsilon": np.float64(0.5)}
        worker.adopt(weights, version=0)
        batch = [worker.sample() for _ in range(2)][-1]
    finally:
        worker.close()
    assert np.abs(batch.states[0]).max() > 0 and not batch.valid.all()
    assert batch.valid[-1].all() and not batch.terminated[-1].any()
    return batch, batch.extras["gradients"][0]


def random_weights(spec, seed: int) -> tuple[torch.nn.Module, dict]:
    torch.manual_seed(seed)
    module = spec.build()
    for param in module.parameters():  # away from the initial heads' near-uniform outputs
        torch.nn.init.normal_(param, std=0.5)
    return module, {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def unrolled(module, batch, outputs):
    """Step by step from `batch.states[0]`, zeroing the state after autoreset steps: `outputs` of
    each step's acting outputs, stacked [T, N, ...], and the state after the last step."""
    state = torch.as_tensor(batch.states[0])
    steps, states = [], []
    for t in range(len(batch.obs)):
        if t > 0:
            state = state * torch.as_tensor(batch.valid[t - 1, :, None], dtype=state.dtype)
        states.append(state)
        out, state = module.acting_outputs(torch.as_tensor(batch.obs[t]), state)
        steps.append(outputs(out))
    return torch.stack(steps), torch.stack(states), state


def assert_gradients(gradients, loss, module):
    module.zero_grad()
    loss.backward()
    for gradient, param in zip(gradients, module.parameters(), strict=True):
        np.testing.assert_allclose(gradient, param.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert sum(np.abs(g).sum() for g in gradients) > 0


def test_a3c_workers_gradient_is_the_step_by_step_unroll_of_its_rollout():
    spec = PolicySpec(obs_dim=OBS, action=ActionInfo(discrete=True, size=ACTIONS), hidden_sizes=(16,),
                      recurrent="lstm", recurrent_size=8)
    module, weights = random_weights(spec, seed=1)
    objective = ActorCriticLoss(gamma=0.9, value_coef=0.7, entropy_coef=0.02)
    batch, gradients = second_rollout(spec, objective, weights)
    logits_values, states, _ = unrolled(module, batch, lambda out: torch.cat([out[0], out[1][:, None]], dim=1))
    np.testing.assert_allclose(batch.states, states.detach().numpy(), atol=1e-5)  # what the numpy copy stored as it acted
    keep = torch.as_tensor(batch.valid)
    dist = torch.distributions.Categorical(logits=logits_values[..., :ACTIONS][keep])
    actions = torch.as_tensor(batch.actions)[keep]
    advantages, returns = (torch.as_tensor(a)[keep] for a in objective.targets(batch, batch.rewards))
    loss = (policy_gradient_loss(dist.log_prob(actions), advantages)
            + 0.7 * value_loss(logits_values[..., ACTIONS][keep], returns, None, None) - 0.02 * dist.entropy().mean())
    assert_gradients(gradients, loss, module)


def test_async_nstep_q_workers_gradient_is_the_step_by_step_unroll_of_its_rollout():
    """The online network's Q of the steps taken, against n-step targets from the target
    network unrolled the same way, bootstrapped one step past the rollout."""
    spec = QNetworkSpec(obs_dim=OBS, action=ActionInfo(discrete=True, size=ACTIONS), hidden_sizes=(16,),
                        recurrent="gru", recurrent_size=8)
    module, weights = random_weights(spec, seed=2)
    target, target_weights = random_weights(spec, seed=3)
    weights.update({f"target.{k}": v for k, v in target_weights.items()})
    batch, gradients = second_rollout(spec, NStepQLoss(gamma=0.9), weights)
    with torch.no_grad():
        target_q, _, final = unrolled(target, batch, lambda out: out[0])
        last_state = final * torch.as_tensor(batch.valid[-1, :, None], dtype=final.dtype)
        (last_q,), _ = target.acting_outputs(torch.as_tensor(batch.last_obs), last_state)
    returns = compute_nstep_returns(rewards=batch.rewards, values=target_q.max(dim=2).values.numpy(),
                                    bootstrap_value=last_q.max(dim=1).values.numpy(), terminated=batch.terminated,
                                    truncated=batch.truncated, valid=batch.valid, gamma=0.9, n_steps=8)[1]
    q, _, _ = unrolled(module, batch, lambda out: out[0])
    keep = torch.as_tensor(batch.valid)
    taken = q.gather(2, torch.as_tensor(batch.actions)[..., None])[..., 0][keep]
    td = torch.as_tensor(returns)[keep] - taken
    assert_gradients(gradients, weighted_huber(td, torch.ones_like(td)), module)


@pytest.mark.slow
def test_recurrent_a3c_learns_the_memory_cue_and_its_checkpoint_evaluates(make_cfg, tmp_path):
    """The cue is in the first observation only: a feed-forward policy answers at chance (return
    0), a recurrent one that learned from its rollouts in sequence reaches the threshold (0.9).
    Hogwild workers; then `rlpar evaluate`'s greedy episodes on the checkpoint, state carried."""
    run_dir = tmp_path / "a3c"
    final = run(make_cfg("algo=a3c", "env.id=rlpar/MemoryCue-v0", "+env.kwargs.delay=3", "model.recurrent=lstm",
                         "model.recurrent_size=32", "algo.rollout_length=20", "total_steps=25000", "eval_episodes=20",
                         "parallel=multiprocess", "workers=2", "envs_per_worker=4", run_dir=run_dir))
    assert final["eval_return_mean"] >= 0.9
    evaluated = evaluate_run(run_dir, episodes=20, video_episodes=0, tensorboard=False)
    assert evaluated["eval_return_mean"] == final["eval_return_mean"]
