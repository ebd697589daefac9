"""`algo.reward_clip`: the losses see clipped rewards (learner, A3C's gradient workers, Ape-X's
actors), the logged returns stay raw. CartPole pays 1 a step, so clipping to 0.5 must equal
scaling by 0.5, exactly."""

import numpy as np
import pytest

from rlpar.envs.factory import resolve_env_spec
from rlpar.learning.losses.actor_critic import ActorCriticLoss
from rlpar.sampling.gradient_worker import GradientWorker
from rlpar.learning.estimators.rewards import clip_rewards
from rlpar.models.q_spec import QNetworkSpec
from rlpar.sampling.prioritizing_worker import PrioritizingWorker
from rlpar.runtime.build import build_trainer, probe_policy_spec
from tests.rollouts import cartpole_rollout
from tests.unit.test_a2c import GAMMA, make_a2c

CARTPOLE = resolve_env_spec(id="CartPole-v1")


def test_clip_rewards_bounds_both_signs_and_none_is_the_identity():
    rewards = np.array([[-3.0, 0.25], [7.0, -0.5]], np.float32)
    np.testing.assert_array_equal(clip_rewards(rewards, 1.0), [[-1.0, 0.25], [1.0, -0.5]])
    assert clip_rewards(rewards, None) is rewards


def test_the_learner_trains_on_clipped_rewards_and_logs_raw_returns(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg("algo.reward_clip=0.5", "checkpoint.every=0", run_dir=tmp_path / "clip"))
    try:
        algorithm = trainer.algorithm
        batch = algorithm.sampler.sample(algorithm.get_weights(), algorithm.version)
        rewards = trainer.algorithm.learning_rewards(batch)
        metrics = trainer.train()
    finally:
        trainer.close()
    valid = batch.valid  # the autoreset steps pay 0
    assert set(np.unique(batch.rewards[valid])) == {1.0} and set(np.unique(rewards[valid])) == {0.5}
    assert metrics["episode_return_mean"] >= 8  # raw CartPole returns: at least 8 steps of 1


def gradients(reward_clip, reward_scale):
    policy_spec, batch = cartpole_rollout(make_a2c)
    a2c = make_a2c(policy_spec)
    worker = GradientWorker(env_spec=CARTPOLE, policy_spec=policy_spec, num_envs=1, rollout_length=4, seed=0,
                            objective=ActorCriticLoss(gamma=GAMMA), reward_clip=reward_clip, reward_scale=reward_scale)
    try:
        worker.adopt(a2c.get_weights(), version=0)
        return worker.gradients(batch)[0]
    finally:
        worker.close()


def test_a3c_workers_differentiate_clipped_rewards():
    clipped, scaled, raw = gradients(0.5, 1.0), gradients(None, 0.5), gradients(None, 1.0)
    for a, b in zip(clipped, scaled, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(clipped, raw))


@pytest.mark.parametrize("reward_clip,factor", [(None, 1.0), (0.5, 0.5)])
def test_ape_x_actors_write_clipped_rewards(reward_clip, factor):
    spec, _ = probe_policy_spec(CARTPOLE, QNetworkSpec)
    actor = PrioritizingWorker(env_spec=CARTPOLE, policy_spec=spec, num_envs=2, rollout_length=8, seed=0, n_step=3,
                               gamma=0.9, reward_clip=reward_clip)
    try:
        from rlpar.models.modules.q_network import QNetwork

        actor.set_weights({k: v.numpy() for k, v in QNetwork(spec).state_dict().items()} | {"epsilon": 1.0}, 1)
        transitions = actor.sample().extras["transitions"][0]
    finally:
        actor.close()
    # 3-step returns of 1 a step, 0.9 discount: 2.71 (or less where an episode ended), halved when clipped
    assert transitions["rewards"].max() == pytest.approx(factor * (1 + 0.9 + 0.81))
